"""Saving and restoring the train state with Orbax (TensorStore underneath).

Public names: Checkpointer, CHECKPOINT_VERSION, install_sigterm_handler,
preemption_requested, reached_preemption.

A checkpoint is `<job_log_dir>/checkpoints/checkpoint_<step>/` with the Orbax
items `state` (the `TrainState` pytree of `jax.Array`s, sharded or not, from
one process or many), `metadata` (JSON: version and step) and, when given,
`train_input` (each process's input iterator state, one file per process).
Saves are asynchronous: `save` returns once the arrays are copied off the
device, and Orbax writes and commits them in the background. Restores read
onto whatever mesh the abstract state names, so a checkpoint written on a
2x4 mesh restores onto an 8x1 mesh or a single device.

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

import dataclasses
import signal
import threading
from typing import Any

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp
from paxml import checkpoint_paths
from paxml import checkpoint_types

# Items `state` (OCDBT TensorStore), `metadata` and optional `train_input`.
CHECKPOINT_VERSION = 1.2

CheckpointType = checkpoint_types.CheckpointType

_STATE = checkpoint_paths.STATE_ITEM_NAME
_INPUT = checkpoint_paths.INPUT_ITEM_NAME
_METADATA = checkpoint_paths.METADATA_ITEM_NAME
_MAX_REPORTED = 5

_sigterm_received = threading.Event()


# -- Preemption --------------------------------------------------------------


def _on_sigterm(signum: int, frame: Any) -> None:
  del signum, frame
  logging.warning('SIGTERM received: a checkpoint will be saved at the next '
                  'step, then the run stops.')
  _sigterm_received.set()


def install_sigterm_handler() -> bool:
  """Makes SIGTERM request a final checkpoint instead of killing the process.

  Only for single-process runs (call it from the main thread): with several
  processes JAX's preemption service already watches SIGTERM and agrees on a
  step with the other processes (see `reached_preemption`). Installing clears
  an earlier request.

  Returns:
    Whether the handler was installed.
  """
  if jax.process_count() > 1:
    return False
  _sigterm_received.clear()
  signal.signal(signal.SIGTERM, _on_sigterm)
  return True


def preemption_requested() -> bool:
  """Whether this process has received SIGTERM since the handler was set."""
  return _sigterm_received.is_set()


def reached_preemption(step: int) -> bool:
  """Whether to save a checkpoint at `step` and stop, because of preemption.

  With several processes this is JAX's preemption sync point (every process
  must call it at every step); with one process it is `preemption_requested`.

  Args:
    step: The current step.

  Returns:
    True at the step where the final checkpoint should be written.
  """
  if _sigterm_received.is_set():
    return True
  try:
    return multihost_utils.reached_preemption_sync_point(step)
  except RuntimeError:  # The preemption service is disabled.
    return False


# -- The input-state item: one file per process --------------------------------


def _input_state_file(directory: epath.Path) -> epath.Path:
  index, count = jax.process_index(), jax.process_count()
  return directory / f'process_{index}-of-{count}.bin'


class _InputStateHandler(ocp.CheckpointHandler):
  """Writes each process's input iterator state (bytes) to its own file."""

  def save(self, directory: epath.Path, args: _InputStateSave) -> None:
    _input_state_file(directory).write_bytes(args.state)

  def restore(self, directory: epath.Path,
              args: _InputStateRestore | None = None) -> bytes:
    del args
    path = _input_state_file(directory)
    if not path.exists():
      found = sorted(p.name for p in directory.iterdir())
      raise ValueError(
          f'No input state {path.name} in {directory} (found {found}): the '
          'checkpoint was written by a different number of processes.')
    return path.read_bytes()


@ocp.args.register_with_handler(_InputStateHandler, for_save=True)
@dataclasses.dataclass
class _InputStateSave(ocp.args.CheckpointArgs):
  state: bytes


@ocp.args.register_with_handler(_InputStateHandler, for_restore=True)
@dataclasses.dataclass
class _InputStateRestore(ocp.args.CheckpointArgs):
  pass


# -- Shape checks --------------------------------------------------------------


def _key_name(key: Any) -> str:
  for attr in ('key', 'name', 'idx'):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return str(key)


def _flat_shapes(tree: Any) -> dict[str, tuple[int, ...] | None]:
  """Leaf path (`mdl_vars.params.w`) -> shape, for the state or its metadata.

  Empty nodes (e.g. optax's `EmptyState`) have no leaves and no entry.
  """
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {'.'.join(_key_name(k) for k in path): getattr(v, 'shape', None)
          for path, v in leaves}


def _shape_errors(stored: Any, wanted: Any) -> list[str]:
  """Why the checkpoint tree `stored` cannot be restored as `wanted`."""
  have, want = _flat_shapes(stored), _flat_shapes(wanted)
  errors = [
      f'{k!r} has shape {tuple(have[k])} in the checkpoint but '
      f'{tuple(want[k])} in the model'
      for k in sorted(want.keys() & have.keys())
      if have[k] is not None and want[k] is not None
      and tuple(have[k]) != tuple(want[k])
  ]
  if missing := sorted(want.keys() - have.keys()):
    errors.append(f'not in the checkpoint: {missing[:_MAX_REPORTED]}')
  if extra := sorted(have.keys() - want.keys()):
    errors.append(f'not in the model: {extra[:_MAX_REPORTED]}')
  return errors


