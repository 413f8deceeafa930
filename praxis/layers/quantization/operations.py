"""Quantization arithmetic: quantize, dequantize, fake quant, quantized einsum.

Public (Pax's names): `get_min_max`, `reduce_precision`,
`reduce_einsum_weight_precision`, `reduce_precision_activation`,
`reduce_einsum_activation_precision`, `fakequant_einsum`,
`fakequant_activation`, `fakequant_vn`, `einsum`, `aqt_einsum`,
`custom_einsum`, `dot_general_int`, `compute_offset`, `pass_through`,
`clip_to_fp16`, `eqn_to_weight_contract_dims`,
`eqn_to_activation_contract_dims`, `get_scale_shape`,
`get_sub_channel_shape`, `compute_shape_with_subchannels`, `get_scale_eqn`,
`factorize_weight`, `FP4`.

Symmetric quantization of t over `contract_dims`:
  scale = max|t| / max_q;  q = clip(round(t / scale), min_q, max_q)
Asymmetric:
  scale = (max t - min t) / (max_q - min_q);  zp = min_q - min t / scale
  q = clip(round(t / scale + zp)), and t ~ q * scale - zp * scale.
The returned zero point is `zp * scale`, so dequantization is
`q * scale - zp_returned`.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from absl import logging
import jax
from jax import lax
from jax import numpy as jnp
import numpy as np
from opt_einsum import parser as einsum_parser
from praxis import pytypes
from praxis.layers.quantization import _qt_einsum
from praxis.layers.quantization import optimization
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils

JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
INT4_TYPES = utils.INT4_TYPES
INT_TYPES = utils.INT_TYPES
get_scale_eqn = _qt_einsum.scale_names
_get_reduction = _qt_einsum.reduction_dims


class FP4:
  """Rounding to the 15 values of an e2m1 4-bit float (asymmetric nudge)."""

  int4_val = [-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0,
              0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

  def __init__(self, val=None):
    self.v = jnp.array(val if val else self.int4_val, dtype=jnp.float32)

  def round(self, x: JTensor) -> JTensor:
    """The nearest representable value of each element."""
    nearest = jnp.argmin(jnp.abs(x[..., None] - self.v), axis=-1)
    return jnp.take(self.v, nearest.reshape(-1)).reshape(x.shape)

  def nudge(self, x: JTensor, contract_dim: Any) -> JTensor:
    """Quantize-dequantize `x` onto the grid, min/max over `contract_dim`."""
    lo, hi = self.v[0], self.v[-1]
    x_min = jnp.min(x, axis=contract_dim, keepdims=True)
    x_max = jnp.max(x, axis=contract_dim, keepdims=True)
    scale = (x_max - x_min) / (hi - lo) + jnp.finfo(x.dtype).eps
    zp = lo - x_min / scale
    return ((self.round(x / scale + zp) - zp) * scale).astype(x.dtype)


def _split_eqn(eqn: str) -> tuple[str, str, str]:
  ins, out = eqn.split('->')
  lhs, rhs = ins.split(',')
  return lhs.replace('.', ''), rhs.replace('.', ''), out.replace('.', '')


def _get_expand_dims_rhs(eqn: str) -> list[int]:
  """Output dims the weight lacks, where its scale needs a unit dim."""
  _, w, out = _split_eqn(eqn)
  dims = [i for i, c in enumerate(out) if c not in w]
  # Leading-only gaps ('ab,bc->ac') broadcast on their own.
  if dims and dims[-1] == len(dims) - 1:
    return []
  return dims


def _get_expand_dims_lhs(eqn: str) -> list[int]:
  """Output dims (negative) the activation lacks, for its scale."""
  act, _, out = _split_eqn(eqn)
  return [-(i + 1) for i, c in enumerate(reversed(out)) if c not in act]


def eqn_to_weight_contract_dims(eqn: str) -> list[int]:
  """Dims of the weight (2nd operand) that `eqn` contracts."""
  _, w, out = _split_eqn(eqn)
  return [i for i, c in enumerate(w) if c not in out]


def eqn_to_activation_contract_dims(eqn: str) -> list[int]:
  """Dims (negative) of the activation (1st operand) that `eqn` contracts."""
  act, _, out = _split_eqn(eqn)
  return [-(i + 1) for i, c in enumerate(reversed(act)) if c not in out]


def _dequantize(x, scale, zp, contraction_dims):
  """x * scale - zp, unit dims inserted at `contraction_dims` when needed."""
  if scale is None and zp is not None:
    raise ValueError('scale must not be None if zp is not None')

  def fit(v):
    if v.ndim > 0 and v.ndim != x.ndim:
      return jnp.expand_dims(v, contraction_dims)
    return v

  if scale is not None:
    x = x * fit(scale)
  if zp is not None:
    x = x - fit(zp)
  return x


def get_min_max(
    bits: int = 8, unsigned: bool = False, use_fp: bool = False
) -> tuple[float, float]:
  """Range of a `bits`-bit integer (or of float8 e4m3 with `use_fp`)."""
  if use_fp:
    return -448.0, 448.0
  if unsigned:
    return 0, 2**bits - 1
  return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def compute_offset(eqn_normalized: str, x: JTensor, zp: JTensor) -> JTensor:
  """einsum of float `x` with the weight's zero point `zp` (its output dims)."""
  if '.' in eqn_normalized:
    raise ValueError(
        'eqn_normalized should not contain broadcast ellipsis "...". Use'
        ' opt_einsum.parser to normalize the eqn before using this function.'
    )
  if x.dtype in INT_TYPES:
    raise ValueError(f'x should not be quantized, but got {x.dtype=}')
  if zp.dtype in INT_TYPES:
    raise ValueError(f'zp should not be quantized, but got {zp.dtype=}')
  lhs, rhs, out = _split_eqn(eqn_normalized)
  zp_names = ''.join(c for c in out if c in rhs)
  return jnp.einsum(f'{lhs},{zp_names}->{out}', x, zp)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def dot_general_int(lhs, rhs, dimension_numbers):
  """`lax.dot_general` of two int tensors, accumulated in int32."""
  for name, t in (('lhs', lhs), ('rhs', rhs)):
    if t.dtype not in INT_TYPES:
      raise ValueError(f'{name}.dtype={t.dtype} is not an int type: '
                       f'{INT_TYPES} ')
  if lhs.dtype != rhs.dtype:
    # Casting both to the smallest common type beats XLA's int32 promotion.
    dtype = utils.get_smallest_matching_dtype(lhs, rhs)
    lhs, rhs = lhs.astype(dtype), rhs.astype(dtype)
  return lax.dot_general(
      lhs, rhs, dimension_numbers, preferred_element_type=jnp.int32
  )


