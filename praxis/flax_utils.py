"""Helpers between plain Flax modules and Pax's boxed variables.

Public names: convert_to_boxed_params, maybe_unpack_summary,
maybe_repack_summary.
"""

from __future__ import annotations

import copy
from typing import Any

from flax import traverse_util
from flax.core import frozen_dict
from flax.linen import partitioning as flax_partitioning
import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pytypes

WeightHParamsCollection = base_layer.WeightHParamsCollection


def maybe_unpack_summary(tree: pytypes.PyTree, unpack_summaries: bool,
                         x_times: int) -> pytypes.PyTree:
  """Splits each [x_times, ...] summary into x_times [1, ...] ones if asked."""
  if not unpack_summaries:
    return tree

  def split(value):
    if value.shape[0] != x_times:
      raise ValueError(f'maybe_unpack_summary: a summary of shape '
                       f'{value.shape} is not stacked {x_times} times.')
    return jnp.split(value, x_times)

  return jax.tree.map(split, tree)


def maybe_repack_summary(tree: pytypes.PyTree, unpack_summaries: bool,
                         x_times: int) -> pytypes.PyTree:
  """Inverse of `maybe_unpack_summary`: lists of pieces stacked again."""
  if not unpack_summaries:
    return tree

  def stack(value):
    if not isinstance(value, list):
      return value
    if len(value) != x_times:
      raise ValueError(f'maybe_repack_summary: {len(value)} pieces, '
                       f'expected {x_times}.')
    return jnp.stack(value)

  return jax.tree.map(stack, tree, is_leaf=lambda x: isinstance(x, list))


def _collections_of(collection: str, var_collection_map: dict[str, Any]
                    ) -> list[Any]:
  """The WeightHParams collections of a variable of Flax `collection`."""
  if collection == base_layer.PARAMS:
    return []
  if collection in var_collection_map:
    return copy.copy(list(var_collection_map[collection]))
  # Other Flax collections (batch_stats, ...) are statistics: not trained,
  # averaged across replicas.
  return [WeightHParamsCollection.NON_TRAINABLE,
          WeightHParamsCollection.REQUIRES_MEAN_SYNC]


def _full_axes_tree(values: Any, axes: Any) -> Any:
  """`axes` completed to the structure of `values` (missing: unsharded)."""
  flat_axes = traverse_util.flatten_dict(frozen_dict.unfreeze(axes), sep='/')
  flat = {k: jax.sharding.PartitionSpec(None)
          for k in traverse_util.flatten_dict(values, sep='/')}
  flat.update(flat_axes)
  return traverse_util.unflatten_dict(flat, sep='/')


def convert_to_boxed_params(
    var_tree: pytypes.PyTree,
    logical_axes_rules: pytypes.LogicalAxisRules | None = None,
    mesh_shape: Any = None,
    var_collection_map: dict[str, list[Any]] | None = None,
) -> pytypes.PyTree:
  """Boxes a Flax module's raw variables as Pax variables.

  Each array becomes a `BoxedParam` whose `WeightHParams` has its shape and
  dtype, the collections of its Flax collection (`params` are trainable;
  others non-trainable and mean-synced unless `var_collection_map` says
  otherwise) and, where the module annotated logical axes (the `*_axes`
  collections of flax.linen.partitioning), the mesh axes `logical_axes_rules`
  map them to. Values that are boxed already are kept.

  Args:
    var_tree: {collection: variables}, as `module.init` returns.
    logical_axes_rules: Logical-to-mesh axis rules, e.g. [('embed', 'mdl')].
    mesh_shape: The mesh shape (needed with `logical_axes_rules`).
    var_collection_map: Collections of the variables of named Flax
      collections.

  Returns:
    {collection: boxed variables}, without the `*_axes` collections.
  """
  if logical_axes_rules is not None and mesh_shape is None:
    raise ValueError('convert_to_boxed_params: logical_axes_rules need a '
                     'mesh_shape.')
  var_collection_map = var_collection_map or {}
  var_tree = dict(frozen_dict.unfreeze(var_tree))
  axes = {key[:-len('_axes')]: flax_partitioning.get_axis_names(
      var_tree.pop(key)) for key in list(var_tree) if key.endswith('_axes')}
  is_boxed = lambda x: isinstance(x, base_layer.BoxedParam)

  def box(value, collection, logical_axes):
    if is_boxed(value):
      return value
    mapping = None
    if logical_axes is not None and logical_axes_rules is not None:
      mapping = list(flax_partitioning.logical_to_mesh_axes(
          tuple(logical_axes), logical_axes_rules))
    hp = base_layer.WeightHParams(
        shape=list(value.shape), init=None, dtype=value.dtype,
        collections=_collections_of(collection, var_collection_map),
        mesh_shape=mesh_shape, tensor_split_dims_mapping=mapping)
    return base_layer.BoxedParam(value, meta=hp)

  boxed = {}
  for collection, values in var_tree.items():
    if collection in axes:
      boxed[collection] = jax.tree.map(
          lambda v, a, c=collection: box(v, c, a), values,
          _full_axes_tree(values, axes[collection]), is_leaf=is_boxed)
    else:
      boxed[collection] = jax.tree.map(
          lambda v, c=collection: box(v, c, None), values, is_leaf=is_boxed)
  return boxed
