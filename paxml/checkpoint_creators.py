"""Pax's training checkpointers, built from a task's config.

Public names (Pax keeps them private but train loops call them):
_create_checkpointer, _checkpoint_dir, _make_checkpoint_dir, _parse_duration,
_OrbaxPjitTrainingCheckpointer, _OrbaxPmapTrainingCheckpointer.

  checkpointer = checkpoint_creators._create_checkpointer(
      task_p, job_log_dir, CheckpointType.GDA, todelete_subdir=None)
  state, provenance, num_params, key = checkpointer.get_model_states(
      partitioner, partitioner.get_train_state_metadata(), key)
  checkpointer.save_if_needed(step, state)  # Every save_interval_steps.
  checkpointer.save_final(step, partitioned_train_state=state)
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from absl import logging
from etils import epath
import jax
from paxml import checkpoint_managers
from paxml import checkpoint_paths
from paxml import checkpoint_types
from paxml import checkpoints
from paxml import train_states
from praxis import py_utils

CheckpointType = checkpoint_types.CheckpointType
_DURATION_RE = re.compile(r'(\d+)([smhd]?)$')
_SECONDS = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400}


def _checkpoint_dir(job_log_dir: epath.PathLike) -> epath.Path:
  """`<job_log_dir>/checkpoints`."""
  return checkpoint_paths.get_checkpoint_dir(job_log_dir)


def _make_checkpoint_dir(job_log_dir: epath.PathLike) -> epath.Path:
  """Creates `<job_log_dir>/checkpoints` (process 0), then syncs."""
  checkpoint_dir = _checkpoint_dir(job_log_dir)
  if jax.process_index() == 0:
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
  py_utils.sync_global_devices(f'checkpointer:makedirs:{checkpoint_dir}')
  return checkpoint_dir


def _parse_duration(duration_str: str | None) -> datetime.timedelta | None:
  """'90', '90s', '15m', '2h' or '1d' as a timedelta (None stays None)."""
  if not duration_str:
    return None
  m = _DURATION_RE.match(str(duration_str).strip())
  if m is None:
    raise ValueError(f'Unable to parse string duration `{duration_str}`.')
  return datetime.timedelta(seconds=int(m.group(1)) * _SECONDS[m.group(2)])


def _input_bytes(train_input_pipeline: Any) -> bytes | None:
  """The input's state to save: bytes as given, or its `get_state()`."""
  if train_input_pipeline is None or isinstance(
      train_input_pipeline, (bytes, bytearray)):
    return train_input_pipeline
  try:
    return train_input_pipeline.get_state()
  except (AttributeError, NotImplementedError):
    return None


class _OrbaxTrainingCheckpointer(checkpoints.TrainingCheckpointer):
  """Pax's TrainingCheckpointer over an OrbaxCheckpointManager."""

  def __init__(
      self,
      checkpoint_manager: checkpoint_managers.OrbaxCheckpointManager,
      checkpoint_type: CheckpointType,
      enable_checkpoint_saving: bool = True,
      restore_transformations: dict[str, Any] | None = None,
      external_checkpoint_path: epath.Path | None = None,
      external_checkpoint_handler: Any = None,
  ):
    if restore_transformations is not None:
      raise ValueError('restore_transformations are not supported.')
    if external_checkpoint_path is not None:
      raise ValueError(
          'external_checkpoint_path is not supported: restore a Pax '
          'checkpoint with --restore_checkpoint_dir or init_from_checkpoint.')
    del external_checkpoint_handler
    self.checkpoint_manager = checkpoint_manager
    self._checkpoint_type = CheckpointType(checkpoint_type)
    self._enable_checkpoint_saving = enable_checkpoint_saving
    self._step_to_restore = checkpoint_manager.latest_step()

  @property
  def step_to_restore(self) -> int | None:
    return self._step_to_restore

  @property
  def checkpoint_type(self) -> CheckpointType:
    return self._checkpoint_type

  def wait_until_finished(self):
    self.checkpoint_manager.wait_until_finished()

  def reached_preemption(self, step: int) -> bool:
    return checkpoints.reached_preemption(step)

  def _save(self, step_i, state, unpadded, train_input_pipeline, force):
    if not self._enable_checkpoint_saving:
      return
    self.checkpoint_manager.save(
        int(step_i), state, unpadded, _input_bytes(train_input_pipeline),
        force=force)

  def save_if_needed(self, step_i, partitioned_train_state,
                     train_state_unpadded_shape_dtype_struct=None,
                     train_state_pspecs=None, train_input_pipeline=None):
    """Saves at the manager's interval (and on preemption)."""
    del train_state_pspecs
    force = checkpoints.preemption_requested()
    self._save(step_i, partitioned_train_state,
               train_state_unpadded_shape_dtype_struct,
               train_input_pipeline, force)
    self.checkpoint_manager.check_for_errors()

  def save_final(self, step_i, *, partitioned_train_state,
                 train_state_unpadded_shape_dtype_struct=None,
                 train_state_pspecs=None, train_input_pipeline=None):
    """Saves `step_i` unless a checkpoint of it (or later) exists."""
    del train_state_pspecs
    latest = self.checkpoint_manager.latest_step()
    if latest is None or latest < step_i:
      logging.info('Saving a checkpoint at the final step %d', step_i)
      self._save(step_i, partitioned_train_state,
                 train_state_unpadded_shape_dtype_struct,
                 train_input_pipeline, True)

  def get_model_states(self, partitioner, metadata, root_prng_key,
                       train_input_pipeline=None):
    """(state, provenance, number of parameters, root key).

    The state is the checkpoint of `step_to_restore` on the partitioner's
    mesh, else a new initialisation.
    """
    state = None
    if self._step_to_restore is not None:
      restore_kwargs = {'specs': metadata.partition_specs,
                        'mesh': partitioner.global_mesh}
      state, input_state = self.checkpoint_manager.restore(
          self._step_to_restore, metadata.padded_global_shapes,
          train_input_pipeline=True, restore_kwargs=restore_kwargs)
      if input_state is not None and train_input_pipeline is not None:
        train_input_pipeline.set_state(input_state)
    root_prng_key, state, provenance = (
        partitioner.initialize_prng_key_and_train_state(
            root_prng_key, state, self.checkpoint_type))
    num_params = py_utils.total_num_vars(state.mdl_vars)
    return state, provenance, num_params, root_prng_key


