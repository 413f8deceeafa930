"""The one layer the Hugging Face mappings add: rotary attention as HF has it.

Public: `rope_inverse_frequencies`, `apply_rope`, `HfRopeAttention`.

`HfRopeAttention` is `grouped_query_attention.GroupedQueryAttention` whose
rotary embedding uses the inverse frequencies that `transformers` computes
(`rope_theta`, and the 'linear' and 'llama3' `rope_scaling` types), so that
an imported model's logits match the PyTorch model's. With
`rope_theta=None` it applies no rotary embedding (GPT-2). With
`sliding_window=W` query i sees keys j with i - W < j <= i (Mistral's
window, as `transformers` masks it), in training and in decoding.
"""

from __future__ import annotations

import math
from typing import Any

from jax import numpy as jnp
import numpy as np

from praxis import pytypes
from praxis.layers import grouped_query_attention

JTensor = pytypes.JTensor

SUPPORTED_ROPE_TYPES = ('default', 'linear', 'llama3')


def rope_inverse_frequencies(
    head_dim: int, theta: float,
    scaling: tuple[tuple[str, Any], ...] | dict[str, Any] | None = None,
) -> np.ndarray:
  """float32 [head_dim / 2]: HF's `inv_freq` for this theta and scaling.

  Args:
    head_dim: Features per head (even).
    theta: `rope_theta`, the base of the wavelengths.
    scaling: HF's `rope_scaling` dict (or its sorted items): type 'linear'
      (`factor`) or 'llama3' (`factor`, `low_freq_factor`,
      `high_freq_factor`, `original_max_position_embeddings`); None or type
      'default' for none.

  Returns:
    The inverse frequencies, as `transformers` computes them in float32.

  Raises:
    ValueError: An unsupported scaling type.
  """
  exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32)
  inv_freq = (1.0 / (np.float32(theta) ** (exponents / np.float32(head_dim))))
  inv_freq = inv_freq.astype(np.float32)
  scaling = dict(scaling or {})
  kind = scaling.get('rope_type', scaling.get('type', 'default'))
  if kind == 'default':
    return inv_freq
  if kind == 'linear':
    return (inv_freq / np.float32(scaling['factor'])).astype(np.float32)
  if kind == 'llama3':
    return _llama3_frequencies(inv_freq, scaling)
  raise ValueError(
      f'rope_scaling type {kind!r} is not supported (supported: '
      f'{SUPPORTED_ROPE_TYPES}).')


def _llama3_frequencies(inv_freq: np.ndarray,
                        scaling: dict[str, Any]) -> np.ndarray:
  """Llama 3.1's scaling: long wavelengths slowed by `factor`, smoothly."""
  factor = scaling['factor']
  low, high = scaling['low_freq_factor'], scaling['high_freq_factor']
  old_len = scaling['original_max_position_embeddings']
  low_wavelen, high_wavelen = old_len / low, old_len / high
  wavelen = 2 * math.pi / inv_freq
  scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
  smooth = (old_len / wavelen - low) / (high - low)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x: JTensor, position: JTensor | None,
               inv_freq: np.ndarray) -> JTensor:
  """Rotates the halves of `x` [B, T, N, H] by position * inv_freq."""
  if position is None:
    position = jnp.arange(x.shape[1])[None, :]
  angle = (position.astype(jnp.float32)[:, :, None, None]
           * jnp.asarray(inv_freq))
  sin, cos = jnp.sin(angle), jnp.cos(angle)
  first, second = jnp.split(x, 2, axis=-1)
  out = jnp.concatenate(
      [first * cos - second * sin, second * cos + first * sin], axis=-1)
  return out.astype(x.dtype)


class HfRopeAttention(grouped_query_attention.GroupedQueryAttention):
  """Grouped-query attention with HF's rotary embedding (see module doc).

  Attributes:
    rope_theta: The base of the rotary wavelengths; None: no rotary
      embedding.
    rope_scaling: HF's `rope_scaling` as sorted (key, value) pairs, or None.
    sliding_window: W: query i also masks keys j <= i - W (None: no window).
  """

  rope_theta: float | None = None
  rope_scaling: tuple[tuple[str, Any], ...] | None = None
  sliding_window: int | None = None

  def setup(self) -> None:
    if self.rope_theta is not None and self.rope_min_max_timescales:
      raise ValueError(f'HfRopeAttention ({self.name}): set rope_theta or '
                       'rope_min_max_timescales, not both.')
    if self.sliding_window is not None and self.sliding_window < 1:
      raise ValueError(f'HfRopeAttention ({self.name}): sliding_window must '
                       f'be a positive int or None, got {self.sliding_window}.')
    super().setup()
    self._inv_freq = None
    if self.rope_theta is not None:
      self._inv_freq = rope_inverse_frequencies(
          self.dim_per_head, self.rope_theta, self.rope_scaling)

  def _qkv(self, q_in, kv_in, q_pos, k_pos):
    q, k, v = super()._qkv(q_in, kv_in, q_pos, k_pos)
    if self._inv_freq is not None:
      q = apply_rope(q, q_pos, self._inv_freq)
      k = apply_rope(k, k_pos, self._inv_freq)
    return q, k, v

  def _window_mask(self, atten_mask: JTensor, query_index: JTensor,
                   num_keys: int) -> JTensor:
    """`atten_mask` also True where key j <= query i - sliding_window.

    Args:
      atten_mask: [1|B, 1|N, 1|T, S], True / nonzero where masked.
      query_index: [1|T] int, each query's index along the keys' time axis.
      num_keys: S.
    """
    keys = jnp.arange(num_keys)[None, :]
    outside = keys <= query_index[:, None] - self.sliding_window
    return jnp.logical_or(atten_mask.astype(bool), outside[None, None])

  def __call__(self, query_vec, key_vec, value_vec, atten_mask,
               query_segment_pos=None, key_segment_pos=None):
    if self.sliding_window is not None:
      t, s = query_vec.shape[1], key_vec.shape[1]
      # Self-attention: query i sits at key index i (of the last T keys).
      atten_mask = self._window_mask(atten_mask, jnp.arange(t) + (s - t), s)
    return super().__call__(query_vec, key_vec, value_vec, atten_mask,
                            query_segment_pos, key_segment_pos)

  def extend_step(self, query_vec, *, atten_mask, time_step, segment_pos,
                  is_cross_attention=False):
    if self.sliding_window is not None and not is_cross_attention:
      step = jnp.asarray(time_step, jnp.int32).reshape([1])
      s = self.decoding_state_sequence_length()
      window = self._window_mask(atten_mask[:, :, None, :], step, s)
      atten_mask = window[:, :, 0, :]
    return super().extend_step(
        query_vec, atten_mask=atten_mask, time_step=time_step,
        segment_pos=segment_pos, is_cross_attention=is_cross_attention)
