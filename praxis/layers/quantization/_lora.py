"""Float LoRA residuals of quantized projections (private helpers)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import fiddle as fdl
from jax import numpy as jnp
from praxis import base_layer
from praxis.layers import normalizations
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import utils

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


def _inits(layer: Any, total_size_left: int) -> tuple[WeightInit, WeightInit]:
  if layer.init_method == 'one_zero':
    return WeightInit.Gaussian(1.0), WeightInit.Constant(0.0)
  if layer.init_method == 'output_dim':
    scale = 1.0 / math.sqrt(total_size_left)
    # As Pax: w_right is drawn with w_left's scale.
    return WeightInit.Gaussian(scale), WeightInit.Gaussian(scale)
  raise ValueError(
      f'{type(layer).__name__}.init_method must be one_zero or output_dim, '
      f'got {layer.init_method!r}.'
  )


def _setup_norm(layer: Any, dims_in: int, dims_out: int) -> None:
  norm_tpl = layer.norm_tpl.clone()
  allowed = (normalizations.BatchNorm, normalizations.GroupNorm,
             normalizations.LayerNorm)
  if fdl.get_callable(norm_tpl) not in allowed:
    raise NotImplementedError(
        f'{fdl.get_callable(norm_tpl)} is not supported as norm_tpl.'
    )
  dims = {'pre': dims_in, 'mid': layer.lora_rank, 'post': dims_out}
  if layer.norm_order not in dims:
    raise ValueError(f'Unrecognized norm_order: {layer.norm_order}')
  norm_tpl.dim = dims[layer.norm_order]
  layer.create_child('norm', norm_tpl)


def setup_lora(
    layer: Any,
    weight_shape: Sequence[int],
    eqn: str,
    total_size_left: int,
    dims_in: int,
    dims_out: int,
    max_reduction: bool = True,
) -> None:
  """Creates `w_left`, `w_right` (and `norm`) and sets `eqn_left/right`."""
  left_init, right_init = _inits(layer, total_size_left)
  (layer.eqn_left, layer.eqn_right, left_shape, right_shape, left_ind,
   right_ind) = utils.get_lora_shape_and_eqn(
       list(weight_shape), layer.lora_rank, eqn, max_reduction=max_reduction)
  wt = getattr(layer, 'wt', layer.weight_split_dims_mapping.wt)
  def mapping(m, shape):
    return _materialize.declared_mapping(layer, m, len(shape))

  layer.create_variable('w_left', WeightHParams(
      shape=left_shape, mesh_shape=layer.mesh_shape, init=left_init,
      tensor_split_dims_mapping=mapping(
          utils.get_left_weight_split_dims_mapping(wt, left_ind),
          left_shape)))
  layer.create_variable('w_right', WeightHParams(
      shape=right_shape, mesh_shape=layer.mesh_shape, init=right_init,
      tensor_split_dims_mapping=mapping(
          utils.get_right_weight_split_dims_mapping(wt, right_ind),
          right_shape)))
  if layer.norm_order is not None:
    _setup_norm(layer, dims_in, dims_out)


def lora_output(layer: Any, inputs: Any) -> Any:
  """The LoRA path of `inputs` (0 when `lora_rank` is 0)."""
  if not layer.lora_rank:
    return 0.0
  out = layer.norm(inputs) if layer.norm_order == 'pre' else inputs
  out = jnp.einsum(layer.eqn_left, out, layer.theta.w_left)
  if layer.norm_order == 'mid':
    out = layer.norm(out)
  out = jnp.einsum(layer.eqn_right, out, layer.theta.w_right)
  if layer.norm_order == 'post':
    out = layer.norm(out)
  return out
