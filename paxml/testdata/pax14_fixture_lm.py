"""Tiny decoder-only LM experiments that run unchanged in the real Pax 1.4.

The checkpoint fixtures beside this file were written by the real Pax 1.4 from
these experiments (see make_pax14_checkpoints.py); the project's tests run
the same experiments to resume them. Run with this folder on PYTHONPATH:

  python -m paxml.main --exp=pax14_fixture_lm.FixtureLmSpmd ...
"""

import os

import jax.numpy as jnp
from paxml import experiment_registry
from paxml.tasks.lm.params import lm_cloud
from praxis import pax_fiddle
from praxis import schedules

_STEPS = int(os.environ.get('FIXTURE_STEPS', '4'))
_SAVE_EVERY = int(os.environ.get('FIXTURE_SAVE_EVERY', '2'))
# For the resume fixtures: a constant learning rate instead of the
# experiment's warmup (whose first steps barely move the weights), and
# float32 activations (bfloat16 rounding would hide small differences).
_LR = os.environ.get('FIXTURE_LR')
_FP32 = bool(os.environ.get('FIXTURE_FP32'))


def _small(task_p, steps, save_every):
  if _LR:
    optimizer = task_p.train.learner.optimizer
    optimizer.learning_rate = float(_LR)
    optimizer.lr_schedule = pax_fiddle.Config(schedules.Constant)
  if _FP32:
    task_p.model.fprop_dtype = jnp.float32
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
