"""Plain dicts in a Fiddle config that become NestedMaps when built.

Public names: make_nested_map.

Fiddle's tools (serialization, codegen, graphviz) understand dicts but not
NestedMap, so a config holds `pax_fiddle.Config(make_nested_map, base={...})`
and the built object is a `NestedMap`.

Example:

  cfg = pax_fiddle.Config(nested_map_config_helper.make_nested_map,
                          base={'a': 1})
  pax_fiddle.build(cfg).a  # 1
"""

from typing import Any

from praxis import py_utils


def make_nested_map(base: dict[str, Any]) -> py_utils.NestedMap:
  """`base` as a NestedMap (nested dicts stay dicts)."""
  return py_utils.NestedMap(base)
