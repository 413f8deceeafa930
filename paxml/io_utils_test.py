"""Tests of io_utils: outputs, TFRecord shards, eval/decode progress."""

import json
import pathlib
import pickle
import struct
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
from paxml import io_utils


def _read_tfrecords(path):
  """The records of a TFRecord file (length, crc, data, crc)."""
  data, records, pos = pathlib.Path(path).read_bytes(), [], 0
  while pos < len(data):
    (length,) = struct.unpack('<Q', data[pos:pos + 8])
    records.append(data[pos + 12:pos + 12 + length])
    pos += 12 + length + 4
  return records


class IoUtilsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp())

  def test_key_value_pairs_as_jsonl_and_pickle(self):
    pairs = [('a', {'x': jnp.array([1, 2]), 'y': np.float32(0.5),
                    'b': b'hi'}), ('b', {'x': np.array([[3]])})]
    io_utils.write_key_value_pairs(self.dir / 'out.jsonl', pairs)
    lines = (self.dir / 'out.jsonl').read_text().splitlines()
    self.assertEqual([json.loads(l) for l in lines],
                     [{'x': [1, 2], 'y': 0.5, 'b': 'hi'}, {'x': [[3]]}])
    with (self.dir / 'out.pickle').open('rb') as f:
      loaded = pickle.load(f)
    self.assertEqual([k for k, _ in loaded], ['a', 'b'])

  def test_validate_filenames(self):
    names = [f'decoder_out_7_shard_{i}.pickle' for i in range(3)]
    self.assertEqual(io_utils._validate_filenames(names), (7, 3))
    with self.assertRaisesRegex(ValueError, 'multiple steps'):
      io_utils._validate_filenames(names + ['eval_out_9_shard_0.pickle'])
    with self.assertRaisesRegex(ValueError, 'step=8 not found'):
      io_utils._validate_filenames(names, step=8)
    with self.assertRaisesRegex(ValueError, 'missing the following shards'):
      io_utils._validate_filenames([names[0], names[2]])
    with self.assertRaisesRegex(ValueError, 'not recognized'):
      io_utils._validate_filenames(['out.pickle'])

  def test_load_outputs_joins_the_shards(self):
    out_dir = self.dir / '1' / 'decoder_out' / 'test'
    out_dir.mkdir(parents=True)
    for shard in range(2):
      io_utils.write_key_value_pairs(
          out_dir / f'decoder_out_5_shard_{shard}.pickle',
          [(f'k{shard}', shard)])
    self.assertEqual(io_utils.load_outputs(self.dir, 'test', 'decoder'),
                     [('k0', 0), ('k1', 1)])

  def test_sharded_writer_round_robin(self):
    writer = io_utils.ShardedParallelWriter(self.dir / 'rec', 2)
    for chunk in ([b'a', b'b'], [b'c'], [b'd']):
      writer.write(chunk)
    writer.close()
    self.assertEqual(_read_tfrecords(self.dir / 'rec.tfrecord-00000-of-00002'),
                     [b'a', b'b', b'd'])
    self.assertEqual(_read_tfrecords(self.dir / 'rec.tfrecord-00001-of-00002'),
                     [b'c'])

  def test_progress_keeps_an_interrupted_step(self):
    ckpts = self.dir / 'checkpoints'
    (ckpts / 'checkpoint_00000020').mkdir(parents=True)
    mode = io_utils.EvaluationMode.EVAL
    with io_utils.checkpoint_progress(self.dir, 10, mode):
      # Step 10's checkpoint is gone: the latest is taken.
      self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 20)
      (ckpts / 'checkpoint_00000010').mkdir()
      self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 10)
    # The block ended: no progress left, the latest is taken.
    self.assertEqual(io_utils.get_checkpoint_step(self.dir, ckpts, mode), 20)


if __name__ == '__main__':
  absltest.main()
