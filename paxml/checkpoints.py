"""Saving and restoring the train state, in Pax 1.4's checkpoint layout.

Public names: Checkpointer, CheckpointType, CHECKPOINT_VERSION,
CHECKPOINT_PREFIX, save_checkpoint, restore_checkpoint, latest_checkpoint,
latest_checkpoint_if_exists, retrieve_latest_checkpoint_step,
retrieve_latest_checkpoint_step_if_exists, retrieve_checkpoint_type,
make_checkpoint_step_dir, get_step_from_checkpoint_asset,
is_checkpoint_asset, TrainingCheckpointer, AsyncCheckpointer,
get_checkpointer, reregister_type_handlers, install_sigterm_handler,
uninstall_sigterm_handler, preemption_requested, reached_preemption,
CheckpointDamagedError, CheckpointDirError, CheckpointNotFoundError,
CheckpointSaveError.

A checkpoint is `<job_log_dir>/checkpoints/checkpoint_<step:08d>/` as the
real Pax 1.4 writes it (see checkpoint_managers.py): `state` (one zarr array
per variable, named by its path; Flax checkpoints of pmap models:
`checkpoint_<step>/state/checkpoint`, one msgpack), `metadata/metadata` and,
when given, `train_input`. Checkpoints of the real Pax restore here and
these restore in the real Pax. Saves are asynchronous and atomic; restores
read onto whatever mesh the abstract state names, so a checkpoint written on
a 2x4 mesh restores onto an 8x1 mesh or a single device.

Pax's functional API, for libraries that load Pax checkpoints:

  state = checkpoints.restore_checkpoint(
      abstract_state, checkpoint_dir, checkpoint_type=CheckpointType.GDA)

The runner's checkpointer:

  ckpt = checkpoints.Checkpointer(job_log_dir, save_interval_steps=100)
  if ckpt.latest_step() is not None:  # Resume from the latest checkpoint.
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
        initial_state)
    state, input_state = ckpt.restore(abstract_state=abstract)
  checkpoints.install_sigterm_handler()
  for step in range(int(state.step), num_steps):
    state = train_step(state)
    # Every 100 steps, and at once after SIGTERM or a preemption notice.
    ckpt.save(step, state)
    if checkpoints.reached_preemption(step):
      break
  ckpt.close()  # Waits for the writes in flight.
"""

from __future__ import annotations

import abc
from typing import Any

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp
from paxml import _checkpointer
from paxml import _preemption
from paxml import _zarr_metadata_key
from paxml import checkpoint_managers
from paxml import checkpoint_paths
from paxml import checkpoint_types
from paxml import checkpoint_version
from paxml import train_states
from praxis import py_utils

# Pax 1.4's default: per-variable zarr arrays and `train_state_metadata`.
CHECKPOINT_VERSION = checkpoint_version.get_version(False)

CheckpointType = checkpoint_types.CheckpointType
CHECKPOINT_PREFIX = checkpoint_paths.CHECKPOINT_PREFIX

latest_checkpoint = checkpoint_paths.latest_checkpoint
latest_checkpoint_if_exists = checkpoint_paths.latest_checkpoint_if_exists
retrieve_latest_checkpoint_step = (
    checkpoint_paths.retrieve_latest_checkpoint_step)
retrieve_latest_checkpoint_step_if_exists = (
    checkpoint_paths.retrieve_latest_checkpoint_step_if_exists)
retrieve_checkpoint_type = checkpoint_types.retrieve_checkpoint_type
make_checkpoint_step_dir = checkpoint_paths.make_checkpoint_step_dir
get_step_from_checkpoint_asset = checkpoint_paths.get_step_from_checkpoint_asset
is_checkpoint_asset = checkpoint_paths.is_checkpoint_asset

install_sigterm_handler = _preemption.install_sigterm_handler
uninstall_sigterm_handler = _preemption.uninstall_sigterm_handler
preemption_requested = _preemption.preemption_requested
reached_preemption = _preemption.reached_preemption
Checkpointer = _checkpointer.Checkpointer
CheckpointDamagedError = _checkpointer.CheckpointDamagedError
CheckpointDirError = _checkpointer.CheckpointDirError
CheckpointNotFoundError = _checkpointer.CheckpointNotFoundError
CheckpointSaveError = _checkpointer.CheckpointSaveError


AsyncCheckpointer = ocp.AsyncCheckpointer


