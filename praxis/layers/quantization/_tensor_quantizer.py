"""`TensorQuantizer`: the quantization state and arithmetic of one tensor (AQT).

Private module behind `praxis.layers.quantization.quantizer`.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers.quantization import operations

JTensor = pytypes.JTensor
Dims = int | Sequence[int] | None


def _reduced_shape(shape: Sequence[int], dims: Dims) -> list[int] | tuple:
  if dims is None:
    return ()
  dims = [dims] if isinstance(dims, int) else dims
  return [1 if i in dims else d for i, d in enumerate(shape)]


class TensorQuantizer(base_layer.BaseLayer):
  """Quantizes one input tensor (weights or activations) for AQT.

  Attributes:
    precision: Bits (None: no quantization).
    stop_scale_gradient: Stop the gradient through the scale.
    min_clipping: Lowest clipping value of the clipping search, in (0, 1).
    num_optimize_clipping: Number of clipping values searched.
    clipping_coeff: Fixed clipping of the range (None: hard min/max).
    add_scale_eps: Add epsilon to the scale (else zero scales become 1).
    unsigned_int_bounds: Clip to [0, 2**precision - 1].
    use_symmetric: Symmetric (else with a zero point).
    quant_loss_weight: Weight of the quantization-error auxiliary loss.
    kurt_loss_weight: Weight of the kurtosis auxiliary loss.
    kurt: Kurtosis target.
    optimize_clipping_per_channel: Search the clipping per channel.
    sub_channels: Number of sub channels of channel-wise quantization.
  """

  precision: int | None = None
  stop_scale_gradient: bool = False
  min_clipping: float | None = None
  num_optimize_clipping: int | None = None
  clipping_coeff: float | None = None
  add_scale_eps: bool | None = True
  unsigned_int_bounds: bool = False
  use_symmetric: bool = True
  quant_loss_weight: float | None = None
  kurt_loss_weight: float | None = None
  kurt: float = 1.8
  optimize_clipping_per_channel: bool = False
  sub_channels: int | None = None

  def setup(self) -> None:
    name = type(self).__name__
    if self.precision is not None and not 0 < self.precision <= 23:
      raise ValueError(
          f'{name}.precision must be in [1, 23] bits (float32 holds no '
          f'more), got {self.precision}.'
      )
    searching = (self.min_clipping, self.num_optimize_clipping)
    if any(v is not None for v in searching):
      if any(v is None for v in searching):
        raise ValueError(
            f'{name}: set both min_clipping and num_optimize_clipping, or '
            'neither.'
        )
      if not 0.0 < self.min_clipping < 1.0:
        raise ValueError(
            f'{name}.min_clipping must be in (0, 1), got {self.min_clipping}.'
        )
      if self.num_optimize_clipping <= 0:
        raise ValueError(f'{name}.num_optimize_clipping must be > 0.')
      if self.clipping_coeff is not None:
        raise ValueError(
            'clipping_coeff can not be used together with min_clipping '
            'and num_optimize_clipping'
        )
    elif self.optimize_clipping_per_channel:
      raise ValueError(
          'optimize_clipping_per_channel can not be True if '
          'min_clipping is None and num_optimize_clipping is None.'
      )
    if self.clipping_coeff is not None and not 0 <= self.clipping_coeff <= 1:
      raise ValueError('clipping_coeff has to be in range 0...1')

  def __call__(self) -> None:
    """Nothing: the quantizer is used through `quantize`."""

  def update(self, x: JTensor) -> None:
    """Statistics update (static quantization); nothing for now."""

  def _bounds(self) -> tuple[float, float]:
    return operations.get_min_max(self.precision, self.unsigned_int_bounds)

  def _get_scale_and_min(self, x, contract_dims, clipping_coeff=None):
    if self.precision is None:
      return jnp.ones((1,) * x.ndim, x.dtype), None
    lo, hi = self._bounds()
    if self.use_symmetric:
      bound = jnp.max(jnp.abs(x), axis=contract_dims, keepdims=True)
      x_min, levels = None, hi
    else:
      x_min = jnp.min(x, axis=contract_dims, keepdims=True)
      bound = jnp.max(x, axis=contract_dims, keepdims=True) - x_min
      levels = hi - lo
    if clipping_coeff is not None:
      bound = bound * clipping_coeff
      x_min = None if x_min is None else x_min * clipping_coeff
    scale = bound / levels
    if self.stop_scale_gradient:
      scale = jax.lax.stop_gradient(scale)
    if self.add_scale_eps:
      scale = scale + jnp.finfo(x.dtype).eps
    else:
      scale = jnp.where(scale == 0, jnp.ones_like(scale), scale)
    return scale, x_min

  def _get_optimal_scale_and_min(self, x, contract_dims):
    def error_of(clipping):
      scale, x_min = self._get_scale_and_min(x, contract_dims, clipping)
      scaled, zp = self._scale(x, scale, x_min)
      err = jnp.abs(
          x - self.dequantize(self.to_quant(scaled), scale, contract_dims, zp)
      )
      if self.optimize_clipping_per_channel:
        err = jnp.sum(err, axis=contract_dims, keepdims=True)
      else:
        err = jnp.sum(err)
      return err, scale, x_min

    clippings = jnp.linspace(
        1.0, self.min_clipping, num=self.num_optimize_clipping, dtype=x.dtype
    )
    errors, scales, mins = jax.vmap(error_of)(clippings)
    reduced = _reduced_shape(x.shape, contract_dims)
    if self.optimize_clipping_per_channel:
      best = jnp.reshape(jnp.argmin(errors, axis=0), [-1])
      positions = jnp.array(
          list(itertools.product(*[range(d) for d in reduced])), jnp.int32
      )
      index = jnp.concatenate([best[:, None], positions], axis=1)
    else:
      index = jnp.array([jnp.argmin(errors)], dtype=jnp.int32)
    index = tuple(jnp.moveaxis(index, -1, 0))
    best_scale, best_min = scales[index], None
    if not self.use_symmetric:
      best_min = mins[index]
    if self.optimize_clipping_per_channel:
      best_scale = jnp.reshape(best_scale, reduced)
      if best_min is not None:
        best_min = jnp.reshape(best_min, reduced)
    return best_scale, best_min

  def get_quant_scale(
      self, x: JTensor, contract_dims: Dims
  ) -> tuple[JTensor, JTensor | None]:
    """(scale, clipped min or None) of `x` over `contract_dims`."""
    if self.min_clipping is not None and self.num_optimize_clipping is not None:
      return self._get_optimal_scale_and_min(x, contract_dims)
    return self._get_scale_and_min(x, contract_dims, self.clipping_coeff)

  def to_quant(self, x: JTensor) -> JTensor:
    """Rounds (half up, straight-through) and clips a scaled `x`."""
    if self.precision is None:
      return x
    lo, hi = self._bounds()
    return jnp.clip(operations.pass_through(x + 0.5, jnp.floor), lo, hi)

  def _get_zero_point(self, x, x_min, scale):
    del x
    return self._bounds()[0] - x_min / scale

  def dequantize(
      self,
      q_x: JTensor,
      q_scale: JTensor,
      contract_dims: Dims,
      zp_time_scale: JTensor | None = None,
  ) -> JTensor:
    """q_x * q_scale (- zp_time_scale when asymmetric)."""
    del contract_dims
    if self.use_symmetric and zp_time_scale is not None:
      raise ValueError('Symmetric quantization can not be used '
                       'with zp_time_scale.')
    if not self.use_symmetric and zp_time_scale is None:
      raise ValueError('Asymmetric quantization need zp_time_scale.')
    if self.use_symmetric:
      return q_x * q_scale
    return q_x * q_scale - zp_time_scale

  def _scale(self, x, q_scale, x_min=None):
    if self.use_symmetric:
      if x_min is not None:
        raise ValueError('x_min has to be None for symmetric quantization.')
      return x / q_scale, None
    if x_min is None:
      raise ValueError('x_min is required for asymmetric quantization.')
    zp = self._get_zero_point(x, x_min, q_scale)
    return x / q_scale + zp, q_scale * zp

  def _add_losses(self, x, q_x, q_s, contract_dims, zp_time_scale):
    if self.quant_loss_weight is not None:
      deq = self.dequantize(q_x, q_s, contract_dims, zp_time_scale)
      loss = jnp.mean(jnp.square(x - deq)) * self.quant_loss_weight
      self.add_summary('quant_loss', loss)
      self.add_aux_loss('quant_loss', loss)
    if self.kurt_loss_weight is not None:
      mean = jnp.mean(x, axis=contract_dims, keepdims=True)
      std = jnp.std(x, axis=contract_dims, keepdims=True)
      std = jnp.where(std == 0, jnp.ones_like(std), std)
      kurtosis = jnp.mean(((x - mean) / std) ** 4.0, axis=contract_dims)
      loss = jnp.mean(jnp.square(kurtosis - self.kurt)) * self.kurt_loss_weight
      self.add_summary('kurt_loss', loss)
      self.add_aux_loss('kurt_loss', loss)

  def quantize(
      self,
      x: JTensor,
      contract_dims: Dims,
      squeeze_scale: bool = True,
      quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """(quantized x, scale, zero point times scale or None).

    Training (not eval, not materializing to int8) adds the configured
    auxiliary losses.
    """
    q_s, x_min = self.get_quant_scale(x, contract_dims)
    scaled, zp_time_scale = self._scale(x, q_s, x_min)
    q_x = self.to_quant(scaled)
    if quantized_dtype != jnp.int8 and not self.do_eval:
      self._add_losses(x, q_x, q_s, contract_dims, zp_time_scale)
    if squeeze_scale:
      q_s = jnp.squeeze(q_s)
      if zp_time_scale is not None:
        zp_time_scale = jnp.squeeze(zp_time_scale)
    if quantized_dtype is not None:
      q_x = q_x.astype(quantized_dtype)
    return q_x, q_s, zp_time_scale
