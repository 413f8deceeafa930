"""Search of the clipping bound that minimizes the quantization error.

Public: `get_best_bound`. Candidates are the hard bound times 1.0, 0.95, ...,
0.5; the one with the smallest p-mean absolute error of quantize-dequantize
wins, for the whole tensor or per channel (last dim of a 2D tensor).
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
import numpy as np
from praxis import pytypes

JTensor = pytypes.JTensor


def _candidate_factors() -> np.ndarray:
  return np.linspace(1.0, 0.5, num=11)


def _pmean_error(bound, t, min_value, max_value, p_value):
  """p-mean absolute error of symmetric quantize-dequantize under `bound`."""
  scale = bound / max_value
  q = jnp.clip(jnp.round(t / scale), min_value, max_value) * scale
  return jnp.mean(jnp.abs(q - t) ** p_value)


def _best_factor_bound(t, bound, min_value, max_value, p_value):
  factors = _candidate_factors()
  errors = jax.vmap(
      lambda f: _pmean_error(bound * f, t, min_value, max_value, p_value)
  )(factors)
  return bound * factors[jnp.argmin(errors)]


def _get_best_bound_per_tensor(t, bound, min_value, max_value, p_value=1.0):
  factors = _candidate_factors()
  errors = jax.vmap(
      lambda f: _pmean_error(bound * f, t, min_value, max_value, p_value)
  )(factors)
  return bound * factors[jnp.argmin(errors)].astype(bound.dtype)


def _get_best_bound_per_channel(t, bound, min_value, max_value, p_value=1.0):
  if t.ndim != 2 or bound.ndim != 2 or bound.shape != (1, t.shape[1]):
    raise ValueError(
        'Per-channel bound search needs a 2D tensor and a [1, channels] '
        f'bound, got shapes {t.shape} and {bound.shape}.'
    )
  columns = np.asarray(t).T
  best = np.zeros(bound.shape[1])
  for i, column in enumerate(columns):
    best[i] = _best_factor_bound(
        column, bound[0, i], min_value, max_value, p_value
    )
  return best.reshape(bound.shape)


def get_best_bound(
    t: JTensor,
    bound: JTensor,
    min_value: float,
    max_value: float,
    p_value: float = 1.0,
    per_channel: bool = False,
) -> JTensor:
  """The bound in [0.5, 1] x `bound` minimizing the quantization p-error.

  Args:
    t: The float tensor.
    bound: Its hard bound, max(|t|) (per channel: shape [1, channels]).
    min_value: Lowest quantized value.
    max_value: Highest quantized value.
    p_value: Exponent of the error (1.0: mean absolute error).
    per_channel: One bound per column of a 2D `t`.

  Returns:
    The best bound, shaped like `bound`.
  """
  if per_channel:
    return _get_best_bound_per_channel(t, bound, min_value, max_value, p_value)
  return _get_best_bound_per_tensor(t, bound, min_value, max_value, p_value)
