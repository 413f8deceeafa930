"""Quantized and sparse variables of Pax layers, and the quantization walk.

Used by `praxis.base_layer.BaseLayer` (its `create_quantized_variable`,
`get_quantized_weight`, `create_sparse_variable`, `get_sparse_weight`,
`quantize_weight` and `quantized_partition_specs` call these functions).

A quantized variable `w` is three variables: `w` (integer, zeros at init),
`w_quantized_scale` and, for asymmetric quantization, `w_quantized_zp`. The
default `quantize_weight` of a layer returns its variables unchanged, nested
by child, so that quantizing layers only override their own method:

  {'params': {'w': w, 'child': {...}}, 'non_trainable': {...}}
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from flax.core import meta
import jax.numpy as jnp
from praxis import _weights

QUANTIZED_SCALE_NAME_POSTFIX = '_quantized_scale'
QUANTIZED_ZP_NAME_POSTFIX = '_quantized_zp'
SPARSITY_NAME_POSTFIX = '_sparsity_mask'
_TARGETS = ('params', 'non_trainable')


def create_quantized_variable(
    layer: Any,
    name: str,
    weight_hparams: _weights.WeightHParams,
    scale_shape: Sequence[int] = (),
    dtype: Any = jnp.int8,
    use_symmetric: bool = True,
    scale_hparams: _weights.WeightHParams | None = None,
) -> None:
  """Creates `name` (in `dtype`, zeros), its scale and maybe its zero point.

  Args:
    layer: The layer (inside its `setup`).
    name: The weight's name.
    weight_hparams: The weight's declaration (shape and sharding are used).
    scale_shape: Shape of the scale (and zero point), without sharding.
    dtype: The quantized weight's dtype.
    use_symmetric: False also creates `<name>_quantized_zp`.
    scale_hparams: Declaration of the scale (and zero point), instead of
      `scale_shape`.
  """
  if scale_hparams is not None and len(scale_shape):
    raise ValueError(
        f'{type(layer).__name__}.create_quantized_variable({name!r}): give '
        f'scale_shape or scale_hparams, not both (got {list(scale_shape)} '
        'and scale_hparams).'
    )
  weight = copy.deepcopy(weight_hparams)
  weight.dtype = dtype
  weight.init = _weights.WeightInit.Constant(0)
  if scale_hparams is None:
    scale_hparams = _weights.WeightHParams(shape=list(scale_shape))
  layer.create_variable(name, weight)
  layer.create_variable(name + QUANTIZED_SCALE_NAME_POSTFIX, scale_hparams)
  if not use_symmetric:
    layer.create_variable(name + QUANTIZED_ZP_NAME_POSTFIX, scale_hparams)


def get_quantized_weight(
    layer: Any, name: str, use_symmetric: bool = True
) -> tuple[Any, Any, Any]:
  """(weight, scale, zero point or None) of a quantized variable."""
  zp = None
  if not use_symmetric:
    zp = layer.theta[name + QUANTIZED_ZP_NAME_POSTFIX]
  return layer.theta[name], layer.theta[name + QUANTIZED_SCALE_NAME_POSTFIX], zp


def create_sparse_variable(
    layer: Any, name: str, weight_hparams: _weights.WeightHParams
) -> None:
  """Creates `name` and its non-trainable boolean `<name>_sparsity_mask`."""
  layer.create_variable(name, weight_hparams)
  mask = copy.deepcopy(weight_hparams)
  mask.init = _weights.WeightInit.Constant(False)
  mask.dtype = jnp.bool_
  layer.create_variable(name + SPARSITY_NAME_POSTFIX, mask, trainable=False)


def get_sparse_weight(layer: Any, name: str) -> tuple[Any, Any]:
  """(weight, mask) of a sparse variable."""
  return layer.theta[name], layer.get_var(name + SPARSITY_NAME_POSTFIX)


def mapping_partition_spec(
    mapping: Sequence[Any] | None, ndim: int, mesh_axis_names: Sequence[str] | None
) -> Any:
  """`BoxedPartitionSpec` of a split-dims mapping (None: `ndim` unsplit dims)."""
  # pylint: disable-next=g-import-not-at-top
  from praxis import base_layer
  if mapping is None:
    mapping = [None] * ndim
  return base_layer.BoxedPartitionSpec(
      meta=_weights.to_partition_spec(mapping, mesh_axis_names or ())
  )


def weight_partition_spec(
    hparams: _weights.WeightHParams | None,
    value: Any,
    mesh_axis_names: Sequence[str] | None,
) -> Any:
  """`BoxedPartitionSpec` of a declared (else replicated) variable."""
  # pylint: disable-next=g-import-not-at-top
  from praxis import base_layer
  shape = hparams.shape if hparams is not None else value.shape
  mapping = hparams.tensor_split_dims_mapping if hparams is not None else None
  if mapping is None:
    mapping = [None] * len(shape)
  return base_layer.BoxedPartitionSpec(
      meta=_weights.to_partition_spec(mapping, mesh_axis_names or ())
  )


def quantize_tree(layer: Any, return_pspec: bool) -> dict[str, Any]:
  """The default quantization: the layer's variables as they are.

  Children (created ones and those held in fields) answer for themselves
  (their own `quantize_weight` / `quantized_partition_specs`); children
  without variables (never called) are left out.

  Args:
    layer: A bound layer (inside `apply`).
    return_pspec: Return `BoxedPartitionSpec`s instead of values.

  Returns:
    `{collection: {name: value or spec, child: {...}}}`.
  """
  result: dict[str, Any] = {}
  children = layer._child_layers()  # pylint: disable=protected-access
  for name, child in children.items():
    if not child.variables:
      continue
    if return_pspec:
      child_result = child.quantized_partition_specs()
    else:
      child_result = child.quantize_weight()
    for target, tree in child_result.items():
      result.setdefault(target, {})[name] = tree
  declared = layer._weight_hparams()  # pylint: disable=protected-access
  for target in _TARGETS:
    for name, value in layer.variables.get(target, {}).items():
      if name in children:
        continue
      value = meta.unbox(value)
      if return_pspec:
        value = weight_partition_spec(
            declared.get(name), value, layer.mesh_axis_names
        )
      result.setdefault(target, {})[name] = value
  return result
