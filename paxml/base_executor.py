"""BaseExecutor: the interface of what runs a job's programs.

Public names: BaseExecutor.
"""

from __future__ import annotations

import abc
from typing import Any, Sequence


class BaseExecutor(metaclass=abc.ABCMeta):
  """Sets up a task's programs (`setup`), then runs them (`start`)."""

  @abc.abstractmethod
  def setup(self, jax_task: Any, job_log_dir: Any, checkpointer: Any,
            partitioner: Any, input_specs_provider: Any, train_input_p: Any,
            train_program: Any, eval_programs: Sequence[Any],
            decode_programs: Sequence[Any], early_stopping_fn: Any,
            exit_after_ondemand_checkpoint: bool = False,
            enable_summary_writer: bool = True) -> None:
    """Sets up the partitioner, the train state and the programs."""

  @abc.abstractmethod
  def start(self) -> Any:
    """Runs the programs."""
