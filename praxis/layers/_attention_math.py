"""Attention masks and math: the module-level functions behind attentions.py.

Re-exported by `praxis.layers.attentions`; import them from there. Public
names:
  masks (0 where attention is allowed, a large negative number where not,
    shaped to broadcast against logits [B, N, T, S]): causal_mask,
    segment_mask, causal_segment_mask, convert_paddings_to_mask,
    limited_context_mask, merge_masks, shift_1d;
  math: per_dim_scale, cap_logits, softmax_with_extra_logit,
    relative_position_bucket, causal_depthwise_conv1d, dot_product_attention.

Also the decode-cache helpers that the attention layers of `attentions` and
`multi_query_attention` share (not re-exported): rotary_key_name,
fprop_update_decode_state, write_decode_state, transform_decode_states,
output_projection.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name
import numpy as np

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor

# 1 / softplus(0): PerDimScale starts as a plain 1/sqrt(dim) scaling.
_R_SOFTPLUS_0 = 1.442695041


# ---------------------------------------------------------------------------
# Masks.
# ---------------------------------------------------------------------------


def _large_negative(dtype: Any) -> JTensor:
  return py_utils.get_large_negative_number(dtype)


def causal_mask(input_t: JTensor) -> JTensor:
  """[1, 1, T, T] in the float dtype of `input_t` [B, T, ...]: keys <= t."""
  if not jnp.issubdtype(input_t.dtype, jnp.floating):
    raise ValueError(f'causal_mask needs float inputs, got {input_t.dtype}.')
  t = input_t.shape[1]
  future = jnp.arange(t)[:, None] < jnp.arange(t)[None, :]
  mask = future.astype(input_t.dtype) * _large_negative(input_t.dtype)
  return mask[None, None]


def segment_mask(
    segment_ids: JTensor,
    source_segment_ids: JTensor | None = None,
    dtype: Any = jnp.float32,
) -> JTensor:
  """[B, 1, T, S]: queries [B, T] see keys [B, S] of their own segment only.

  Args:
    segment_ids: [B, T], the segment of each query token.
    source_segment_ids: [B, S], of each key token (default: segment_ids).
    dtype: Dtype of the mask.
  """
  if source_segment_ids is None:
    source_segment_ids = segment_ids
  differ = segment_ids[:, :, None] != source_segment_ids[:, None, :]
  return (differ.astype(dtype) * _large_negative(dtype))[:, None]


def causal_segment_mask(
    segment_ids: JTensor,
    dtype: Any = jnp.float32,
    causal_attention_mask: JTensor | None = None,
) -> JTensor:
  """[B, 1, T, T]: the segment mask combined with the causal mask.

  Args:
    segment_ids: [B, T], the segment of each token.
    dtype: Dtype of the mask.
    causal_attention_mask: [B, T], 1 where keys are masked causally, 0 where
      not (e.g. 0 over an input prefix, 1 over the targets).
  """
  b, t = segment_ids.shape
  causal = causal_mask(jnp.zeros([b, t, 1], dtype))
  if causal_attention_mask is not None:
    causal = causal * causal_attention_mask[:, None, None, :].astype(dtype)
  return jnp.minimum(segment_mask(segment_ids, dtype=dtype), causal)


def convert_paddings_to_mask(
    paddings: JTensor, dtype: Any = jnp.float32
) -> JTensor:
  """[B, 1, 1, T]: no query attends to padded keys (paddings [B, T], 1=pad)."""
  mask = paddings[:, None, None, :].astype(dtype)
  return mask * _large_negative(dtype)


def limited_context_mask(
    left_context: int | None,
    right_context: int | None,
    time_size: int,
    dtype: Any = jnp.float32,
    column_time_size: int | None = None,
) -> JTensor:
  """Additive mask [T, C]: row t sees columns (t - left_context,
  t + right_context].

  Args:
    left_context: Positions visible to the left, counting the current one
      (None: all).
    right_context: Positions visible to the right (None: all).
    time_size: T, the rows (queries).
    dtype: Dtype of the mask.
    column_time_size: C, the columns (keys); default T.
  """
  cols = time_size if column_time_size is None else column_time_size
  unlimited = max(time_size, cols)
  left = unlimited if left_context is None else left_context
  right = unlimited if right_context is None else right_context
  row = jnp.arange(time_size)[:, None]
  col = jnp.arange(cols)[None, :]
  outside = (col + left <= row) | (row < col - right)
  return outside.astype(dtype) * _large_negative(dtype)


def merge_masks(a: JTensor, b: JTensor) -> JTensor:
  """The minimum of two masks [B, 1, 1|T, T].

  A key-only mask [B, 1, 1, T] is first made [B, 1, T, T] by also masking
  the queries at its masked positions.
  """

  def expand(key_mask: JTensor) -> JTensor:
    return jnp.minimum(jnp.swapaxes(key_mask, 2, 3), key_mask)

  if a.shape[2] != b.shape[2]:
    if a.shape[2] == 1:
      a = expand(a)
    elif b.shape[2] == 1:
      b = expand(b)
  if a.shape[1:] != b.shape[1:]:
    raise ValueError(f'Cannot merge masks of shapes {a.shape} and {b.shape}.')
  return jnp.minimum(a, b)


def shift_1d(inputs: JTensor, offset: int, axis: int) -> JTensor:
  """Shifts `inputs` by `offset` along `axis` (positive: later), zero-filled."""
  length = inputs.shape[axis]
  pad = [(0, 0)] * inputs.ndim
  pad[axis] = (max(offset, 0), max(-offset, 0))
  padded = jnp.pad(inputs, pad)
  start = max(-offset, 0)
  return jax.lax.slice_in_dim(padded, start, start + length, axis=axis)


# ---------------------------------------------------------------------------
# Math.
# ---------------------------------------------------------------------------


def per_dim_scale(inputs: JTensor, scale: JTensor) -> JTensor:
  """`inputs * softplus(scale) / (softplus(0) * sqrt(dim))` over the last dim.

  Args:
    inputs: [..., dim].
    scale: [dim], the learned per-dim scale (0 gives 1 / sqrt(dim)).

  Returns:
    The scaled inputs.
  """
  dim = inputs.shape[-1]
  factor = jnp.asarray(_R_SOFTPLUS_0 / np.sqrt(dim), inputs.dtype)
  return inputs * (factor * jax.nn.softplus(scale))


def cap_logits(logits: JTensor, cap: float | None) -> JTensor:
  """`cap * tanh(logits / cap)` for a positive cap; `logits` otherwise."""
  if not cap or cap <= 0.0:
    return logits
  cap = jnp.asarray(cap, logits.dtype)
  return cap * jnp.tanh(logits / cap)


def softmax_with_extra_logit(
    logits: JTensor, extra_logit: float | None = None
) -> JTensor:
  """Softmax over the last axis, optionally with an extra (constant) logit.

  The extra logit only enlarges the denominator, so the probabilities of a
  row may sum to less than 1 (e.g. attending to "nothing").

  Args:
    logits: [..., S].
    extra_logit: The extra logit, or None for a plain softmax.

  Returns:
    Probabilities [..., S].
  """
  if extra_logit is None:
    return jax.nn.softmax(logits, axis=-1)
  max_logit = jnp.max(jax.lax.stop_gradient(logits), axis=-1, keepdims=True)
  extra = jnp.asarray(extra_logit, logits.dtype)
  max_logit = jnp.maximum(max_logit, extra)
  exp_x = jnp.exp(logits - max_logit)
  denom = jnp.sum(exp_x, axis=-1, keepdims=True) + jnp.exp(extra - max_logit)
  return exp_x / denom


def relative_position_bucket(
    relative_position: JTensor,
    num_buckets: int,
    max_distance: int,
    bidirectional: bool,
) -> JTensor:
  """T5's bucket (int32 in [0, num_buckets)) of each key - query offset.

  Half of the buckets are exact offsets, the rest log-spaced up to
  `max_distance`; if bidirectional, the buckets are split between keys
  before and after the query, else keys after the query share bucket 0.

  Args:
    relative_position: int offsets (key position - query position).
    num_buckets: Number of buckets.
    max_distance: Offset at which the last bucket starts.
    bidirectional: Whether keys after the query get their own buckets.

  Returns:
    The buckets, shaped as `relative_position`.
  """
  n = -relative_position
  ret = jnp.zeros_like(n)
  if bidirectional:
    num_buckets //= 2
    ret = ret + (n < 0).astype(jnp.int32) * num_buckets
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  max_exact = num_buckets // 2
  log_ratio = jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact)
  log_ratio /= np.log(max_distance / max_exact)
  large = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
  large = jnp.minimum(large, num_buckets - 1)
  return ret + jnp.where(n < max_exact, n, large)


def causal_depthwise_conv1d(
    inputs: JTensor,
    kernels: Sequence[JTensor],
    axis: int,
    segment_pos: JTensor | None = None,
) -> JTensor:
  """`sum_i kernels[i] * inputs[t - i]` along `axis` (zero before the start).

  Args:
    inputs: [B, L, ...] (or any layout; `axis` is the time axis).
    kernels: Per-channel kernels, each broadcastable to the trailing dims.
    axis: The time axis.
    segment_pos: [B, L], positions within packed segments; a tap reaching
      before its segment's start is dropped.

  Returns:
    The convolved inputs, shaped as `inputs`.
  """
  outputs = inputs * kernels[0]
  for i, kernel in enumerate(kernels[1:], start=1):
    term = shift_1d(inputs, i, axis) * kernel
    if segment_pos is not None:
      keep = (segment_pos >= i).astype(inputs.dtype)
      term = term * keep.reshape(keep.shape + (1,) * (inputs.ndim - 2))
    outputs = outputs + term
  return outputs


def _fully_masked(atten_mask: JTensor) -> JTensor:
  """[B|1, 1|T]: whether a query sees no key at all (mask [B, 1, T, S])."""
  cutoff = py_utils.get_large_negative_number(jnp.float32) / 2
  return jnp.all(atten_mask < cutoff, axis=-1)[:, 0]


def dot_product_attention(
    query: JTensor,
    key: JTensor,
    value: JTensor,
    atten_mask: JTensor,
    *,
    relative_bias: JTensor | None = None,
    logits_scale: float | None = None,
    logit_cap: float | None = None,
    extra_logit: float | None = None,
    probs_dropout: Callable[[JTensor], JTensor] | None = None,
    zero_fully_masked: bool = False,
    qk_einsum: Callable[..., JTensor] = jnp.einsum,
    pv_einsum: Callable[..., JTensor] = jnp.einsum,
) -> tuple[JTensor, JTensor]:
  """Multi-head attention of (already scaled) queries over keys and values.

  B = batch, T = query length, S = key length, N = query heads, K = key/value
  heads (K divides N; query head n reads key/value head n // (N // K)),
  H = dims per head.

  Args:
    query: [B, T, N, H], already scaled (e.g. by 1 / sqrt(H)).
    key: [B, S, K, H].
    value: [B, S, K, H].
    atten_mask: Additive mask [1|B, 1, 1|T, S].
    relative_bias: [1|B, N, T, S], added to the logits.
    logits_scale: If set, the logits (with the bias) are multiplied by it.
    logit_cap: If positive, logits are capped by `cap * tanh(x / cap)`.
    extra_logit: If set, an extra logit of this value joins the softmax.
    probs_dropout: Applied to the probabilities (e.g. a Dropout layer).
    zero_fully_masked: Output zeros for queries that see no key.
    qk_einsum: The einsum computing the logits.
    pv_einsum: The einsum combining the values.

  Returns:
    (encoded [B, T, N, H], probs [B, N, T, S] in the dtype of `value`).
  """
  b, t, n, h = query.shape
  s, k = key.shape[1], key.shape[2]
  if key.shape != (b, s, k, h) or value.shape != key.shape or n % k:
    raise ValueError(
        f'dot_product_attention: query {query.shape}, key {key.shape} and '
        f'value {value.shape} must be [B, T, N, H], [B, S, K, H], [B, S, K, '
        'H] with K dividing N.'
    )
  if atten_mask.ndim != 4 or atten_mask.shape[-1] != s:
    raise ValueError(
        f'dot_product_attention: atten_mask {atten_mask.shape} must be '
        f'[1|B, 1, 1|T, {s}].'
    )
  g = n // k
  if g == 1:
    logits = qk_einsum('BTNH,BSNH->BNTS', query, key)
  else:
    grouped = query.reshape(b, t, k, g, h)
    logits = qk_einsum('BTKGH,BSKH->BKGTS', grouped, key).reshape(b, n, t, s)
  if relative_bias is not None:
    logits = logits + relative_bias
  logits = checkpoint_name(logits, 'logits')
  if logits_scale is not None:
    logits = logits * jnp.asarray(logits_scale, logits.dtype)
  logits = cap_logits(logits, logit_cap).astype(jnp.float32)
  logits = py_utils.apply_mask_to_logits(logits, atten_mask)
  probs = softmax_with_extra_logit(logits, extra_logit).astype(value.dtype)
  if probs_dropout is not None:
    probs = probs_dropout(probs)
  if g == 1:
    encoded = pv_einsum('BNTS,BSNH->BTNH', probs, value)
  else:
    grouped_probs = probs.reshape(b, k, g, t, s)
    encoded = pv_einsum('BKGTS,BSKH->BTKGH', grouped_probs, value)
    encoded = encoded.reshape(b, t, n, h)
  if zero_fully_masked:
    keep = 1 - _fully_masked(atten_mask).astype(encoded.dtype)
    encoded = encoded * keep[:, :, None, None]
  return encoded, probs


# ---------------------------------------------------------------------------
# Decode-cache helpers shared by the attention layers.
# ---------------------------------------------------------------------------


def rotary_key_name(consolidate_rope_key_state: bool) -> str:
  """The cache entry of the rotated keys: 'key_state' when consolidated
  (the unrotated keys are then not kept), else 'key_post_rotary_pos_emb'."""
  if consolidate_rope_key_state:
    return 'key_state'
  return 'key_post_rotary_pos_emb'


def fprop_update_decode_state(layer: base_layer.BaseLayer, name: str,
                              value: JTensor) -> None:
  """Stores `value` as `layer`'s cache entry `name` in a forward pass, when
  the layer keeps a cache (`decode_cache`) and the collection is mutable."""
  if layer.decode_cache and layer.is_mutable_collection(
      base_layer.DECODE_CACHE):
    layer.update_decode_state(name, value)


def write_decode_state(layer: base_layer.BaseLayer, name: str, value: JTensor,
                       time_step: JTensor, time_dim: int) -> JTensor:
  """Writes `value` at `time_step` of `layer`'s cache entry `name`.

  Args:
    layer: The attention layer.
    name: The entry, e.g. [B, S, N, H] (or [B, S, H] with one KV head).
    value: One step without the time dim (e.g. [B, N, H]), or steps with it.
    time_step: Scalar index into the time dim.
    time_dim: The time dim of the entry.

  Returns:
    The updated entry.
  """
  state = layer.get_decode_state(name)
  if value.ndim == state.ndim - 1:
    value = jnp.expand_dims(value, time_dim)
  indices = [0] * state.ndim
  indices[time_dim] = jnp.asarray(time_step, jnp.int32)
  new_state = jax.lax.dynamic_update_slice(
      state, value.astype(state.dtype), indices)
  layer.update_decode_state(name, new_state)
  return new_state


def transform_decode_states(
    layer: base_layer.BaseLayer,
    transform_fn: base_layer.DecodeStateTransformFn,
    shard_fn: Callable[[JTensor], JTensor]) -> None:
  """Replaces each of `layer`'s cache entries x by
  `shard_fn(transform_fn(x, 0, 1))` (batch dim 0, time dim 1)."""
  cache = layer.variables.get(base_layer.DECODE_CACHE, {})
  for name, state in cache.items():
    if isinstance(state, jax.Array):
      layer.update_decode_state(name, shard_fn(transform_fn(state, 0, 1)))


def output_projection(
    post: Callable[[JTensor], JTensor], encoded: JTensor,
    shard_context: Callable[[JTensor], JTensor],
    shard_output: Callable[[JTensor], JTensor]) -> JTensor:
  """The tail of an attention's forward pass: the context [B, T, N, H]
  (sharded, named 'context') through `post` to [B, T, D] ('out_proj')."""
  encoded = checkpoint_name(shard_context(encoded), 'context')
  return checkpoint_name(shard_output(post(encoded)), 'out_proj')
