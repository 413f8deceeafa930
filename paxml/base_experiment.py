"""BaseExperiment: an experiment is a builder of a task config and datasets.

Public names: BaseExperiment, BaseExperimentT.

Example:

  @experiment_registry.register
  class MyLm(base_experiment.BaseExperiment):

    def datasets(self):
      return [pax_fiddle.Config(MyInput, is_training=True, batch_size=8),
              pax_fiddle.Config(MyInput, is_training=False, batch_size=8)]

    def task(self):
      task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='lm')
      ...
      return task_p

Variants subclass and edit a copy of the parent's config (at most two levels).
The runner writes the resolved configs to `<job_log_dir>/model_params.txt`.
"""

from __future__ import annotations

import abc
import sys
from typing import Any

from praxis import base_input
from praxis import pax_fiddle


class BaseExperiment(metaclass=abc.ABCMeta):
  """The interface `paxml.main` runs (see the module docstring)."""

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    # Class attributes such as `pg.oneof(...)` become search decision points
    # (as in Pax); a class body that uses them has imported pyglove, so
    # experiments without them never import it.
    if 'pyglove' in sys.modules:
      from paxml import automl_interfaces  # pylint: disable=g-import-not-at-top
      automl_interfaces.enable_class_level_hyper_primitives(cls)

  @abc.abstractmethod
  def datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    """The input configs: training (`is_training=True`) and eval ones."""

  @abc.abstractmethod
  def task(self) -> pax_fiddle.Config[Any]:
    """The task config (usually a `tasks_lib.SingleTask`)."""

  def decode_datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    """Inputs of the decode programs (default: none)."""
    return []

  def decoder_datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    """Deprecated name of `decode_datasets`."""
    return self.decode_datasets()

  def train_datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    return [d for d in self.datasets() if d.is_training]

  def eval_datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    return [d for d in self.datasets() if not d.is_training]

  def training_dataset(self) -> pax_fiddle.Config[base_input.BaseInput]:
    """The one training input; raises if there is not exactly one."""
    train = self.train_datasets()
    if len(train) != 1:
      raise ValueError(
          f'{type(self).__name__}.datasets() must hold exactly one input '
          f'with is_training=True, found {len(train)}.'
      )
    return train[0]

  def get_input_specs_provider_params(self) -> pax_fiddle.Config[Any]:
    """How the runner learns input shapes (default: read a training batch)."""
    return pax_fiddle.Config(
        base_input.DatasetInputSpecsProvider,
        input_p=self.training_dataset(),
    )

  def validate(self) -> None:
    """Checks the experiment before it runs (override to add checks)."""

  def search(self) -> Any:
    """Hyper-parameter search settings (pyglove); None runs no search."""
    return None

  def sub_experiments(self) -> dict[str, type[BaseExperiment]]:
    return {'': self.__class__}

  # The runner's hooks, as in Pax: an experiment that overrides one of them
  # runs its own programs, partitioner or executor (`paxml.train` and
  # `paxml.eval_lib` call the overrides only; the defaults below are what
  # they use otherwise).

  def partitioner(self) -> Any:
    """A partitioner (not set up yet), or None for the default one."""
    return None

  def train_programs(self) -> list[Any]:
    """The train programs; the runner runs the first."""
    from paxml import programs  # pylint: disable=g-import-not-at-top
    return [programs.SingleTaskTrainProgram()]

  def eval_programs(self) -> list[Any]:
    """The eval programs: one per eval dataset."""
    from paxml import programs  # pylint: disable=g-import-not-at-top
    return [programs.SingleTaskEvalProgram(input_p)
            for input_p in self.eval_datasets()]

  def decode_programs(self) -> list[Any]:
    """The decode programs: one per decode dataset."""
    from paxml import decode_programs  # pylint: disable=g-import-not-at-top
    return [decode_programs.SingleTaskDecodeProgram(input_p)
            for input_p in self.decode_datasets()]

  def executor(self) -> Any:
    """An executor (`base_executor.BaseExecutor`), or None for the default
    `executors.DefaultExecutor`."""
    return None


BaseExperimentT = type[BaseExperiment]
