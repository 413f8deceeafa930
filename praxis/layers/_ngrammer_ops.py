"""The math of the N-grammer layers (private sibling of `ngrammer`).

Functions: get_bigram_ids, hash_primes, hash_ids, vq_distances,
updated_means, causal_pair_ids, step_pair_ids, time_step_nonzero; and the
layer helpers shared by `ngrammer` and `_bregman_ngrammer`: check_emb_dims,
require_positive, layer_norms, per_head_layer_norm, merge_ngram_embs,
finish_embs.

Shape letters: B batch, L length, N heads, H depth per head, K clusters.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
from jax import numpy as jnp
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import normalizations

JTensor = pytypes.JTensor


def get_bigram_ids(
    ids: JTensor,
    vocab_size: int,
    segment_pos: JTensor | None = None,
    pair_ids: JTensor | None = None,
) -> JTensor:
  """Bi-gram ids `ids[t] + ids[pair(t)] * vocab_size`, [B, L].

  By default position t pairs with t - 1 (position 0 with a pad, id 0).

  Args:
    ids: Uni-gram ids [B, L].
    vocab_size: Size of the uni-gram vocabulary (> 0).
    segment_pos: Optional [B, L] positions in packed segments; a position 0
      pairs with the pad instead of the previous segment's last id.
    pair_ids: Optional [B, L] indices into `ids` with a pad appended (index L
      is the pad) naming each position's partner.

  Returns:
    The bi-gram ids [B, L], int64 where x64 is enabled (else int32).
  """
  if vocab_size <= 0:
    raise ValueError(f'get_bigram_ids: vocab_size must be > 0, got '
                     f'{vocab_size}.')
  # int64 against overflow of the bucket ids; int32 unless x64 is enabled.
  ids = jnp.asarray(ids, dtype=jax.dtypes.canonicalize_dtype(jnp.int64))
  pad = jnp.zeros([ids.shape[0], 1], dtype=ids.dtype)
  with_pad = jnp.concatenate([ids, pad], axis=1)  # [B, L + 1]
  if pair_ids is not None:
    if pair_ids.shape != ids.shape:
      raise ValueError(
          f'get_bigram_ids: pair_ids shape {pair_ids.shape} must equal the '
          f'ids shape {ids.shape}.')
    partners = jnp.take_along_axis(with_pad, pair_ids, axis=1)
    partners = jnp.concatenate([partners, pad], axis=1)
  else:
    partners = jnp.concatenate([pad, ids], axis=1)
  if segment_pos is not None:
    starts = jnp.asarray(jnp.equal(segment_pos, 0), dtype=ids.dtype)
    partners = partners * jnp.concatenate([1 - starts, pad], axis=1)
  bigrams = with_pad + partners * vocab_size
  return bigrams[:, :-1]


@functools.lru_cache(maxsize=64)
def _primes_between(low: int, high: int, count: int) -> tuple[int, ...]:
  """The first `count` primes p with low <= p < high (maybe fewer)."""
  found = []
  n = max(low, 2)
  while n < high and len(found) < count:
    if all(n % d for d in range(2, int(n ** 0.5) + 1)):
      found.append(n)
    n += 1
  return tuple(found)


def hash_primes(ngram_vocab_size: int, num_heads: int) -> tuple[int, ...]:
  """The hash moduli of the heads: the first primes in (V, 2V)."""
  primes = _primes_between(ngram_vocab_size + 1, 2 * ngram_vocab_size,
                           num_heads)
  if len(primes) < num_heads:
    raise ValueError(
        f'Ngrammer: ngram_vocab_size={ngram_vocab_size} is too small: there '
        f'are only {len(primes)} primes in ({ngram_vocab_size}, '
        f'{2 * ngram_vocab_size}) for num_heads={num_heads} hash functions.')
  return primes


def hash_ids(ids: JTensor, a: int, b: int, prime: int,
             buckets: int) -> JTensor:
  """The universal hash `((ids * a + b) % prime) % buckets`."""
  return ((ids * a + b) % prime) % buckets


def vq_distances(inputs: JTensor, means: JTensor) -> JTensor:
  """Squared distances [B, L, N, K] of inputs [B, L, N, H] to means [N, K, H].

  Computed as -2 x.m + (|x|^2 + |m|^2).
  """
  dists = -2 * jnp.einsum('BLNH,NKH->BLNK', inputs, means)
  inputs_sq = jnp.sum(jnp.square(inputs), axis=-1, keepdims=True)
  means_sq = jnp.sum(jnp.square(means), axis=-1)[jnp.newaxis, jnp.newaxis]
  return dists + (inputs_sq + means_sq)


def updated_means(inputs: JTensor, one_hot: JTensor, means: JTensor,
                  decay: float, epsilon: float) -> JTensor:
  """One online k-means step of the centroids, [N, K, H].

  `decay * means + (1 - decay) * cluster_mean`, where cluster_mean is the
  mean of the inputs assigned to a cluster (zero for an empty cluster).

  Args:
    inputs: [B, L, N, H].
    one_hot: [B, L, N, K] assignments (zero rows for padded positions).
    means: [N, K, H].
    decay: Decay of the moving average.
    epsilon: Added to the cluster counts.
  """
  counts = jnp.sum(one_hot, axis=(0, 1))  # [N, K]
  sums = jnp.einsum('BLNK,BLNH->NKH', one_hot, inputs)
  cluster_means = sums / (epsilon + counts[..., jnp.newaxis])
  new_means = (1.0 - decay) * cluster_means + decay * means
  return jnp.asarray(new_means, means.dtype)


def causal_pair_ids(attention_scores: JTensor) -> JTensor:
  """[B, N, L]: for each query t, the earlier key it attends to most.

  Position 0 has no earlier key and pairs with the pad (index L).

  Args:
    attention_scores: [B, N, L, L] (queries, keys).
  """
  length = attention_scores.shape[2]
  earlier = jnp.tril(jnp.ones([length, length], dtype=bool), k=-1)
  masked = jnp.where(earlier, attention_scores, -jnp.inf)
  pair_ids = jnp.argmax(masked, axis=-1).astype(jnp.int32)
  return pair_ids.at[:, :, 0].set(length)


def step_pair_ids(attention_score: JTensor, step: int | JTensor) -> JTensor:
  """[B, N, L] partners at one decoding step, tiled over the positions.

  Args:
    attention_score: [B, N, L], the step's scores over the keys.
    step: The position; step 0 pairs with the pad (index L).
  """
  length = attention_score.shape[2]
  if isinstance(step, int) and step == 0:
    return length * jnp.ones_like(attention_score, dtype=jnp.int32)
  earlier = jnp.arange(length) < step
  masked = jnp.where(earlier, attention_score, -jnp.inf)
  best = jnp.argmax(masked, axis=-1, keepdims=True).astype(jnp.int32)
  best = jnp.where(step > 0, best, length)
  return jnp.tile(best, [1, 1, length])


def time_step_nonzero(input_ids: JTensor | None,
                      input_embs: JTensor) -> JTensor:
  """1 where the ids or the embeddings are nonzero, else 0.

  Broadcastable to the cluster ids [B, L, N]: [B, L, 1] (or [B, L, N] from
  [B, L, N, H] embeddings).
  """
  if input_ids is None:
    ids_nonzero = jnp.zeros(input_embs.shape[:2] + (1,), jnp.int32)
  else:
    ids_nonzero = jnp.not_equal(input_ids, 0).astype(jnp.int32)
    if input_ids.ndim == 3:
      ids_nonzero = jnp.max(ids_nonzero, axis=-1)
    ids_nonzero = ids_nonzero[:, :, jnp.newaxis]
  embs_nonzero = jnp.max(
      jnp.not_equal(input_embs, 0).astype(jnp.int32), axis=-1)
  if input_embs.ndim == 3:
    embs_nonzero = embs_nonzero[:, :, jnp.newaxis]
  return jnp.maximum(ids_nonzero, embs_nonzero)


# ---------------------------------------------------------------------------
# Layer helpers.
# ---------------------------------------------------------------------------


def _where(layer: Any) -> str:
  return f'{type(layer).__name__} ({layer.name})'


def check_emb_dims(layer: Any) -> None:
  """The ngram embedding must fit (concat) or match (add) a head's depth."""
  if layer.concat_ngrams and layer.ngram_emb_dim > layer.dim_per_head:
    raise ValueError(
        f'{_where(layer)}: ngram_emb_dim={layer.ngram_emb_dim} must be at '
        f'most dim_per_head={layer.dim_per_head} when concat_ngrams is set.')
  if not layer.concat_ngrams and layer.ngram_emb_dim != layer.dim_per_head:
    raise ValueError(
        f'{_where(layer)}: ngram_emb_dim={layer.ngram_emb_dim} must equal '
        f'dim_per_head={layer.dim_per_head} when concat_ngrams is False.')


