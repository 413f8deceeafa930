"""LmTextInput over gzipped JSON Lines and Parquet: equality and errors."""

import gzip
import json
import os
import tempfile

from absl.testing import absltest
import numpy as np
import pytest

from paxml import grain_input
from praxis import base_hyperparams
from praxis import pax_fiddle

_DOCS = ['alpha beta', 'gamma', 'delta epsilon zeta', 'eta theta']


def _input(pattern, **kwargs):
  kwargs.setdefault('seq_len', 8)
  kwargs.setdefault('batch_size', 2)
  kwargs.setdefault('num_infeed_hosts', 1)
  return base_hyperparams.instantiate(pax_fiddle.Config(
      grain_input.LmTextInput, file_pattern=pattern, **kwargs))


def _batches(inp, n):
  return [inp.get_next() for _ in range(n)]


def _byte_ids(text):  # ByteTokenizer: byte b -> b + 3, BOS 2, EOS 1.
  return [2] + [b + 3 for b in text.encode()] + [1]


class GzipJsonlTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()

  def _write(self, name, texts, opener=open):
    path = os.path.join(self.dir, name)
    with opener(path, 'wt') as f:
      for t in texts:
        f.write(json.dumps({'text': t, 'url': 'u'}) + '\n')
    return path

  def test_gzipped_jsonl_reads_as_the_plain_file(self):
    plain = self._write('a.jsonl', _DOCS)
    packed = self._write('c4-train.00000-of-01024.json.gz', _DOCS, gzip.open)
    for path in (plain, packed):
      inp = _input(path, reset_for_eval=True, pack=True)
      batch = inp.get_next()
      # Packed rows: ids = s[:-1] and labels = s[1:] per document, in order.
      want_ids = [t for d in _DOCS for t in _byte_ids(d)[:-1]][:8]
      self.assertEqual(list(batch.ids[0]), want_ids)
      want_labels = [t for d in _DOCS for t in _byte_ids(d)[1:]][:8]
      self.assertEqual(list(batch.labels[0]), want_labels)
    a = _batches(_input(plain, reset_for_eval=True), 2)
    b = _batches(_input(packed, reset_for_eval=True), 2)
    for x, y in zip(a, b):
      for key in x:
        np.testing.assert_array_equal(x[key], y[key])

  def test_corrupt_gzip_names_the_file(self):
    path = os.path.join(self.dir, 'bad.json.gz')
    with open(path, 'wb') as f:
      f.write(b'\x1f\x8b\x08\x00garbage')
    with self.assertRaisesRegex(ValueError, 'bad.json.gz.*gzip'):
      _input(path)

  def test_bad_json_line_names_file_and_line(self):
    path = os.path.join(self.dir, 'x.jsonl.gz')
    with gzip.open(path, 'wt') as f:
      f.write('{"text": "ok"}\n{not json\n')
    inp = _input(path, reset_for_eval=True, num_read_threads=0)
    with self.assertRaisesRegex(ValueError, r'x.jsonl.gz:2: not a JSON'):
      inp.get_next()

  def test_training_state_restores_the_exact_stream(self):
    path = self._write('t.json.gz', _DOCS * 3, gzip.open)
    kwargs = dict(is_training=True, input_random_seed=3, num_read_threads=0)
    first = _input(path, **kwargs)
    first.get_next()
    state = first.get_state()
    want = _batches(first, 3)
    second = _input(path, **kwargs)
    second.set_state(state)
    for x, y in zip(want, _batches(second, 3)):
      np.testing.assert_array_equal(x.ids, y.ids)


class PromptMaskingTest(absltest.TestCase):

  def _records(self, records, name='sft.jsonl'):
    path = os.path.join(tempfile.mkdtemp(), name)
    with open(path, 'w') as f:
      for r in records:
        f.write(json.dumps(r) + '\n')
    return path

  def test_prompt_labels_carry_no_weight(self):
    path = self._records([{'prompt': 'ab', 'answer': 'c'}])
    inp = _input(path, text_field='answer', prompt_field='prompt',
                 pack=False, reset_for_eval=True, seq_len=6)
    batch = inp.get_next()
    # s = BOS a b c EOS; labels a b c EOS; a and b are the prompt's.
    self.assertEqual(list(batch.labels[0][:4]), _byte_ids('abc')[1:])
    np.testing.assert_array_equal(batch.weights[0], [0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch.paddings[0], [0, 0, 0, 0, 1, 1])

  def test_packed_weights_stay_with_their_tokens(self):
    path = self._records([{'q': 'ab', 't': 'c'}, {'q': 'd', 't': 'ef'}])
    inp = _input(path, text_field='t', prompt_field='q', pack=True,
                 reset_for_eval=True, seq_len=8, batch_size=1)
    batch = inp.get_next()
    want_labels = _byte_ids('abc')[1:] + _byte_ids('def')[1:]
    self.assertEqual(list(batch.labels[0]), want_labels)
    np.testing.assert_array_equal(batch.weights[0], [0, 0, 1, 1, 0, 1, 1, 1])

  def test_lines_files_cannot_have_prompts(self):
    path = os.path.join(tempfile.mkdtemp(), 'a.txt')
    with open(path, 'w') as f:
      f.write('x\n')
    with self.assertRaisesRegex(ValueError, 'prompt_field needs records'):
      _input(path, prompt_field='q')

  def test_missing_prompt_field_is_named(self):
    path = self._records([{'text': 'x'}])
    inp = _input(path, prompt_field='q', reset_for_eval=True,
                 num_read_threads=0)
    with self.assertRaisesRegex(ValueError, "sft.jsonl:1: no string field 'q'"):
      inp.get_next()


class ParquetTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.pa = pytest.importorskip('pyarrow')
    self.pq = pytest.importorskip('pyarrow.parquet')
    self.dir = tempfile.mkdtemp()

  def _write(self, name, table):
    path = os.path.join(self.dir, name)
    self.pq.write_table(table, path)
    return path

  def test_unpacked_rows_hold_the_documents(self):
    path = self._write('d.parquet', self.pa.table(
        {'body': ['ab', None, 'c'], 'n': [1, 2, 3]}))
    inp = _input(path, text_field='body', pack=False, reset_for_eval=True)
    batch = inp.get_next()  # None is an empty document, skipped.
    self.assertEqual(list(batch.labels[0][:3]), _byte_ids('ab')[1:])
    self.assertEqual(list(batch.labels[1][:2]), _byte_ids('c')[1:])

  def test_prompt_column(self):
    path = self._write('p.parquet', self.pa.table(
        {'prompt': ['ab'], 'text': ['c']}))
    inp = _input(path, prompt_field='prompt', pack=False,
                 reset_for_eval=True, seq_len=4, batch_size=1)
    np.testing.assert_array_equal(inp.get_next().weights[0], [0, 0, 1, 1])

  def test_missing_column_names_file_and_field(self):
    path = self._write('d.parquet', self.pa.table({'body': ['ab']}))
    with self.assertRaisesRegex(ValueError, "d.parquet: no column 'text'"):
      _input(path)

  def test_non_string_column_is_refused(self):
    path = self._write('n.parquet', self.pa.table({'text': [1, 2]}))
    with self.assertRaisesRegex(ValueError, "n.parquet: column 'text'.*int"):
      _input(path)

  def test_corrupt_file_is_named(self):
    path = os.path.join(self.dir, 'bad.parquet')
    with open(path, 'wb') as f:
      f.write(b'PAR1 this is not parquet PAR1')
    with self.assertRaisesRegex(ValueError, 'bad.parquet: not a readable'):
      _input(path)


if __name__ == '__main__':
  absltest.main()
