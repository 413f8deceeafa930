"""Decoder-only LMs scaled Chinchilla-style with the slice size (Pax's).

Public names: OptimalScaling and its registered sizes OptimalScaling2x2x1
... OptimalScaling4x24x32 (the TPU topology each is meant for).

Each size sets NUM_LAYERS, the per-core batch and the mesh; the width
follows the depth: MODEL_DIMS = 128 * NUM_LAYERS, HIDDEN_DIMS = 4 *
MODEL_DIMS. The data are LmCloud's synthetic inputs.

  python -m paxml.main \
      --exp=tasks.lm.params.optimal_scaling.OptimalScaling2x2x1 ...
"""

from __future__ import annotations

from paxml import experiment_registry
from paxml.tasks.lm.params import lm_cloud
from praxis.layers import checkpoint_policy

# The class names keep Pax's topology suffixes; MODEL_DIMS/HIDDEN_DIMS keep
# the experiments' upper-case attribute names.
# pylint: disable=invalid-name


class OptimalScaling(lm_cloud.LmCloudSpmd):
  """The family: width derived from NUM_LAYERS (sizes set NUM_LAYERS)."""

  CHECKPOINT_POLICY = (
      checkpoint_policy.AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM)
  PERCORE_BATCH_SIZE = None
  NUM_LAYERS = None

  @property
  def MODEL_DIMS(self) -> int:
    if not self.NUM_LAYERS:
      raise ValueError(f'{type(self).__name__}: set NUM_LAYERS (the model '
                       'width is 128 * NUM_LAYERS).')
    return 128 * self.NUM_LAYERS

  @property
  def HIDDEN_DIMS(self) -> int:
    return 4 * self.MODEL_DIMS


@experiment_registry.register
class OptimalScaling2x2x1(OptimalScaling):
  """28 layers of width 3584; per-core batch 16."""

  NUM_LAYERS = 28
  PERCORE_BATCH_SIZE = 16
  ICI_MESH_SHAPE = (1, 4, 1)


@experiment_registry.register
class OptimalScaling2x2x2(OptimalScaling):
  """32 layers of width 4096; per-core batch 8."""

  NUM_LAYERS = 32
  PERCORE_BATCH_SIZE = 8
  ICI_MESH_SHAPE = (1, 8, 1)


@experiment_registry.register
class OptimalScaling2x2x4(OptimalScaling):
  """36 layers of width 4608; per-core batch 8."""

  NUM_LAYERS = 36
  PERCORE_BATCH_SIZE = 8
  ICI_MESH_SHAPE = (1, 16, 1)


@experiment_registry.register
class OptimalScaling2x4x4(OptimalScaling):
  """40 layers of width 5120; per-core batch 8."""

  NUM_LAYERS = 40
  PERCORE_BATCH_SIZE = 8
  ICI_MESH_SHAPE = (1, 32, 1)


@experiment_registry.register
class OptimalScaling4x4x4(OptimalScaling):
  """45 layers of width 5760; per-core batch 8."""

  NUM_LAYERS = 45
  PERCORE_BATCH_SIZE = 8
  ICI_MESH_SHAPE = (1, 64, 1)


@experiment_registry.register
class OptimalScaling4x4x8(OptimalScaling):
  """50 layers of width 6400; per-core batch 4."""

  NUM_LAYERS = 50
  PERCORE_BATCH_SIZE = 4
  ICI_MESH_SHAPE = (1, 128, 1)


@experiment_registry.register
class OptimalScaling4x8x8(OptimalScaling):
  """56 layers of width 7168; per-core batch 2."""

  NUM_LAYERS = 56
  PERCORE_BATCH_SIZE = 2
  ICI_MESH_SHAPE = (1, 64, 4)


@experiment_registry.register
class OptimalScaling4x8x16(OptimalScaling):
  """64 layers of width 8192; per-core batch 2."""

  NUM_LAYERS = 64
  PERCORE_BATCH_SIZE = 2
  ICI_MESH_SHAPE = (1, 128, 4)


@experiment_registry.register
class OptimalScaling4x16x16(OptimalScaling):
  """64 layers of width 8192; per-core batch 1."""

  NUM_LAYERS = 64
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = (1, 256, 4)


@experiment_registry.register
class OptimalScaling4x16x32(OptimalScaling):
  """64 layers of width 8192; per-core batch 1."""

  NUM_LAYERS = 64
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = (1, 512, 4)


@experiment_registry.register
class OptimalScaling4x24x32(OptimalScaling):
  """64 layers of width 8192; per-core batch 1."""

  NUM_LAYERS = 64
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = (1, 768, 4)
