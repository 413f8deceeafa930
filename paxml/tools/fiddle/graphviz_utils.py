"""Draws a Pax config as a graph, after normalizing it.

Public names: render.

Needs the `graphviz` Python package (imported when called).

Example:

  graphviz_utils.render(config=experiment_config).render('/tmp/exp')
"""

from __future__ import annotations

from typing import Any

from paxml.tools.fiddle import config_normalization


def render(
    config: Any,
    *,
    max_depth: int | None = 4,
    max_str_length: int | None = 100,
    remove_defaults: bool = True,
    convert_dataclasses: bool = True,
    remove_sharding_annotations: bool = False,
    unshare_sharding_config: bool = True,
) -> Any:
  """A `graphviz.Graph` of a normalized copy of `config`.

  Args:
    config: A ParameterizedExperiment config.
    max_depth: How deep nested configs are drawn.
    max_str_length: Longer values are cut.
    remove_defaults: Leave out fields equal to their defaults.
    convert_dataclasses: Draw dataclass instances as configs.
    remove_sharding_annotations: Leave out sharding annotations.
    unshare_sharding_config: Draw each sharding annotation on its own (when
      they are kept).

  Returns:
    The graph.
  """
  from fiddle import graphviz as fiddle_graphviz  # pylint: disable=g-import-not-at-top

  normalizer = config_normalization.ConfigNormalizer(
      remove_defaults=remove_defaults,
      convert_dataclasses=convert_dataclasses,
      remove_sharding_annotations=remove_sharding_annotations,
      unshare_sharding_config=unshare_sharding_config)
  return fiddle_graphviz.render(config=normalizer(config), max_depth=max_depth,
                                max_str_length=max_str_length)