@dot_general_int.defjvp
def _dot_general_int_jvp(dimension_numbers, primals, tangents):
  y = dot_general_int(*primals, dimension_numbers)
  _, y_dot = jax.jvp(
      lambda a, b: lax.dot_general(a, b, dimension_numbers), primals, tangents
  )
  return y, y_dot


def custom_einsum(
    x: JTensor,
    w: JTensor,
    *,
    eqn: str,
    prng_key: jax.Array,
    params: quantization_hparams.QuantizedTrainingParams,
) -> JTensor:
  """Einsum whose forward and backward einsums run on quantized operands.

  Args:
    x: Activation (left operand).
    w: Weight (right operand).
    eqn: The einsum.
    prng_key: Key of the stochastic rounding of the gradients.
    params: Bits and dtypes of both passes.

  Returns:
    einsum(eqn, x, w), quantized as `params` says.
  """
  return _qt_einsum.custom_einsum(
      x, w, eqn=eqn, prng_key=prng_key, params=params,
      reduce_precision=reduce_precision,
  )


def _int_einsum(eqn_normalized, x, w):
  numbers, perm = utils.einsum_eqn_to_dimension_numbers(eqn_normalized)
  out = dot_general_int(x, w, numbers)
  return out if perm is None else lax.transpose(out, perm)


