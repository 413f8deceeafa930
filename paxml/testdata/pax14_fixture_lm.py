"""Tiny decoder-only LM experiments that run unchanged in the real Pax 1.4.

The checkpoint fixtures beside this file were written by the real Pax 1.4 from
these experiments (see make_pax14_checkpoints.py); the project's tests run
the same experiments to resume them. Run with this folder on PYTHONPATH:

  python -m paxml.main --exp=pax14_fixture_lm.FixtureLmSpmd ...
"""

import os

from paxml import experiment_registry
from paxml.tasks.lm.params import lm_cloud

_STEPS = int(os.environ.get('FIXTURE_STEPS', '4'))
_SAVE_EVERY = int(os.environ.get('FIXTURE_SAVE_EVERY', '2'))


def _small(task_p, steps, save_every):
  task_p.train.num_train_steps = steps
  task_p.train.save_interval_steps = save_every
  task_p.train.summary_interval_steps = 1
  task_p.train.eval_interval_steps = 0
  return task_p


@experiment_registry.register
class FixtureLmSpmd(lm_cloud.LmCloudSpmd):
  """1 repeated layer, d=8, ffn=16, 2 heads, vocab 32, batch 2, seq 8."""

  NUM_LAYERS = 2
  MODEL_DIMS = 8
  HIDDEN_DIMS = 16
  NUM_HEADS = 2
  DIMS_PER_HEAD = 4
  VOCAB_SIZE = 32
  PERCORE_BATCH_SIZE = 2
  MAX_SEQ_LEN = 8
  ICI_MESH_SHAPE = [1, 1, 1]

  def task(self):
    return _small(super().task(), _STEPS, _SAVE_EVERY)


@experiment_registry.register
class FixtureLmPmap(lm_cloud.LmCloudTransformerAdam):
  """The same sizes on the pmap path (Flax checkpoints), Adam."""

  NUM_LAYERS = 2
  MODEL_DIMS = 8
  HIDDEN_DIMS = 16
  NUM_HEADS = 2
  VOCAB_SIZE = 32
  PERCORE_BATCH_SIZE = 2
  MAX_SEQ_LEN = 8

  def task(self):
    return _small(super().task(), _STEPS, _SAVE_EVERY)
