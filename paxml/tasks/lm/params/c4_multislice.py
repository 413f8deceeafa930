r"""C4 experiments on several TPU slices (Pax's `c4_multislice`).

Public names: C4Spmd22BAdamMaxText; C4Spmd22BAdam{1,2,4}xv4_128 and their
LimitSteps variants; C4Spmd22BAdam{1,2}xv4_384; C4Spmd22BAdam{1,2,4}xv4_8
and their LimitSteps variants; C4SpmdGpt3AdamDataParallel2x16x16;
C4Spmd32BAdam{1,2}xv5_256.

Model sizes follow MaxText's multislice benchmarks (22B and 32B parameters;
the `xv4_8` ones are a 1B-sized model of the same recipe for small slices);
the slices multiply the mesh through DCN_MESH_SHAPE ([replica, data, mdl]
across slices). LimitSteps variants stop after 300 steps. Run one process
per host of every slice, e.g. on two v4-128 slices:

  C4_DATA_DIR=/data/c4/en python -m paxml.main \
      --exp=tasks.lm.params.c4_multislice.C4Spmd22BAdam2xv4_128 \
      --job_log_dir=/tmp/c4_22b
"""

from __future__ import annotations

from jax import numpy as jnp

from paxml import experiment_registry
from paxml import tasks_lib
from paxml.tasks.lm.params import c4
from praxis import pax_fiddle
from praxis.layers import checkpoint_policy

AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType

# The class names keep Pax's slice suffixes (`2xv4_128`).
# pylint: disable=invalid-name


@experiment_registry.register
class C4Spmd22BAdamMaxText(c4.C4SpmdAdam):
  """22B parameters (48 layers, D 6144); global batch 1 * 4 * 2 * 16 = 128."""

  NUM_LAYERS = 48
  MODEL_DIMS = 6144
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 256
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32768
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING


@experiment_registry.register
class C4Spmd22BAdam1xv4_128(C4Spmd22BAdamMaxText):
  """22B on one v4-128 slice; global batch 1 * 64 * 1 * 16 = 1024."""

  ICI_MESH_SHAPE = (1, 64, 1)


@experiment_registry.register
class C4Spmd22BAdam2xv4_128(C4Spmd22BAdamMaxText):
  """22B on two v4-128 slices; global batch 2 * 64 * 16 = 2048."""

  ICI_MESH_SHAPE = (1, 64, 1)
  DCN_MESH_SHAPE = (2, 1, 1)


@experiment_registry.register
class C4Spmd22BAdam4xv4_128(C4Spmd22BAdamMaxText):
  """22B on four v4-128 slices; global batch 4 * 64 * 16 = 4096."""

  ICI_MESH_SHAPE = (1, 64, 1)
  DCN_MESH_SHAPE = (4, 1, 1)


@experiment_registry.register
class C4Spmd22BAdam1xv4_384(C4Spmd22BAdamMaxText):
  """22B (24 layers, D 9216) on one v4-384 slice; global batch 192 * 10."""

  NUM_LAYERS = 24
  MODEL_DIMS = 9216
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 384
  PERCORE_BATCH_SIZE = 10
  ICI_MESH_SHAPE = (1, 192, 1)


@experiment_registry.register
class C4Spmd22BAdam2xv4_384(C4Spmd22BAdamMaxText):
  """C4Spmd22BAdam1xv4_384 on two slices; global batch 2 * 192 * 10 = 3840."""

  NUM_LAYERS = 24
  MODEL_DIMS = 9216
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 384
  PERCORE_BATCH_SIZE = 10
  ICI_MESH_SHAPE = (1, 192, 1)
  DCN_MESH_SHAPE = (2, 1, 1)


