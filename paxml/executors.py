"""The training loop: checkpoints, train steps, periodic eval and decode.

Public names: RunOptions, DefaultExecutor.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Sequence

from absl import logging
from paxml import checkpoints
from paxml import programs


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How `paxml.main` was asked to run (its flags, parsed once).

  Attributes:
    job_log_dir: Where the run writes everything.
    mode: 'train', 'eval', 'decode' or 'decode_once'.
    eval_on_test: Run the eval programs during training.
    decode_during_train: Run the decode programs during training.
    eval_during_decode: Also evaluate in a decode job.
    restore_checkpoint_dir: Checkpoints to read instead of
      `<job_log_dir>/checkpoints` (eval/decode jobs, or a warm start).
    restore_checkpoint_step: The step to restore (default: the latest).
    enable_checkpoint_saving: Write checkpoints.
    enable_summary_writer: Write TensorBoard summaries.
  """

  job_log_dir: pathlib.Path
  mode: str = 'train'
  eval_on_test: bool = True
  decode_during_train: bool = True
  eval_during_decode: bool = False
  restore_checkpoint_dir: pathlib.Path | None = None
  restore_checkpoint_step: int | None = None
  enable_checkpoint_saving: bool = True
  enable_summary_writer: bool = True


class DefaultExecutor:
  """Runs the train program until `num_train_steps`, with eval and decode.

  Each iteration: save a checkpoint if one is due (or a preemption was
  signalled), run one train step, then the eval programs every
  `eval_interval_steps` and the decode programs every
  `decode_interval_steps`. A final checkpoint is written at the end.
  """

  def __init__(self, task: Any, checkpointer: checkpoints.Checkpointer | None,
               train_program: programs.SingleTaskTrainProgram,
               eval_programs: Sequence[programs.Program] = (),
               decode_programs: Sequence[programs.Program] = (),
               train_input: Any = None):
    self._train = task.train
    self._checkpointer = checkpointer
    self._train_program = train_program
    self._eval_programs = list(eval_programs)
    self._decode_programs = list(decode_programs)
    self._train_input = train_input

  def _input_state(self) -> bytes | None:
    try:
      return self._train_input.get_state() if self._train_input else None
    except NotImplementedError:
      return None

  def _save(self, step: int, state: Any, force: bool = False) -> None:
    if self._checkpointer is not None:
      self._checkpointer.save(step, state, self._input_state(), force=force)

  def _due(self, interval: int | None, step: int, start: int = 0) -> bool:
    last = step == self._train_program.num_train_steps
    return bool(interval) and step >= start and (step % interval == 0 or last)

  def start(self, state: Any, step: int) -> Any:
    """Trains from `state` at `step`; returns the final state."""
    logging.info('Training from step %d to %d.', step,
                 self._train_program.num_train_steps)
    while self._train_program.should_run(state, step):
      if step > 0:
        self._save(step, state)
      if checkpoints.preemption_requested():
        logging.warning('Preemption requested: saving step %d and exiting.',
                        step)
        break
      state, _ = self._train_program.run(state, step)
      step += 1
      if self._due(self._train.eval_interval_steps, step):
        for program in self._eval_programs:
          program.run(state, step)
      if self._due(self._train.decode_interval_steps, step,
                   self._train.decode_start_after_n_steps):
        for program in self._decode_programs:
          program.run(state, step)
    self._save(step, state, force=True)
    if self._checkpointer is not None:
      self._checkpointer.wait_until_finished()
    for program in [self._train_program, *self._eval_programs,
                    *self._decode_programs]:
      program.shutdown()
    return state
