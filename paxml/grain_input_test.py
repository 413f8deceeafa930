"""Tests of paxml.grain_input: packing, host sharding, eval, checkpoints."""

import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
from array_record.python import array_record_module
import numpy as np

from paxml import grain_input
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils
from praxis import tokenizers

instantiate = base_hyperparams.instantiate

# ByteTokenizer ids: pad 0, EOS 1, BOS 2, byte b -> b + 3 ('a' = 97 -> 100).
PAD, EOS, BOS = 0, 1, 2
A, B, C = 100, 101, 102
_KEYS = ('ids', 'labels', 'paddings', 'weights', 'segment_ids',
         'segment_pos', 'eval_sample_weights')


def _byte(ch):
  return ord(ch) + 3


class LmTextInputTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())

  def _jsonl(self, texts, name='docs.jsonl'):
    path = os.path.join(self.dir, name)
    with open(path, 'w') as f:
      f.writelines(json.dumps({'text': t, 'other': 1}) + '\n' for t in texts)
    return path

  def _input(self, path, **kwargs):
    kwargs.setdefault('batch_size', 1)
    kwargs.setdefault('num_infeed_hosts', 1)
    if not kwargs.get('is_training'):
      kwargs.setdefault('reset_for_eval', True)
    return instantiate(pax_fiddle.Config(
        grain_input.LmTextInput, file_pattern=path, **kwargs))

  def _texts(self, inp, batch):
    """The documents of an unpacked batch's real rows (ids minus BOS)."""
    lengths = batch.weights.sum(axis=1).astype(np.int32)
    real = batch.eval_sample_weights > 0
    return inp.ids_to_strings(batch.ids[real], lengths[real])

  def assertBatch(self, batch, expected):
    self.assertEqual(sorted(batch), sorted(_KEYS))
    for key, value in expected.items():
      floats = ('paddings', 'weights', 'eval_sample_weights')
      dtype = np.float32 if key in floats else np.int32
      self.assertArraysEqual(batch[key], np.asarray(value, dtype))
      self.assertEqual(batch[key].dtype, dtype, key)
    self.assertArraysEqual(batch.weights, 1.0 - batch.paddings)

  def test_packs_two_documents_into_one_row(self):
    inp = self._input(self._jsonl(['ab', 'c']), seq_len=8)
    # s1 = [BOS a b EOS], s2 = [BOS c EOS]; ids = s[:-1], labels = s[1:].
    self.assertBatch(inp.get_next(), {
        'ids': [[BOS, A, B, BOS, C, PAD, PAD, PAD]],
        'labels': [[A, B, EOS, C, EOS, PAD, PAD, PAD]],
        'segment_ids': [[1, 1, 1, 2, 2, 0, 0, 0]],
        'segment_pos': [[0, 1, 2, 0, 1, 0, 0, 0]],
        'paddings': [[0, 0, 0, 0, 0, 1, 1, 1]],
        'eval_sample_weights': [1],
    })
    with self.assertRaises(StopIteration):
      inp.get_next()

  def test_packing_splits_a_long_document_across_rows(self):
    inp = self._input(self._jsonl(['abcdef']), seq_len=4, batch_size=2)
    d, e, f = (_byte(ch) for ch in 'def')
    # s = [BOS a b c d e f EOS]: 7 pairs; the second row restarts at pos 0.
    self.assertBatch(inp.get_next(), {
        'ids': [[BOS, A, B, C], [d, e, f, PAD]],
        'labels': [[A, B, C, d], [e, f, EOS, PAD]],
        'segment_ids': [[1, 1, 1, 1], [1, 1, 1, 0]],
        'segment_pos': [[0, 1, 2, 3], [0, 1, 2, 0]],
        'paddings': [[0, 0, 0, 0], [0, 0, 0, 1]],
        'eval_sample_weights': [1, 1],
    })

  def test_unpacked_rows_are_truncated_or_padded(self):
    inp = self._input(self._jsonl(['abcdef', 'c']), seq_len=4, batch_size=2,
                      pack=False, add_bos=False)
    d = _byte('d')
    self.assertBatch(inp.get_next(), {
        'ids': [[A, B, C, d], [C, PAD, PAD, PAD]],
        'labels': [[B, C, d, _byte('e')], [EOS, PAD, PAD, PAD]],
        'segment_ids': [[1, 1, 1, 1], [1, 0, 0, 0]],
        'segment_pos': [[0, 1, 2, 3], [0, 0, 0, 0]],
        'paddings': [[0, 0, 0, 0], [0, 1, 1, 1]],
    })

  def test_two_hosts_get_disjoint_documents(self):
    docs = [f'document {i}' for i in range(41)]
    path = self._jsonl(docs)
    seen = []
    for host in (0, 1):
      own = [docs[i] for i in range(host, 41, 2)]  # 21 and 20 documents.
      inp = self._input(path, seq_len=16, pack=False, is_training=True,
                        batch_size=len(own), num_infeed_hosts=2,
                        infeed_host_index=host, input_random_seed=5,
                        prefetch_buffer_size=4)
      # Each batch is one epoch: a permutation of the host's share.
      epochs = [self._texts(inp, inp.get_next()) for _ in range(2)]
      for epoch in epochs:
        self.assertCountEqual(epoch, own)
      self.assertNotEqual(epochs[0], epochs[1])  # Reshuffled.
      self.assertNotEqual(epochs[0], own)
      seen.append(set(epochs[0]))
    self.assertEmpty(seen[0] & seen[1])

  def test_eval_epoch_pads_to_the_same_batch_count_on_every_host(self):
    docs = ['d0', 'd1', 'd2', 'd3', 'd4']
    path = self._jsonl(docs)
    # Host 0 owns d0 d2 d4 (2 batches of 2), host 1 d1 d3 (1 batch): both
    # emit 2, host 1's second one all padding.
    expected = {0: [['d0', 'd2'], ['d4']], 1: [['d1', 'd3'], []]}
    weights = {0: [[1, 1], [1, 0]], 1: [[1, 1], [0, 0]]}
    for host in (0, 1):
      inp = self._input(path, seq_len=6, pack=False, batch_size=2,
                        num_infeed_hosts=2, infeed_host_index=host)
      for _ in range(2):  # Two eval runs: reset() restarts.
        inp.reset()
        for k in range(2):
          batch = inp.get_next()
          self.assertEqual(self._texts(inp, batch), expected[host][k])
          self.assertArraysEqual(
              batch.eval_sample_weights, np.array(weights[host][k], np.float32))
          pad_rows = batch.eval_sample_weights == 0
          self.assertTrue(np.all(batch.paddings[pad_rows] == 1))
          self.assertTrue(np.all(batch.ids[pad_rows] == 0))
        with self.assertRaises(StopIteration):
          inp.get_next()

  def test_packed_eval_pads_hosts_with_fewer_rows(self):
    # Host 0: 'abcdefgh' -> 9 pairs -> 3 rows of 4; host 1: 'x' -> 1 row.
    path = self._jsonl(['abcdefgh', 'x'])
    counts = []
    for host in (0, 1):
      inp = self._input(path, seq_len=4, num_infeed_hosts=2,
                        infeed_host_index=host)
      batches = []
      while True:
        try:
          batches.append(inp.get_next())
        except StopIteration:
          break
      counts.append([float(b.eval_sample_weights[0]) for b in batches])
    self.assertEqual(counts, [[1, 1, 1], [1, 0, 0]])

  @parameterized.parameters(True, False)
  def test_restored_state_continues_the_exact_stream(self, pack):
    # Documents of 1 to 5 words, so that rows end inside documents.
    docs = [' '.join([f'w{i}'] * (i % 5 + 1)) for i in range(40)]
    path = self._jsonl(docs)
    config = {'seq_len': 8, 'batch_size': 2, 'pack': pack,
              'is_training': True, 'input_random_seed': 3,
              'prefetch_buffer_size': 4}
    reference = [self._input(path, **config)]
    reference = [reference[0].get_next() for _ in range(10)]
    for k in (0, 1, 4, 7):
      inp = self._input(path, **config)
      for _ in range(k):
        inp.get_next()
      state = inp.get_state()
      restored = self._input(path, **config)
      restored.set_state(state)
      for want in reference[k:]:
        self.assertAllClose(restored.get_next(), want)

  def test_state_carries_an_unset_seed(self):
    path = self._jsonl([f'text number {i}' for i in range(40)])
    config = {'seq_len': 6, 'batch_size': 2, 'is_training': True,
              'prefetch_buffer_size': 4}
    inp = self._input(path, **config)
    for _ in range(3):
      inp.get_next()
    state = inp.get_state()
    expected = [inp.get_next() for _ in range(4)]
    restored = self._input(path, **config)  # Another random seed.
    restored.set_state(state)
    for want in expected:
      self.assertAllClose(restored.get_next(), want)
    other_host = self._input(path, num_infeed_hosts=2, **config)
    with self.assertRaisesRegex(ValueError, 'state is of host 0 of 1'):
      other_host.set_state(state)

  def test_eval_state_restores_inside_the_padding(self):
    path = self._jsonl(['d0', 'd1', 'd2'])
    # Host 1 of 2 owns d1 only: its second batch is padding.
    config = {'seq_len': 4, 'pack': False, 'num_infeed_hosts': 2,
              'infeed_host_index': 1}
    inp = self._input(path, **config)
    inp.get_next()
    state = inp.get_state()
    restored = self._input(path, **config)
    restored.set_state(state)
    self.assertEqual(float(restored.get_next().eval_sample_weights[0]), 0.0)
    with self.assertRaises(StopIteration):
      restored.get_next()

  def test_finite_training_epochs_end(self):
    inp = self._input(self._jsonl(['ab', 'c', 'abc']), seq_len=8,
                      pack=False, batch_size=2, is_training=True,
                      num_epochs=2, input_random_seed=0)
    weights = [inp.get_next().eval_sample_weights.tolist() for _ in range(3)]
    self.assertEqual(weights, [[1, 1], [1, 1], [1, 1]])  # 6 documents.
    with self.assertRaises(StopIteration):
      inp.get_next()

  def test_sentencepiece_ids_to_strings(self):
    docs = ['the cat sat on the mat', 'a dog ate the hat', 'the end',
            'quick brown foxes jump over lazy dogs',
            'seven wizards box with jovial pygmies']
    path = self._jsonl(docs * 4)
    tok = pax_fiddle.Config(tokenizers.SentencePieceTokenizer,
                            train_on=path, vocab_size=40)
    inp = self._input(path, seq_len=40, pack=False, batch_size=5,
                      tokenizer=tok)
    self.assertEqual(inp.vocabulary.vocab_size, 40)
    batch = inp.get_next()
    self.assertEqual(self._texts(inp, batch), docs)
    # Labels are the inputs shifted by one, ending with EOS.
    n = int(batch.weights[0].sum())
    self.assertArraysEqual(batch.labels[0, :n - 1], batch.ids[0, 1:n])
    self.assertEqual(batch.labels[0, n - 1], inp.vocabulary.eos_id)
    self.assertEqual(batch.ids[0, 0], inp.vocabulary.bos_id)
    self.assertEqual(inp.ids_to_strings(batch.labels[:1], [n]), [docs[0]])

  def test_errors_name_the_field(self):
    path = self._jsonl(['a', 'b'])
    with self.assertRaisesRegex(ValueError, 'seq_len=0 must be positive'):
      self._input(path)
    with self.assertRaisesRegex(ValueError, 'file_pattern=.* matches no file'):
      self._input(os.path.join(self.dir, 'nothing*.jsonl'), seq_len=4)
    with self.assertRaisesRegex(ValueError, 'num_epochs=1 is for training'):
      self._input(path, seq_len=4, num_epochs=1)
    with self.assertRaisesRegex(ValueError, 'too few to give each of 3 hosts'):
      self._input(path, seq_len=4, is_training=True, num_infeed_hosts=3,
                  infeed_host_index=2)
    with self.assertRaisesRegex(ValueError, 'file_format=.* must be one of'):
      self._input(path, seq_len=4, file_format='csv')
    text = os.path.join(self.dir, 'more.txt')
    with open(text, 'w') as f:
      f.write('c\n')
    with self.assertRaisesRegex(ValueError, r"mixes formats \['jsonl', 'l"):
      self._input([path, text], seq_len=4)
    with self.assertRaisesRegex(ValueError, 'tokenizer=.* BaseTokenizer'):
      self._input(path, seq_len=4,
                  tokenizer=pax_fiddle.Config(dict))
    with self.assertRaisesRegex(ValueError, r'docs.jsonl:1: no string field'):
      self._input(path, seq_len=4, text_field='body').get_next()


class DocumentSourceTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())

  def _write(self, name, content):
    path = os.path.join(self.dir, name)
    with open(path, 'w') as f:
      f.write(content)
    return path

  def test_lines_and_paragraphs(self):
    path = self._write('a.txt', 'one\n\n  \ntwo two\nthree\r\n\n\nfour')
    lines = grain_input.document_source([path], 'lines')
    self.assertEqual(list(lines), ['one', 'two two', 'three', 'four'])
    paragraphs = grain_input.document_source([path], 'paragraphs')
    self.assertEqual(list(paragraphs), ['one', 'two two\nthree', 'four'])
    empty = self._write('empty.txt', '')
    both = grain_input.document_source([empty, path], 'lines')
    self.assertLen(both, 4)

  def test_jsonl_and_array_record(self):
    records = [{'text': 'first', 'n': 1}, {'text': 'second\nline'}]
    lines = '\n'.join(json.dumps(r) for r in records) + '\n\n'
    path = self._write('a.jsonl', lines)
    self.assertEqual(list(grain_input.document_source([path], 'jsonl')),
                     ['first', 'second\nline'])
    ar_path = os.path.join(self.dir, 'a.array_record')
    writer = array_record_module.ArrayRecordWriter(ar_path, 'group_size:1')
    for r in records:
      writer.write(json.dumps(r).encode())
    writer.close()
    source = grain_input.document_source([ar_path], 'array_record')
    self.assertEqual([source[i] for i in range(len(source))],
                     ['first', 'second\nline'])
    inp = instantiate(pax_fiddle.Config(
        grain_input.LmTextInput, file_pattern=ar_path, seq_len=8,
        batch_size=2, num_infeed_hosts=1, reset_for_eval=True, pack=False))
    batch = inp.get_next()
    self.assertEqual(
        inp.ids_to_strings(batch.labels, batch.weights.sum(1).astype(int)),
        ['first', 'second\nl'])  # Labels: s[1:9], s = BOS text EOS.

  def test_parquet(self):
    path = os.path.join(self.dir, 'a.parquet')
    try:
      import pyarrow  # pylint: disable=g-import-not-at-top
      from pyarrow import parquet  # pylint: disable=g-import-not-at-top
    except ImportError:
      with self.assertRaisesRegex(ImportError, 'pip install pyarrow'):
        grain_input.document_source([path], 'parquet')
      return
    parquet.write_table(pyarrow.table({'text': ['x y', 'z']}), path)
    self.assertEqual(grain_input.document_source([path], 'parquet'),
                     ['x y', 'z'])

  def test_lm_example(self):
    example = grain_input.lm_example(np.array([7, 8]), bos_id=2, eos_id=1)
    self.assertArraysEqual(
        example['pairs'], np.array([[2, 7], [7, 8], [8, 1]], np.int32))
    self.assertIsNone(grain_input.lm_example(np.array([7]), None, None))


if __name__ == '__main__':
  absltest.main()
