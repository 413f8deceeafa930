"""Block-local self-attention (Pax's LocalSelfAttention family).

Public names (re-exported by `attentions`): convert_to_block,
extract_block_context, LocalSelfAttention, LocalSelfAttentionRelativeBias,
LocalSelfAttentionAlibi.

Query position i attends to key positions i - (L - 1) ... i + R (L =
`left_context`, counting i itself; R = `right_context`). The sequence is cut
into U blocks of W = `block_size` queries; each block attends to its context
of C = W + L - 1 + R keys, so logits and probabilities are [B, N, U, W, C]
instead of [B, N, T, S]: memory O(T * C) rather than O(T^2).
"""

from __future__ import annotations

import math

import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _attention_math
from praxis.layers import attentions

JTensor = pytypes.JTensor
WeightHParams = base_layer.WeightHParams


def convert_to_block(x: JTensor, block_size: int,
                     padding_val: float = 0.0) -> JTensor:
  """[B, T, ...] -> [B, U, W, ...], the time axis padded to U * W.

  Args:
    x: [batch, time, ...].
    block_size: W, the frames per block.
    padding_val: Value of the padded frames.

  Returns:
    [batch, ceil(time / W), W, ...]; block u holds frames u*W ... u*W + W - 1.
  """
  if block_size < 1:
    raise ValueError(f'block_size must be at least 1, got {block_size}.')
  b, t = x.shape[:2]
  u = -(-t // block_size)
  pad = [(0, 0)] * x.ndim
  pad[1] = (0, u * block_size - t)
  x = jnp.pad(x, pad, constant_values=padding_val)
  return x.reshape((b, u, block_size) + x.shape[2:])


def _check_context(block_size: int, left: int, right: int) -> None:
  if block_size < 1:
    raise ValueError(f'block_size must be at least 1, got {block_size}.')
  if not 1 <= left <= block_size + 1:
    raise ValueError(
        f'left_context must be in [1, block_size + 1 = {block_size + 1}], '
        f'got {left}.'
    )
  if not 0 <= right <= block_size:
    raise ValueError(
        f'right_context must be in [0, block_size = {block_size}], got '
        f'{right}.'
    )


def extract_block_context(
    x: JTensor,
    block_size: int,
    left_context: int,
    right_context: int,
    padding_val: float = 0.0,
) -> JTensor:
  """[B, T, ...] -> [B, U, C, ...]: each block's frames with their context.

  Block u gets frames u*W - (L - 1) ... (u + 1)*W - 1 + R, C = W + L - 1 + R;
  frames outside the sequence are `padding_val`.

  Args:
    x: [batch, time, ...].
    block_size: W.
    left_context: L, in [1, W + 1].
    right_context: R, in [0, W].
    padding_val: Value of frames outside the sequence.

  Returns:
    [batch, num_blocks, C, ...].
  """
  _check_context(block_size, left_context, right_context)
  blocks = convert_to_block(x, block_size, padding_val)
  filler = jnp.full_like(blocks[:, :1], padding_val)
  parts = [blocks]
  if left_context > 1:
    previous = jnp.concatenate([filler, blocks[:, :-1]], axis=1)
    parts.insert(0, previous[:, :, block_size - (left_context - 1):])
  if right_context > 0:
    following = jnp.concatenate([blocks[:, 1:], filler], axis=1)
    parts.append(following[:, :, :right_context])
  return jnp.concatenate(parts, axis=2)


def _context_positions(num_blocks: int, block_size: int,
                       left_context: int, right_context: int) -> np.ndarray:
  """[U, C]: the key position each context slot of each block stands for."""
  context = block_size + left_context - 1 + right_context
  starts = np.arange(num_blocks)[:, None] * block_size
  return starts + np.arange(context)[None, :] - (left_context - 1)


def local_block_mask(seq_len: int, block_size: int, left_context: int,
                     right_context: int) -> np.ndarray:
  """[U, W, C] booleans: may query w of block u attend to context slot c."""
  u = -(-seq_len // block_size)
  keys = _context_positions(u, block_size, left_context, right_context)
  queries = np.arange(u * block_size).reshape(u, block_size)
  diff = queries[:, :, None] - keys[:, None, :]
  in_band = (diff > -right_context - 1) & (diff < left_context)
  valid = (queries < seq_len)[:, :, None] & (
      (keys >= 0) & (keys < seq_len))[:, None, :]
  return in_band & valid


def _blocked_mask(atten_mask: JTensor, block_size: int, left: int,
                  right: int, seq_len: int) -> JTensor:
  """Additive [1|B, 1, U, W, C] mask: the layer's mask and the local band."""
  neg = py_utils.get_large_negative_number(jnp.float32)
  atten_mask = atten_mask.astype(jnp.float32)
  if atten_mask.shape[2] == 1:  # [B, 1, 1, S]: the same keys for all queries.
    ctx = extract_block_context(atten_mask[:, 0, 0, :], block_size, left,
                                right, padding_val=neg)
    mask = ctx[:, None, :, None, :]
  else:  # [B, 1, T, S]: rows per query, gathered at each block's context.
    rows = convert_to_block(atten_mask[:, 0], block_size, padding_val=neg)
    u = rows.shape[1]
    keys = _context_positions(u, block_size, left, right)
    inside = (keys >= 0) & (keys < seq_len)
    idx = jnp.asarray(np.clip(keys, 0, seq_len - 1))
    gathered = jnp.take_along_axis(
        rows, jnp.broadcast_to(idx[None, :, None, :],
                               rows.shape[:3] + idx.shape[1:]), axis=3)
    mask = jnp.where(inside[None, :, None, :], gathered, neg)[:, None]
  band = local_block_mask(seq_len, block_size, left, right)
  return jnp.where(jnp.asarray(band)[None, None], mask, neg)


class LocalSelfAttention(attentions.DotProductAttention):
  """Self-attention within a window of left and right context.

  Attributes:
    block_size: W, queries per block (None: max(1, R, L - 1)).
    left_context: L, the positions visible to the left, counting the query's
      own.
    right_context: R, the positions visible to the right (0: causal).
    simulated: Compute full [T, S] attention under a band mask instead of
      blocks (faster when W is close to T; probabilities [B, N, T, S]).
  """

  block_size: int | None = None
  left_context: int | None = None
  right_context: int | None = None
  simulated: bool = False

  def _check_config(self) -> None:
    super()._check_config()
    if self.left_context is None or self.right_context is None:
      raise ValueError(f'{type(self).__name__} {self.name!r}: left_context '
                       'and right_context must be set.')
    if self.num_kv_heads not in (None, self.num_heads):
      raise ValueError(f'{type(self).__name__} {self.name!r}: num_kv_heads='
                       f'{self.num_kv_heads} is not supported (use None).')

  @property
  def _block(self) -> int:
    if self.block_size is not None:
      return self.block_size
    return max(1, self.right_context, self.left_context - 1)

  def _local_logits(self, query: JTensor, key: JTensor) -> JTensor:
    """[B, U, W, N, H] x [B, U, C, N, H] -> logits [B, N, U, W, C]."""
    return jnp.einsum('buwnh,bucnh->bnuwc', query, key)

  def _attend(self, query, key, value, atten_mask, relative_bias, dropout):
    if query.shape[1] != key.shape[1]:  # One decoding step: see extend_step.
      return super()._attend(query, key, value, atten_mask, relative_bias,
                             dropout)
    t = query.shape[1]
    if self.simulated:
      band = _attention_math.limited_context_mask(
          self.left_context, self.right_context, t, atten_mask.dtype)
      return super()._attend(query, key, value, jnp.minimum(atten_mask, band),
                             relative_bias, dropout)
    if relative_bias is not None:
      raise NotImplementedError(f'{type(self).__name__}: relative_bias_tpl is '
                                'not supported.')
    w, l, r = self._block, self.left_context, self.right_context
    q = convert_to_block(self._scale_query(query), w)
    k = extract_block_context(key, w, l, r)
    v = extract_block_context(value, w, l, r)
    mask = _blocked_mask(atten_mask, w, l, r, t)
    logits = _attention_math.cap_logits(self._local_logits(q, k),
                                        self.atten_logit_cap)
    logits = py_utils.apply_mask_to_logits(logits.astype(jnp.float32), mask)
    probs = _attention_math.softmax_with_extra_logit(
        logits, self.attention_extra_logit).astype(key.dtype)
    if dropout:
      probs = self.atten_dropout(probs)
    encoded = jnp.einsum('bnuwc,bucnh->buwnh', probs, v)
    if self.zero_fully_masked:
      cutoff = py_utils.get_large_negative_number(jnp.float32) / 2
      seen = jnp.any(mask > cutoff, axis=-1)[:, 0, :, :, None, None]
      encoded = encoded * seen.astype(encoded.dtype)
    b, u, _, n, h = encoded.shape
    return encoded.reshape(b, u * w, n, h)[:, :t], probs

  def extend_step(self, query_vec: JTensor, *, atten_mask: JTensor,
                  time_step: JTensor, segment_pos: JTensor | None,
                  is_cross_attention: bool = False) -> JTensor:
    """One decoding step, seeing the cached keys within the window."""
    s = atten_mask.shape[-1]
    pos = jnp.arange(s)
    step = jnp.asarray(time_step)
    band = (pos > step - self.left_context) & (pos <= step + self.right_context)
    neg = py_utils.get_large_negative_number(atten_mask.dtype)
    atten_mask = jnp.where(band, atten_mask, neg)
    return super().extend_step(query_vec, atten_mask=atten_mask,
                               time_step=time_step, segment_pos=segment_pos,
                               is_cross_attention=is_cross_attention)


class LocalSelfAttentionRelativeBias(LocalSelfAttention):
  """Local attention with a learned bias per head and relative distance
  (DIET-REL, https://arxiv.org/abs/2104.08698).

  Variable `pos_emb_compressed` [N, P], P = C + W - 1. Query w and context
  slot c read entry (c - w + W - 2) mod P: Pax's layout, kept so that its
  checkpoints give the same logits.
  """

  def setup(self) -> None:
    super().setup()
    if self.block_size is None:
      raise ValueError(f'{type(self).__name__} {self.name!r}: block_size must '
                       'be set.')
    w = self.block_size
    c = w + self.left_context + self.right_context - 1
    self.create_variable('pos_emb_compressed',
                         WeightHParams(shape=[self.num_heads, c + w - 1]))

  def _local_logits(self, query: JTensor, key: JTensor) -> JTensor:
    w, c = query.shape[2], key.shape[2]
    table = self.theta.pos_emb_compressed  # [N, C + W - 1]
    self.add_summary('pos_emb_compressed', jnp.sum(table))
    period = c + w - 1
    idx = (np.arange(c)[None, :] - np.arange(w)[:, None] + w - 2) % period
    bias = table[:, idx]  # [N, W, C]
    return super()._local_logits(query, key) + bias[None, :, None]


def alibi_slopes(num_heads: int) -> np.ndarray:
  """ALiBi's per-head slopes (https://arxiv.org/abs/2108.12409)."""
  n = 2 ** math.floor(math.log2(num_heads))
  slopes = (2.0 ** (-8.0 / n)) ** np.arange(1, n + 1)
  if n < num_heads:
    extra = (2.0 ** (-4.0 / n)) ** np.arange(1, 1 + 2 * (num_heads - n), 2)
    slopes = np.concatenate([slopes, extra])
  return slopes.astype(np.float32)


class LocalSelfAttentionAlibi(LocalSelfAttention):
  """Local attention with ALiBi's linear position bias.

  Head n adds slope_n * (c - w + W - 1) to the logit of query w and context
  slot c: up to a per-query constant (which the softmax ignores), slope_n
  times the key's position minus the query's, so with R = 0 it is ALiBi's
  -slope_n * distance.
  """

  def _local_logits(self, query: JTensor, key: JTensor) -> JTensor:
    w, c = query.shape[2], key.shape[2]
    n = query.shape[3]
    offset = np.arange(c)[None, :] - np.arange(w)[:, None] + (w - 1)
    bias = alibi_slopes(n)[:, None, None] * offset[None]
    return super()._local_logits(query, key) + jnp.asarray(
        bias, jnp.float32)[None, :, None]