def _check_abstract_state(abstract_state: Any) -> None:
  leaves = jax.tree_util.tree_flatten_with_path(abstract_state)[0]
  for path, leaf in leaves:
    if getattr(leaf, 'sharding', None) is None:
      raise ValueError(
          f'abstract_state{jax.tree_util.keystr(path)} has no sharding: give '
          'every leaf a jax.ShapeDtypeStruct with sharding=NamedSharding(...).')


# -- The checkpointer ----------------------------------------------------------


class Checkpointer:
  """Saves and restores the train state under `<job_log_dir>/checkpoints`.

  A thin layer over `orbax.checkpoint.CheckpointManager`. Every process must
  call `save` and `restore` (Orbax coordinates the writes).
  """

  def __init__(
      self,
      job_log_dir: epath.PathLike,
      *,
      save_interval_steps: int = 5000,
      save_max_to_keep: int | None = 10,
      enable_async_checkpointing: bool = True,
      checkpoint_dir: epath.PathLike | None = None,
  ):
    """Opens (creating if needed) the checkpoint directory.

    Args:
      job_log_dir: The run's directory; checkpoints go to its `checkpoints/`.
      save_interval_steps: `save` writes when `step` is a multiple of this
        (and always the first time, and on preemption).
      save_max_to_keep: How many recent checkpoints to keep (None: all).
      enable_async_checkpointing: Write in the background.
      checkpoint_dir: Another directory to use instead (for instance
        `--restore_checkpoint_dir` of an eval job).
    """
    if save_interval_steps < 1:
      raise ValueError(
          f'save_interval_steps must be >= 1, got {save_interval_steps}.')
    self._dir = epath.Path(
        checkpoint_dir or checkpoint_paths.get_checkpoint_dir(job_log_dir))
    options = ocp.CheckpointManagerOptions(
        save_interval_steps=save_interval_steps,
        max_to_keep=save_max_to_keep,
        step_name_format=checkpoint_paths.name_format(),
        enable_async_checkpointing=enable_async_checkpointing,
    )
    self._manager = ocp.CheckpointManager(
        self._dir,
        item_handlers={
            _STATE: ocp.StandardCheckpointHandler(),
            _METADATA: ocp.JsonCheckpointHandler(),
            _INPUT: _InputStateHandler(),
        },
        options=options,
    )

  @property
  def directory(self) -> epath.Path:
    return self._dir

  def save(self, step: int, train_state: Any, input_state: bytes | None = None,
           force: bool = False) -> bool:
    """Starts writing a checkpoint of `step` if one is due; returns at once.

    Args:
      step: The step the state belongs to.
      train_state: The `TrainState` (any pytree of `jax.Array`s).
      input_state: This process's input iterator state, if it has one.
      force: Save even if the interval says no (never twice the same step).

    Returns:
      Whether a save was started.
    """
    step = int(step)
    if step in self._manager.all_steps():
      return False
    items = {
        _STATE: ocp.args.StandardSave(train_state),
        _METADATA: ocp.args.JsonSave(
            {'version': CHECKPOINT_VERSION, 'step': step}),
    }
    if input_state is not None:
      items[_INPUT] = _InputStateSave(bytes(input_state))
    force = force or preemption_requested()
    saved = self._manager.save(
        step, args=ocp.args.Composite(**items), force=force)
    if saved:
      logging.info('Saving checkpoint %s', self._step_dir(step))
    return saved

  def restore(
      self, step: int | None = None, *, abstract_state: Any
  ) -> tuple[Any, bytes | None]:
    """Reads a committed checkpoint onto the shardings of `abstract_state`.

    Args:
      step: The step to restore; None for the latest committed one.
      abstract_state: The state's pytree of `jax.ShapeDtypeStruct`s, each with
        its `sharding` (a `NamedSharding` on the target mesh).

    Returns:
      (train_state, input_state), input_state being None if the checkpoint
      has none.

    Raises:
      FileNotFoundError: There is no such committed checkpoint.
      ValueError: A variable's shape differs between checkpoint and model, or
        a variable is only on one side.
    """
    if step is None:
      step = self.latest_step()
      if step is None:
        raise FileNotFoundError(f'No committed checkpoint in {self._dir}.')
    step_dir = self._step_dir(step)
    if not (step_dir.is_dir() and ocp.step.is_path_finalized(step_dir)):
      raise FileNotFoundError(f'No committed checkpoint {step_dir}.')
    _check_abstract_state(abstract_state)
    stored = self._manager.item_metadata(step)[_STATE].tree
    if errors := _shape_errors(stored, abstract_state):
      raise ValueError(f'Checkpoint {step_dir} does not fit the model: '
                       + '; '.join(errors) + '.')
    items = {_STATE: ocp.args.StandardRestore(abstract_state)}
    has_input = (step_dir / _INPUT).exists()
    if has_input:
      items[_INPUT] = _InputStateRestore()
    logging.info('Restoring checkpoint %s', step_dir)
    out = self._manager.restore(step, args=ocp.args.Composite(**items))
    return out[_STATE], (out[_INPUT] if has_input else None)

  def latest_step(self) -> int | None:
    """The latest committed step on disk (writes in progress do not count)."""
    return checkpoint_paths.retrieve_latest_checkpoint_step(self._dir)

  def wait_until_finished(self) -> None:
    """Blocks until every started save is committed (raises its errors)."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and releases Orbax's resources."""
    self._manager.wait_until_finished()
    self._manager.close()

  def _step_dir(self, step: int) -> epath.Path:
    return checkpoint_paths.make_checkpoint_step_dir(self._dir, step)