def einsum(
    eqn: str,
    x: JTensor,
    w: JTensor,
    scale: JTensor,
    zp: JTensor | None = None,
    scale_act: JTensor | None = None,
    zp_act: JTensor | None = None,
    scale_eqn: str | None = None,
    zp_eqn: str | None = None,
    swap_xw: bool = False,
) -> JTensor:
  """Einsum of (maybe quantized) `x` with quantized `w`, then rescaling.

  Args:
    eqn: The einsum of x and w.
    x: Activation, float or int.
    w: Quantized weight.
    scale: The weight's scale (output dims).
    zp: The weight's zero point times scale (asymmetric weights).
    scale_act: The activation's scale, if it is quantized.
    zp_act: The activation's zero point, if asymmetric.
    scale_eqn: einsum(scale_eqn, out, scale) instead of out * scale.
    zp_eqn: einsum(zp_eqn, x, zp) instead of the offset from `eqn`.
    swap_xw: Compute einsum(eqn, w, x) (for speed).

  Returns:
    The float result.
  """
  operands = (w, x) if swap_xw else (x, w)
  ins, out_names, _ = einsum_parser.parse_einsum_input((eqn, *operands))
  eqn_normalized = f'{ins}->{out_names}'
  if zp_act is not None:
    # Asymmetric activations: dequantize both (reference path).
    x = _dequantize(x, scale_act, zp_act, eqn_to_activation_contract_dims(eqn))
    w = _dequantize(w, scale, zp, eqn_to_weight_contract_dims(eqn))
    return jnp.einsum(eqn, x, w)
  if jnp.issubdtype(w.dtype, jnp.floating) and jnp.finfo(w.dtype).bits == 8:
    w = w.astype(jnp.bfloat16)
  if x.dtype in INT_TYPES and w.dtype in INT_TYPES:
    if swap_xw:
      raise ValueError('No need to swap x and w when both are int types.')
    ret = _int_einsum(eqn_normalized, x, w)
  else:
    # jnp.einsum does not promote (u)int4.
    w = w.astype(jnp.int8) if w.dtype in INT4_TYPES else w
    x = x.astype(jnp.int8) if x.dtype in INT4_TYPES else x
    ret = jnp.einsum(eqn_normalized, *((w, x) if swap_xw else (x, w)))
  if scale_act is not None:
    if scale_act.ndim == 0:
      scale = scale * scale_act
    else:
      ret = ret * jnp.expand_dims(scale_act, _get_expand_dims_lhs(eqn))
  fill = _get_expand_dims_rhs(eqn)
  if fill and not swap_xw:
    scale = jnp.expand_dims(scale, fill)
  if scale_eqn is not None:
    ret = jnp.einsum(scale_eqn, ret, scale)
  else:
    ret = ret * scale
  if zp is not None:
    x_float = _dequantize(
        x, scale_act, zp_act, eqn_to_activation_contract_dims(eqn)
    )
    if zp_eqn is not None:
      offset = jnp.einsum(zp_eqn, x_float, zp)
    else:
      offset = compute_offset(eqn_normalized, x_float, zp)
    ret = ret - offset
  return ret


def pass_through(x: JTensor, fn: Any) -> JTensor:
  """fn(x) forward, identity gradient (straight-through estimator)."""
  return x - lax.stop_gradient(x) + lax.stop_gradient(fn(x))


def _binarize(t, contract_dims, quant_method):
  if quant_method == 'bin_norm':
    t = t - jnp.mean(t, axis=contract_dims, keepdims=True)
  t = jnp.where(t == 0.0, 1e-6, t)  # So that sign() is +-1 only.
  scale = jnp.mean(jnp.abs(t), axis=contract_dims, keepdims=True)
  return pass_through(t, jnp.sign), scale, None


def _round_and_clip(t, bits, min_value, max_value, need_gradient,
                    random_rounding, key):
  if need_gradient:
    return jnp.clip(pass_through(t, jnp.round), min_value, max_value)
  if random_rounding:
    t = t + jax.random.uniform(key, t.shape, minval=-0.5, maxval=0.5)
  container = jnp.int8 if bits <= 8 else jnp.int16 if bits <= 16 else jnp.int32
  return jnp.clip(jnp.round(t), min_value, max_value).astype(container)


