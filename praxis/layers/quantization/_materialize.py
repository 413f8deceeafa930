"""MATERIALIZE: float weights -> integer weights, scales and zero points.

Private helpers shared by the quantized layers' `quantize_weight` and
`quantized_partition_specs`.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import jax.numpy as jnp
from praxis import _layer_quantization
from praxis import base_layer
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils

QuantizationType = quantization_hparams.QuantizationType
SCALE = base_layer.QUANTIZED_SCALE_NAME_POSTFIX
ZP = base_layer.QUANTIZED_ZP_NAME_POSTFIX


def require_quantization(layer: Any, what: str) -> Any:
  if layer.quantization is None:
    raise ValueError(
        f'{type(layer).__name__}.{what}: the layer has no quantization config;'
        ' set `quantization` (a QuantizationParams) to quantize it.'
    )
  if layer._do_static_activation_quantization():  # pylint: disable=protected-access
    raise NotImplementedError(
        'Static activation quantization is not supported yet.'
    )
  return layer.quantization


def quantize_tensor(
    layer: Any,
    w: Any,
    contract_dims: Sequence[int],
    pack_dim: int | None = None,
    squeeze: bool = True,
) -> tuple[Any, Any, Any]:
  """(q, scale, zp or None) of float `w` as `layer.quantization` says.

  PTQ/FQ/FQ_VN use `operations.reduce_precision` in the layer's dtype; AQT
  uses the layer's `weight_quantizer`. 4-bit weights are packed along
  `pack_dim` when `use_int4_packed_weights`.
  """
  q = require_quantization(layer, 'quantize_weight')
  wp = q.weight_params
  if q.quantization_type == QuantizationType.AQT:
    q_w, q_s, zp = layer.weight_quantizer.quantize(
        w, contract_dims, squeeze_scale=squeeze, quantized_dtype=wp.dtype
    )
  elif q.quantization_type in (
      QuantizationType.PTQ, QuantizationType.FQ, QuantizationType.FQ_VN
  ):
    q_w, q_s, zp = operations.reduce_precision(
        w.astype(layer.dtype), contract_dims, bits=wp.precision,
        percentile=wp.clipping_coeff, use_symmetric=wp.use_symmetric,
        quant_method=wp.quant_method,
    )
    if squeeze:
      q_s = jnp.squeeze(q_s)
      zp = None if zp is None else jnp.squeeze(zp)
  else:
    raise NotImplementedError(
        f'{type(layer).__name__}.quantize_weight: quantization_type '
        f'{q.quantization_type} cannot be materialized.'
    )
  if wp.precision == 4 and wp.use_int4_packed_weights and pack_dim is not None:
    q_w = utils.pack_4bit(q_w, pack_dim, wp.int4_packed_weights_container_dtype)
  elif wp.dtype in utils.INT4_TYPES:
    q_w = q_w.astype(wp.dtype)  # Native int4 storage.
  return q_w, q_s, zp


def named(
    name: str, q_w: Any, q_s: Any, zp: Any, use_symmetric: bool
) -> dict[str, Any]:
  """{name: q_w, name_quantized_scale: q_s[, name_quantized_zp: zp]}."""
  out = {name: q_w, name + SCALE: q_s}
  if not use_symmetric:
    out[name + ZP] = zp
  return out


def declared_mapping(layer: Any, mapping: Any, ndim: int) -> Any:
  """`mapping` for a variable of rank `ndim`; without a mesh (where Pax
  ignores shardings) a mapping of another rank is dropped."""
  if (mapping is not None and layer.mesh_shape is None
      and len(mapping) != ndim):
    return None
  return mapping


def pspec(layer: Any, hparams: base_layer.WeightHParams) -> Any:
  """The `BoxedPartitionSpec` of a declaration (its mapping, else replicated)."""
  return _layer_quantization.weight_partition_spec(
      hparams, None, layer.mesh_axis_names
  )


def named_pspecs(
    layer: Any,
    name: str,
    weight_mapping: Any,
    scale_mapping: Any,
    weight_ndim: int = 0,
    scale_ndim: int = 0,
) -> dict[str, Any]:
  """Partition specs of `named(...)`'s entries, from split-dims mappings
  (None: replicated over `*_ndim` dims)."""
  q = require_quantization(layer, 'quantized_partition_specs')
  names = layer.mesh_axis_names
  scale = _layer_quantization.mapping_partition_spec(
      scale_mapping, scale_ndim, names)
  out = {
      name: _layer_quantization.mapping_partition_spec(
          weight_mapping, weight_ndim, names),
      name + SCALE: scale,
  }
  if not q.weight_params.use_symmetric:
    out[name + ZP] = copy.deepcopy(scale)
  return out
