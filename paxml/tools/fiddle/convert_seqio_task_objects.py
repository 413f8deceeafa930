"""A pass that replaces SeqIO Task objects in a config by configs of names.

Public names: convert_seqio_tasks.

A Task object cannot be printed or serialized as config; the config
`Config(seqio.get_mixture_or_task, name)` builds the same registered task.
seqio is imported only when a config is converted.

Example:

  config = convert_seqio_task_objects.convert_seqio_tasks(config)
"""

from __future__ import annotations

from typing import Any, TypeVar

from fiddle import daglish
from praxis import pax_fiddle

_T = TypeVar('_T')


def convert_seqio_tasks(config: _T) -> _T:
  """A copy of `config` whose seqio.Task objects are configs of their names.

  Args:
    config: A config or a structure of configs.

  Returns:
    The copy (the config's field for the task is then built by
    `seqio.get_mixture_or_task(name)`).
  """
  import seqio  # pylint: disable=g-import-not-at-top  # Heavy and optional.

  def transform(value: Any, state: daglish.State) -> Any:
    if isinstance(value, seqio.Task):
      return pax_fiddle.Config(seqio.get_mixture_or_task, value.name)
    return state.map_children(value)

  return daglish.MemoizedTraversal.run(transform, config)
