"""Codebook statistics for vector quantizers (VQ-VAE and the like).

Public names: scatter_nd, batch_pplx_entropy_from_codes,
batch_codebook_coverage.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from praxis import pytypes

JTensor = pytypes.JTensor


def scatter_nd(indices: JTensor, updates: JTensor,
               shape: tuple[int, ...] | list[int]) -> JTensor:
  """Zeros of `shape` with `updates` added at `indices` [..., len(shape)]."""
  zeros = jnp.zeros(shape, updates.dtype)
  return zeros.at[tuple(jnp.moveaxis(indices, -1, 0))].add(updates)


def _histogram(codes: JTensor, num_classes: int, paddings: JTensor | None
               ) -> tuple[JTensor, JTensor]:
  """([groups, classes] counts of unpadded codes, unpadded rows)."""
  if codes.ndim < 2:
    raise ValueError(f'codes must be [..., num_groups], got {codes.shape}.')
  groups = codes.shape[-1]
  codes = jnp.reshape(codes.astype(jnp.int32), (-1, groups))
  if paddings is None:
    keep = jnp.ones((codes.shape[0],), jnp.float32)
  else:
    keep = 1.0 - jnp.reshape(paddings, (-1,)).astype(jnp.float32)
  one_hot = jax.nn.one_hot(codes, num_classes, dtype=jnp.float32)
  return jnp.einsum('n,ngc->gc', keep, one_hot), jnp.sum(keep)


def batch_pplx_entropy_from_codes(
    codes: JTensor, num_classes: int, *, paddings: JTensor | None = None,
    data_parallel_axis: str | None = None,
) -> tuple[JTensor, JTensor, JTensor]:
  """Perplexity and entropy of the codes' distribution within the batch.

  Args:
    codes: [..., num_groups] ints in [0, num_classes).
    num_classes: The codebook size.
    paddings: [...] 0/1; padded rows are not counted.
    data_parallel_axis: If set, counts are summed over this mapped axis.

  Returns:
    (pplx, entropy, histogram): the mean over groups of exp(entropy) of each
    group's code distribution, its log, and the [num_groups, num_classes]
    counts.
  """
  histogram, rows = _histogram(codes, num_classes, paddings)
  if data_parallel_axis is not None:
    histogram = jax.lax.psum(histogram, data_parallel_axis)
    rows = jax.lax.psum(rows, data_parallel_axis)
  probs = histogram / jnp.maximum(rows, 1.0)
  plogp = probs * jnp.log(jnp.maximum(probs, 1e-30))
  pplx = jnp.mean(jnp.exp(-jnp.sum(plogp, axis=-1)))
  return pplx, jnp.log(pplx), histogram


def batch_codebook_coverage(codes: JTensor, num_classes: int, *,
                            paddings: JTensor,
                            data_parallel_axis: str | None = None) -> JTensor:
  """Fraction of the codebook used in the batch, averaged over groups."""
  _, _, histogram = batch_pplx_entropy_from_codes(
      codes, num_classes, paddings=paddings,
      data_parallel_axis=data_parallel_axis)
  return jnp.mean(jnp.sum(histogram > 0, axis=-1)) / num_classes
