"""Pax's C4 experiments on C4's `.json.gz` files, without TensorFlow."""

import gzip
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax
import numpy as np

from paxml.tasks.lm.params import c4
from praxis import base_hyperparams

_EXPERIMENT = '''
from paxml import experiment_registry
from paxml.tasks.lm.params import c4


@experiment_registry.register
class TinyC4(c4.C4SpmdAdam):
  PERCORE_BATCH_SIZE = 2
  MAX_SEQ_LEN = 16
  NUM_LAYERS = 1
  NUM_HEADS = 2
  MODEL_DIMS = 8
  HIDDEN_DIMS = 16
  ICI_MESH_SHAPE = (1, 1, 1)
  NUM_TRAIN_STEPS = 2
  CHECKPOINT_EVERY_N_STEPS = 2
  CHECKPOINT_POLICY = c4.AutodiffCheckpointType.SAVE_NOTHING
'''


def _c4_folder():
  """c4-train.00000-of-01024.json.gz and a validation file, as released."""
  directory = tempfile.mkdtemp()
  rng = np.random.RandomState(0)
  for name, n in (('c4-train.00000-of-01024.json.gz', 30),
                  ('c4-validation.00000-of-00008.json.gz', 6)):
    with gzip.open(os.path.join(directory, name), 'wt') as f:
      for i in range(n):
        text = ' '.join(rng.choice(['the', 'cat', 'sat', 'mat'], 6))
        f.write(json.dumps({'text': text, 'timestamp': '2019-04-25T12:57:54Z',
                            'url': f'https://example.com/{i}'}) + '\n')
  return directory


class C4FilesTest(absltest.TestCase):

  def test_c4_files_finds_the_released_names(self):
    directory = _c4_folder()
    self.assertEqual(
        [os.path.basename(f) for f in c4.c4_files(directory, 'train')],
        ['c4-train.00000-of-01024.json.gz'])

  def test_input_reads_the_gzipped_shard(self):
    directory = _c4_folder()
    train_p, eval_p = c4.c4_datasets(2, 16, data_dir=directory)
    batch = base_hyperparams.instantiate(train_p).get_next()
    rows = 2 * jax.local_device_count()  # PERCORE_BATCH_SIZE per device.
    self.assertEqual(batch.ids.shape, (rows, 16))
    self.assertTrue((batch.segment_ids > 0).all())  # Packed: no padding.
    eval_batch = base_hyperparams.instantiate(eval_p).get_next()
    self.assertEqual(eval_batch.ids.shape, (rows, 16))

  def test_a_c4_experiment_trains_without_tensorflow(self):
    directory = _c4_folder()
    exp_dir = tempfile.mkdtemp()
    with open(os.path.join(exp_dir, 'tiny_c4.py'), 'w') as f:
      f.write(_EXPERIMENT)
    # Importing TensorFlow would fail: a stub that raises is first on the path.
    stub = os.path.join(exp_dir, 'tensorflow')
    os.makedirs(stub)
    with open(os.path.join(stub, '__init__.py'), 'w') as f:
      f.write('raise ImportError("TensorFlow must not be imported")\n')
    env = dict(os.environ, C4_DATA_DIR=directory,
               XLA_FLAGS='--xla_force_host_platform_device_count=1',
               PYTHONPATH=os.pathsep.join(
        [exp_dir, os.environ.get('PYTHONPATH', '')]))
    job = os.path.join(exp_dir, 'job')
    run = subprocess.run(
        [sys.executable, '-m', 'paxml.main', '--exp=tiny_c4.TinyC4',
         f'--job_log_dir={job}'], env=env, capture_output=True, text=True,
        timeout=300, check=False)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    self.assertIn('checkpoint_00000002', os.listdir(f'{job}/checkpoints'))
    self.assertIn('step 2/2 loss', run.stderr)


if __name__ == '__main__':
  absltest.main()
