"""Grouped-query attention: fewer key/value heads than query heads.

Public names: causal_mask, segment_mask, attention_mask, padding_mask,
apply_mask, apply_rope, GroupedQueryAttention.

The masks here are boolean, True where attention is NOT allowed; the layer
also accepts the additive float masks of `praxis.layers.attentions` (any
nonzero entry is masked), so it can replace `DotProductAttention` as a
Transformer's `tr_atten_tpl`:

  atten = pax_fiddle.Config(
      grouped_query_attention.GroupedQueryAttention, input_dim=16,
      num_heads=4, num_kv_heads=1, dim_per_head=4,
      rope_min_max_timescales=(1, 10_000))

The attention math is `attentions.dot_product_attention`; its probabilities
are returned as [B, N, T, S] (query head n reads key/value head
n // (N // K)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import einsum
from praxis.layers import embedding_softmax
from praxis.layers import stochastics

JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping


def causal_mask(seqlen: int) -> JTensor:
  """[1, 1, T, T] bool: True where a key lies in the query's future."""
  return (jnp.arange(seqlen)[:, None] < jnp.arange(seqlen)[None, :])[None, None]


def segment_mask(
    segment_ids: JTensor, src_segment_ids: JTensor | None = None
) -> JTensor:
  """[B, 1, T, S] bool: True where query and key segments differ."""
  if src_segment_ids is None:
    src_segment_ids = segment_ids
  return (segment_ids[:, :, None] != src_segment_ids[:, None, :])[:, None]


def attention_mask(segment_ids: JTensor) -> JTensor:
  """[B, 1, T, T] bool: the causal mask within segments."""
  return causal_mask(segment_ids.shape[1]) | segment_mask(segment_ids)


def padding_mask(paddings: JTensor) -> JTensor:
  """[B, 1, 1, T]: the paddings (1.0 = padded, i.e. masked)."""
  return paddings[:, None, None, :]


def apply_mask(logits: JTensor, atten_mask: JTensor) -> JTensor:
  """`logits` with a large negative number where `atten_mask` is nonzero."""
  return jnp.where(
      atten_mask, py_utils.get_large_negative_number(logits.dtype), logits
  )


def apply_rope(
    inputs: JTensor,
    min_timescale: int,
    max_timescale: int,
    position: JTensor | None = None,
) -> JTensor:
  """Rotary position embedding of `inputs` [B, S, N, H] at `position` [B, S].

  Args:
    inputs: [B, S, N, H].
    min_timescale: Shortest wavelength.
    max_timescale: Longest wavelength.
    position: [B, S] positions (None: 0 .. S-1).

  Returns:
    The rotated inputs, in their dtype.
  """
  if position is None:
    position = jnp.arange(inputs.shape[1])[None, :]
  out = embedding_softmax.apply_rotary_position_embedding(
      inputs, position, min_timescale, max_timescale
  )
  return out.astype(inputs.dtype)


def _to_additive(atten_mask: JTensor) -> JTensor:
  """A boolean / 0-1 / additive mask as an additive float32 mask."""
  neg = py_utils.get_large_negative_number(jnp.float32)
  return jnp.where(atten_mask.astype(bool), neg, 0.0).astype(jnp.float32)



def apply_dropout(x: JTensor, prng_key: JTensor, dropout_prob: float,
                  broadcast_dims: Sequence[int] = ()) -> JTensor:
  """Inverted dropout of `x`: each entry kept with probability
  1 - dropout_prob and scaled by 1 / (1 - dropout_prob); the mask has size 1
  (is shared) along `broadcast_dims`."""
  if dropout_prob == 0.0:
    return x
  mask_shape = [1 if d in broadcast_dims else n for d, n in enumerate(x.shape)]
  keep = jax.random.bernoulli(prng_key, 1.0 - dropout_prob, shape=mask_shape)
  return x * keep / (1.0 - dropout_prob)

