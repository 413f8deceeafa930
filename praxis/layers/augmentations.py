"""Data augmentation layers: BERT-style token masking, random time shifts.

Public: `MaskedLmDataAugmenter`, `TemporalShifting`. Both draw from the
`random` stream in Pax's order, so a given key gives Pax's result (with
jax_threefry_partitionable off, as in Pax's JAX).

  aug = base_layer.instantiate(pax_fiddle.Config(
      MaskedLmDataAugmenter, name='mlm', vocab_size=100, mask_token_id=0))
  new_ids, replaced = aug.apply({}, ids, paddings, rngs={'random': key})
"""

from __future__ import annotations

import jax
from jax import lax
from jax import numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor


class MaskedLmDataAugmenter(base_layer.BaseLayer):
  """Replaces random tokens by <MASK>, a random token or themselves (BERT,
  arXiv:1810.04805).

  Attributes:
    vocab_size: Vocabulary size (random tokens are drawn from [0, vocab_size)).
    mask_prob: Probability a token becomes `mask_token_id`.
    random_prob: Probability a token becomes a random token.
    same_prob: Probability a token is picked but kept.
    mask_token_id: The <MASK> id.
  """

  vocab_size: int = 0
  mask_prob: float = 0.12
  random_prob: float = 0.015
  same_prob: float = 0.015
  mask_token_id: int = -1

  def _check_config(self) -> None:
    name = type(self).__name__
    total = self.mask_prob + self.random_prob + self.same_prob
    if self.vocab_size <= 0:
      raise ValueError(f'{name}.vocab_size must be > 0, got '
                       f'{self.vocab_size}.')
    if self.mask_token_id < 0:
      raise ValueError(f'{name}.mask_token_id must be >= 0, got '
                       f'{self.mask_token_id}.')
    if not 0.0 < total < 1.0:
      raise ValueError(f'{name}: mask_prob + random_prob + same_prob must be '
                       f'in (0, 1), got {total}.')
    if self.mask_prob >= total:
      raise ValueError(f'{name}: random_prob + same_prob must be > 0.')

  def __call__(self, inputs: JTensor,
               paddings: JTensor) -> tuple[JTensor, JTensor]:
    """`inputs` [B, L] int ids, `paddings` [B, L] 0/1.

    Returns:
      `(new ids [B, L], replaced [B, L])`, replaced 1.0 where a token was
      picked (masked, randomized or kept).
    """
    self._check_config()
    dtype = self.fprop_dtype

    def draw(prob: float) -> JTensor:
      u = jax.random.uniform(self.next_prng_key(), inputs.shape)
      return (u < prob).astype(dtype)

    total = self.mask_prob + self.random_prob + self.same_prob
    picked = (1.0 - paddings.astype(dtype)) * draw(total)
    # Of the picked: mask with mask_prob / total, then of the rest randomize
    # with random_prob / (total - mask_prob); the remainder keeps itself.
    mask_pos = picked * draw(self.mask_prob / total)
    rest = picked - mask_pos
    random_pos = rest * draw(self.random_prob / (total - self.mask_prob))
    self_pos = rest - random_pos
    random_tokens = jax.random.randint(self.next_prng_key(), inputs.shape, 0,
                                       self.vocab_size, inputs.dtype)
    mask_tokens = jnp.zeros_like(inputs) + self.mask_token_id
    as_ids = lambda x: x.astype(inputs.dtype)
    augmented = (inputs * as_ids(1.0 - picked)
                 + mask_tokens * as_ids(mask_pos)
                 + random_tokens * as_ids(random_pos)
                 + inputs * as_ids(self_pos))
    return augmented, picked


def shift_along_axis(x: JTensor, axis: int, shift_range: int, shift: JTensor,
                     pad_value: float = 0.0) -> JTensor:
  """`x` moved by `shift` (|shift| <= shift_range) along `axis`, the vacated
  entries set to `pad_value`: shift 1 turns [1 2 3] into [0 1 2]."""
  pad = [(0, 0)] * x.ndim
  pad[axis] = (shift_range, shift_range)
  padded = jnp.pad(x, pad, constant_values=pad_value)
  return lax.dynamic_slice_in_dim(padded, shift_range - shift, x.shape[axis],
                                  axis=axis)


class TemporalShifting(base_layer.BaseLayer):
  """Shifts each example by a random amount of time in training.

  Attributes:
    shift_range_ms: Largest shift either way, in milliseconds; smaller than
      the signal.
    sample_rate: Samples per second of the time axis.
    axis: The time axis (> 0; axis 0 is the batch).
  """

  shift_range_ms: float = 0.0
  sample_rate: float = 16000.0
  axis: int = 1

  def setup(self) -> None:
    name = type(self).__name__
    if self.shift_range_ms < 0.0:
      raise ValueError(f'{name}.shift_range_ms must be >= 0, got '
                       f'{self.shift_range_ms}.')
    if self.axis <= 0:
      raise ValueError(f'{name}.axis must be > 0 (0 is the batch), got '
                       f'{self.axis}.')

  def __call__(self, features: JTensor, paddings: JTensor | None = None
               ) -> tuple[JTensor, JTensor | None]:
    """Shifted `(features, paddings)`; shifted-in frames are padding (1)."""
    if self.do_eval or self.shift_range_ms == 0.0:
      return features, paddings
    shift_range = int(round(self.sample_rate * self.shift_range_ms / 1000.0))
    length = features.shape[self.axis]
    if shift_range >= length:
      raise ValueError(
          f'{type(self).__name__}.shift_range_ms={self.shift_range_ms} blanks '
          f'out the whole {length / self.sample_rate * 1000.0}ms signal.')
    # Draws in [-range, range]; Pax slices at range + draw, i.e. shifts by
    # -draw.
    draws = jax.random.randint(self.next_prng_key(), [features.shape[0]],
                               -shift_range, shift_range + 1)
    axis = self.axis - 1

    def one(f, p, draw):
      f = shift_along_axis(f, axis, shift_range, -draw)
      if p is not None:
        p = shift_along_axis(p, axis, shift_range, -draw, pad_value=1.0)
      return f, p

    return jax.vmap(one)(features, paddings, draws)
