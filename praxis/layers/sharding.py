"""Sharding annotations written as dimension-name equations.

Public names: DimSharding, Sharding, derive, shard, get_dim_sharding,
shard_one_dim, num_shards_on_dim.

A sharding is a tuple with one mesh axis (a name, a tuple of names, or None)
per dimension. `derive(s, 'ab->cbda')` moves it onto another layout by
matching letters; `shard(x, s, eqn)` annotates an activation with the result
(a no-op without an active mesh), as layers declare sharding and the
partitioner performs it. Example:

  derive(('x', 'y'), 'ab->cbda') == (None, 'y', None, 'x')
"""

import math
import re
from typing import Sequence

import jax

from praxis import base_layer
from praxis import py_utils

DimSharding = str | Sequence[str] | None
Sharding = Sequence[DimSharding] | None


def derive(s: Sharding, eqn: str) -> Sharding:
  """The sharding `s` of layout `original` carried to `derived` ('o->d').

  Args:
    s: The source sharding (None: unsharded, returned as is).
    eqn: 'original->derived', one letter per dimension; letters of derived
      not in original are unsharded (None).

  Returns:
    A tuple with one entry per letter of derived.
  """
  if s is None:
    return None
  pieces = eqn.split('->')
  if len(pieces) != 2:
    raise ValueError(f"derive: eqn must be 'original->derived', got {eqn!r}.")
  original, derived = pieces
  if len(original) != len(s):
    raise ValueError(f'derive: {original!r} names {len(original)} dims but '
                     f'the sharding {tuple(s)} has {len(s)}.')
  return tuple(s[original.index(d)] if d in original else None
               for d in derived)


def _resolve_optional(derived: str, ndim: int) -> str:
  """`derived` with its '[...]' group kept or dropped to match ndim."""
  left, optional, right = re.split(r'\[|\]', derived)
  if ndim == len(left) + len(right):
    return left + right
  if ndim == len(left) + len(optional) + len(right):
    return left + optional + right
  raise ValueError(f'shard: the layout {derived!r} does not fit a tensor of '
                   f'rank {ndim}.')


def shard(x: jax.Array, s: Sharding, eqn: str | None = None) -> jax.Array:
  """x annotated with sharding s (derived through eqn when given).

  In eqn's derived side, '?' leaves a dim unconstrained, and one group of
  consecutive dims in '[]' is optional: the tensor has all of them or none.
  E.g. s=('x', 'y', 'z'), eqn='abc->[ab]c' gives ('x', 'y', 'z') for a 3-D
  tensor and ('z',) for a 1-D one. Without an active mesh, x is returned.

  Args:
    x: The tensor.
    s: The source sharding (None: no annotation).
    eqn: 'original->derived', or None to use s as is.

  Returns:
    x with a sharding constraint.
  """
  if s is None or not py_utils.global_mesh_defined():
    return x
  if eqn is not None:
    original, derived = eqn.split('->')
    if '[' in derived:
      derived = _resolve_optional(derived, x.ndim)
    s = list(derive(s, f'{original}->{derived}'))
    for i, d in enumerate(derived):
      if d == '?':
        s[i] = jax.sharding.PartitionSpec.UNCONSTRAINED
  spec = base_layer.maybe_transpose_mesh_axes(jax.sharding.PartitionSpec(*s))
  return py_utils.with_sharding_constraint(x, spec)


def get_dim_sharding(s: Sharding, dim: int) -> DimSharding:
  """The sharding of dimension `dim` (None when s is None)."""
  return None if s is None else s[dim]


def shard_one_dim(x: jax.Array, s: DimSharding, dim: int) -> jax.Array:
  """x sharded as s on dim `dim`, its other dims unconstrained."""
  layout = '?' * dim + 'd' + '?' * (x.ndim - dim - 1)
  return shard(x, (s,), 'd->' + layout)


def _mesh_axis_sizes() -> dict[str, int]:
  """Axis name -> size of the active mesh (empty without one)."""
  mesh = py_utils._legacy_context_mesh()  # pylint: disable=protected-access
  if mesh is not None:
    return dict(zip(mesh.axis_names, mesh.devices.shape))
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return {}
  return dict(zip(mesh.axis_names, mesh.axis_sizes))


def num_shards_on_dim(dim_sharding: DimSharding) -> int:
  """How many shards the mesh axes of dim_sharding make (1 if unsharded)."""
  sizes = _mesh_axis_sizes()
  mapping = None
  if base_layer.JaxContext.has_context():
    mapping = base_layer.cur_jax_context().hparams.mesh_axes_transpose
  if dim_sharding is None:
    return 1
  axes = [dim_sharding] if isinstance(dim_sharding, str) else dim_sharding
  return math.prod(
      sizes.get(base_layer.transpose_one_axis(a, mapping), 1) for a in axes)
