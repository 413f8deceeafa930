"""SpecAugment (arXiv:1904.08779): random time and frequency masks.

Public: `SpectrumAugmenter`, `block_masks` (the mask maker, a function of
uniform draws). Inputs are [B, T, F] features and [B, T] paddings; masked
entries become 0, the paddings are returned unchanged. The draws follow Pax's
order (time lengths, time starts, then frequency lengths, frequency starts),
so a given `random` key masks the same entries as in Pax (with
jax_threefry_partitionable off, as in Pax's JAX).

  aug = base_layer.instantiate(pax_fiddle.Config(
      SpectrumAugmenter, name='specaug', freq_mask_max_bins=4))
  features, paddings = aug.apply({}, features, paddings,
                                 rngs={'random': key})
"""

from __future__ import annotations

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor


def block_masks(length_draws: JTensor, start_draws: JTensor,
                choose_range: JTensor, mask_size: int,
                max_length: JTensor, max_ratio: float,
                masks_per_frame: float = 0.0) -> JTensor:
  """[B, mask_size] 0/1 keep-mask: 0 inside any of M random blocks per row.

  Args:
    length_draws: [B, M] uniforms in [0, 1): block length = draw * max_length,
      at most max(max_ratio * choose_range, 1).
    start_draws: [B, M] uniforms: start = draw * (choose_range - length + 1).
    choose_range: [B] the range the blocks lie in (e.g. unpadded length).
    mask_size: Width of the mask.
    max_length: [B] longest block.
    max_ratio: Largest fraction of `choose_range` one block may cover.
    masks_per_frame: If > 0, only the first masks_per_frame * choose_range
      blocks of a row count.
  """
  multiplicity = length_draws.shape[1]
  length = jnp.einsum('b,bm->bm', max_length, length_draws).astype(jnp.int32)
  choose_range = jnp.broadcast_to(choose_range[:, None], length.shape)
  bound = (max_ratio * choose_range).astype(jnp.int32)
  length = jnp.minimum(length, jnp.maximum(bound, 1))
  start = (start_draws * (choose_range - length + 1)).astype(jnp.int32)
  end = start + length - 1
  pos = jnp.arange(mask_size)[None, None, :]
  # Half-open by 0.1 on both sides, as Pax compares.
  inside = (pos > (start - 0.1)[..., None]) & (pos < (end + 0.1)[..., None])
  inside = inside.astype(jnp.int32)
  if masks_per_frame > 0:
    counted = (jnp.arange(multiplicity, dtype=jnp.int32)[None, :]
               < masks_per_frame * choose_range).astype(jnp.int32)
    hits = jnp.einsum('bmt,bm->bt', inside, counted)
  else:
    hits = jnp.sum(inside, axis=1)
  return 1.0 - (hits > 0).astype(jnp.int32)


class SpectrumAugmenter(base_layer.BaseLayer):
  """Masks random time spans and frequency bands in training.

  Attributes:
    freq_mask_max_bins: Longest frequency mask (0: no frequency masking).
    freq_mask_count: How many frequency masks.
    use_dynamic_time_mask_max_frames: Longest time mask is
      time_mask_max_ratio * utterance length (ignores time_mask_max_frames).
    time_mask_max_frames: Longest time mask otherwise.
    time_mask_count: How many time masks (an upper bound when
      time_masks_per_frame > 0).
    time_mask_max_ratio: Largest fraction of the utterance one mask covers
      (<= 0: no time masking).
    time_masks_per_frame: If > 0, min(time_masks_per_frame * length,
      time_mask_count) time masks.
    augment_at_eval: Mask in eval too.
  """

  freq_mask_max_bins: int = 27
  freq_mask_count: int = 2
  use_dynamic_time_mask_max_frames: bool = True
  time_mask_max_frames: int = 40
  time_mask_count: int = 10
  time_mask_max_ratio: float = 0.05
  time_masks_per_frame: float = 0.0
  augment_at_eval: bool = False

  def _get_mask(self, batch_size: int, choose_range: JTensor, mask_size: int,
                max_length: int | None = None, masks_per_frame: float = 0.0,
                multiplicity: int = 1, max_ratio: float = 1.0) -> JTensor:
    """[B, mask_size] keep-mask of `multiplicity` random blocks per row."""
    if max_length and max_length > 0:
      max_length = jnp.full((batch_size,), max_length)
    else:
      max_length = choose_range * max_ratio
    shape = (batch_size, multiplicity)
    length_draws = jax.random.uniform(self.next_prng_key(), shape)
    start_draws = jax.random.uniform(self.next_prng_key(), shape)
    return block_masks(length_draws, start_draws, choose_range, mask_size,
                       max_length, max_ratio, masks_per_frame)

  def _time_mask(self, inputs: JTensor, length: JTensor) -> JTensor:
    """Masks time spans of `inputs` [B, T, F]; `length` [B] frames each."""
    max_frames = self.time_mask_max_frames
    dynamic = self.use_dynamic_time_mask_max_frames
    if ((max_frames == 0 and not dynamic) or self.time_mask_max_ratio <= 0.0
        or self.time_mask_count == 0):
      return inputs
    batch_size, time_length, _ = inputs.shape
    mask = self._get_mask(
        batch_size, choose_range=length, mask_size=time_length,
        max_length=None if dynamic else max_frames,
        masks_per_frame=self.time_masks_per_frame,
        multiplicity=self.time_mask_count,
        max_ratio=self.time_mask_max_ratio)
    return jnp.einsum('bxy,bx->bxy', inputs, mask)

  def _frequency_mask(self, inputs: JTensor) -> JTensor:
    """Masks frequency bands of `inputs` [B, T, F]."""
    if self.freq_mask_max_bins == 0 or self.freq_mask_count == 0:
      return inputs
    batch_size, _, num_freq = inputs.shape
    mask = self._get_mask(
        batch_size, choose_range=jnp.full((batch_size,), num_freq),
        mask_size=num_freq, max_length=self.freq_mask_max_bins,
        multiplicity=self.freq_mask_count, max_ratio=1.0)
    return jnp.einsum('bxy,by->bxy', inputs, mask)

  def __call__(self, inputs: JTensor,
               paddings: JTensor) -> tuple[JTensor, JTensor]:
    """`inputs` [B, T, F], `paddings` [B, T] -> (masked inputs, paddings)."""
    if inputs.ndim != 3 or paddings.shape != inputs.shape[:2]:
      raise ValueError(f'{type(self).__name__}: inputs must be [B, T, F] and '
                       f'paddings [B, T], got {inputs.shape} and '
                       f'{paddings.shape}.')
    if not self.do_eval or self.augment_at_eval:
      lengths = jnp.einsum('bh->b', 1 - paddings).astype(jnp.int32)
      inputs = self._time_mask(inputs, lengths)
      inputs = self._frequency_mask(inputs)
    return inputs, paddings
