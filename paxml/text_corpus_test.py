"""Tests of paxml.text_corpus: the pydoc topics corpus and its JSONL files."""

import json
import os
from pydoc_data import topics
import tempfile

from absl.testing import absltest

from paxml import grain_input
from paxml import text_corpus
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils


class TextCorpusTest(test_utils.TestCase):

  def test_documents_are_the_sorted_topics(self):
    docs = text_corpus.pydoc_topics_documents()
    self.assertEqual([d['topic'] for d in docs], sorted(topics.topics))
    for doc in docs:
      self.assertEqual(doc['text'], topics.topics[doc['topic']])
    self.assertGreater(len(docs), 50)

  def test_split_spreads_test_documents_evenly(self):
    docs = [{'topic': str(i), 'text': ''} for i in range(10)]
    splits = text_corpus.split_documents(docs, 0.25)
    # floor((i + 1) / 4) > floor(i / 4) for i = 3 and 7.
    self.assertEqual([d['topic'] for d in splits['test']], ['3', '7'])
    self.assertLen(splits['train'], 8)
    self.assertEmpty(text_corpus.split_documents(docs, 0.0)['test'])
    with self.assertRaisesRegex(ValueError, 'test_fraction=1'):
      text_corpus.split_documents(docs, 1)

  def test_jsonl_files_are_written_once_and_readable(self):
    cache = self.enter_context(tempfile.TemporaryDirectory())
    paths = text_corpus.pydoc_topics_jsonl(cache, test_fraction=0.1)
    self.assertEqual(sorted(paths), ['test', 'train'])
    rows = {}
    for split, path in paths.items():
      self.assertEqual(os.path.dirname(path), cache)
      with open(path) as f:
        rows[split] = [json.loads(line) for line in f]
    everything = rows['train'] + rows['test']
    self.assertCountEqual(
        [d['topic'] for d in everything], list(topics.topics)
    )
    n = len(topics.topics)
    self.assertLen(rows['test'], int(n * 0.1))
    mtime = os.path.getmtime(paths['train'])
    self.assertEqual(text_corpus.pydoc_topics_jsonl(cache, 0.1), paths)
    self.assertEqual(os.path.getmtime(paths['train']), mtime)
    # An input reads the test file like any user's JSONL data.
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        grain_input.LmTextInput, file_pattern=paths['test'], seq_len=64,
        batch_size=1, num_infeed_hosts=1, reset_for_eval=True, pack=False))
    batch = inp.get_next()
    first = rows['test'][0]['text'].encode()[:64]  # Labels: the text's bytes.
    self.assertEqual(inp.ids_to_strings(batch.labels, [64]),
                     [first.decode(errors='replace')])

  def test_a_changed_cached_file_is_written_again(self):
    cache = self.enter_context(tempfile.TemporaryDirectory())
    paths = text_corpus.pydoc_topics_jsonl(cache, test_fraction=0.1)
    with open(paths['test'], 'rb') as f:
      good = f.read()
    with open(paths['test'], 'w') as f:
      f.write('{"text": "planted"}\n')
    with self.assertLogs(level='WARNING') as logs:
      text_corpus.pydoc_topics_jsonl(cache, test_fraction=0.1)
    self.assertIn('does not hold the expected test split',
                  '\n'.join(logs.output))
    with open(paths['test'], 'rb') as f:
      self.assertEqual(f.read(), good)


if __name__ == '__main__':
  absltest.main()