def require_positive(layer: Any, *names: str) -> None:
  """Raises ValueError naming the first field in `names` that is not > 0."""
  for name in names:
    if getattr(layer, name) <= 0:
      raise ValueError(
          f'{_where(layer)}: {name} must be positive, got '
          f'{getattr(layer, name)}.')


def layer_norms(dim: int, count: int) -> list[pax_fiddle.Config]:
  """`count` LayerNorm templates of depth `dim`."""
  return [
      pax_fiddle.Config(normalizations.LayerNorm, dim=dim)
      for _ in range(count)
  ]


def per_head_layer_norm(norms: Sequence[Any], embs: JTensor) -> JTensor:
  """Applies norms[i] to head i of embs [B, L, N, H]."""
  heads = jnp.split(embs, len(norms), axis=2)
  return jnp.concatenate([norm(x) for norm, x in zip(norms, heads)], axis=2)


def merge_ngram_embs(input_embs: JTensor, ngram_embs: JTensor,
                     concat: bool) -> JTensor:
  """[B, L, N, H] embeddings with the ngram embeddings concatenated or added.

  Concatenation keeps the first H - ngram_emb_dim features of each head.
  """
  if not concat:
    return input_embs + ngram_embs
  keep = input_embs.shape[-1] - ngram_embs.shape[-1]
  return jnp.concatenate([input_embs[..., :keep], ngram_embs], axis=-1)


def finish_embs(embs: JTensor, paddings: JTensor | None,
                merge_heads: bool) -> JTensor:
  """Zeroes padded positions of [B, L, N, H]; maybe merges to [B, L, D]."""
  if paddings is not None:
    embs = embs * (1 - paddings[:, :, jnp.newaxis, jnp.newaxis])
  if merge_heads:
    embs = jnp.reshape(embs, embs.shape[:2] + (-1,))
  return embs

