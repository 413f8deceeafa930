"""N-grammer layers (https://arxiv.org/abs/2207.06366).

Public names:
  get_bigram_ids: bi-gram ids from uni-gram ids;
  VectorQuantization: multi-head online k-means (non-trainable `means`);
  Ngrammer: augments embeddings with hashed bi-gram embeddings per head;
  VQNgrammer: an Ngrammer over the VQ cluster ids of the embeddings;
  BregmanCompression, BregmanNgrammer: the Bregman-PCA variants (from the
    private sibling `_bregman_ngrammer`);
  NgrammerStub: only the per-head layer norm an Ngrammer performs.

Shape letters: B batch, L length, N heads, H depth per head, D = N * H,
K clusters.

  ngrammer = base_layer.instantiate(pax_fiddle.Config(
      Ngrammer, name='ngrammer', unigram_vocab_size=32,
      ngram_vocab_size=64, ngram_emb_dim=4, num_heads=2, dim_per_head=8))
  variables = ngrammer.init(key, ids, embs)   # ids [B, L], embs [B, L, 16]
  out = ngrammer.apply(variables, ids, embs)  # [B, L, 16]

The math lives in module-level functions of the private sibling
`_ngrammer_ops` (hashing, VQ distances and updates, pairing by attention)
that the layers call.
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _bregman_ngrammer
from praxis.layers import _ngrammer_ops as ops
from praxis.layers import embedding_softmax

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor

get_bigram_ids = ops.get_bigram_ids


class VectorQuantization(base_layer.BaseLayer):
  """Multi-head vector quantization: online k-means of the inputs.

  Each head has its own K centroids (the non-trainable `means` [N, K, H]).
  A call returns the squared distances of each input to each centroid and
  the nearest centroids; in training it also moves each centroid towards the
  mean of its assigned inputs, `means <- decay * means + (1 - decay) * mean`.

  Attributes:
    num_clusters: K, the number of centroids per head.
    num_heads: N.
    decay: Decay of the centroids' moving average.
    epsilon: Guards the per-cluster mean against empty clusters.
    dim_per_head: H.
    prenormalize: L2-normalize the inputs first.
  """

  num_clusters: int = 0
  num_heads: int = 0
  decay: float = 0.999
  epsilon: float = 1e-6
  dim_per_head: int = 0
  prenormalize: bool = False

  def setup(self) -> None:
    ops.require_positive(self, 'num_clusters', 'dim_per_head')
    self.create_variable(
        'means',
        WeightHParams(
            shape=[self.num_heads, self.num_clusters, self.dim_per_head],
            collections=[
                base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC],
            init=self.params_init,
        ),
        trainable=False,
    )

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor | None = None,
      summarize_and_update: bool = True,
  ) -> tuple[JTensor, JTensor]:
    """(distances [B, L, N, K], nearest centroids [B, L, N, H]).

    Args:
      inputs: [B, L, N, H] or [B, L, D].
      paddings: Optional [B, L]; padded positions do not move the centroids
        (and their nearest centroid is zero).
      summarize_and_update: Add summaries and (in training) update `means`.
    """
    means = self.get_var('means')
    inputs = self._cast_to_fprop_dtype(inputs)
    if inputs.ndim == 3:
      inputs = jnp.reshape(
          inputs, inputs.shape[:2] + (self.num_heads, self.dim_per_head))
    if self.prenormalize:
      norms = jnp.linalg.norm(inputs, ord=2, axis=-1, keepdims=True)
      inputs = inputs / jnp.where(norms > 0, norms, 1.0)

    dists = ops.vq_distances(inputs, means)
    nearest_ids = jnp.argmin(dists, axis=-1)
    one_hot = jax.nn.one_hot(nearest_ids, self.num_clusters, dtype=means.dtype)
    if summarize_and_update:
      self.add_summary(
          'k_means/centroid/cluster_ids',
          (nearest_ids / self.num_clusters * 256)[..., jnp.newaxis],
          summary_type=base_layer.SummaryType.IMAGE,
      )
    if paddings is not None:
      one_hot = one_hot * (1 - paddings[:, :, jnp.newaxis, jnp.newaxis])
    nearest_centroid = jnp.einsum('BLNK,NKH->BLNH', one_hot, means)

    if summarize_and_update:
      self._summarize_means(means)
    if not self.do_eval:
      counts = jnp.sum(one_hot, axis=(0, 1))  # [N, K]
      if summarize_and_update:
        self._summarize_counts(counts)
      new_means = ops.updated_means(
          inputs, one_hot, means, self.decay, self.epsilon)
      if summarize_and_update:
        self.update_var('means', new_means)
    return dists, nearest_centroid

  def _summarize_means(self, means: JTensor) -> None:
    norm = jnp.linalg.norm(means, ord=2, axis=-1)
    self.add_summary('k_means/centroid/l2_norm_avg', jnp.mean(norm))
    self.add_summary('k_means/centroid/l2_norm_min', jnp.min(norm))
    self.add_summary('k_means/centroid/l2_norm_max', jnp.max(norm))

  def _summarize_counts(self, counts: JTensor) -> None:
    """Cluster usage per head: inactive, largest, smallest, geometric mean."""
    prefix = 'k_means/centroid'
    self.add_summary(f'{prefix}/avg_cluster_count', jnp.mean(counts))
    for i in range(self.num_heads):
      head = counts[i]
      total = jnp.sum(head)
      used = head > 0
      self.add_summary(f'{prefix}/inactive_clusters_proportion/head{i}',
                       jnp.mean(head == 0))
      self.add_summary(f'{prefix}/max_cluster_proportion/head{i}',
                       jnp.max(head) / total)
      self.add_summary(f'{prefix}/min_cluster_proportion/head{i}',
                       jnp.min(head) / total)
      log_share = jnp.log(jnp.where(used, head / total, 1.0))
      log_share = log_share / jnp.maximum(1.0, jnp.sum(used))
      self.add_summary(f'{prefix}/geomean_cluster_proportion/head{i}',
                       jnp.exp(log_share.sum()))


class Ngrammer(base_layer.BaseLayer):
  """Augments per-head embeddings with embeddings of hashed bi-gram ids.

  For head i the bi-gram id of each position (`get_bigram_ids` over the
  head's uni-gram ids) is hashed into `ngram_vocab_size` buckets with
  `((x * (i + 1) + (i + 1)) % p_i) % ngram_vocab_size` (p_i the i-th prime
  above ngram_vocab_size), looked up in the head's table `ngram_table_<i>`
  and layer-normed (`ngram_layer_norm_<i>`). The input embeddings are
  layer-normed per head (`emb_layer_norm_<i>`) and either keep their first
  H - ngram_emb_dim features followed by the ngram embedding
  (`concat_ngrams`) or have it added.

  Attributes:
    ngram_vocab_size: Buckets of the hashed bi-gram ids (rows per table).
    unigram_vocab_size: Size of the uni-gram vocabulary.
    ngram_emb_dim: Depth of the bi-gram embeddings.
    concat_ngrams: Concatenate (True) or add the bi-gram embeddings.
    num_heads: N.
    dim_per_head: H.
  """

  ngram_vocab_size: int = 768 * 256
  unigram_vocab_size: int = 0
  ngram_emb_dim: int = 8
  concat_ngrams: bool = True
  num_heads: int = 0
  dim_per_head: int = 0

  def _ngram_table_tpl(self) -> pax_fiddle.Config:
    """The template of one head's bi-gram embedding table."""
    return pax_fiddle.Config(embedding_softmax.Embedding)

  def setup(self) -> None:
    ops.check_emb_dims(self)
    tables = []
    for _ in range(self.num_heads):
      table = self._ngram_table_tpl()
      table.num_classes = self.ngram_vocab_size
      table.input_dims = self.ngram_emb_dim
      table.params_init = self.params_init
      table.weight_split_dims_mapping = self.weight_split_dims_mapping
      tables.append(table)
    self.create_children(
        'emb_layer_norm', ops.layer_norms(self.dim_per_head, self.num_heads))
    self.create_children(
        'ngram_layer_norm', ops.layer_norms(self.ngram_emb_dim, self.num_heads))
    self.create_children('ngram_table', tables)

  def _ids_per_head(self, input_ids: JTensor) -> list[JTensor]:
    if input_ids.ndim == 2:
      return [input_ids] * self.num_heads
    return [input_ids[..., i] for i in range(self.num_heads)]

  def __call__(
      self,
      input_ids: JTensor,
      input_embs: JTensor,
      paddings: JTensor | None = None,
      segment_pos: JTensor | None = None,
      merge_heads: bool = True,
      pair_ids: JTensor | None = None,
      emb_var: JTensor | None = None,
      **kwargs,
  ) -> JTensor:
    """The embeddings with bi-gram embeddings, [B, L, D] or [B, L, N, H].

    Args:
      input_ids: Uni-gram ids [B, L], or [B, L, N] (one per head).
      input_embs: [B, L, D] or [B, L, N, H].
      paddings: Optional [B, L]; padded positions become zero.
      segment_pos: Optional [B, L] positions in packed segments.
      merge_heads: Return [B, L, D] (else [B, L, N, H]).
      pair_ids: Optional [B, N, L]: which position (in the ids with a pad
        appended at index L) each position pairs with, per head.
      emb_var: Unused (kept for the VQNgrammer interface).
      **kwargs: Unused.
    """
    del emb_var, kwargs
    input_embs = self._cast_to_fprop_dtype(input_embs)
    batch, length = input_ids.shape[:2]
    if input_embs.ndim == 3:
      input_embs = jnp.reshape(
          input_embs, [batch, length, self.num_heads, -1])
    primes = ops.hash_primes(self.ngram_vocab_size, self.num_heads)
    ngram_embs = []
    for i, ids in enumerate(self._ids_per_head(input_ids)):
      head_pairs = None if pair_ids is None else pair_ids[:, i, :]
      bigrams = get_bigram_ids(
          ids, self.unigram_vocab_size, segment_pos, pair_ids=head_pairs)
      hashed = ops.hash_ids(bigrams, i + 1, i + 1, primes[i],
                        self.ngram_vocab_size)
      embs = self.ngram_table[i].emb_lookup(hashed)
      ngram_embs.append(self.ngram_layer_norm[i](embs))
    ngram_embs = jnp.stack(ngram_embs, axis=2)  # [B, L, N, H']
    input_embs = ops.per_head_layer_norm(self.emb_layer_norm, input_embs)
    outputs = ops.merge_ngram_embs(input_embs, ngram_embs, self.concat_ngrams)
    return ops.finish_embs(outputs, paddings, merge_heads)


class VQNgrammer(base_layer.BaseLayer):
  """An Ngrammer over the VQ cluster ids of the embeddings.

  The embeddings are assigned to their nearest centroid per head
  (`vq_layer`, a VectorQuantization) and the cluster ids feed an Ngrammer
  (`ngram_layer`) whose uni-gram vocabulary is the K clusters. With
  `unigram_vocab_size`, training also caches each input id's cluster ids in
  `input_id_to_cluster_id_cache` [V, N], which evaluation can use instead of
  the VQ (`use_cached_input_ids_to_cluster_ids`).

  Attributes:
    ngram_vocab_size: Buckets of the hashed bi-gram ids.
    unigram_vocab_size: Size of the input vocabulary (enables the cache).
    ngram_emb_dim: Depth of the bi-gram embeddings.
    ngram_using_attention_scores: Pair each token with the token it attends
      to most (from `attention_scores`) instead of its predecessor.
    causal_attention: With attention scores, pair only with earlier tokens.
    concat_ngrams: Concatenate (True) or add the bi-gram embeddings.
    num_clusters: K.
    num_heads: N.
    decay: Decay of the centroids' moving average.
    epsilon: Guards the per-cluster mean against empty clusters.
    dim_per_head: H.
    use_cached_input_ids_to_cluster_ids: In evaluation, take cluster ids
      from the cache.
    enable_cache_updates: Update the cache from each training batch.
    full_update_cache_frequency: If positive, recompute the whole cache from
      `emb_var` every this many calls.
    full_update_cache_steps: Call counts at which to also recompute it.
    prenormalize: L2-normalize the VQ inputs.
  """

  ngram_vocab_size: int = 768 * 256
  unigram_vocab_size: int = 0
  ngram_emb_dim: int = 8
  ngram_using_attention_scores: bool = False
  causal_attention: bool = True
  concat_ngrams: bool = False
  num_clusters: int = 0
  num_heads: int = 0
  decay: float = 0.999
  epsilon: float = 1e-6
  dim_per_head: int = 0
  use_cached_input_ids_to_cluster_ids: bool = False
  enable_cache_updates: bool = True
  full_update_cache_frequency: int = 0
  full_update_cache_steps: tuple[int, ...] = ()
  prenormalize: bool = False

  @classmethod
  def set_canonical_sharding_params(
      cls, vqngrammer_p, *, replica_axis, data_axis, mdl_axis,
      ici_mesh_shape, dcn_mesh_shape, mesh_axis_names, training_optimized):
    """Shards the bi-gram tables [V, H'] over (mdl_axis, data_axis)."""
    del replica_axis, training_optimized
    vqngrammer_p.ici_mesh_shape = ici_mesh_shape
    vqngrammer_p.dcn_mesh_shape = dcn_mesh_shape
    vqngrammer_p.mesh_axis_names = mesh_axis_names
    vqngrammer_p.weight_split_dims_mapping.wt = [mdl_axis, data_axis]
    return vqngrammer_p

  def _ngram_layer_tpl(self) -> pax_fiddle.Config:
    """The template of the Ngrammer over cluster ids."""
    return pax_fiddle.Config(Ngrammer)

  def _vq_layer_tpl(self) -> pax_fiddle.Config:
    return pax_fiddle.Config(
        VectorQuantization,
        num_clusters=self.num_clusters,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        decay=self.decay,
        epsilon=self.epsilon,
        params_init=self.params_init,
        prenormalize=self.prenormalize,
    )

  def setup(self) -> None:
    ops.check_emb_dims(self)
    self.create_child('vq_layer', self._vq_layer_tpl())
    if self.unigram_vocab_size:
      self.create_variable(
          'input_id_to_cluster_id_cache',
          WeightHParams(
              shape=[self.unigram_vocab_size, self.num_heads],
              dtype=jnp.int32,
              init=base_layer.WeightInit.Constant(0),
          ),
          trainable=False,
      )
    ngram = self._ngram_layer_tpl()
    ngram.ngram_vocab_size = self.ngram_vocab_size
    ngram.unigram_vocab_size = self.num_clusters
    ngram.ngram_emb_dim = self.ngram_emb_dim
    ngram.concat_ngrams = self.concat_ngrams
    ngram.num_heads = self.num_heads
    ngram.dim_per_head = self.dim_per_head
    ngram.params_init = self.params_init
    ngram.weight_split_dims_mapping = self.weight_split_dims_mapping
    self.create_child('ngram_layer', ngram)
    if self._should_full_update_cache():
      self.create_variable(
          'count',
          WeightHParams(shape=[], init=base_layer.WeightInit.Constant(0),
                        dtype=jnp.int32),
          trainable=False,
      )

  def _where(self) -> str:
    return f'VQNgrammer ({self.name})'

  def _cached_cluster_ids(self, input_ids: JTensor | None) -> JTensor:
    if not self.do_eval:
      raise ValueError(
          f'{self._where()}: use_cached_input_ids_to_cluster_ids is for '
          'evaluation only (caching while training stops n-gram updates).')
    if not self.unigram_vocab_size:
      raise ValueError(
          f'{self._where()}: unigram_vocab_size must be set when '
          'use_cached_input_ids_to_cluster_ids is True.')
    if input_ids is None:
      raise ValueError(
          f'{self._where()}: input_ids are needed when '
          'use_cached_input_ids_to_cluster_ids is True.')
    return self.get_var('input_id_to_cluster_id_cache')[input_ids]

  def _pair_ids(self, attention_scores: JTensor | None) -> JTensor | None:
    if not self.ngram_using_attention_scores:
      return None
    if attention_scores is None:
      raise ValueError(
          f'{self._where()}: attention_scores [B, N, L, L] are needed when '
          'ngram_using_attention_scores is set.')
    if self.causal_attention:
      return ops.causal_pair_ids(attention_scores)
    return jnp.argmax(attention_scores, axis=-1)

  def __call__(
      self,
      input_ids: JTensor | None,
      input_embs: JTensor,
      paddings: JTensor | None = None,
      segment_pos: JTensor | None = None,
      merge_heads: bool = True,
      attention_scores: JTensor | None = None,
      emb_var: JTensor | None = None,
      check_time_step_zero: bool = False,
  ) -> JTensor:
    """The embeddings with VQ bi-gram embeddings, [B, L, D] or [B, L, N, H].

    Args:
      input_ids: Uni-gram ids [B, L] (or [B, L, N]); only used for the cache
        and by `check_time_step_zero`; may be None.
      input_embs: [B, L, D] or [B, L, N, H].
      paddings: Optional [B, L].
      segment_pos: Optional [B, L] positions in packed segments.
      merge_heads: Return [B, L, D] (else [B, L, N, H]).
      attention_scores: [B, N, L, L], when ngram_using_attention_scores.
      emb_var: The [V, D] embedding table, for full cache updates.
      check_time_step_zero: Give cluster id 0 where both the ids and the
        embeddings are all zero (the t=0 placeholder).
    """
    pair_ids = None
    if self.use_cached_input_ids_to_cluster_ids:
      cluster_ids = self._cached_cluster_ids(input_ids)
    else:
      pair_ids = self._pair_ids(attention_scores)
      input_embs = self._cast_to_fprop_dtype(input_embs)
      distances, _ = self.vq_layer(input_embs, paddings=paddings)
      cluster_ids = jnp.argmin(distances, axis=-1)  # [B, L, N]
      if check_time_step_zero:
        keep = ops.time_step_nonzero(input_ids, input_embs)
        cluster_ids = jnp.where(keep == 0, 0, cluster_ids)
      self._maybe_update_cache(input_ids, cluster_ids)
      self._maybe_full_update_cache(emb_var)
    return self.ngram_layer(
        cluster_ids, input_embs, paddings, segment_pos,
        merge_heads=merge_heads, pair_ids=pair_ids)

  def _maybe_update_cache(self, input_ids, cluster_ids) -> None:
    if (self.do_eval or not self.unigram_vocab_size or input_ids is None
        or not self.enable_cache_updates):
      return
    cache = self.get_var('input_id_to_cluster_id_cache')
    flat_ids = jnp.reshape(input_ids, [-1])
    flat_clusters = jnp.reshape(cluster_ids, [-1, self.num_heads])
    for i in range(self.num_heads):
      cache = cache.at[flat_ids, i].set(flat_clusters[:, i])
    self.update_var('input_id_to_cluster_id_cache', cache)

  def _maybe_full_update_cache(self, emb_var: JTensor | None) -> None:
    if not self._should_full_update_cache():
      return
    if emb_var is None:
      raise ValueError(
          f'{self._where()}: emb_var [V, D] is needed for the full cache '
          'updates (full_update_cache_frequency / full_update_cache_steps).')
    count = self.get_var('count')
    should_update = jnp.zeros([], dtype=bool)
    if self.full_update_cache_frequency:
      should_update |= (count % self.full_update_cache_frequency) == 0
    for step in self.full_update_cache_steps:
      should_update |= count == step
    cache = self.get_var('input_id_to_cluster_id_cache')
    cache = jax.lax.cond(
        should_update, self._full_update_cache, lambda _: cache, emb_var)
    self.update_var('input_id_to_cluster_id_cache', cache)
    self.update_var('count', count + 1)

  def _full_update_cache(self, emb_var: JTensor) -> JTensor:
    """The cluster ids of every uni-gram id's embedding, [V, N]."""
    expected = (self.unigram_vocab_size, self.num_heads * self.dim_per_head)
    if not self.unigram_vocab_size or tuple(emb_var.shape) != expected:
      raise ValueError(
          f'{self._where()}: emb_var must have shape {expected} (with '
          f'unigram_vocab_size > 0), got {tuple(emb_var.shape)}.')
    cache = self.get_var('input_id_to_cluster_id_cache')
    block = 8192  # Bounds the memory of the distances.
    for start in range(0, self.unigram_vocab_size, block):
      stop = min(start + block, self.unigram_vocab_size)
      embs = emb_var[start:stop].reshape(1, stop - start, -1)
      dists, _ = self.vq_layer(embs, summarize_and_update=False)
      cache = cache.at[start:stop].set(jnp.argmin(dists[0], axis=-1))
    return cache

  def _should_full_update_cache(self) -> bool:
    """Whether training recomputes the whole cache at some calls."""
    return not self.do_eval and bool(
        self.full_update_cache_frequency or self.full_update_cache_steps)

  def extend_step(
      self,
      input_embs: JTensor,
      step: int | JTensor,
      merge_heads: bool | None = True,
      attention_score: JTensor | None = None,
  ) -> JTensor:
    """The VQ n-gram output at position `step`, [B, D] or [B, N, H].

    Args:
      input_embs: The embeddings so far, [B, L, D] or [B, L, N, H].
      step: The position to return.
      merge_heads: Return [B, D] (else [B, N, H]).
      attention_score: [B, N, L], this step's attention scores, when
        ngram_using_attention_scores.
    """
    input_embs = self._cast_to_fprop_dtype(input_embs)
    pair_ids = None
    if self.ngram_using_attention_scores:
      if attention_score is None:
        raise ValueError(
            f'{self._where()}: attention_score [B, N, L] is needed when '
            'ngram_using_attention_scores is set.')
      if not self.causal_attention:
        raise ValueError(
            f'{self._where()}: extend_step needs causal_attention=True.')
      pair_ids = ops.step_pair_ids(attention_score, step)
    distances, _ = self.vq_layer(input_embs)
    cluster_ids = jnp.argmin(distances, axis=-1)
    outputs = self.ngram_layer(
        cluster_ids, input_embs, merge_heads=merge_heads, pair_ids=pair_ids)
    outputs = jax.lax.dynamic_slice_in_dim(
        outputs, start_index=step, slice_size=1, axis=1)
    return jnp.squeeze(outputs, axis=1)


class NgrammerStub(base_layer.BaseLayer):
  """Only the per-head layer norm of an Ngrammer (same call interface).

  Attributes:
    dim_per_head: H.
    num_heads: N.
  """

  dim_per_head: int = 0
  num_heads: int = 0

  def setup(self) -> None:
    self.create_children(
        'emb_layer_norm', ops.layer_norms(self.dim_per_head, self.num_heads))

  def __call__(
      self,
      input_ids: JTensor | None,
      input_embs: JTensor,
      paddings: JTensor | None = None,
      segment_pos: JTensor | None = None,
      merge_heads: bool = True,
      attention_scores: JTensor | None = None,
      emb_var: JTensor | None = None,
      check_time_step_zero: bool = False,
  ) -> JTensor:
    """input_embs layer-normed per head, [B, L, D] or [B, L, N, H]."""
    del input_ids, segment_pos, attention_scores, emb_var
    del check_time_step_zero
    input_embs = self._cast_to_fprop_dtype(input_embs)
    if input_embs.ndim == 3:
      b, l, d = input_embs.shape
      if d % self.dim_per_head:
        raise ValueError(
            f'NgrammerStub ({self.name}): the embedding depth {d} is not a '
            f'multiple of dim_per_head={self.dim_per_head}.')
      input_embs = jnp.reshape(
          input_embs, [b, l, d // self.dim_per_head, self.dim_per_head])
    outputs = ops.per_head_layer_norm(self.emb_layer_norm, input_embs)
    return ops.finish_embs(outputs, paddings, merge_heads)

  def extend_step(
      self,
      input_embs: JTensor,
      step: int | JTensor,
      merge_heads: bool | None = True,
      attention_score: JTensor | None = None,
  ) -> JTensor:
    """The output at position `step`, [B, D] or [B, N, H]."""
    del attention_score
    at_step = jax.lax.dynamic_slice_in_dim(
        input_embs, start_index=step, slice_size=1, axis=1)
    outputs = self(None, at_step, merge_heads=merge_heads)
    return jnp.squeeze(outputs, axis=1)


BregmanCompression = _bregman_ngrammer.BregmanCompression
BregmanNgrammer = _bregman_ngrammer.BregmanNgrammer
