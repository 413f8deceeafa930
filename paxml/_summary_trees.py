"""Tree helpers behind `summary_utils`: pretty printing, norms, flattening.

Re-exported by `paxml.summary_utils` (see its docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
import textwrap
from typing import Any, Iterator

import jax
from jax import numpy as jnp
from praxis import base_layer

SummaryType = base_layer.SummaryType


def pretty_repr(values: Any, num_spaces: int = 4) -> str:
  """Nested dicts/lists written one entry a line, indented by depth."""
  if isinstance(values, dict):
    opening, closing = '{', '}'
    lines = [f'{key}: {pretty_repr(val)},\n' for key, val in values.items()]
  elif isinstance(values, (list, tuple)):
    opening, closing = '[', ']'
    lines = [f'{pretty_repr(val)},\n' for val in values]
  else:
    return repr(values)
  if not lines:
    return opening + closing
  return f'{opening}\n' + textwrap.indent(''.join(lines),
                                          ' ' * num_spaces) + closing


def pretty_format_iters(input_str: str) -> str:
  """`input_str` without brackets, commas and blank lines."""
  for c in '{}(),[]':
    input_str = input_str.replace(c, '')
  return '\n'.join(line for line in input_str.splitlines()
                   if line and not line.isspace())


def pretty_repr_shapes(replicated_vars: Any, is_vars_replicated: bool,
                       with_dtype: bool = False) -> str:
  """Each variable's shape as `AxBxC` (and dtype), one a line by path.

  Args:
    replicated_vars: The variables.
    is_vars_replicated: They carry a leading replica axis (pmap): left out.
    with_dtype: Add each dtype.

  Returns:
    The text.
  """

  def describe(x: Any) -> str:
    shape = x.shape[1:] if is_vars_replicated else x.shape
    text = 'x'.join(str(d) for d in shape)
    return f'{text} {x.dtype}' if with_dtype else text

  return pretty_format_iters(pretty_repr(jax.tree.map(describe,
                                                      replicated_vars)))


def pretty_repr_provenance(provenance: Any) -> str:
  """A train state's provenance tree as text."""
  return pretty_format_iters(pretty_repr(provenance))


def _subtrees(root: Any, max_level: int, level: int = 0,
              name: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                           Any]]:
  """(path, subtree) for the subtrees `max_level` deep (or shallower leaves)."""
  if level >= max_level:
    if root is not None:
      yield name, root
  elif isinstance(root, dict):
    for key in root:
      yield from _subtrees(root[key], max_level, level + 1, name + (key,))
  elif isinstance(root, (list, tuple)):
    for i, sub in enumerate(root):
      yield from _subtrees(sub, max_level, level + 1, name + (str(i),))
  else:
    yield name, root


def l2_mean(tree: Any, prefix: str = '', max_level: int = 4,
            sep: str = '/') -> dict[str, jax.Array]:
  """The root mean square of the entries of each subtree `max_level` deep.

  Args:
    tree: Arrays, nested.
    prefix: Put before each name.
    max_level: How deep names go; deeper leaves are pooled.
    sep: Joins name parts.

  Returns:
    name -> sqrt(sum of squares / number of entries).
  """

  def count_and_squares(x: jax.Array) -> jax.Array:
    scale = jnp.maximum(jnp.amax(jnp.abs(x)), 1.0)  # Avoids overflow.
    return jnp.array([x.size, scale**2 * jnp.sum((x / scale)**2)])

  parts = list(_subtrees(jax.tree.map(count_and_squares, tree), max_level))
  result = {}
  for name, subtree in parts:
    total = sum(jax.tree.leaves(subtree))
    key = sep.join(name)
    result[f'{prefix}{sep}{key}' if prefix else key] = jnp.sqrt(
        total[1] / total[0])
  return result


def flatten_flax_summaries(summary_tensors: Mapping[str, Any]
                           ) -> dict[str, Any]:
  """A nested summary dict as `a/b/c` keys; lists (repeated layers) become
  `<name>_<i><suffix>` entries."""
  flat = {}

  def visit(node: Any, path: tuple[str, ...]) -> None:
    if isinstance(node, Mapping):
      for key, value in node.items():
        visit(value, path + (key,))
      return
    key = '/'.join(path)
    if not isinstance(node, list):
      flat[key] = node
      return
    suffix = base_layer.get_summary_type_suffix(
        base_layer.get_summary_type_from_key(key))
    root = base_layer.trim_summary_type_from_key(key)
    for i, value in enumerate(node):
      flat[f'{root}_{i}{suffix}'] = value

  visit(summary_tensors, ())
  return flat


def aggregate_per_replica_summaries(summary_tensors: dict[str, Any],
                                    max_images: int, max_audios: int,
                                    axis_name: str) -> dict[str, Any]:
  """Inside pmap: scalars averaged over replicas, media gathered and capped."""
  out = dict(summary_tensors)
  for key, value in summary_tensors.items():
    kind = base_layer.get_summary_base_type(
        base_layer.get_summary_type_from_key(key))
    if kind == SummaryType.SCALAR:
      out[key] = jax.lax.pmean(value, axis_name=axis_name)
    elif kind in (SummaryType.IMAGE, SummaryType.AUDIO, SummaryType.VIDEO):
      gathered = jax.lax.all_gather(value, axis_name=axis_name)
      if kind == SummaryType.IMAGE:
        gathered = jnp.reshape(gathered, (-1,) + gathered.shape[-3:])
        gathered = gathered[:max_images]
      elif kind == SummaryType.AUDIO:
        gathered = jnp.reshape(gathered, (-1,) + gathered.shape[-2:])
        gathered = gathered[:max_audios]
      out[key] = gathered
  return out
