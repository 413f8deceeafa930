"""The kinds of checkpoint Pax writes, and how a task picks one.

Public names: CheckpointType, retrieve_checkpoint_type.

  ckpt_type = checkpoint_types.retrieve_checkpoint_type(False, task)
  # GDA for SPMD (mesh) models, FLAX for pmap models.
"""

from __future__ import annotations

import enum
from typing import Any

from praxis import py_utils


@enum.unique
class CheckpointType(str, enum.Enum):
  """On-disk format of a checkpoint; the value is the name Pax writes."""

  UNSPECIFIED = 'unspecified'
  FLAX = 'flax'
  GDA = 'gda'
  PERSISTENCE = 'persistence'


def retrieve_checkpoint_type(
    maybe_use_persistence_checkpointing: bool, task: Any
) -> CheckpointType:
  """The checkpoint type for `task` (a task or its config).

  Args:
    maybe_use_persistence_checkpointing: Ask for the persistence kind where
      the model is SPMD (or pmap with TensorStore).
    task: A task or task config with `model.mesh_shape`.

  Returns:
    GDA (or PERSISTENCE when asked) for SPMD models and pmap models that use
    TensorStore; FLAX for other pmap models.
  """
  model = getattr(task, 'model', None)
  if model is None:
    raise ValueError(
        f'retrieve_checkpoint_type: `task` must have a `model`, got {task!r}.'
    )
  uses_mesh = getattr(model, 'mesh_shape', None) is not None
  if uses_mesh or py_utils.pmap_use_tensorstore():
    if maybe_use_persistence_checkpointing:
      return CheckpointType.PERSISTENCE
    return CheckpointType.GDA
  return CheckpointType.FLAX
