"""A pass that gives every sharding annotation its own copy.

Public names: unshare_sharding.

Fiddle keeps object sharing, so two layers whose annotations were built from
one list print (and generate code) as if they were tied together. Sharing
means nothing for annotations; this pass copies each one wherever it occurs,
and keeps every other shared object shared.

Example:

  config = unshare_sharding.unshare_sharding(config)
"""

from __future__ import annotations

from typing import Any, TypeVar

from fiddle import daglish
from paxml.tools.fiddle import remove_sharding

_T = TypeVar('_T')


def _deep_copy(value: Any) -> Any:
  """A copy of `value` in which no two positions share an object.

  Unlike `copy.deepcopy`, which copies a shared object once and shares the
  copy, this copies it at each position it occurs in.

  Args:
    value: The structure to copy.

  Returns:
    The unshared copy.
  """
  return daglish.BasicTraversal.run(
      lambda node, state: state.map_children(node), value)


class _UnmemoizedAnnotations(daglish.MemoizedTraversal):
  """Memoizes every node except sharding annotations (copied each visit)."""

  def apply(self, value: Any, state: daglish.State) -> Any:
    if remove_sharding._is_sharding_annotation(value, state.current_path):  # pylint: disable=protected-access
      return _deep_copy(value)
    return super().apply(value, state)


def unshare_sharding(config: _T) -> _T:
  """A copy of `config` whose sharding annotations share nothing.

  Args:
    config: A config, or a structure of configs.

  Returns:
    The copy; other shared objects stay shared.
  """
  return _UnmemoizedAnnotations.run(
      lambda value, state: state.map_children(value), config)
