"""Pooling layers.

Public names: pool_2d, global_pool, pool_1d, Pooling, GlobalPooling,
Pooling1D.

`Pooling` pools NHWC images over H and W (paddings mark padded rows of H);
`GlobalPooling` reduces whole dimensions; `Pooling1D` pools [B, T, ...] over
T. The math is in the module-level functions.

Example:

  pool = base_layer.instantiate(pax_fiddle.Config(
      poolings.Pooling, name='pool', window_shape=(2, 2),
      window_stride=(2, 2)))
  outputs, out_paddings = pool.apply({}, images)
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor

_POOLING_TYPES = ('MAX', 'AVG')
_PADDINGS = ('SAME', 'VALID')


def _lowest(dtype: jnp.dtype) -> JTensor | float:
  """The identity of max for `dtype`."""
  if jnp.issubdtype(dtype, jnp.inexact):
    return -jnp.inf
  if jnp.issubdtype(dtype, jnp.integer):
    return jnp.iinfo(dtype).min
  raise ValueError(f'Pooling supports float and int inputs, not {dtype}.')


# The init values of reduce_window are numpy constants: a traced (jnp) one
# makes JAX use a generic reduction without a gradient rule under jit.
def _window_sum(
    x: JTensor, window: Sequence[int], stride: Sequence[int], padding: str
) -> JTensor:
  return jax.lax.reduce_window(
      x, np.zeros((), x.dtype), jax.lax.add, tuple(window), tuple(stride),
      padding,
  )


def _window_max(
    x: JTensor, window: Sequence[int], stride: Sequence[int], padding: str
) -> JTensor:
  return jax.lax.reduce_window(
      x, np.asarray(_lowest(x.dtype), x.dtype), jax.lax.max, tuple(window),
      tuple(stride), padding,
  )


def pool_2d(
    inputs: JTensor,
    paddings: JTensor | None,
    window_shape: Sequence[int],
    window_stride: Sequence[int],
    pooling_type: str = 'MAX',
    padding: str = 'SAME',
) -> tuple[JTensor, JTensor | None]:
  """Max or average pooling of NHWC `inputs` over H and W.

  Average pooling divides the window sum by the number of in-bounds,
  non-padded entries of the window; as in Pax, the sum itself includes the
  values of padded rows (paddings over H), which max pooling ignores. Output
  rows whose window is all padding, and padded output rows, are zero.
  Integer inputs average to float32.

  Args:
    inputs: [B, H, W, C].
    paddings: [B, H] (1 = padded), or None.
    window_shape: (height, width) of the window.
    window_stride: (height, width) strides.
    pooling_type: 'MAX' or 'AVG'.
    padding: 'SAME' or 'VALID'.

  Returns:
    (outputs [B, H', W', C], paddings [B, H'] or None).
  """
  window = (1, window_shape[0], window_shape[1], 1)
  stride = (1, window_stride[0], window_stride[1], 1)
  valid = None
  if paddings is not None:
    valid = (1 - paddings).astype(inputs.dtype)[:, :, None, None]
  if pooling_type == 'MAX':
    x = inputs
    if valid is not None:
      x = jnp.where(valid > 0, inputs, _lowest(inputs.dtype))
    out = _window_max(x, window, stride, padding)
  else:
    if valid is None:
      valid = jnp.ones((1,) + inputs.shape[1:3] + (1,), inputs.dtype)
    else:
      valid = jnp.broadcast_to(valid, valid.shape[:2] + (inputs.shape[2], 1))
    count = _window_sum(valid, window, stride, padding)
    out = _window_sum(inputs, window, stride, padding)
    out = out * jnp.where(count > 0, 1.0 / jnp.maximum(count, 1), 0)
    if jnp.issubdtype(inputs.dtype, jnp.inexact):  # As Pax: int -> float32.
      out = out.astype(inputs.dtype)
  if paddings is None:
    return out, None
  if window_stride[0] > 1 or padding == 'VALID':
    paddings = _window_max(
        paddings, (1, window_shape[0]), (1, window_stride[0]), padding
    )
  # `where`, not a product: max-pooled outputs may be -inf.
  out = jnp.where(paddings[:, :, None, None] > 0, 0, out).astype(out.dtype)
  return out, paddings


def global_pool(
    inputs: JTensor,
    pooling_dims: Sequence[int],
    pooling_type: str = 'AVG',
    keepdims: bool = False,
    compatible_paddings: JTensor | None = None,
    epsilon: float = 1e-8,
) -> JTensor:
  """Max or mean of `inputs` over `pooling_dims`, skipping padded entries.

  Args:
    inputs: Any shape.
    pooling_dims: The dimensions reduced.
    pooling_type: 'MAX' or 'AVG'.
    keepdims: Keep the reduced dimensions as size 1.
    compatible_paddings: Paddings broadcastable to `inputs` (1 = padded).
    epsilon: Added to the count of valid entries for 'AVG' with paddings.

  Returns:
    The pooled tensor.
  """
  dims = tuple(pooling_dims)
  if compatible_paddings is None:
    if pooling_type == 'MAX':
      return jnp.max(inputs, dims, keepdims=keepdims)
    return jnp.mean(inputs, dims, keepdims=keepdims).astype(inputs.dtype)
  padded = compatible_paddings > 0
  if pooling_type == 'MAX':
    x = jnp.where(padded, _lowest(inputs.dtype), inputs)
    return jnp.max(x, dims, keepdims=keepdims)
  x = jnp.where(padded, jnp.zeros([], inputs.dtype), inputs)
  count = jnp.sum(
      jnp.broadcast_to(1.0 - compatible_paddings, inputs.shape), dims,
      keepdims=keepdims, dtype=inputs.dtype,
  )
  total = jnp.sum(x, dims, keepdims=keepdims)
  return (total / (count + epsilon)).astype(inputs.dtype)


def pool_1d(
    inputs: JTensor,
    paddings: JTensor | None,
    window: int,
    stride: int,
    pooling_type: str = 'AVG',
) -> tuple[JTensor, JTensor | None]:
  """Pools [B, T, ...] over T with SAME padding; paddings are subsampled.

  Args:
    inputs: [B, T, ...].
    paddings: [B, T] (1 = padded), or None.
    window: Window length (1: plain striding).
    stride: Stride over T.
    pooling_type: 'MAX' or 'AVG' (average over valid entries).

  Returns:
    (outputs [B, ceil(T / stride), ...], paddings[:, ::stride] or None).
  """
  out_paddings = None if paddings is None else paddings[:, ::stride]
  if window == 1:
    return inputs[:, ::stride], out_paddings
  trailing = inputs.ndim - 2
  expand = lambda x: jnp.reshape(x, x.shape + (1,) * trailing)
  dims = (1, window) + (1,) * trailing
  strides = (1, stride) + (1,) * trailing
  if pooling_type == 'MAX':
    x = inputs
    if paddings is not None:
      x = jnp.where(expand(paddings) > 0, _lowest(inputs.dtype), inputs)
    out = _window_max(x, dims, strides, 'SAME')
    if out_paddings is not None:
      out = jnp.where(expand(out_paddings) > 0, 0, out).astype(out.dtype)
    return out, out_paddings
  x = inputs
  valid = jnp.ones(inputs.shape[:2], inputs.dtype)
  if paddings is not None:
    x = jnp.where(expand(paddings) > 0, jnp.zeros([], inputs.dtype), inputs)
    valid = (1.0 - paddings).astype(inputs.dtype)
  count = _window_sum(valid, (1, window), (1, stride), 'SAME')
  scale = jnp.where(count > 0, 1.0 / jnp.maximum(count, 1), 0.0)
  out = _window_sum(x, dims, strides, 'SAME') * expand(scale)
  return out.astype(inputs.dtype), out_paddings


def _check_choice(layer: base_layer.BaseLayer, field: str, choices) -> None:
  value = getattr(layer, field)
  if value not in choices:
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: `{field}` must be one of '
        f'{choices}, got {value!r}.'
    )


class Pooling(base_layer.BaseLayer):
  """2-D max or average pooling of NHWC inputs.

  Attributes:
    window_shape: (height, width) of the pooling window.
    window_stride: (height, width) strides.
    pooling_type: 'MAX' or 'AVG'.
    padding: 'SAME' or 'VALID'.
  """

  window_shape: Sequence[int] = (0, 0)
  window_stride: Sequence[int] = (0, 0)
  pooling_type: str = 'MAX'
  padding: str = 'SAME'

  def setup(self) -> None:
    for field in ('window_shape', 'window_stride'):
      value = tuple(getattr(self, field))
      if len(value) != 2 or any(v <= 0 for v in value):
        raise ValueError(
            f'Pooling {self.name!r}: `{field}` must be two positive ints, got '
            f'{value}.'
        )
    _check_choice(self, 'pooling_type', _POOLING_TYPES)
    _check_choice(self, 'padding', _PADDINGS)

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> tuple[JTensor, JTensor | None]:
    """Pools `inputs` [B, H, W, C]; `paddings` is [B, H] or None.

    Returns:
      (outputs, output paddings); the paddings are None if none were given.
    """
    return pool_2d(
        inputs, paddings, self.window_shape, self.window_stride,
        self.pooling_type, self.padding,
    )


class GlobalPooling(base_layer.BaseLayer):
  """Max or average over whole dimensions, with optional paddings.

  Attributes:
    pooling_type: 'MAX' or 'AVG'.
    pooling_dims: The dimensions to pool over (non-negative ints).
    keepdims: Keep the pooled dimensions as size 1.
  """

  pooling_type: str = 'AVG'
  pooling_dims: Sequence[int] | None = None
  keepdims: bool = False

  def setup(self) -> None:
    _check_choice(self, 'pooling_type', _POOLING_TYPES)
    if self.pooling_dims is None or any(d < 0 for d in self.pooling_dims):
      raise ValueError(
          f'GlobalPooling {self.name!r}: `pooling_dims` must be a list of '
          f'non-negative dims, got {self.pooling_dims}.'
      )

  def __call__(
      self,
      inputs: JTensor,
      epsilon: float = 1e-8,
      compatible_paddings: JTensor | None = None,
  ) -> JTensor:
    """Pools `inputs`; `compatible_paddings` broadcasts to it (1 = padded)."""
    return global_pool(
        inputs, self.pooling_dims, self.pooling_type, self.keepdims,
        compatible_paddings, epsilon,
    )


class Pooling1D(base_layer.BaseLayer):
  """Pooling of [B, T, ...] inputs over T (SAME padding).

  Attributes:
    stride: Keep every `stride`-th step.
    window: Window length; 0 means `stride`.
    pooling_type: 'MAX' or 'AVG'.
  """

  stride: int = 1
  window: int = 0
  pooling_type: str = 'AVG'

  def setup(self) -> None:
    if self.stride <= 0 or self.window < 0:
      raise ValueError(
          f'Pooling1D {self.name!r}: `stride` must be positive and `window` '
          f'non-negative, got stride={self.stride}, window={self.window}.'
      )
    _check_choice(self, 'pooling_type', _POOLING_TYPES)

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> tuple[JTensor, JTensor | None]:
    """Pools `inputs` [B, T, ...]; `paddings` is [B, T] or None."""
    window = self.window or self.stride
    if window == 1 and self.stride == 1:
      return inputs, paddings
    return pool_1d(inputs, paddings, window, self.stride, self.pooling_type)