class _OrbaxPjitTrainingCheckpointer(_OrbaxTrainingCheckpointer):
  """For SPMD (mesh) models: GDA checkpoints."""

  def __init__(self, checkpoint_manager, checkpoint_type, **kwargs):
    _check_pjit_checkpoint_type(checkpoint_type)
    super().__init__(checkpoint_manager, checkpoint_type, **kwargs)


def _check_pjit_checkpoint_type(checkpoint_type: CheckpointType) -> None:
  if CheckpointType(checkpoint_type) == CheckpointType.FLAX:
    raise ValueError('FLAX checkpointing not supported for pjit models.')


class _OrbaxPmapTrainingCheckpointer(_OrbaxTrainingCheckpointer):
  """For pmap (no mesh) models: Flax checkpoints."""

  def __init__(self, job_log_dir, checkpoint_manager, checkpoint_type,
               **kwargs):
    del job_log_dir
    super().__init__(checkpoint_manager, checkpoint_type, **kwargs)


def _create_checkpointer(
    task_p: Any,
    job_log_dir: epath.PathLike,
    checkpoint_type: CheckpointType,
    todelete_subdir: str | None,
    train_input_p: Any = None,
    enable_async_checkpointing: bool = True,
    enable_checkpoint_saving: bool = True,
    enforce_restore_shape_check: bool = False,
    maybe_use_persistence_checkpointing: bool = False,
    tensorstore_use_ocdbt: bool = False,
    async_timeout_secs: int | None = None,
) -> checkpoints.TrainingCheckpointer:
  """The training checkpointer of a task config, under `job_log_dir`.

  Args:
    task_p: The task's config (reads `train.save_max_to_keep`,
      `save_interval_steps`, `save_keep_interval_duration` and
      `model.ici_mesh_shape`).
    job_log_dir: The run's directory.
    checkpoint_type: GDA or FLAX.
    todelete_subdir: Move old checkpoints there instead of deleting them.
    train_input_p: Unused.
    enable_async_checkpointing: Write in the background.
    enable_checkpoint_saving: False: never save.
    enforce_restore_shape_check: Accepted (shapes are always checked).
    maybe_use_persistence_checkpointing: Must be False.
    tensorstore_use_ocdbt: Must be False (version 1.1 is written).
    async_timeout_secs: Unused.

  Returns:
    The checkpointer.
  """
  del train_input_p, enforce_restore_shape_check, async_timeout_secs
  if maybe_use_persistence_checkpointing:
    raise NotImplementedError('Persistence checkpointer not supported.')
  pjit = getattr(task_p.model, 'ici_mesh_shape', None) is not None
  if pjit:
    # Before the manager exists: it starts cleaning up the directory's
    # unfinished checkpoints on a background thread as it is made.
    _check_pjit_checkpoint_type(checkpoint_type)
  train_p = task_p.train
  # Before the manager, which copies the registered handlers as it is made.
  checkpoints.reregister_type_handlers(
      getattr(train_p, 'tensorstore_metadata_key', None))
  options = checkpoint_managers.CheckpointManagerOptions(
      max_to_keep=train_p.save_max_to_keep,
      save_interval_steps=train_p.save_interval_steps,
      keep_time_interval=_parse_duration(
          getattr(train_p, 'save_keep_interval_duration', None)),
      todelete_subdir=todelete_subdir,
      cleanup_tmp_directories=True,
      enable_async_checkpointing=enable_async_checkpointing,
  )
  manager = checkpoint_managers.OrbaxCheckpointManager(
      _make_checkpoint_dir(job_log_dir), options=options,
      checkpoint_type=checkpoint_type,
      tensorstore_use_ocdbt=tensorstore_use_ocdbt)
  kwargs = {'enable_checkpoint_saving': enable_checkpoint_saving}
  if pjit:
    return _OrbaxPjitTrainingCheckpointer(manager, checkpoint_type, **kwargs)
  return _OrbaxPmapTrainingCheckpointer(job_log_dir, manager, checkpoint_type,
                                        **kwargs)


# Names Pax 1.4's module also has (aliases of other modules' names).
Checkpointer = checkpoint_paths.Checkpointer
TrainState = train_states.TrainState
TrainStateProvenance = train_states.TrainStateProvenance
