"""Path-aware helpers on pytrees.

Public API: `to_path_tree`, `fullmatch_path`, `is_subset`,
`extract_elements_matching_subset_structure`, `get_shape_dtype`, `copy`.

Paths are built from JAX key paths: dict keys and attribute names are joined
with `/`, sequence indices are written `[i]` with no separator, so
`{'a': [x, {'b': y}]}` has paths `'a[0]'` and `'a[1]/b'`.
"""

import re
from collections.abc import Callable, Iterable
from typing import Any

import jax
from jax import tree_util as jtu

from praxis import pytypes

Patterns = str | re.Pattern | Iterable[str | re.Pattern]


def _key_to_str(key: Any) -> str:
  """Renders one JAX key-path entry."""
  if isinstance(key, jtu.DictKey):
    return str(key.key)
  if isinstance(key, jtu.SequenceKey):
    return f'[{key.idx}]'
  if isinstance(key, jtu.GetAttrKey):
    return key.name
  if isinstance(key, jtu.FlattenedIndexKey):
    return str(key.key)
  raise ValueError(f'Unexpected pytree key {key!r} of type {type(key)}.')


def _path_to_str(path: tuple[Any, ...]) -> str:
  return '/'.join(_key_to_str(k) for k in path).replace('/[', '[')


def to_path_tree(
    tree: Any, is_leaf: Callable[..., bool] | None = None
) -> Any:
  """Returns `tree` with each leaf replaced by its path string.

  Example:
    `{'a': [1, Point(x=2, y=3)], 'b': (4,)}` becomes
    `{'a': ['a[0]', Point(x='a[1]/x', y='a[1]/y')], 'b': ('b[0]',)}`.

  Args:
    tree: any pytree.
    is_leaf: optional predicate; a subtree for which it is true becomes None.

  Returns:
    A pytree of the same structure holding strings (or None).
  """

  def leaf_path(path, value):
    if is_leaf is not None and is_leaf(value):
      return None
    return _path_to_str(path)

  return jtu.tree_map_with_path(leaf_path, tree, is_leaf=is_leaf)


def fullmatch_path(
    tree: Any,
    patterns: Patterns,
    is_leaf: Callable[..., bool] | None = None,
) -> Any:
  """Returns a bool tree: does each leaf's path fully match any pattern?

  Args:
    tree: any pytree.
    patterns: a regex (`str` or `re.Pattern`) or an iterable of them.
    is_leaf: as in `to_path_tree`; such subtrees become None.

  Returns:
    A pytree of bools shaped like `tree`.
  """
  if isinstance(patterns, (str, re.Pattern)):
    patterns = [patterns]
  compiled = [re.compile(p) for p in patterns]
  return jtu.tree_map(
      lambda path: any(p.fullmatch(path) for p in compiled),
      to_path_tree(tree, is_leaf=is_leaf),
  )


def is_subset(subset: pytypes.Nested, superset: pytypes.Nested) -> bool:
  """True if `subset` is contained in `superset`, starting from the root.

  Dicts (and NestedMaps, which compare with dicts) may miss keys, lists and
  tuples may miss a suffix (`[1, 2]` is in `[1, 2, 3]`, `[1, 3]` is not);
  everything else must be equal and of the same type.

  Args:
    subset: the smaller structure.
    superset: the larger structure.

  Returns:
    Whether `subset` is contained in `superset`.
  """
  if isinstance(subset, dict) and isinstance(superset, dict):
    return set(subset) <= set(superset) and all(
        is_subset(subset[k], superset[k]) for k in subset
    )
  if type(subset) is not type(superset):
    return False
  if type(subset) in (list, tuple):
    return len(subset) <= len(superset) and all(
        is_subset(a, b) for a, b in zip(subset, superset)
    )
  return subset == superset


def _is_single_leaf(x: Any) -> bool:
  treedef = jtu.tree_structure(x)
  return treedef.num_nodes == 1 and treedef.num_leaves == 1


def extract_elements_matching_subset_structure(
    subset: pytypes.Nested, superset: pytypes.Nested
) -> pytypes.Nested:
  """Returns the values of `superset` at the positions present in `subset`.

  The result has `subset`'s structure and container types: dict keys come
  from `subset`, sequences are cut to `subset`'s length, and each leaf is the
  corresponding value of `superset` (which may be of another type, or even a
  subtree, where `subset` has a leaf).

  Example:
    `extract_elements_matching_subset_structure({'a': [0]}, {'a': [1, 2],
    'b': 3})` is `{'a': [1]}`.

  Args:
    subset: the structure to keep.
    superset: the structure to read values from; must contain `subset`.

  Returns:
    A structure shaped like `subset` holding `superset`'s values.

  Raises:
    ValueError: `subset` has a key or index that `superset` lacks, or a
      container where `superset` has another type.
  """
  if isinstance(subset, dict) and isinstance(superset, dict):
    missing = set(subset) - set(superset)
    if missing:
      raise ValueError(
          f'Keys {sorted(missing)} of subset are missing from superset '
          f'(which has keys {sorted(superset)}).'
      )
    return type(subset)(**{
        k: extract_elements_matching_subset_structure(subset[k], superset[k])
        for k in subset
    })
  if type(subset) is not type(superset):
    if _is_single_leaf(subset):
      return superset
    raise ValueError(
        f'Subset node of type {type(subset).__name__} cannot be matched '
        f'against a superset node of type {type(superset).__name__}.'
    )
  if type(subset) in (list, tuple):
    if len(subset) > len(superset):
      raise ValueError(
          f'Subset {type(subset).__name__} has {len(subset)} elements but '
          f'superset has only {len(superset)}.'
      )
    return type(subset)(
        extract_elements_matching_subset_structure(a, b)
        for a, b in zip(subset, superset)
    )
  return superset


def get_shape_dtype(
    nested_obj: pytypes.NestedShapeDtypeLike,
) -> pytypes.NestedShapeDtypeStruct:
  """Returns a tree of `jax.ShapeDtypeStruct`s for the leaves' shape/dtype."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(shape=x.shape, dtype=x.dtype), nested_obj
  )


def copy(pytree: Any) -> Any:
  """Returns a new tree with the same structure that shares the leaves."""
  return jax.tree.map(lambda x: x, pytree)