@experiment_registry.register
class C4Spmd22BAdam1xv4_128LimitSteps(C4Spmd22BAdamMaxText):
  """C4Spmd22BAdam1xv4_128 stopped after 300 steps."""

  ICI_MESH_SHAPE = (1, 64, 1)
  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4Spmd22BAdam2xv4_128LimitSteps(C4Spmd22BAdamMaxText):
  """C4Spmd22BAdam2xv4_128 stopped after 300 steps."""

  ICI_MESH_SHAPE = (1, 64, 1)
  DCN_MESH_SHAPE = (2, 1, 1)
  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4Spmd22BAdam4xv4_128LimitSteps(C4Spmd22BAdamMaxText):
  """C4Spmd22BAdam4xv4_128 stopped after 300 steps."""

  ICI_MESH_SHAPE = (1, 64, 1)
  DCN_MESH_SHAPE = (4, 1, 1)
  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4Spmd22BAdam1xv4_8(c4.C4SpmdAdam):
  """The 22B recipe at 1B (16 layers, D 2048) on a v4-8; batch 4 * 16 = 64.

  Pax names it 22B; the model has 0.87B parameters. It repeats
  C4Spmd22BAdamMaxText's settings rather than deriving from it, so that its
  variants stay two levels deep.
  """

  NUM_LAYERS = 16
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 8
  DIMS_PER_HEAD = 256
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32768
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 4, 1)


@experiment_registry.register
class C4Spmd22BAdam2xv4_8(C4Spmd22BAdam1xv4_8):
  """C4Spmd22BAdam1xv4_8 on two slices; global batch 2 * 4 * 16 = 128."""

  DCN_MESH_SHAPE = (2, 1, 1)


@experiment_registry.register
class C4Spmd22BAdam4xv4_8(C4Spmd22BAdam1xv4_8):
  """C4Spmd22BAdam1xv4_8 on four slices; global batch 4 * 4 * 16 = 256."""

  DCN_MESH_SHAPE = (4, 1, 1)


@experiment_registry.register
class C4Spmd22BAdam1xv4_8LimitSteps(C4Spmd22BAdam1xv4_8):
  """C4Spmd22BAdam1xv4_8 stopped after 300 steps."""

  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4Spmd22BAdam2xv4_8LimitSteps(C4Spmd22BAdam1xv4_8):
  """C4Spmd22BAdam2xv4_8 stopped after 300 steps."""

  DCN_MESH_SHAPE = (2, 1, 1)
  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4Spmd22BAdam4xv4_8LimitSteps(C4Spmd22BAdam1xv4_8):
  """C4Spmd22BAdam4xv4_8 stopped after 300 steps."""

  DCN_MESH_SHAPE = (4, 1, 1)
  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class C4SpmdGpt3AdamDataParallel2x16x16(c4.C4SpmdGpt3AdamOrgHP):
  """GPT-3 175B data-parallel across two 16x16 slices, 100 steps."""

  PERCORE_BATCH_SIZE = 0.5
  ICI_MESH_SHAPE = (1, 16, 16)
  DCN_MESH_SHAPE = (2, 1, 1)
  FPROP_DTYPE = jnp.bfloat16
  CHECKPOINT_EVERY_N_STEPS = 2000
  # As in Pax, where the LM recipes read CHECKPOINT_MAX_TO_KEEP (10) instead.
  CHECKPOINT_SAVE_MAX_TO_KEEP = 20
  NUM_TRAIN_STEPS = 100

  def task(self) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    task_p = super().task()
    task_p.summary_verbosity = 0
    return task_p


@experiment_registry.register
class C4Spmd32BAdam1xv5_256(c4.C4SpmdAdam):
  """32B (40 layers, D 8192) on one v5-256; global batch 128 * 2 = 256.

  The 22B recipe's settings, repeated so that its variant stays two levels
  deep.
  """

  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 32
  DIMS_PER_HEAD = 256
  PERCORE_BATCH_SIZE = 2
  MAX_SEQ_LEN = 2048
  VOCAB_SIZE = 32768
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 128, 1)


@experiment_registry.register
class C4Spmd32BAdam2xv5_256(C4Spmd32BAdam1xv5_256):
  """C4Spmd32BAdam1xv5_256 on two slices; global batch 2 * 128 * 2 = 512."""

  DCN_MESH_SHAPE = (2, 1, 1)
