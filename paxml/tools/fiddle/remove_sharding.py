"""A pass that strips sharding annotations from a Pax config.

Public names: BASE_LAYER_SHARDING_FIELDS, SHARDING_TYPES, remove_sharding.

Without the annotations a config reads (and draws, see `graphviz_utils`)
more easily, and generated code can put them back in a function of their
own.

Example:

  plain = remove_sharding.remove_sharding(task_config)
"""

from __future__ import annotations

from typing import Any, TypeVar

import fiddle as fdl
from fiddle import daglish
from praxis import base_layer
from praxis import pax_fiddle

_T = TypeVar('_T')

# BaseLayer's fields that hold sharding annotations.
BASE_LAYER_SHARDING_FIELDS = {
    'weight_split_dims_mapping',
    'activation_split_dims_mapping',
}

# The annotation classes (their subclasses count too).
SHARDING_TYPES = (
    base_layer.BaseLayer.WeightSharding,
    base_layer.BaseLayer.ActivationSharding,
)


def _is_sharding_annotation(value: Any, path: daglish.Path) -> bool:
  """Whether `value` (found at `path`) is a sharding annotation.

  Args:
    value: A config node.
    path: Where it sits; a last attribute named like BaseLayer's sharding
      fields counts whatever the value's class.

  Returns:
    True for a config of a `SHARDING_TYPES` class or a value of a sharding
    field.
  """
  if path and isinstance(path[-1], daglish.Attr) and (
      path[-1].name in BASE_LAYER_SHARDING_FIELDS):
    return True
  if not isinstance(value, fdl.Buildable):
    return False
  fn = fdl.get_callable(value)
  return isinstance(fn, type) and issubclass(fn, SHARDING_TYPES)


class _Removed:
  """Marks a value to delete from its parent."""


_REMOVED = _Removed()


def _drop_removed_arguments(config: fdl.Buildable,
                            replace_with_default: bool) -> None:
  for name, value in list(fdl.ordered_arguments(config).items()):
    if value is not _REMOVED:
      continue
    delattr(config, name)
    if replace_with_default:
      fresh = pax_fiddle.Config(fdl.get_callable(config))
      setattr(config, name, getattr(fresh, name))


def remove_sharding(config: _T, replace_with_default: bool = False) -> _T:
  """A copy of `config` without its sharding annotations.

  Args:
    config: A config, or a structure (list, dict, ...) of configs.
    replace_with_default: Put each removed annotation's default back (an
      empty annotation config for BaseLayer fields) instead of leaving the
      field unset.

  Returns:
    The copy; sharing between its other nodes is kept.
  """

  def transform(value, state: daglish.State):
    value = state.map_children(value)
    if _is_sharding_annotation(value, state.current_path):
      return _REMOVED
    if isinstance(value, fdl.Buildable):
      _drop_removed_arguments(value, replace_with_default)
    return value

  return daglish.MemoizedTraversal.run(transform, config)