def reduce_precision(
    t: JTensor,
    contract_dims: Sequence[int] | None,
    need_gradient: bool = False,
    bits: int = 8,
    optimization_on_bound: bool = False,
    p_value: float = 1.0,
    percentile: float = 1.0,
    use_symmetric: bool = True,
    use_fp: bool = False,
    add_scale_eps: bool = False,
    per_channel: bool = False,
    random_rounding: bool = False,
    key: jax.Array | None = None,
    save_fp8_to_int8: bool = True,
    quant_method: str = 'default',
    scale_eps: float = -1.0,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Quantizes `t` with one scale per slice over `contract_dims`.

  Args:
    t: The float tensor.
    contract_dims: Dims reduced for the scale (None: per tensor).
    need_gradient: Keep float values with a straight-through gradient.
    bits: Target bits.
    optimization_on_bound: Search the clipping bound (`optimization`).
    p_value: Exponent of that search's error.
    percentile: Shrink the bound by this factor (disables the search).
    use_symmetric: Symmetric (else with a zero point).
    use_fp: Quantize to float8 e4m3 instead.
    add_scale_eps: Add epsilon to the scale (else zero scales become 1).
    scale_eps: That epsilon (negative: the dtype's).
    per_channel: Per-channel bound search.
    random_rounding: Stochastic rounding with `key`.
    key: PRNG key of the stochastic rounding.
    save_fp8_to_int8: Bitcast float8 results to int8 (else bfloat16).
    quant_method: 'default', or 'bin'/'bin_norm' binarization for bits == 1.

  Returns:
    (quantized t, scale, zero point times scale or None); scale and zero
    point keep `t`'s rank.
  """
  if bits == 1 and quant_method in ('bin', 'bin_norm'):
    return _binarize(t, contract_dims, quant_method)
  min_value, max_value = get_min_max(bits, use_fp=use_fp)
  if use_symmetric:
    bound = jnp.max(jnp.abs(t), axis=contract_dims, keepdims=True)
    levels = max_value
  else:
    t_max = jnp.max(t, axis=contract_dims, keepdims=True)
    t_min = jnp.min(t, axis=contract_dims, keepdims=True)
    bound = t_max - t_min
    levels = max_value - min_value
  if isinstance(percentile, jax.Array) or percentile < 1.0:
    bound = bound * percentile
  elif optimization_on_bound:
    bound = optimization.get_best_bound(
        t, bound, min_value, max_value, p_value, per_channel=per_channel
    )
  scale = bound / levels
  if add_scale_eps:
    scale = scale + (jnp.finfo(t.dtype).eps if scale_eps < 0.0 else scale_eps)
  else:
    scale = jnp.where(scale == 0.0, 1.0, scale)
  zp = None
  if use_symmetric:
    t = t / scale
  else:
    zp_q = min_value - t_min / scale
    t = t / scale + zp_q
    zp = scale * zp_q
  if use_fp:
    t = jnp.clip(t, min_value, max_value).astype(jnp.float8_e4m3fn)
    if save_fp8_to_int8:
      t = lax.bitcast_convert_type(t, jnp.int8)
    else:
      t = t.astype(jnp.bfloat16)
  else:
    t = _round_and_clip(t, bits, min_value, max_value, need_gradient,
                        random_rounding, key)
  return t, scale, zp


def reduce_einsum_weight_precision(
    eqn: str | None,
    t: JTensor,
    calculation_dtype: jnp.dtype = jnp.bfloat16,
    squeeze: bool = True,
    need_gradient: bool = False,
    bits: int = 8,
    optimization_on_bound: bool = False,
    percentile: float = 1.0,
    use_symmetric: bool = True,
    quant_method: str = 'default',
    contract_dims: Sequence[int] | None = None,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Per-channel quantization of an einsum weight (channels: output dims).

  Give `eqn` or `contract_dims`, not both. Returns (q, scale, zp or None).
  """
  if eqn is not None and contract_dims is not None:
    raise ValueError('both contract_dims and eqn can not be defined')
  if eqn is not None:
    contract_dims = eqn_to_weight_contract_dims(eqn)
  elif not contract_dims:
    raise ValueError('contract_dims must be defined if eqn is None')
  t = t.astype(calculation_dtype)
  q, scale, zp = reduce_precision(
      t, contract_dims, need_gradient, bits, optimization_on_bound,
      percentile=percentile, use_symmetric=use_symmetric,
      quant_method=quant_method,
  )
  if squeeze:
    scale = jnp.squeeze(scale)
    zp = None if zp is None else jnp.squeeze(zp)
  return q, scale, zp


def clip_to_fp16(t: JTensor) -> JTensor:
  """Shrinks (x0.99) the values beyond float16's range."""
  too_big = jnp.abs(t) > jnp.finfo(jnp.float16).max
  return lax.select(too_big, t * 0.99, t)


def get_scale_shape(
    weight_shape: Sequence[int], contract_dims: Sequence[int]
) -> list[int]:
  """`weight_shape` without `contract_dims`."""
  return [d for i, d in enumerate(weight_shape) if i not in contract_dims]


def get_sub_channel_shape(
    shape: Sequence[int],
    block_size: int,
    contract_dims: Sequence[int],
    insert_sub_channel: bool = True,
    error_on_misaligned_shape: bool = False,
) -> tuple[list[int], list[int]]:
  """Splits the largest contraction dim into (sub channels, block_size).

  Args:
    shape: The tensor's shape.
    block_size: Elements per block (<= 0: no split).
    contract_dims: Its contraction dims.
    insert_sub_channel: Insert a sub-channel dim (else fold it into the
      first feature dim).
    error_on_misaligned_shape: Raise when block_size does not divide the dim
      (else log and leave the shape).

  Returns:
    (new shape, new contraction dims).
  """
  new_dims = list(contract_dims)
  new_shape = list(shape)
  if block_size <= 0:
    return new_shape, new_dims
  k = int(np.argmax([shape[i] for i in new_dims]))
  dim = new_dims[k]
  if block_size >= shape[dim]:
    logging.warning(
        'block_size %d is not smaller than the largest contraction dim of %s'
        ' (contract dims %s): no sub channels.', block_size, shape,
        contract_dims,
    )
    return new_shape, new_dims
  sub_channels, rem = divmod(shape[dim], block_size)
  if rem:
    if error_on_misaligned_shape:
      raise ValueError(
          f'block_size {block_size} must fully divide shape: {shape}'
          f'with contract dims: {contract_dims}'
      )
    logging.warning(
        'block_size %d must fully divide shape: %s; of contract dims: %s',
        block_size, shape, contract_dims,
    )
    return new_shape, new_dims
  new_shape[dim] = block_size
  if insert_sub_channel:
    new_shape.insert(dim, sub_channels)
    for i in range(k, len(new_dims)):
      new_dims[i] += 1
  else:
    features = [i for i in range(len(shape)) if i not in contract_dims]
    new_shape[features[0]] *= sub_channels
  return new_shape, new_dims


def _dequant(q, scale, zp):
  res = q * scale
  return res if zp is None else res - zp


def fakequant_einsum(
    eqn: str,
    t: JTensor,
    bits: int = 8,
    calculation_dtype: jnp.dtype = jnp.float32,
    use_symmetric: bool = True,
    block_size: int = 0,
    use_fp: bool = False,
    quant_method: str = 'default',
) -> JTensor:
  """Quantize-dequantize of an einsum weight, straight-through gradient.

  Per channel (the output dims of `eqn`), optionally per block of
  `block_size` along the contraction; `use_fp` with 4 bits rounds to FP4.
  """
  dtype = t.dtype
  dims = eqn_to_weight_contract_dims(eqn)
  shape = list(t.shape)
  if block_size > 0:
    blocked, dims = get_sub_channel_shape(shape, block_size, dims)
    t = jnp.reshape(t, blocked)
  t = t.astype(calculation_dtype)
  if use_fp and bits == 4:
    return FP4().nudge(t, dims)
  q, scale, zp = reduce_precision(
      t, dims, need_gradient=True, bits=bits, use_symmetric=use_symmetric,
      quant_method=quant_method,
  )
  return jnp.reshape(_dequant(q, scale, zp), shape).astype(dtype)


def reduce_precision_activation(
    t: JTensor,
    need_gradient: bool = False,
    bits: int = 8,
    contract_dims: Sequence[int] | None = None,
    symmetric: bool = True,
    percentile: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """`reduce_precision` of an activation (no bound search)."""
  return reduce_precision(
      t, contract_dims, need_gradient, bits, use_symmetric=symmetric,
      percentile=percentile,
  )


def reduce_einsum_activation_precision(
    eqn: str,
    t: JTensor,
    bits: int = 8,
    squeeze: bool = True,
    per_channel: bool = False,
    symmetric: bool = True,
    percentile: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor | None]:
  """Quantizes an einsum's activation per token (`per_channel`) or tensor."""
  dims = eqn_to_activation_contract_dims(eqn) if per_channel else None
  q, scale, zp = reduce_precision(
      t, dims, bits=bits, use_symmetric=symmetric, percentile=percentile
  )
  if squeeze:
    scale = jnp.squeeze(scale, axis=dims)
    zp = None if zp is None else jnp.squeeze(zp, axis=dims)
  return q, scale, zp


def fakequant_activation(
    t: JTensor,
    bits: int = 8,
    eqn: str | None = None,
    per_channel: bool = False,
    symmetric: bool = True,
    percentile: float = 1.0,
) -> JTensor:
  """Quantize-dequantize of an activation, straight-through gradient."""
  dims = None
  if per_channel:
    if eqn is None:
      raise ValueError('eqn should be defined with per_channel = True.')
    dims = eqn_to_activation_contract_dims(eqn)
  q, scale, zp = reduce_precision_activation(
      t, True, bits, dims, symmetric, percentile
  )
  return _dequant(q, scale, zp).astype(t.dtype)


def compute_shape_with_subchannels(
    sub_channels: int,
    inputs_shape: Sequence[int],
    contract_dims: Sequence[int],
    min_sub_channel_size: int = -1,
) -> list[int]:
  """Halves the largest contraction dim (doubling the first feature dim)
  until `sub_channels` splits are made, it is odd or below the minimum."""
  features = [i for i in range(len(inputs_shape)) if i not in contract_dims]
  shape = list(inputs_shape)
  axis, largest = 0, 0
  for d in contract_dims:
    if shape[d] and shape[d] > largest:
      axis, largest = d, shape[d]
  if largest < sub_channels:
    raise ValueError(f'Maximum dimension: {largest} can not be '
                     f'smaller than sub_channels: {sub_channels}.')
  remaining = sub_channels
  while remaining > 1:
    half = shape[axis] // 2
    if half * 2 != shape[axis] or half < min_sub_channel_size:
      break
    shape[axis] = half
    shape[features[0]] *= 2
    remaining /= 2
  return shape


def aqt_einsum(
    eqn: str,
    lhs: JTensor,
    rhs: JTensor,
    *,
    lhs_quantizer: Any,
    rhs_quantizer: Any,
    scale_eqn: str | None = None,
    zp_eqn: str | None = None,
) -> JTensor:
  """Einsum with both operands quantized by `TensorQuantizer`s (AQT)."""
  ins, out, _ = einsum_parser.parse_einsum_input((eqn, lhs, rhs))
  eqn_normalized = f'{ins}->{out}'
  numbers, _ = utils.einsum_eqn_to_dimension_numbers(eqn_normalized)
  lhs_dims, rhs_dims = numbers[0]
  if getattr(rhs_quantizer, 'sub_channels', None) is not None:
    logging.warning('sub_channels is deprecated: use block_size instead.')
    if lhs_quantizer.precision is not None:
      raise ValueError(
          'sub_channels is not implemented for activation quantization yet.'
      )
    shape = rhs.shape
    rhs = jnp.reshape(rhs, compute_shape_with_subchannels(
        rhs_quantizer.sub_channels, rhs.shape, rhs_dims))
    q, s, zp = rhs_quantizer.quantize(
        rhs, rhs_dims, squeeze_scale=False, quantized_dtype=rhs.dtype
    )
    rhs = jnp.reshape(rhs_quantizer.dequantize(q, s, rhs_dims, zp), shape)
    return jnp.einsum(eqn, lhs, rhs)
  if scale_eqn is not None or zp_eqn is not None:
    if lhs_quantizer.precision is not None:
      raise NotImplementedError(
          'Activation quantization with custom scale_eqn/zp_eqn is not'
          ' implemented.'
      )
    rhs, out_scale, rhs_zp = rhs_quantizer.quantize(
        rhs, rhs_dims, squeeze_scale=True, quantized_dtype=rhs.dtype
    )
  else:
    lhs, lhs_scale, _ = lhs_quantizer.quantize(
        lhs, lhs_dims, squeeze_scale=False, quantized_dtype=lhs.dtype
    )
    rhs, rhs_scale, rhs_zp = rhs_quantizer.quantize(
        rhs, rhs_dims, squeeze_scale=False, quantized_dtype=rhs.dtype
    )
    out_scale = jnp.einsum(eqn, lhs_scale, rhs_scale)
  ret = jnp.einsum(eqn, lhs, rhs)
  if scale_eqn is not None:
    ret = jnp.einsum(scale_eqn, ret, out_scale)
  else:
    ret = ret * out_scale
  if rhs_zp is not None:
    if getattr(lhs_quantizer, 'precision', None) is not None:
      raise NotImplementedError(
          'Activation quantization with weight zero point is not supported '
          'yet.'
      )
    if zp_eqn is not None:
      offset = jnp.einsum(zp_eqn, lhs, rhs_zp)
    else:
      offset = compute_offset(eqn_normalized, lhs, jnp.squeeze(rhs_zp))
    ret = ret - offset
  return ret


def fakequant_vn(
    eqn: str,
    w: JTensor,
    next_prng_key: PRNGKey,
    wp: WeightQuantizationParams,
    step: JTensor | None = None,
    do_eval: bool = False,
    bits: int = 8,
    calculation_dtype: jnp.dtype = jnp.bfloat16,
    use_symmetric: bool = True,
) -> JTensor:
  """`w` plus variational noise scaled like quantization noise (training);
  fake quant in eval."""
  if wp.vn_weight_norm_type not in ('L2', 'Linf', 'PerChannelLinf'):
    raise ValueError(
        "WeightQuantizationParams.vn_weight_norm_type must be 'L2', 'Linf' or"
        f" 'PerChannelLinf', got {wp.vn_weight_norm_type!r}."
    )
  if None in (wp.vn_scale, wp.vn_start_step, wp.vn_noise_type,
              wp.vn_weight_norm_type, wp.stop_scale_gradient):
    raise ValueError('VN parameter must be set.')
  if not use_symmetric:
    raise ValueError('Asymmetric quantization with VN is not supported yet.')
  if do_eval:
    return fakequant_einsum(eqn, w, bits=bits,
                            calculation_dtype=calculation_dtype,
                            use_symmetric=use_symmetric)
  if wp.vn_start_step > 0 and step is None:
    raise ValueError('step can not be None if wp.vn_start_step > 0.')
  if wp.vn_noise_type == 'uniform':
    noise = jax.random.uniform(next_prng_key, w.shape, w.dtype, -0.5, 0.5)
  elif wp.vn_noise_type == 'normal':
    noise = jax.random.normal(next_prng_key, w.shape, w.dtype)
  else:
    raise ValueError('Unsupported noise type.')
  scale = wp.vn_scale
  if wp.vn_start_step > 0:
    scale = lax.select(step >= wp.vn_start_step, wp.vn_scale, 0.0)
  if wp.vn_weight_norm_type == 'L2':
    raise ValueError('Not implemented.')
  if wp.vn_weight_norm_type == 'Linf':
    scale = scale * jnp.max(jnp.abs(w))
  else:
    dims = eqn_to_weight_contract_dims(eqn)
    scale = scale * jnp.max(jnp.abs(w), axis=dims, keepdims=True)
  if wp.stop_scale_gradient:
    scale = lax.stop_gradient(scale)
  return w + scale.astype(w.dtype) * noise


def factorize_weight(var: JTensor, rank: int) -> tuple[JTensor, JTensor]:
  """Rank-`rank` truncated SVD: (u, s-scaled vh) of the last two dims."""
  u, s, vh = jnp.linalg.svd(var, full_matrices=False)
  return u[..., :, :rank], jnp.einsum(
      '...i,...ij->...ij', s[..., :rank], vh[..., :rank, :]
  )
