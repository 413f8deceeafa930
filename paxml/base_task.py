"""BaseTask: the base of tasks, which pair a model with how to train it.

Public names: BaseTask.
"""

from __future__ import annotations

import abc

from praxis import base_hyperparams


class BaseTask(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """A task; `SingleTask` (in `paxml.tasks_lib`) is the one Pax runs.

  Attributes:
    name: The task's name; required.
  """

  def __post_init__(self):
    if not self.name:
      raise ValueError(
          f'{type(self).__name__}: the field `name` must be set (e.g. '
          f"{type(self).__name__}.HParams(name='my_task')).")
