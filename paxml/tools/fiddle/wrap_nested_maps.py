"""A pass that turns NestedMap values of a config into configs making them.

Public names: wrap_nested_maps.

Fiddle's tools handle dicts and configs but not custom objects such as
NestedMap; each NestedMap becomes
`Config(nested_map_config_helper.make_nested_map, base={...})`, which builds
back to the same NestedMap.

Example:

  config = wrap_nested_maps.wrap_nested_maps(config)
"""

from __future__ import annotations

from typing import Any, TypeVar

from fiddle import daglish
from paxml.experimental import nested_map_config_helper
from praxis import pax_fiddle
from praxis import py_utils

_T = TypeVar('_T')


def wrap_nested_maps(config: _T) -> _T:
  """A copy of `config` with every NestedMap replaced by a config of it.

  Args:
    config: A config or a structure of configs.

  Returns:
    The copy; NestedMaps nested in NestedMaps are wrapped too, and shared
    objects stay shared.
  """

  def transform(value: Any, state: daglish.State) -> Any:
    if isinstance(value, py_utils.NestedMap):
      value = pax_fiddle.Config(nested_map_config_helper.make_nested_map,
                                base=dict(value))
    return state.map_children(value)

  return daglish.MemoizedTraversal.run(transform, config)
