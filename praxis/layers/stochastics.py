"""Stochastic layers: dropout and stochastic depth.

Public names: dropout, drop_connect, Dropout, StochasticResidual.

Both draw their randomness from the `random` RNG stream
(`BaseLayer.next_prng_key`) and are the identity in eval mode
(`JaxContext.do_eval`), so train-time outputs are scaled to keep expectations:

  drop = base_layer.instantiate(
      pax_fiddle.Config(stochastics.Dropout, name='drop', keep_prob=0.9))
  y = drop.apply({}, x, rngs={'random': key})  # x * mask / 0.9
"""

from __future__ import annotations

import numbers
from typing import Sequence

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey


def keep_mask(
    key: PRNGKey, keep_prob: float | JTensor, shape: Sequence[int], dtype
) -> JTensor:
  """A 0/1 mask of `shape`: `floor(keep_prob + uniform[0, 1))`, as in Pax.

  The uniform draw and the sum are in `dtype` (float32 for non-float
  dtypes), so a bfloat16 mask keeps slightly more than `keep_prob` (sums
  that round up to 1), exactly as Pax's does.

  Args:
    key: PRNG key.
    keep_prob: Probability of a 1.
    shape: Shape of the mask.
    dtype: Its dtype.

  Returns:
    The mask.
  """
  draw_dtype = dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.float32
  uniform = jax.random.uniform(key, tuple(shape), draw_dtype)
  return jnp.floor(keep_prob + uniform).astype(dtype)


def dropout(
    inputs: JTensor,
    key: PRNGKey,
    keep_prob: float | JTensor,
    noise_shape: Sequence[int] | None = None,
    transpose_qk: bool = False,
) -> JTensor:
  """Zeroes entries with probability 1 - keep_prob, scales the rest up.

  Args:
    inputs: Any shape.
    key: PRNG key of the mask.
    keep_prob: Probability of keeping an entry, in (0, 1].
    noise_shape: Shape of the mask, broadcast against `inputs` (dims of size 1
      share one draw); None: `inputs.shape`.
    transpose_qk: For a rank-4 mask with equal last two dims, use the
      transpose of the draw over those dims.

  Returns:
    `inputs * mask / keep_prob`.
  """
  shape = list(inputs.shape if noise_shape is None else noise_shape)
  mask = keep_mask(key, keep_prob, shape, inputs.dtype)
  if transpose_qk and len(shape) == 4 and shape[2] == shape[3]:
    mask = jnp.swapaxes(mask, 2, 3)
  return inputs * mask / keep_prob


def drop_connect(
    inputs: JTensor, key: PRNGKey, survival_prob: float
) -> JTensor:
  """Drops whole examples (axis 0) with probability 1 - survival_prob."""
  noise_shape = [inputs.shape[0]] + [1] * (inputs.ndim - 1)
  return dropout(inputs, key, survival_prob, noise_shape)


def _check_probability(
    layer: base_layer.BaseLayer, name: str, value: float | JTensor
) -> None:
  if isinstance(value, numbers.Real) and not 0.0 < value <= 1.0:
    raise ValueError(
        f'{type(layer).__name__} ({layer.name}): {name} must be in (0, 1], '
        f'got {value}.'
    )


class Dropout(base_layer.BaseLayer):
  """Dropout in training: `inputs * mask / keep_prob`; identity in eval.

  Attributes:
    keep_prob: Probability of keeping each entry, in (0, 1]; 1.0 disables
      dropout.
    noise_shape: Shape of the random mask (broadcast against the inputs);
      None: the shape of the inputs.
    noise_shape_broadcast_dims: Dims of the mask set to size 1 (one draw
      shared along them), e.g. [-1] for [n, h, w, 1].
    dropout_at_eval: Also drop in eval mode (for when E[f(x)] != f(E[x])).
    transpose_qk: For a rank-4 mask [b, n, t, t] (attention probabilities),
      use the transpose of the draw over its last two dims (the mask the
      transposed layout would draw); other shapes are not transposed.
  """

  keep_prob: float = 1.0
  noise_shape: Sequence[int] | None = None
  noise_shape_broadcast_dims: Sequence[int] | None = None
  dropout_at_eval: bool = False
  transpose_qk: bool = False

  def setup(self) -> None:
    _check_probability(self, 'keep_prob', self.keep_prob)

  def _noise_shape(self, inputs: JTensor) -> list[int] | None:
    if not self.noise_shape_broadcast_dims:
      return None if self.noise_shape is None else list(self.noise_shape)
    shape = list(self.noise_shape or inputs.shape)
    for dim in self.noise_shape_broadcast_dims:
      if not -len(shape) <= dim < len(shape):
        raise ValueError(
            f'{type(self).__name__} ({self.name}): noise_shape_broadcast_dims '
            f'entry {dim} is out of range for a noise shape {shape}.'
        )
      shape[dim] = 1
    return shape

  def __call__(self, inputs: JTensor) -> JTensor:
    """Applies dropout to `inputs` (any shape) unless evaluating."""
    if isinstance(self.keep_prob, numbers.Real) and self.keep_prob == 1.0:
      return inputs
    if self.do_eval and not self.dropout_at_eval:
      return inputs
    return dropout(
        inputs,
        self.next_prng_key(),
        self.keep_prob,
        self._noise_shape(inputs),
        bool(self.transpose_qk),
    )


class StochasticResidual(base_layer.BaseLayer):
  """`inputs + residual_weight * residual`, dropping the residual per example.

  In training the residual of each example (axis 0) is kept with probability
  `survival_prob` and then scaled by 1 / survival_prob (stochastic depth).

  Attributes:
    residual_weight: Weight of the residual branch.
    survival_prob: Probability of keeping an example's residual, in (0, 1].
  """

  residual_weight: float = 1.0
  survival_prob: float = 1.0

  def setup(self) -> None:
    _check_probability(self, 'survival_prob', self.survival_prob)

  def __call__(self, inputs: JTensor, residual: JTensor) -> JTensor:
    """Returns `inputs + residual_weight * maybe_dropped(residual)`."""
    if not self.do_eval:
      key = self.next_prng_key()
      residual = drop_connect(residual, key, self.survival_prob)
    return inputs + self.residual_weight * residual