def get_checkpointer(
    checkpoint_type: CheckpointType,
    async_checkpointer: Any = None,
    enforce_restore_shape_check: bool = False,
    tensorstore_use_ocdbt: bool = False,
) -> Any:
  """An Orbax checkpointer of a bare `state` item in Pax's layout.

  Args:
    checkpoint_type: GDA or FLAX.
    async_checkpointer: Returned as is when given.
    enforce_restore_shape_check: Accepted (shapes are always checked).
    tensorstore_use_ocdbt: Must be False (version 1.1 is written).

  Returns:
    `ocp.Checkpointer` whose handler writes and reads a TrainState.
  """
  del enforce_restore_shape_check
  if async_checkpointer is not None:
    return async_checkpointer
  if tensorstore_use_ocdbt:
    raise ValueError('tensorstore_use_ocdbt=True: this project writes '
                     'checkpoint version 1.1 (it reads 1.2).')
  return checkpoint_managers.state_checkpointer(checkpoint_type)


def reregister_type_handlers(
    tensorstore_metadata_key: str | None = None) -> None:
  """Names each array's zarr header file in the checkpoints written and read.

  Orbax's scalar, numpy and jax.Array handlers are registered anew with
  `metadata_key=tensorstore_metadata_key` (the array handler keeps the
  registered one's array metadata store), and this project's checkpoint
  readers look for the header under that name. None changes nothing (as in
  Pax); the name holds for the rest of the process.

  Args:
    tensorstore_metadata_key: The header's file name (TensorStore's zarr
      default: `.zarray`).

  Raises:
    ValueError: `tensorstore_metadata_key` is not a file name.
  """
  if tensorstore_metadata_key is None:
    return
  _zarr_metadata_key.set_key(tensorstore_metadata_key)  # Checks it first.
  key = tensorstore_metadata_key
  th = ocp.type_handlers
  for ty in (int, float, bytes, np.number):
    th.register_type_handler(ty, th.ScalarHandler(metadata_key=key),
                             override=True)
  th.register_type_handler(np.ndarray, th.NumpyHandler(metadata_key=key),
                           override=True)
  # Orbax's own `register_standard_handlers_with_options` would drop the
  # registered array handler's metadata store (and, in orbax-checkpoint
  # 0.12, fails unless given `use_ocdbt` and `ts_context`).
  store = getattr(th.get_type_handler(jax.Array), '_array_metadata_store',
                  None)
  th.register_type_handler(
      jax.Array, th.ArrayHandler(metadata_key=key, array_metadata_store=store),
      override=True)


# -- Pax's functional API ------------------------------------------------------


def _manager(checkpoint_dir: epath.PathLike, checkpoint_type: Any,
             tensorstore_use_ocdbt: bool, **options: Any
             ) -> checkpoint_managers.OrbaxCheckpointManager:
  return checkpoint_managers.OrbaxCheckpointManager(
      epath.Path(checkpoint_dir),
      options=checkpoint_managers.CheckpointManagerOptions(**options),
      checkpoint_type=checkpoint_type,
      tensorstore_use_ocdbt=tensorstore_use_ocdbt)


def save_checkpoint(
    train_state: train_states.TrainState,
    checkpoint_dir: epath.PathLike,
    overwrite: bool = False,
    checkpoint_type: CheckpointType = CheckpointType.FLAX,
    state_specs: train_states.TrainState | None = None,
    async_checkpointer: Any = None,
    train_state_unpadded_shape_dtype_struct: Any = None,
    tensorstore_use_ocdbt: bool = False,
) -> checkpoint_managers.OrbaxCheckpointManager:
  """Writes `train_state` as `checkpoint_<its step>` under `checkpoint_dir`.

  Args:
    train_state: The TrainState (its `step` names the checkpoint).
    checkpoint_dir: The directory of the step directories.
    overwrite: Save even if the save interval would not.
    checkpoint_type: FLAX (one msgpack) or GDA (one array per variable).
    state_specs: Unused (the arrays carry their shardings).
    async_checkpointer: Non-None: return while the write goes on (call
      `wait_until_finished` on the returned manager).
    train_state_unpadded_shape_dtype_struct: Unpadded shapes for the metadata.
    tensorstore_use_ocdbt: Must be False (version 1.1 is written).

  Returns:
    The manager that wrote it.
  """
  del state_specs
  step = int(np.asarray(
      py_utils.maybe_unreplicate_for_fully_replicated(train_state.step)
  ).reshape(-1)[0])
  manager = _manager(checkpoint_dir, checkpoint_type, tensorstore_use_ocdbt,
                     create=True,
                     enable_async_checkpointing=async_checkpointer is not None)
  manager.save(step, train_state, train_state_unpadded_shape_dtype_struct,
               force=overwrite)
  if async_checkpointer is None:
    manager.wait_until_finished()
  return manager


