"""Tests of praxis.tokenizers: byte and SentencePiece round trips."""

import json
import os
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils
from praxis import tokenizers

instantiate = base_hyperparams.instantiate

_LINES = [
    'the quick brown fox jumps over the lazy dog.',
    'a stitch in time saves nine; the early bird catches the worm!',
    '    def f(x):  return x + 1',
    'tabs\tand  double  spaces, QUOTES "like these" and digits 0123456789',
    'zebras, yaks and vixens quietly move west (KJ-42).',
]


class ByteTokenizerTest(test_utils.TestCase):

  def test_ids_are_utf8_bytes_plus_three(self):
    tok = instantiate(pax_fiddle.Config(tokenizers.ByteTokenizer))
    text = 'hé\n'
    expected = [b + 3 for b in text.encode('utf-8')]  # h=104, é=195 169.
    self.assertEqual(expected, [107, 198, 172, 13])
    self.assertArraysEqual(tok.encode(text), np.array(expected, np.int32))
    self.assertEqual(tok.encode(text).dtype, np.int32)
    self.assertEqual(
        (tok.vocab_size, tok.pad_id, tok.eos_id, tok.bos_id), (259, 0, 1, 2)
    )

  def test_decode_skips_special_ids(self):
    tok = tokenizers.ByteTokenizer()
    self.assertEqual(tok.decode([2, 107, 198, 172, 1, 0, 0, 300]), 'hé')
    for line in _LINES:
      self.assertEqual(tok.decode(tok.encode(line)), line)


class SentencePieceTokenizerTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())
    self.cache = os.path.join(self.dir, 'cache')
    self.enter_context(mock.patch.dict(os.environ,
                                       {'XDG_CACHE_HOME': self.cache}))
    self.text_path = os.path.join(self.dir, 'corpus.txt')
    with open(self.text_path, 'w') as f:
      f.write('\n'.join(_LINES * 3) + '\n')

  def _train(self, **kwargs):
    kwargs.setdefault('vocab_size', 64)
    return instantiate(
        pax_fiddle.Config(tokenizers.SentencePieceTokenizer, **kwargs)
    )

  def test_trains_caches_and_round_trips(self):
    tok = self._train(train_on=[self.text_path])
    self.assertEqual(tok.vocab_size, 64)
    self.assertEqual((tok.pad_id, tok.eos_id, tok.bos_id), (0, 1, 2))
    # Cached in the user's cache dir, named by vocab size and a hash.
    self.assertEqual(os.path.dirname(tok.model_file),
                     os.path.join(self.cache, 'praxis', 'sentencepiece'))
    self.assertStartsWith(os.path.basename(tok.model_file), 'spm_64_')
    text = 'the lazy fox\n    def g(y):  return 42\n\nzebras  quietly move'
    ids = tok.encode(text)
    self.assertEqual(ids.dtype, np.int32)
    self.assertTrue(np.all((ids >= 4) & (ids < 64)))  # No pad/eos/bos/unk.
    self.assertLess(len(ids), len(text))  # Pieces longer than characters.
    self.assertEqual(tok.decode(ids), text)
    self.assertEqual(tok.decode(np.concatenate([[2], ids, [1, 0, 0]])), text)
    self.assertIn(3, tok.encode('Zebras'))  # 'Z' was not in training: UNK.
    # A second tokenizer loads the cached file: the same model, no training.
    mtime = os.path.getmtime(tok.model_file)
    again = self._train(train_on=[self.text_path])
    self.assertEqual(again.model_file, tok.model_file)
    self.assertEqual(os.path.getmtime(tok.model_file), mtime)
    # Loading the file directly gives the same ids.
    loaded = instantiate(pax_fiddle.Config(
        tokenizers.SentencePieceTokenizer, model_path=tok.model_file))
    self.assertEqual(loaded.vocab_size, 64)
    self.assertArraysEqual(loaded.encode(text), ids)

  def test_training_is_deterministic_and_reads_jsonl(self):
    jsonl = os.path.join(self.dir, 'corpus.jsonl')
    with open(jsonl, 'w') as f:
      record = json.dumps({'body': '\n'.join(_LINES), 'id': 1})
      f.writelines(record + '\n' for _ in range(3))
    a = self._train(train_on=[jsonl], text_field='body',
                    model_path=os.path.join(self.dir, 'a.model'))
    b = self._train(train_on=[self.text_path],
                    model_path=os.path.join(self.dir, 'b.model'))
    # Same lines (the JSONL text split at newlines): the same model bytes.
    with open(a.model_file, 'rb') as fa, open(b.model_file, 'rb') as fb:
      self.assertEqual(fa.read(), fb.read())

  def test_training_lines(self):
    jsonl = os.path.join(self.dir, 'x.jsonl')
    with open(jsonl, 'w') as f:
      f.write(json.dumps({'text': 'one\n\ntwo'}) + '\n\n')
      f.write(json.dumps({'text': ' three '}) + '\n')
    self.assertEqual(
        list(tokenizers.training_lines([jsonl], 'text')),
        ['one', 'two', ' three '],
    )

  def test_errors_name_the_field(self):
    with self.assertRaisesRegex(ValueError, 'model_path=None does not name'):
      self._train()
    with self.assertRaisesRegex(ValueError, 'vocab_size=0 must be positive'):
      self._train(train_on=[self.text_path], vocab_size=0)
    with self.assertRaisesRegex(FileNotFoundError, 'missing'):
      self._train(train_on=[os.path.join(self.dir, 'missing*.txt')])
    with self.assertRaisesRegex(ValueError, 'training on .* failed'):
      self._train(train_on=[self.text_path], vocab_size=5000)
    tok = self._train(train_on=[self.text_path])
    with self.assertRaisesRegex(ValueError, 'vocab_size=50 differs'):
      self._train(model_path=tok.model_file, vocab_size=50)

  def test_a_bad_cached_model_is_trained_again(self):
    tok = self._train(train_on=[self.text_path])
    good = open(tok.model_file, 'rb').read()
    for bad in (b'not a model', None):
      if bad is None:  # A valid model of another size under the same name.
        other = self._train(train_on=[self.text_path], vocab_size=70,
                            model_path=os.path.join(self.dir, 'o.model'))
        bad = open(other.model_file, 'rb').read()
      with open(tok.model_file, 'wb') as f:
        f.write(bad)
      with self.assertLogs(level='WARNING') as logs:
        again = self._train(train_on=[self.text_path])
      self.assertIn('training it again', '\n'.join(logs.output))
      self.assertEqual(again.model_file, tok.model_file)
      self.assertEqual(open(again.model_file, 'rb').read(), good)

  def test_a_garbage_model_file_is_named(self):
    path = os.path.join(self.dir, 'garbage.model')
    with open(path, 'wb') as f:
      f.write(b'\x00garbage\xff' * 10)
    with self.assertRaisesRegex(
        base_hyperparams.ConfigError,
        f'{path} is not a SentencePiece model file'):
      self._train(model_path=path, vocab_size=0)

  def test_a_garbage_jsonl_line_is_named(self):
    jsonl = os.path.join(self.dir, 'bad.jsonl')
    with open(jsonl, 'w') as f:
      f.write(json.dumps({'text': 'fine'}) + '\n{not json\n')
    with self.assertRaisesRegex(ValueError,
                                f'{jsonl}:2: not a JSON object'):
      list(tokenizers.training_lines([jsonl], 'text'))
    with open(jsonl, 'w') as f:
      f.write('[1, 2]\n')
    with self.assertRaisesRegex(ValueError,
                                f"{jsonl}:1: no string field 'text'"):
      list(tokenizers.training_lines([jsonl], 'text'))


if __name__ == '__main__':
  absltest.main()
