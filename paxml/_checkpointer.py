"""The runner's checkpointer: saves its own run, restores what reads.

Private to paxml.checkpoints (public there as `Checkpointer`).

What it guarantees:
- It writes and deletes only in its own directory
  (`<job_log_dir>/checkpoints`). A `restore_dir` (a warm start from another
  run) is only read; a `read_only` checkpointer (eval, decode) writes nothing.
- Garbage collection keeps the `save_max_to_keep` newest *good* checkpoints
  and everything newer; with `verify_before_gc` a saved step counts as good
  only once `mark_good` says so (the train loop does, after a finite loss
  from that state), so a run going non-finite never pushes out good ones.
- A checkpoint is checked before it is used (`_checkpoint_safety`). Without
  an explicit step, a damaged one is moved aside (own directory only) and the
  newest one that reads is restored, with a warning; an explicit step that is
  missing or damaged is one error.
- A save that fails raises `CheckpointSaveError` naming the directory and the
  cause, at the next save or wait.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
from paxml import _checkpoint_safety as safety
from paxml import _preemption
from paxml import _run_errors
from paxml import checkpoint_managers
from paxml import checkpoint_paths
from paxml import checkpoint_types
from praxis import base_hyperparams
from praxis import py_utils

CheckpointType = checkpoint_types.CheckpointType
CheckpointDamagedError = safety.CheckpointDamagedError


class CheckpointDirError(base_hyperparams.ConfigError):
  """A checkpoint directory or step that cannot be used as asked."""


class CheckpointNotFoundError(CheckpointDirError, FileNotFoundError):
  """No (readable) checkpoint where one was asked for."""


class CheckpointSaveError(_run_errors.RunStoppedError):
  """Writing a checkpoint failed; the message names the directory."""


def _cause(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f'{type(error).__name__}: {text[0] if text else ""}'.rstrip(': ')


def _check_abstract_state(abstract_state: Any) -> None:
  leaves = jax.tree_util.tree_flatten_with_path(
      abstract_state, is_leaf=py_utils.is_optax_masked_node)[0]
  for path, leaf in leaves:
    if py_utils.is_optax_masked_node(leaf):
      continue
    if getattr(leaf, 'sharding', None) is None:
      raise ValueError(
          f'abstract_state{jax.tree_util.keystr(path)} has no sharding: give '
          'every leaf a jax.ShapeDtypeStruct with sharding=NamedSharding(...).')


def _probe_writable(directory: epath.Path) -> None:
  """Creates `directory`; writes and removes a small file in it."""
  probe = directory / f'.write_test-{socket.gethostname()}-{os.getpid()}'
  directory.mkdir(parents=True, exist_ok=True)
  probe.write_text('ok')
  probe.unlink()


def _prepare_writable(directory: epath.Path) -> None:
  try:
    _probe_writable(directory)
  except OSError as e:
    raise CheckpointDirError(
        f'Checkpoint directory {directory} is not writable ({_cause(e)}).'
    ) from e


def check_options(save_interval_steps: int, save_max_to_keep: int | None,
                  restore_dir: epath.PathLike | None = None) -> None:
  """Rejects settings that would lose checkpoints, before anything runs."""
  if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
    raise CheckpointDirError(
        f'task.train.save_interval_steps={save_interval_steps!r}: expected '
        'an integer >= 1 (steps between checkpoints).')
  if save_max_to_keep is not None and (
      not isinstance(save_max_to_keep, int) or save_max_to_keep < 1):
    raise CheckpointDirError(
        f'task.train.save_max_to_keep={save_max_to_keep!r}: expected an '
        'integer >= 1 (how many recent checkpoints to keep), or None to '
        'keep all.')
  if restore_dir is not None and not epath.Path(restore_dir).is_dir():
    raise CheckpointDirError(
        f'--restore_checkpoint_dir={restore_dir}: no such directory '
        '(expected the checkpoints/ directory of an earlier run; it is only '
        'read).')


class Checkpointer:
  """Saves and restores the train state under `<job_log_dir>/checkpoints`.

  The runner's face of `checkpoint_managers.OrbaxCheckpointManager`: Pax
  1.4's layout, so the real Pax resumes these checkpoints and this project
  resumes the real Pax's. Every process must call `save` and `restore`.
  """

  def __init__(
      self,
      job_log_dir: epath.PathLike,
      *,
      save_interval_steps: int = 5000,
      save_max_to_keep: int | None = 10,
      enable_async_checkpointing: bool = True,
      checkpoint_dir: epath.PathLike | None = None,
      checkpoint_type: CheckpointType = CheckpointType.GDA,
      restore_dir: epath.PathLike | None = None,
      read_only: bool = False,
      verify_before_gc: bool = False,
  ):
    """Opens (creating if needed) the checkpoint directory.

    Args:
      job_log_dir: The run's directory; checkpoints go to its `checkpoints/`.
      save_interval_steps: `save` writes when `step` is a multiple of this
        (and always the first time, and on preemption).
      save_max_to_keep: How many recent good checkpoints to keep (None: all;
        at least 1).
      enable_async_checkpointing: Write in the background.
      checkpoint_dir: Another directory to use instead (for instance
        `--restore_checkpoint_dir` of an eval job, with `read_only`).
      checkpoint_type: GDA (Pax's SPMD models) or FLAX (its pmap models).
      restore_dir: Another run's checkpoints to start from when this
        directory has none (read only; it must exist).
      read_only: Never write, move or delete anything (eval and decode).
      verify_before_gc: Saved steps count as good only after `mark_good`.
    """
    check_options(save_interval_steps, save_max_to_keep, restore_dir)
    self._dir = epath.Path(
        checkpoint_dir or checkpoint_paths.get_checkpoint_dir(job_log_dir))
    self._restore_dir = None
    if restore_dir is not None:
      self._restore_dir = epath.Path(restore_dir)
      if self._restore_dir.resolve() == self._dir.resolve():
        self._restore_dir = None
    self._read_only = read_only
    self._max_to_keep = save_max_to_keep
    self._verify = verify_before_gc
    if not read_only:
      _prepare_writable(self._dir)
      for step, path in safety.step_dirs(self._dir):
        if not safety.has_commit_marker(path):
          logging.warning('Checkpoint %s has no commit marker and no state '
                          '(an unfinished or foreign directory): ignored.',
                          path)
          self._move_aside(path)
    self._good = {s for s, _ in safety.step_dirs(self._dir)}
    self.restored_from: epath.Path | None = None
    options = {'read_only': True, 'create': False} if read_only else {}
    self._manager = checkpoint_managers.OrbaxCheckpointManager(
        self._dir,
        options=checkpoint_managers.CheckpointManagerOptions(
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=enable_async_checkpointing,
            **options),
        checkpoint_type=checkpoint_type)

  @property
  def directory(self) -> epath.Path:
    return self._dir

  @property
  def manager(self) -> checkpoint_managers.OrbaxCheckpointManager:
    return self._manager

  # -- Saving --------------------------------------------------------------

  def _raise_save_errors(self, step: int | None = None) -> None:
    try:
      self._manager.check_for_errors()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e, step)

  def _raise_save_error(self, error: BaseException, step: int | None) -> None:
    what = 'a checkpoint' if step is None else f'the checkpoint of step {step}'
    raise CheckpointSaveError(
        f'Saving {what} in {self._dir} failed: {_cause(error)}') from error

  def save_due(self, step: int, force: bool = False) -> bool:
    """Whether `save(step, ..., force)` would write."""
    force = force or _preemption.preemption_requested()
    return not self._read_only and self._manager.should_save(int(step), force)

  def save(self, step: int, train_state: Any, input_state: bytes | None = None,
           force: bool = False) -> bool:
    """Starts writing a checkpoint of `step` if one is due; returns at once.

    Args:
      step: The step the state belongs to.
      train_state: The `TrainState` (any pytree of `jax.Array`s).
      input_state: This process's input iterator state, if it has one (or a
        function giving it, called only when a save is due).
      force: Save even if the interval says no (never twice the same step).

    Returns:
      Whether a save was started.

    Raises:
      CheckpointSaveError: This or an earlier save failed.
    """
    if self._read_only:
      raise CheckpointDirError(f'{self._dir} is open read-only: not saving.')
    self._raise_save_errors()
    force = force or _preemption.preemption_requested()
    if not self._manager.should_save(int(step), force):
      return False
    if callable(input_state):
      input_state = input_state()
    try:
      # Orbax creates the step directory in the background and its other
      # threads wait minutes for it: fail here, at once, when it cannot.
      _probe_writable(self._dir)
      saved = self._manager.save(int(step), train_state,
                                 train_input_pipeline=input_state, force=force)
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e, int(step))
    if saved and not self._verify:
      self._good.add(int(step))
    self._collect_garbage()
    return saved

  def mark_good(self, step: int) -> None:
    """Marks the checkpoint of `step` (if any) good, then collects garbage."""
    if int(step) not in self._good:
      self._good.add(int(step))
      self._collect_garbage()

  def _collect_garbage(self) -> None:
    """Deletes checkpoints older than the `save_max_to_keep` newest good."""
    if (self._read_only or self._max_to_keep is None
        or jax.process_index() != 0):
      return
    good_newer = 0
    for step, path in safety.step_dirs(self._dir):
      if good_newer >= self._max_to_keep and step in self._good:
        logging.info('Deleting old checkpoint %s (save_max_to_keep=%d).',
                     path, self._max_to_keep)
        path.rmtree()
        self._good.discard(step)
      elif step in self._good:
        good_newer += 1

  def last_good(self) -> str:
    """A sentence naming the newest checkpoint known to be good."""
    for step, path in safety.step_dirs(self._dir):
      if step in self._good:
        return (f'The last good checkpoint is {path} (resume from it with '
                f'--restore_checkpoint_step={step}).')
    if self.restored_from is not None:
      return (f'The run started from {self.restored_from}, the last good '
              'checkpoint.')
    return 'There is no good checkpoint yet.'

  # -- Restoring ------------------------------------------------------------

  def _candidates(self) -> list[tuple[int, epath.Path, bool]]:
    """(step, dir, own) of every committed checkpoint, own dir first."""
    own = [(s, p, True) for s, p in safety.step_dirs(self._dir)]
    if own or self._restore_dir is None:
      return own
    return [(s, p, False) for s, p in safety.step_dirs(self._restore_dir)]

  def _read(self, step: int, step_dir: epath.Path,
            abstract_state: Any) -> tuple[Any, bytes | None]:
    safety.verify_step_dir(step_dir, step)
    # A full state must match the checkpoint exactly (a resumed run with
    # another optimizer fails here); without optimizer states (eval, decode)
    # the checkpoint's are ignored.
    strict = bool(jax.tree.leaves(abstract_state.opt_states))
    logging.info('Restoring checkpoint %s', step_dir)
    state = checkpoint_managers.read_state(
        step_dir / checkpoint_paths.STATE_ITEM_NAME, abstract_state, strict)
    held = int(np.asarray(py_utils.maybe_unreplicate_for_fully_replicated(
        state.step)).reshape(-1)[0])
    if held != step:
      raise CheckpointDamagedError(
          step_dir / checkpoint_paths.STATE_ITEM_NAME,
          f'holds step {held}, but the directory is named for step {step}')
    input_dir = step_dir / checkpoint_paths.INPUT_ITEM_NAME
    input_state = (checkpoint_managers.read_input_state(input_dir)
                   if input_dir.exists() else None)
    self.restored_from = step_dir
    return state, input_state

  def _move_aside(self, path: epath.Path, why: str = 'damaged') -> None:
    """Renames a step directory aside (process 0; the others skip it)."""
    if self._read_only or jax.process_index() != 0:
      return
    try:
      safety.quarantine(path, why)
    except FileNotFoundError:  # Another process was first.
      pass

  def set_aside_newer(self, step: int) -> None:
    """Training again from `step`: newer own checkpoints are renamed aside.

    Left in place they would block this run's saves (a step is never saved
    twice, nor below the newest) and a restart would resume from them.
    """
    if self._read_only:
      return
    newer = [(s, p) for s, p in safety.step_dirs(self._dir) if s > step]
    for s, path in newer:
      self._move_aside(path, 'superseded')
      self._good.discard(s)
    if newer:
      self._manager.reload()

  def restore(
      self, step: int | None = None, *, abstract_state: Any
  ) -> tuple[Any, bytes | None]:
    """Reads a checked checkpoint onto the shardings of `abstract_state`.

    Args:
      step: The step to restore; None for the newest one that reads (damaged
        newer ones in this run's own directory are moved aside).
      abstract_state: The state's pytree of `jax.ShapeDtypeStruct`s, each with
        its `sharding` (a `NamedSharding` on the target mesh).

    Returns:
      (train_state, input_state), input_state being None if the checkpoint
      has none.

    Raises:
      CheckpointNotFoundError: No such committed checkpoint, or none reads.
      CheckpointDirError: The explicit step's checkpoint is damaged.
      ValueError: A variable's shape differs between checkpoint and model, or
        a variable is only on one side.
    """
    _check_abstract_state(abstract_state)
    candidates = self._candidates()
    if step is not None:
      found = [(p, own) for s, p, own in candidates if s == int(step)]
      if not found:
        raise CheckpointNotFoundError(
            f'--restore_checkpoint_step={step}: no committed checkpoint '
            f'{self._manager.step_dir(int(step))} (steps found: '
            f'{sorted(s for s, _, _ in candidates)}).')
      try:
        result = self._read(int(step), found[0][0], abstract_state)
      except CheckpointDamagedError as e:
        raise CheckpointDirError(
            f'--restore_checkpoint_step={step}: the checkpoint is damaged '
            f'({e}); choose another step (found: '
            f'{sorted(s for s, _, _ in candidates)}).') from e
      return result
    skipped = []
    for s, path, own in candidates:
      try:
        result = self._read(s, path, abstract_state)
      except CheckpointDamagedError as e:
        logging.warning('Checkpoint of step %d cannot be used: %s', s, e)
        if own and not self._read_only:
          self._move_aside(path)
          self._good.discard(s)
        skipped.append(s)
        continue
      if skipped:
        self._manager.reload()
        logging.warning(
            'Resuming from step %d, the newest checkpoint that reads: newer '
            'ones (steps %s) are damaged%s. To pick a step, pass '
            '--restore_checkpoint_step.', s, skipped,
            ' and were moved aside' if own and not self._read_only else '')
      return result
    where = self._dir if self._restore_dir is None else (
        f'{self._dir} or {self._restore_dir}')
    if skipped:
      raise CheckpointNotFoundError(
          f'No checkpoint in {where} reads: steps {skipped} are damaged. '
          'Start afresh in another --job_log_dir.')
    raise CheckpointNotFoundError(f'No committed checkpoint in {where}.')

  def latest_step(self) -> int | None:
    """The newest committed step on disk (writes in progress do not count).

    The run's own directory first; else the `restore_dir`'s.
    """
    found = -1
    for s, path, _ in self._candidates():
      if safety.has_commit_marker(path):
        found = s
        break
    if jax.process_count() > 1:  # Every process restores process 0's pick.
      found = int(multihost_utils.broadcast_one_to_all(np.int64(found)))
    return None if found < 0 else found

  def wait_until_finished(self) -> None:
    """Blocks until every started save is committed (raises its errors)."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e, None)
    self._raise_save_errors()
    self._collect_garbage()

  def close(self) -> None:
    """Waits for pending saves and releases Orbax's resources."""
    try:
      self._manager.close()
    except Exception as e:  # pylint: disable=broad-except
      self._raise_save_error(e, None)
    self._collect_garbage()
