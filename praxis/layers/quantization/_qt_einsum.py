"""Einsum with quantized forward and backward passes (QuantizationMode.QT).

Private helper of `operations.custom_einsum`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax import numpy as jnp
from opt_einsum import parser as einsum_parser

JTensor = jax.Array


def reduction_dims(left: str, right: str) -> list[int]:
  """Positions in `left` of the names that `right` also has."""
  if '.' in left:
    raise ValueError(f'left is not normalized: {left}')
  return [i for i, c in enumerate(left) if c in right]


def scale_names(out: str, operand: str) -> str:
  """The names of `operand` (in its order) that survive into `out`."""
  return ''.join(c for c in operand if c in out)


def _sides(eqn: str, x: JTensor, w: JTensor) -> tuple[str, str, str]:
  inputs, out, _ = einsum_parser.parse_einsum_input((eqn, x, w))
  left, right = inputs.split(',')
  return left, right, out


def _rescale(target: str, t: JTensor, names: str, scale: JTensor, dtype):
  return jnp.einsum(
      f'{target},{names}->{target}', t, scale, preferred_element_type=dtype
  )


def _cast_bits(t: JTensor, bits: int, what: str) -> JTensor:
  if bits == 8:
    return t.astype(jnp.int8)
  if bits == 4:
    return t.astype(jnp.int4)
  raise ValueError(f'Unsupported params.{what}: {bits}')


def custom_einsum(
    x: JTensor,
    w: JTensor,
    *,
    eqn: str,
    prng_key: jax.Array,
    params: Any,
    reduce_precision: Callable[..., Any],
) -> JTensor:
  """See `operations.custom_einsum`."""
  if params.bits_fwd is not None and params.cast_bits_fwd is not None:
    raise ValueError('Set at most one of bits_fwd and cast_bits_fwd.')
  if params.bits_bwd is not None and params.cast_bits_bwd is not None:
    raise ValueError('Set at most one of bits_bwd and cast_bits_bwd.')

  def quantize(t, bits, dims, key=None, random_rounding=False):
    q, s, _ = reduce_precision(
        t, contract_dims=dims, bits=bits, random_rounding=random_rounding,
        key=key,
    )
    return q, jnp.squeeze(s)

  def fwd(x, w, key):
    left, right, out = _sides(eqn, x, w)
    sx = sw = None
    if params.bits_fwd is not None:
      qx, sx = quantize(x, params.bits_fwd, reduction_dims(left, right))
      qw, sw = quantize(w, params.bits_fwd, reduction_dims(right, left))
    elif params.cast_bits_fwd is not None:
      qx = _cast_bits(x, params.cast_bits_fwd, 'cast_bits_fwd')
      qw = _cast_bits(w, params.cast_bits_fwd, 'cast_bits_fwd')
    else:
      qx, qw = x, w
    res = jnp.einsum(
        eqn, qx, qw, preferred_element_type=params.einsum_output_dtype
    )
    if sx is not None:
      dtype = params.einsum_scale_output_dtype
      res = _rescale(out, res, scale_names(out, right), sw, dtype)
      res = _rescale(out, res, scale_names(out, left), sx, dtype)
    if params.bwd_output_dtype is not None:
      res = res.astype(params.bwd_output_dtype)
    return res, (qx, qw, sx, sw, key)

  def bwd(res, g):
    qx, qw, sx, sw, key = res
    left, right, out = _sides(eqn, qx, qw)
    gx_eqn = f'{out},{right}->{left}'
    gw_eqn = f'{left},{out}->{right}'
    acc = params.einsum_output_dtype
    if params.cast_bits_bwd is not None:
      g = _cast_bits(g, params.cast_bits_bwd, 'cast_bits_bwd')
    g_sw = g if sw is None else _rescale(out, g, scale_names(out, right), sw,
                                         acc)
    g_sx = g if sx is None else _rescale(out, g, scale_names(out, left), sx,
                                         acc)
    sg_w = sg_x = None
    if params.bits_bwd is not None:
      qg_w, sg_w = quantize(
          g_sw, params.bits_bwd, reduction_dims(out, right), key,
          params.random_rounding_bwd,
      )
      qg_x, sg_x = quantize(
          g_sx, params.bits_bwd, reduction_dims(out, left), key,
          params.random_rounding_bwd,
      )
    elif params.cast_bits_bwd is not None:
      qg_w = _cast_bits(g_sw, params.cast_bits_fwd, 'cast_bits_fwd')
      qg_x = _cast_bits(g_sx, params.cast_bits_fwd, 'cast_bits_fwd')
    else:
      qg_w, qg_x = g_sw, g_sx
    gx = jnp.einsum(gx_eqn, qg_w, qw, preferred_element_type=acc)
    gw = jnp.einsum(gw_eqn, qx, qg_x, preferred_element_type=acc)
    dtype = params.einsum_scale_output_dtype
    if sg_w is not None:
      gx = _rescale(left, gx, scale_names(left, out), sg_w, dtype)
    if sg_x is not None:
      gw = _rescale(right, gw, scale_names(right, out), sg_x, dtype)
    if params.bwd_output_dtype is not None:
      gx = gx.astype(params.bwd_output_dtype)
      gw = gw.astype(params.bwd_output_dtype)
    return gx, gw, None

  @jax.custom_vjp
  def einsum_qt(x, w, key):
    del key
    return jnp.einsum(eqn, x, w)

  einsum_qt.defvjp(jax.jit(fwd), jax.jit(bwd))
  return einsum_qt(x, w, prng_key)
