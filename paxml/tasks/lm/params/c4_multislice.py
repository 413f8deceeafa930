r"""C4 experiments on several TPU slices (Pax's `c4_multislice`).

Public names: C4Spmd22BAdamMaxText, C4Spmd22BAdam1xv4_128,
C4Spmd22BAdam2xv4_128, C4Spmd22BAdam4xv4_128, C4Spmd22BAdam1xv4_384,
C4Spmd22BAdam2xv4_384.

Model sizes follow MaxText's multislice benchmarks (22B parameters); the
slices multiply the mesh through DCN_MESH_SHAPE ([replica, data, mdl]
across slices). Run one process per host of every slice, e.g. on two
v4-128 slices:

  C4_DATA_DIR=/data/c4/en python -m paxml.main \
      --exp=tasks.lm.params.c4_multislice.C4Spmd22BAdam2xv4_128 \
      --job_log_dir=/tmp/c4_22b
"""

from __future__ import annotations

from jax import numpy as jnp

from paxml import experiment_registry
from paxml.tasks.lm.params import c4
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