def restore_checkpoint(
    state_global_shapes: train_states.TrainState,
    checkpoint_dir: epath.PathLike,
    global_mesh: jax.sharding.Mesh | None = None,
    checkpoint_type: CheckpointType = CheckpointType.FLAX,
    state_specs: train_states.TrainState | None = None,
    step: int | None = None,
    enforce_restore_shape_check: bool = False,
    state_unpadded_shape_dtype_struct: Any = None,
    tensorstore_use_ocdbt: bool = False,
    restore_transformations: dict[str, Any] | None = None,
) -> train_states.TrainState:
  """Reads a checkpoint (the latest, or `step`) as `state_global_shapes`.

  Any layout Pax 1.4 writes is read (GDA 1.1/1.2, FLAX), whatever
  `checkpoint_type` says; shapes are always checked.

  Args:
    state_global_shapes: TrainState of ShapeDtypeStructs (or arrays): names,
      shapes, dtypes and, where set, shardings.
    checkpoint_dir: The directory of the step directories.
    global_mesh: With `state_specs`, where leaves without a sharding go.
    checkpoint_type: GDA or FLAX (checked; the files decide the reader).
    state_specs: TrainState of PartitionSpecs on `global_mesh`.
    step: The step; None for the latest.
    enforce_restore_shape_check: Accepted (shapes are always checked).
    state_unpadded_shape_dtype_struct: Unused.
    tensorstore_use_ocdbt: Accepted (both 1.1 and 1.2 are read).
    restore_transformations: Not supported (must be None).

  Returns:
    The TrainState.

  Raises:
    ValueError: Not a TrainState, no such directory or checkpoint, or a
      variable of `state_global_shapes` is missing or of another shape (the
      error names it). Arrays only in the checkpoint are ignored, as in Pax
      (restore `TrainState(step, mdl_vars, opt_states=[])` for the model).
  """
  del enforce_restore_shape_check, state_unpadded_shape_dtype_struct
  del tensorstore_use_ocdbt
  if not issubclass(type(state_global_shapes), train_states.TrainState):
    raise ValueError(
        'state_global_shapes must be a subclass of '
        f'`{train_states.TrainState}`, but was `{type(state_global_shapes)}`.')
  if restore_transformations is not None:
    raise ValueError('restore_transformations are not supported.')
  checkpoint_dir = epath.Path(checkpoint_dir)
  if not checkpoint_dir.exists():
    raise ValueError(f'{checkpoint_dir=!r} does not exist')
  manager = _manager(checkpoint_dir, checkpoint_type, False, create=False,
                     enable_async_checkpointing=False)
  if step is None:
    step = manager.latest_step()
    if step is None:
      raise ValueError(
          f'No checkpoints were found in directory {checkpoint_dir=!r}')
  kwargs = {'specs': state_specs, 'mesh': global_mesh}
  return manager.restore(step, state_global_shapes, restore_kwargs=kwargs)


# -- Pax's training checkpointer interface -------------------------------------


class TrainingCheckpointer(metaclass=abc.ABCMeta):
  """What Pax's train loop asks of a checkpointer (see checkpoint_creators)."""

  @abc.abstractmethod
  def save_if_needed(self, step_i, partitioned_train_state,
                     train_state_unpadded_shape_dtype_struct,
                     train_state_pspecs, train_input_pipeline):
    """Saves a checkpoint of `step_i` if one is due."""

  @abc.abstractmethod
  def save_final(self, step_i, *, partitioned_train_state,
                 train_state_unpadded_shape_dtype_struct, train_state_pspecs,
                 train_input_pipeline):
    """Saves the final step's checkpoint if not already saved."""

  @property
  @abc.abstractmethod
  def step_to_restore(self) -> int | None:
    """The step that `get_model_states` restores, or None (initialise)."""

  @abc.abstractmethod
  def get_model_states(self, partitioner, metadata, root_prng_key,
                       train_input_pipeline):
    """(train_state, provenance, number of parameters, root key)."""

  @property
  @abc.abstractmethod
  def checkpoint_type(self) -> CheckpointType:
    """The checkpoint type written."""

  @abc.abstractmethod
  def wait_until_finished(self):
    """Blocks until started saves are committed."""

  @abc.abstractmethod
  def reached_preemption(self, step: int) -> bool:
    """Whether to save at `step` and stop, because of preemption."""
