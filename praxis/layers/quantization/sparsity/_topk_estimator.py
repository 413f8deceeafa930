"""Learned N:M masks (top-k estimators) of `SparsityBaseLayer`: private."""

from __future__ import annotations

from typing import Any

import jax
from jax import numpy as jnp


def estimate_masks(kind: str, mask_params, weight_shape, n: int, m: int):
  """(float mask, binary mask) from the learned `mask_params` scores.

  Args:
    kind: 'BINARY_MASK' (straight-through 0/1) or 'PROB_MASK' (softmax over
      each group's kept scores, times N).
    mask_params: The learned scores, shaped like the weight.
    weight_shape: The weight's shape.
    n: N of N:M.
    m: M of N:M.
  """
  groups = mask_params.reshape(-1, m)
  _, top = jax.lax.top_k(groups, k=n)
  keep = jnp.any(jax.nn.one_hot(top, m, dtype=jnp.bool_), axis=-2)
  if kind == 'BINARY_MASK':
    keep = keep.reshape(mask_params.shape)
    zero = mask_params - jax.lax.stop_gradient(mask_params)
    float_mask = zero + jax.lax.stop_gradient(keep)
    return float_mask, float_mask == 1.0
  if kind == 'PROB_MASK':
    kept_scores = jnp.where(keep, groups, jnp.full(groups.shape, -jnp.inf,
                                                   groups.dtype))
    probs = jax.nn.softmax(kept_scores, axis=-1) * n
    return probs.reshape(weight_shape), keep.reshape(weight_shape)
  raise ValueError(
      "SparsityHParams.topk_estimator_type must be 'BINARY_MASK' or "
      f"'PROB_MASK', got {kind!r}.")


def sparsify(layer: Any, weight, name: str, step, mask_suffix: str):
  """The weight times its learned mask; updates the mask variables."""
  sp = layer.sparsity
  binary_name = name + mask_suffix
  float_name = binary_name + '_float'
  binary = layer.get_var(binary_name).reshape(weight.shape)
  float_mask = layer.get_var(float_name).reshape(weight.shape)
  mask_params = layer.theta.w_mask
  count = layer.get_var('mask_update_count')
  if hasattr(sp.mode, 'increment_target_step'):
    sp.mode.increment_target_step(count)
  n, m = sp.weight_params.prune_rate

  def update(binary, weight, count, mask_params, float_mask):
    del float_mask
    new_float, new_binary = estimate_masks(
        sp.topk_estimator_type, mask_params, weight.shape, n, m)
    sad = None
    if sp.track_sad_metric:
      sad = jnp.sum(jnp.logical_xor(binary, new_binary)) / new_binary.size
    return weight * new_float, count, new_float, new_binary, sad

  def keep(binary, weight, count, mask_params, float_mask):
    del mask_params
    sad = jnp.zeros((), jnp.float32) if sp.track_sad_metric else None
    return weight * float_mask, count, float_mask, binary, sad

  weight, count, float_mask, binary, sad = jax.lax.cond(
      sp.mode.update_cond(step, count), update, keep,
      binary, weight, count, mask_params, float_mask)
  layer.update_var('mask_update_count', count)
  layer.update_var(binary_name, binary)
  layer.update_var(float_name, float_mask)
  if sp.track_sad_metric:
    layer.update_var('sparse_architecture_divergence', sad)
  return weight
