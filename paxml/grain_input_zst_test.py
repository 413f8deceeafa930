"""zstd-compressed JSON Lines (.jsonl.zst, as the Pile ships) in Grain."""

import json
import os
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from paxml import grain_input
from paxml.contrib.gpu.scripts_gpu import local_data
from praxis import base_hyperparams
from praxis import pax_fiddle

zstandard = pytest.importorskip('zstandard')

_DOCS = ['alpha beta', 'gamma \u2028 delta', 'epsilon zeta', 'eta theta']


def _jsonl(texts):
  return ''.join(json.dumps({'text': t, 'meta': {'pile_set_name': 'x'}},
                            ensure_ascii=False) + '\n'
                 for t in texts).encode('utf-8')


def _zst(data, frames=1):
  """`data` compressed as `frames` consecutive zstd frames."""
  cut = len(data) // frames
  parts = [data[i * cut:(i + 1) * cut if i < frames - 1 else None]
           for i in range(frames)]
  return b''.join(zstandard.ZstdCompressor().compress(p) for p in parts)


def _input(pattern, **kwargs):
  return base_hyperparams.instantiate(pax_fiddle.Config(
      grain_input.LmTextInput, file_pattern=pattern, seq_len=8,
      batch_size=2, num_infeed_hosts=1, reset_for_eval=True, **kwargs))


class ZstdJsonlTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = tempfile.mkdtemp()

  def _write(self, name, data):
    path = os.path.join(self.dir, name)
    with open(path, 'wb') as f:
      f.write(data)
    return path

  def test_documents_equal_the_plain_files(self):
    for frames in (1, 3):  # One frame as `zstd`, or several concatenated.
      path = self._write(f'{frames}.jsonl.zst', _zst(_jsonl(_DOCS), frames))
      source = grain_input.document_source([path], 'jsonl', 'text')
      self.assertEqual([source[i] for i in range(len(source))], _DOCS)

  def test_batches_equal_the_plain_files(self):
    plain = self._write('00.jsonl', _jsonl(_DOCS))
    packed = self._write('00.jsonl.zst', _zst(_jsonl(_DOCS)))
    a, b = _input(plain, pack=True), _input(packed, pack=True)
    # ByteTokenizer: BOS 2, then byte + 3; packed ids start with doc 0.
    want = [2] + [c + 3 for c in b'alpha beta'][:7]
    for x, y in zip([a.get_next(), a.get_next()],
                    [b.get_next(), b.get_next()]):
      self.assertEqual(sorted(x), sorted(y))
      for key in x:
        np.testing.assert_array_equal(x[key], y[key])
    self.assertEqual(list(_input(packed, pack=True).get_next().ids[0]), want)

  def test_empty_file_has_no_documents(self):
    path = self._write('e.jsonl.zst', _zst(b''))
    self.assertLen(grain_input.document_source([path], 'jsonl', 'text'), 0)

  def test_corrupt_file_names_the_file(self):
    path = self._write('bad.jsonl.zst', b'\x28\xb5\x2f\xfd garbage here')
    with self.assertRaisesRegex(ValueError, 'bad.jsonl.zst: not a readable '
                                'zstd file'):
      _input(path)

  def test_truncated_file_names_the_file(self):
    data = _zst(_jsonl(_DOCS * 50))
    path = self._write('cut.jsonl.zst', data[:len(data) // 2])
    with self.assertRaisesRegex(ValueError, 'cut.jsonl.zst:.*truncated'):
      grain_input.document_source([path], 'jsonl', 'text')

  def test_without_zstandard_the_install_is_named(self):
    path = self._write('x.jsonl.zst', _zst(_jsonl(_DOCS)))
    with mock.patch.dict(sys.modules, {'zstandard': None}):
      with self.assertRaisesRegex(ImportError,
                                  'x.jsonl.zst.*pip install zstandard'):
        grain_input.document_source([path], 'jsonl', 'text')


class LocalDataZstdTest(absltest.TestCase):

  def test_pile_and_lambada_folders_take_zst_files(self):
    root = tempfile.mkdtemp()
    os.makedirs(os.path.join(root, 'train'))
    for name in ('train/00.jsonl.zst', 'val.jsonl.zst',
                 'lambada_test.jsonl.zst'):
      with open(os.path.join(root, name), 'wb') as f:
        f.write(_zst(_jsonl(['the cat sat on the mat'])))
    self.assertEqual(
        local_data.data_files(root, 'PILE_DATA_DIR', ('train',), 'Pile'),
        [os.path.join(root, 'train/00.jsonl.zst')])
    self.assertEqual(
        local_data.data_files(root, 'PILE_DATA_DIR', ('val',), 'Pile'),
        [os.path.join(root, 'val.jsonl.zst')])
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        local_data.LambadaInput,
        file_pattern=os.path.join(root, 'lambada_test.jsonl.zst'),
        seq_len=32, batch_size=1, num_infeed_hosts=1, reset_for_eval=True))
    batch = inp.get_next()
    # Loss only on ' mat' (4 bytes) and EOS.
    self.assertEqual(float(batch.weights[0].sum()), 5.0)
    targets = batch.labels[0][batch.weights[0] > 0]
    self.assertEqual(list(targets), [c + 3 for c in b' mat'] + [1])


if __name__ == '__main__':
  absltest.main()