class GroupedQueryAttention(base_layer.BaseLayer):
  """Dot-product attention whose K key/value heads serve N / K query heads.

  Children: `query` (w [D, N, H]), `key` and `value` (w [D, K, H], or [D, H]
  when K = 1), `post` (w [D, N, H]), all `einsum.Einsum`.

  Attributes:
    input_dim: D.
    hidden_dim: Unused (kept for configs); set input_dim.
    num_heads: N, query heads.
    num_kv_heads: K, key/value heads; must divide N.
    dim_per_head: H.
    atten_dropout_prob: Dropout probability of the attention probabilities.
    atten_temp: Logits are divided by this temperature.
    use_bias: Whether the projections have biases.
    atten_logit_cap: If positive, cap the logits by `cap * tanh(x / cap)`.
    rope_min_max_timescales: If set, apply rotary embeddings with these
      timescales to queries and keys.
  """

  input_dim: int = 0
  hidden_dim: int = 0
  num_heads: int = 1
  num_kv_heads: int = 1
  dim_per_head: int = 0
  atten_dropout_prob: float = 0.0
  atten_temp: float = 1.0
  use_bias: bool = True
  atten_logit_cap: float = 0.0
  rope_min_max_timescales: tuple[int, int] | None = None

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      dnh: Of the query and output weights [D, N, H].
      dkh: Of the key and value weights [D, K, H] (None: dnh).
    """

    dnh: SplitDimsMapping = None
    dkh: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      btd: Of the inputs and outputs [B, T, D].
      btnh: Of the queries and contexts [B, T, N, H].
      bskh: Of the keys and values [B, S, K, H].
    """

    btd: SplitDimsMapping = None
    btnh: SplitDimsMapping = None
    bskh: SplitDimsMapping = None

  def _einsum(self, eqn: str, shape: tuple[int, ...], wt: Any) -> Any:
    p = pax_fiddle.Config(
        einsum.Einsum, eqn=eqn, w_shape=shape, use_bias=self.use_bias
    )
    p.weight_split_dims_mapping.wt = wt
    return p

  def setup(self) -> None:
    d, n, k, h = (
        self.input_dim, self.num_heads, self.num_kv_heads, self.dim_per_head
    )
    where = f'GroupedQueryAttention ({self.name})'
    for name, value in (('input_dim', d), ('num_heads', n),
                        ('num_kv_heads', k), ('dim_per_head', h)):
      if not value or value <= 0:
        raise ValueError(f'{where}: {name} must be positive, got {value}.')
    if n % k:
      raise ValueError(f'{where}: num_kv_heads {k} must divide num_heads {n}.')
    ws = self.weight_split_dims_mapping
    dkh = ws.dkh or ws.dnh
    self.create_child('query', self._einsum('...D,DNH->...NH', (d, n, h),
                                            ws.dnh))
    for name in ('key', 'value'):
      if k == 1:
        wt = None if dkh is None else [dkh[0], dkh[2]]
        p = self._einsum('...D,DH->...H', (d, h), wt)
      else:
        p = self._einsum('...D,DKH->...KH', (d, k, h), dkh)
      self.create_child(name, p)
    self.create_child('post', self._einsum('...NH,DNH->...D', (d, n, h),
                                           ws.dnh))

  def _shard(self, x: JTensor, mapping: SplitDimsMapping) -> JTensor:
    if mapping is not None and len(mapping) != x.ndim:
      return x
    return base_layer.maybe_shard(x, mapping, self.mesh_axis_names)

  def _qkv(
      self,
      q_in: JTensor,
      kv_in: tuple[JTensor, JTensor],
      q_pos: JTensor | None,
      k_pos: JTensor | None,
  ) -> tuple[JTensor, JTensor, JTensor]:
    """Projections [B, T, N, H], [B, S, K, H] x 2, with rope applied."""
    sh = self.activation_split_dims_mapping
    q = checkpoint_name(self.query(q_in), 'query_proj')
    k = checkpoint_name(self.key(kv_in[0]), 'key_proj')
    v = checkpoint_name(self.value(kv_in[1]), 'value_proj')
    if self.num_kv_heads == 1:
      k, v = k[..., None, :], v[..., None, :]
    if self.rope_min_max_timescales is not None:
      q = apply_rope(q, *self.rope_min_max_timescales, q_pos)
      k = apply_rope(k, *self.rope_min_max_timescales, k_pos)
    q = self._shard(q, sh.btnh)
    return q, self._shard(k, sh.bskh), self._shard(v, sh.bskh)

  def _attend(
      self, q: JTensor, k: JTensor, v: JTensor, atten_mask: JTensor
  ) -> tuple[JTensor, JTensor]:
    scale = self.dim_per_head**-0.5 / self.atten_temp
    dropout = None
    if self.atten_dropout_prob > 0.0 and not self.do_eval:
      keep = 1.0 - self.atten_dropout_prob
      dropout = lambda p: stochastics.dropout(p, self.next_prng_key(), keep)
    encoded, probs = attentions.dot_product_attention(
        q * jnp.asarray(scale, q.dtype),
        k,
        v,
        _to_additive(atten_mask),
        logit_cap=self.atten_logit_cap,
        probs_dropout=dropout,
    )
    encoded = checkpoint_name(encoded, 'context')
    return self._shard(encoded, self.activation_split_dims_mapping.btnh), probs

  def __call__(
      self,
      query_vec: JTensor,
      key_vec: JTensor,
      value_vec: JTensor,
      atten_mask: JTensor,
      query_segment_pos: JTensor | None = None,
      key_segment_pos: JTensor | None = None,
  ) -> tuple[JTensor, JTensor]:
    """Attends from `query_vec` [B, T, D] over `key_vec`/`value_vec` [B, S, D].

    Args:
      query_vec: [B, T, D].
      key_vec: [B, S, D].
      value_vec: [B, S, D].
      atten_mask: [1|B, 1|N, 1|T, S], True / nonzero where masked.
      query_segment_pos: [B, T] positions for rope (None: 0 .. T-1).
      key_segment_pos: [B, S].

    Returns:
      (encoded [B, T, D], probs [B, N, T, S]).
    """
    q, k, v = self._qkv(
        query_vec, (key_vec, value_vec), query_segment_pos, key_segment_pos
    )
    self.update_decode_state('key_state', k)
    self.update_decode_state('value_state', v)
    encoded, probs = self._attend(q, k, v, atten_mask)
    btd = self.activation_split_dims_mapping.btd
    encoded = self._shard(self.post(encoded), btd)
    return checkpoint_name(encoded, 'out_proj'), probs

  def extend_decode_state(self, name: str, value: JTensor,
                          time_step: JTensor) -> JTensor:
    """Writes one step's `value` [B, K, H] at `time_step` of the cached
    `name` [B, S, K, H]; returns the updated entry."""
    state = self.get_decode_state(name)
    index = jnp.asarray(time_step, jnp.int32)
    new_state = jax.lax.dynamic_update_slice_in_dim(
        state, value[:, None].astype(state.dtype), index, axis=1
    )
    self.update_decode_state(name, new_state)
    return new_state

  def extend_step(
      self,
      query_vec: JTensor,
      *,
      atten_mask: JTensor,
      time_step: JTensor,
      segment_pos: JTensor | None,
      is_cross_attention: bool = False,
  ) -> JTensor:
    """Attends from the query at `time_step` over the decoder cache.

    Args:
      query_vec: [B, D].
      atten_mask: [1|B, 1, S], True / nonzero where masked.
      time_step: Scalar, the 0-based step (its slot in the cache).
      segment_pos: [B] positions for rope (None: time_step).
      is_cross_attention: Leave the cache (the encoder's keys) unchanged.

    Returns:
      encoded: [B, D].
    """
    time_step = jnp.asarray(time_step)
    if segment_pos is None:
      position = jnp.broadcast_to(time_step, query_vec.shape[:1])[:, None]
    else:
      position = segment_pos[:, None]
    x = query_vec[:, None]
    q, k, v = self._qkv(x, (x, x), position, position)
    if not is_cross_attention:
      self.extend_decode_state('key_state', k[:, 0], time_step)
      self.extend_decode_state('value_state', v[:, 0], time_step)
    encoded, _ = self._attend(
        q,
        self.get_decode_state('key_state'),
        self.get_decode_state('value_state'),
        atten_mask[:, :, None, :],
    )
    return self.post(encoded)[:, 0]

  def decoding_state_sequence_length(self) -> int:
    """The length of the cached sequences."""
    return self.get_decode_state('key_state').shape[1]

  def init_states(self, target_batch_size: int, target_max_length: int) -> None:
    """Creates a zero cache of `target_max_length` steps."""
    shape = [target_batch_size, target_max_length, self.num_kv_heads,
             self.dim_per_head]
    for name in ('key_state', 'value_state'):
      self.update_decode_state(name, jnp.zeros(shape, self.fprop_dtype))

  def transform_decode_state(self, transform_fn: Any) -> None:
    """Replaces each cached state by `transform_fn(state, 0, 1)`."""
    cache = self.variables.get(base_layer.DECODE_CACHE, {})
    for name, state in cache.items():
      if isinstance(state, jax.Array):
        new_state = self._shard(
            transform_fn(state, 0, 1), self.activation_split_dims_mapping.bskh
        )
        self.update_decode_state(name, new_state)
