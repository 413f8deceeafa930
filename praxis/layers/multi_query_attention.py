"""Multi-query and grouped-query attention with Pax's variable layout.

Public: `OneHeadedAttentionProjection`, `MultiQueryDotProductAttention`,
`MultiQueryDotProductAttentionLPB`.

`MultiQueryDotProductAttention` shares `num_kv_heads` key/value heads among
`num_heads` query heads (query head n reads key/value head n // (N // K)).
With one key/value head (the default) the key and value projections are
`OneHeadedAttentionProjection`s with weights [D, H] and the decoder cache
holds [B, S, H]; with several they are `AttentionProjection`s ([D, K, H]) and
the cache holds [B, S, K, H]. The attention math is
`attentions.dot_product_attention`, the one shared by every attention layer
here:

  atten = base_layer.instantiate(pax_fiddle.Config(
      multi_query_attention.MultiQueryDotProductAttention, name='mqa',
      input_dim=16, hidden_dim=32, num_heads=4))
  variables = atten.init(key, x, x, x, attentions.causal_mask(x))
  y, probs = atten.apply(variables, x, x, x, attentions.causal_mask(x))

`MultiQueryDotProductAttentionLPB` adds lazy prefix broadcast for sampling
(`lazy_broadcast_prefix`): the prefix cache is kept once per prefix and
repeated for the samples only when attended to.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _attention_math as attn_math
from praxis.layers import _bias_add
from praxis.layers import attentions
from praxis.layers import base_ops
from praxis.layers import embedding_softmax
from praxis.layers import stochastics

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
DecodeStateTransformFn = base_layer.DecodeStateTransformFn


def _where(layer: base_layer.BaseLayer) -> str:
  return f'{type(layer).__name__}({layer.name!r})'


class OneHeadedAttentionProjection(base_layer.BaseLayer):
  """Projects [..., D] to one head [..., H] (weight `w` [D, H], bias `b` [H]).

  Attributes:
    input_dim: D.
    output_dim: H.
    use_bias: Whether to add the bias.
    einsum_tpl: The einsum op (replaceable, e.g. by a quantized one).
  """

  input_dim: int = 0
  output_dim: int = 0
  use_bias: bool = True
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  def setup(self) -> None:
    attentions._check_positive(  # pylint: disable=protected-access
        self, input_dim=self.input_dim, output_dim=self.output_dim)
    wt = self.weight_split_dims_mapping.wt
    self.create_variable('w', WeightHParams(
        shape=[self.input_dim, self.output_dim], mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=wt))
    if self.use_bias:
      sharded = self.mesh_shape is not None and wt is not None
      self.create_variable('b', WeightHParams(
          shape=[self.output_dim], init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=[wt[1]] if sharded else None))
    self.create_child('einsum', self.einsum_tpl.clone())

  def __call__(self, inputs: JTensor) -> JTensor:
    """[..., D] -> [..., H]."""
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(f'{_where(self)}: inputs {inputs.shape} must end in '
                       f'input_dim={self.input_dim}.')
    inputs = self._cast_to_fprop_dtype(inputs)
    out = self.einsum('...D,DH->...H', inputs, self.theta.w)
    return _bias_add.add_bias(out, self.theta.b) if self.use_bias else out


class MultiQueryDotProductAttention(base_layer.BaseLayer):
  """Dot-product attention whose heads share K (default 1) key/value heads.

  Children: `query` ([D, N, H]), `key` and `value` ([D, H] when K == 1, else
  [D, K, H]), `post` ([D, N, H]), `atten_dropout`, `qk_einsum`,
  `pv_einsum`, and, when enabled, `rotary_position_emb` and
  `relative_bias`. Queries are scaled by (hidden_dim // num_heads)**-0.5
  (or dim_per_head**-0.5, see `scale_query_by_dim_per_head`).

  Attributes:
    input_dim: D, or a dict with 'query', 'key' and 'value' dims.
    hidden_dim: N * H; sets H when `dim_per_head` is None.
    num_heads: N.
    num_kv_heads: K; must divide N.
    dim_per_head: H (None: hidden_dim // num_heads).
    dropout_tpl: Template of the attention-probability dropout.
    atten_dropout_prob: Dropout probability of the attention probabilities.
    proj_tpl: Template of the query and output projections (and of the
      key/value projections when K > 1).
    headless_proj_tpl: Template of the key/value projections when K == 1.
    internal_gshard_gaussian_init: Unused (kept for config compatibility).
    use_bias: Whether the projections have biases.
    output_proj_use_nhd_shape: Store the output weight as [N, H, D].
    internal_enable_query_scale: Unused (queries are always scaled, as Pax).
    atten_logit_cap: If positive, cap the logits by `cap * tanh(x / cap)`.
    use_rotary_position_emb: Rotate queries and keys (RoPE).
    consolidate_rope_key_state: Cache the rotated keys as `key_state` (no
      separate `key_post_rotary_pos_emb`).
    rotary_position_emb_tpl: Template of the rotary embedding.
    relative_bias_tpl: Template of an optional RelativeBias.
    attention_extra_logit: If set, an extra softmax logit of this value.
    dconv_qkv: Not supported; must be False.
    combine_qkv: Not supported; must be False.
    decode_cache: Whether the forward pass fills the decoder cache.
    qk_einsum_tpl: The einsum op computing the logits.
    pv_einsum_tpl: The einsum op combining the values.
    scale_query_by_dim_per_head: Scale queries by dim_per_head**-0.5 when
      dim_per_head is set.
    chunked_attn_num_seq_split: If > 1, self-attention is computed in this
      many query chunks, each over the keys up to its end (causal masks
      only; the probabilities are then not returned).
  """

  input_dim: int | dict[str, int] = 0
  hidden_dim: int = 0
  num_heads: int = 1
  num_kv_heads: int = 1
  dim_per_head: int | None = None
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  atten_dropout_prob: float = 0.0
  proj_tpl: LayerTpl = template_field(attentions.AttentionProjection)
  headless_proj_tpl: LayerTpl = template_field(OneHeadedAttentionProjection)
  internal_gshard_gaussian_init: bool = False
  use_bias: bool = True
  output_proj_use_nhd_shape: bool = False
  internal_enable_query_scale: bool = True
  atten_logit_cap: float = 0.0
  use_rotary_position_emb: bool = False
  consolidate_rope_key_state: bool = False
  rotary_position_emb_tpl: LayerTpl = template_field(
      embedding_softmax.RotaryPositionalEmbedding
  )
  relative_bias_tpl: LayerTpl | None = template_field(None)
  attention_extra_logit: float | None = None
  dconv_qkv: bool = False
  combine_qkv: bool = False
  decode_cache: bool = True
  qk_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  pv_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  scale_query_by_dim_per_head: bool = False
  chunked_attn_num_seq_split: int = 1

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      proj: Of the [D, N, H] projection weights.
      dconv: Unused (no dconv).
      proj_headless: Of the [D, H] key/value weights (K == 1).
    """

    proj: SplitDimsMapping = None
    dconv: SplitDimsMapping = None
    proj_headless: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      blnh: Of the [B, L, N, H] queries and contexts.
      blh: Of the [B, L, H] keys and values (K == 1; default from blnh).
      bld: Of the [B, L, D] output.
      bd: Of the [B, D] one-step output (default from bld).
    """

    blnh: SplitDimsMapping = None
    blh: SplitDimsMapping = None
    bld: SplitDimsMapping = None
    bd: SplitDimsMapping = None

  # -- Set-up -----------------------------------------------------------------

  @property
  def head_dim(self) -> int:
    """H, the dims per head."""
    if self.dim_per_head is not None:
      return self.dim_per_head
    return self.hidden_dim // self.num_heads

  def _input_dims(self) -> tuple[int, int, int]:
    """(query, key, value) input dims."""
    if isinstance(self.input_dim, Mapping):
      return tuple(self.input_dim[k] for k in ('query', 'key', 'value'))
    return (self.input_dim,) * 3

  def _check_config(self) -> None:
    where = _where(self)
    attentions._check_positive(  # pylint: disable=protected-access
        self, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
        chunked_attn_num_seq_split=self.chunked_attn_num_seq_split)
    if not all(d and d > 0 for d in self._input_dims()):
      raise ValueError(f'{where}: input_dim must be set, got {self.input_dim}.')
    if self.dim_per_head is None and (
        not self.hidden_dim or self.hidden_dim % self.num_heads):
      raise ValueError(
          f'{where}: hidden_dim {self.hidden_dim} must be a positive multiple '
          f'of num_heads {self.num_heads} (or set dim_per_head).')
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f'{where}: num_kv_heads {self.num_kv_heads} must '
                       f'divide num_heads {self.num_heads}.')
    if self.dconv_qkv or self.combine_qkv:
      raise ValueError(f'{where}: dconv_qkv and combine_qkv are not '
                       'supported (as in Pax).')
    if self.consolidate_rope_key_state and not self.use_rotary_position_emb:
      raise ValueError(f'{where}: consolidate_rope_key_state needs '
                       'use_rotary_position_emb.')

  def _proj(self, input_dim: int, num_heads: int) -> LayerTpl:
    p = self.proj_tpl.clone().set(
        input_dim=input_dim, num_heads=num_heads, dim_per_head=self.head_dim,
        use_bias=self.use_bias)
    p.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.proj
    return p

  def _kv_proj(self, input_dim: int) -> LayerTpl:
    if self.num_kv_heads > 1:
      return self._proj(input_dim, self.num_kv_heads)
    p = self.headless_proj_tpl.clone().set(
        input_dim=input_dim, output_dim=self.head_dim, use_bias=self.use_bias)
    p.weight_split_dims_mapping.wt = (
        self.weight_split_dims_mapping.proj_headless)
    return p

  def setup(self) -> None:
    self._check_config()
    q_dim, k_dim, v_dim = self._input_dims()
    self.create_child('value', self._kv_proj(v_dim))
    self.create_child('key', self._kv_proj(k_dim))
    self.create_child('query', self._proj(q_dim, self.num_heads))
    if self.use_rotary_position_emb:
      self.create_child('rotary_position_emb',
                        self.rotary_position_emb_tpl.clone().set(
                            embedding_dims=self.head_dim))
    if self.relative_bias_tpl is not None:
      self.create_child('relative_bias', self.relative_bias_tpl.clone().set(
          num_heads=self.num_heads))
    self.create_child('atten_dropout', self.dropout_tpl.clone().set(
        keep_prob=1.0 - self.atten_dropout_prob))
    self.create_child('post', self._proj(q_dim, self.num_heads).set(
        is_output_projection=True,
        use_nhd_shape=self.output_proj_use_nhd_shape))
    self.create_child('qk_einsum', self.qk_einsum_tpl.clone())
    self.create_child('pv_einsum', self.pv_einsum_tpl.clone())

  # -- Sharding ---------------------------------------------------------------

  def _shard(self, x: JTensor, mapping: SplitDimsMapping) -> JTensor:
    return base_layer.maybe_shard(x, mapping, self.mesh_axis_names)

  def _shard_blnh(self, x: JTensor) -> JTensor:
    return self._shard(x, self.activation_split_dims_mapping.blnh)

  def _shard_bnh(self, x: JTensor) -> JTensor:
    blnh = self.activation_split_dims_mapping.blnh
    return self._shard(x, None if blnh is None else
                       [blnh[0], blnh[2], blnh[3]])

  def _shard_blh(self, x: JTensor) -> JTensor:
    ap = self.activation_split_dims_mapping
    mapping = ap.blh
    if mapping is None and ap.blnh is not None:
      mapping = [ap.blnh[0], ap.blnh[1], ap.blnh[3]]
    return self._shard(x, mapping)

  def _shard_kv(self, x: JTensor) -> JTensor:
    """Shards cached keys/values ([B, L, H] or [B, L, K, H])."""
    if self.num_kv_heads == 1:
      return self._shard_blh(x)
    return self._shard_blnh(x)

  def _shard_bld(self, x: JTensor) -> JTensor:
    return self._shard(x, self.activation_split_dims_mapping.bld)

  def _shard_bd(self, x: JTensor) -> JTensor:
    ap = self.activation_split_dims_mapping
    bd = ap.bd
    if bd is None and ap.bld is not None:
      bd = [ap.bld[0], ap.bld[2]]
    return self._shard(x, bd)

  # -- Math -------------------------------------------------------------------

  def _scale_query(self, query: JTensor) -> JTensor:
    if self.scale_query_by_dim_per_head and self.dim_per_head is not None:
      dim = self.dim_per_head
    else:
      dim = self.hidden_dim // self.num_heads
    return query * dim**-0.5

  def _with_head_axis(self, kv: JTensor) -> JTensor:
    """Keys/values [B, S, H] (K == 1) -> [B, S, 1, H]; [B, S, K, H] as is."""
    return kv[..., None, :] if self.num_kv_heads == 1 else kv

  def _attention(
      self,
      query: JTensor,
      key: JTensor,
      value: JTensor,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
      dropout: bool,
  ) -> tuple[JTensor, JTensor]:
    """Scaled query [B, T, N, H] over key/value [B, S, K, H]."""
    return attentions.dot_product_attention(
        self._scale_query(query), key, value, atten_mask,
        relative_bias=relative_bias, logit_cap=self.atten_logit_cap,
        extra_logit=self.attention_extra_logit,
        probs_dropout=self.atten_dropout if dropout else None,
        qk_einsum=self.qk_einsum, pv_einsum=self.pv_einsum)

  def _chunked_attention(
      self,
      query: JTensor,
      key: JTensor,
      value: JTensor,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
  ) -> JTensor:
    """Query chunk i attends to the keys of chunks 0..i (causal)."""
    t, s, splits = query.shape[1], key.shape[1], self.chunked_attn_num_seq_split
    if t != s or s % splits:
      raise ValueError(
          f'{_where(self)}: chunked_attn_num_seq_split={splits} needs '
          f'self-attention with a length divisible by it, got query length '
          f'{t}, key length {s}.')
    w = s // splits
    chunks = []
    for i in range(splits):
      q_rows, k_cols = slice(i * w, (i + 1) * w), slice(0, (i + 1) * w)
      mask = atten_mask[:, :, q_rows if atten_mask.shape[2] > 1 else
                        slice(None), k_cols]
      bias = (None if relative_bias is None else
              relative_bias[:, :, q_rows, k_cols])
      encoded, _ = self._attention(
          query[:, q_rows], key[:, k_cols], value[:, k_cols], mask, bias,
          dropout=True)
      chunks.append(encoded)
    return jnp.concatenate(chunks, axis=1)

  def _relative_bias(
      self, query_vec: JTensor, key_vec: JTensor,
      query_segment_pos: JTensor | None, key_segment_pos: JTensor | None,
  ) -> JTensor | None:
    if self.relative_bias_tpl is None:
      return None
    def default_pos(x: JTensor) -> JTensor:
      return jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
    if query_segment_pos is None:
      query_segment_pos = default_pos(query_vec)
    if key_segment_pos is None:
      key_segment_pos = default_pos(key_vec)
    return self.relative_bias(query_segment_pos, key_segment_pos)

  def _rotate_keys(self, key: JTensor, position: JTensor | None,
                   step: bool) -> JTensor:
    """RoPE of keys shaped as the projection returns them."""
    rope = self.rotary_position_emb
    rotated = (rope.extend_step if step else rope)(
        self._with_head_axis(key) if self.num_kv_heads == 1 else key, position)
    return rotated.reshape(key.shape)

  def __call__(
      self,
      query_vec: JTensor,
      key_vec: JTensor,
      value_vec: JTensor,
      atten_mask: JTensor,
      query_segment_pos: JTensor | None = None,
      key_segment_pos: JTensor | None = None,
  ) -> tuple[JTensor, JTensor | None]:
    """Attends from `query_vec` over `key_vec`/`value_vec`.

    Args:
      query_vec: [B, T, D].
      key_vec: [B, S, D].
      value_vec: [B, S, D].
      atten_mask: Additive mask [1|B, 1, 1|T, S].
      query_segment_pos: [B, T] positions (rotary/relative positions).
      key_segment_pos: [B, S].

    Returns:
      (encoded [B, T, D], probs): probs are [B, N, T, S] for one key/value
      head; with several they are the same values reshaped to [B, T, N, S]
      (as Pax returns them); None when chunked.
    """
    b, t = query_vec.shape[:2]
    s = key_vec.shape[1]
    shape = atten_mask.shape
    if (len(shape) != 4 or shape[0] not in (1, b) or shape[1] != 1
        or shape[2] not in (1, t) or shape[3] != s):
      raise ValueError(
          f'{_where(self)}: atten_mask {shape} must be [1|{b}, 1, 1|{t}, {s}].')
    query = checkpoint_name(self.query(query_vec), 'query_proj')
    key = checkpoint_name(self.key(key_vec), 'key_proj')
    value = checkpoint_name(self.value(value_vec), 'value_proj')
    if not self.consolidate_rope_key_state:
      self._fprop_update_decode_state('key_state', key)
    self._fprop_update_decode_state('value_state', value)
    if self.use_rotary_position_emb:
      query = self.rotary_position_emb(query, query_segment_pos)
      key = self._rotate_keys(key, key_segment_pos, step=False)
      self._fprop_update_decode_state(self._rotary_key_name(), key)
    relative_bias = self._relative_bias(
        query_vec, key_vec, query_segment_pos, key_segment_pos)
    query = self._shard_blnh(query)
    key, value = self._shard_kv(key), self._shard_kv(value)
    key, value = self._with_head_axis(key), self._with_head_axis(value)
    if self.chunked_attn_num_seq_split > 1:
      encoded = self._chunked_attention(query, key, value, atten_mask,
                                        relative_bias)
      probs = None
    else:
      encoded, probs = self._attention(query, key, value, atten_mask,
                                       relative_bias, dropout=True)
      if self.num_kv_heads > 1 and probs is not None:
        probs = probs.reshape(b, t, self.num_heads, s)
    return attn_math.output_projection(
        self.post, encoded, self._shard_blnh, self._shard_bld), probs

  # -- Decoding ---------------------------------------------------------------

  def _rotary_key_name(self) -> str:
    return attn_math.rotary_key_name(self.consolidate_rope_key_state)

  def _fprop_update_decode_state(self, name: str, value: JTensor) -> None:
    """Stores `value` in the decoder cache when it is mutable."""
    attn_math.fprop_update_decode_state(self, name, value)

  def decoding_state_sequence_length(self) -> int:
    """The length of the cached sequences."""
    return self.get_decode_state('value_state').shape[1]

  def init_states(self, target_batch_size: int, target_max_length: int) -> None:
    """Not supported (as in Pax): fill the cache with a forward pass."""
    raise NotImplementedError(
        f'{_where(self)}: init_states is not supported; run the layer on the '
        'prefix with the decoder_cache collection mutable.')

  def extend_decode_state(self, name: str, value: JTensor, time_step: JTensor,
                          time_dim: int) -> JTensor:
    """Writes one step ([B, H] / [B, K, H]) or several at `time_step`.

    Args:
      name: The decoder-cache entry, [B, S, H] or [B, S, K, H].
      value: The new step(s): without the time dim for one step.
      time_step: Scalar index into the time dim.
      time_dim: The time dim of the entry.

    Returns:
      The updated entry.
    """
    return attn_math.write_decode_state(self, name, value, time_step,
                                        time_dim)

  def _cached_kv(self, name: str, batch: int) -> JTensor:
    """The cached keys or values for a query batch of `batch`."""
    del batch
    return self._shard_kv(self.get_decode_state(name))

  def _one_step_attention(
      self, query: JTensor, key_name: str, value_name: str,
      atten_mask: JTensor, relative_bias: JTensor | None,
  ) -> JTensor:
    """Query [B, N, H] (or [B, T, N, H]) over the cache -> same shape."""
    one_step = query.ndim == 3
    b = query.shape[0]
    key = self._cached_kv(key_name, b)
    value = self._cached_kv(value_name, b)
    s = key.shape[1]
    if atten_mask.ndim != query.ndim or atten_mask.shape[-1] != s:
      want = '[1|B, 1, S]' if one_step else '[1|B, 1, T, S]'
      raise ValueError(f'{_where(self)}: extend_step atten_mask '
                       f'{atten_mask.shape} must be {want} with S={s}.')
    if one_step:
      query, atten_mask = query[:, None], atten_mask[:, :, None]
    elif relative_bias is not None:
      raise NotImplementedError(f'{_where(self)}: extending several steps '
                                'with a relative bias is not supported.')
    encoded, _ = self._attention(
        query, self._with_head_axis(key), self._with_head_axis(value),
        atten_mask, relative_bias, dropout=False)
    return encoded[:, 0] if one_step else encoded

  def _step_position(self, time_step: JTensor, batch: int,
                     segment_pos: JTensor | None) -> JTensor:
    if segment_pos is None:
      return jnp.broadcast_to(time_step, [batch])
    return segment_pos if segment_pos.ndim == 1 else segment_pos[:, -1]

  def _cache_time_step(self, time_step: JTensor) -> JTensor:
    """Where `time_step` is written in the current cache."""
    return time_step

  def extend_step(
      self,
      query_vec: JTensor,
      *,
      atten_mask: JTensor,
      time_step: JTensor,
      segment_pos: JTensor | None,
      is_cross_attention: bool = False,
  ) -> JTensor:
    """Attends from the step(s) at `time_step` over the decoder cache.

    Args:
      query_vec: [B, D] (one step) or [B, T, D] (T steps from time_step).
      atten_mask: Additive mask [1|B, 1, S] (or [1|B, 1, T, S]).
      time_step: Scalar, the 0-based step; its keys and values are written
        into the cache (unless `is_cross_attention`).
      segment_pos: [B] or [B, T] positions (None: `time_step`); with T
        steps the last one's position is used.
      is_cross_attention: The cache holds the encoder's keys and values and
        is not updated.

    Returns:
      encoded: [B, D] (or [B, T, D]).
    """
    if query_vec.ndim not in (2, 3):
      raise ValueError(f'{_where(self)}: extend_step takes query_vec [B, D] '
                       f'or [B, T, D], got {query_vec.shape}.')
    time_step = jnp.asarray(time_step)
    if time_step.ndim:
      raise ValueError(f'{_where(self)}: time_step must be a scalar, got '
                       f'shape {time_step.shape}.')
    step = self._cache_time_step(time_step)
    query = self.query(query_vec)
    key_name, value_name = 'key_state', 'value_state'
    if not is_cross_attention:
      key, value = self.key(query_vec), self.value(query_vec)
      self.extend_decode_state(value_name, value, step, 1)
      if not self.consolidate_rope_key_state:
        self.extend_decode_state(key_name, key, step, 1)
    if self.use_rotary_position_emb:
      key_name = self._rotary_key_name()
      position = self._step_position(time_step, query_vec.shape[0],
                                     segment_pos)
      query = self.rotary_position_emb.extend_step(query, position)
      if not is_cross_attention:
        key = self._rotate_keys(key, position, step=True)
        self.extend_decode_state(key_name, key, step, 1)
    relative_bias = None
    if self.relative_bias_tpl is not None:
      relative_bias = self.relative_bias.extend_step(
          seq_length=self.decoding_state_sequence_length(),
          time_step=time_step)
    encoded = self._one_step_attention(
        query, key_name, value_name, atten_mask, relative_bias)
    encoded = self.post(encoded)
    if query_vec.ndim == 2:
      return self._shard_bd(encoded)
    return self._shard_bld(encoded)

  def transform_decode_state(
      self, transform_fn: DecodeStateTransformFn) -> None:
    """Replaces each cached state by `transform_fn(state, 0, 1)`."""
    attn_math.transform_decode_states(self, transform_fn, self._shard_kv)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int) -> None:
    """Not supported here: use MultiQueryDotProductAttentionLPB."""
    raise NotImplementedError(
        f'{_where(self)}: lazy_broadcast_prefix needs '
        'MultiQueryDotProductAttentionLPB.')


class MultiQueryDotProductAttentionLPB(MultiQueryDotProductAttention):
  """`MultiQueryDotProductAttention` with lazy prefix broadcast.

  `lazy_broadcast_prefix(num_suffix_samples, suffix_length)` moves the
  decoder cache into the `prefix_decoder_cache` collection as chunk
  `<name>_<i>` and starts an empty chunk for `num_suffix_samples` samples
  per row. Each chunk is kept once per row of its own batch and repeated for
  the samples only inside the attention, so the query batch after k
  broadcasts is b * n_1 * ... * n_k and the cache spans all chunks (the
  mask's S is their total length; `time_step` counts from the first).

  The chunks are stored flattened, [rows, L, ...], where Pax stores
  [b, n_1, ..., n_i, L, ...].
  """

  def _prefix_chunks(self, name: str) -> list[JTensor]:
    if not self.has_variable(base_layer.PREFIX_DECODE_CACHE, f'{name}_0'):
      return []
    chunks, i = [], 0
    while self.has_variable(base_layer.PREFIX_DECODE_CACHE, f'{name}_{i}'):
      chunks.append(
          self.get_variable(base_layer.PREFIX_DECODE_CACHE, f'{name}_{i}'))
      i += 1
    return chunks

  def _prefix_length(self) -> int:
    return sum(c.shape[1] for c in self._prefix_chunks('value_state'))

  def decoding_state_sequence_length(self) -> int:
    """The length of all chunks together."""
    return self._prefix_length() + super().decoding_state_sequence_length()

  def _cache_time_step(self, time_step: JTensor) -> JTensor:
    return time_step - self._prefix_length()

  def _cached_kv(self, name: str, batch: int) -> JTensor:
    parts = self._prefix_chunks(name) + [self.get_decode_state(name)]
    expanded = []
    for part in parts:
      if batch % part.shape[0]:
        raise ValueError(f'{_where(self)}: query batch {batch} is not a '
                         f'multiple of the cached batch {part.shape[0]}.')
      expanded.append(jnp.repeat(part, batch // part.shape[0], axis=0))
    return self._shard_kv(jnp.concatenate(expanded, axis=1))

  def _one_step_attention(
      self, query: JTensor, key_name: str, value_name: str,
      atten_mask: JTensor, relative_bias: JTensor | None,
  ) -> JTensor:
    # As Pax, the mask may span more steps than the chunks so far.
    length = self.decoding_state_sequence_length()
    if atten_mask.shape[-1] > length:
      atten_mask = atten_mask[..., :length]
    if relative_bias is not None and relative_bias.shape[-1] > length:
      relative_bias = relative_bias[..., :length]
    return super()._one_step_attention(
        query, key_name, value_name, atten_mask, relative_bias)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int) -> None:
    """Freezes the cache as a prefix chunk; starts one for the samples.

    Args:
      num_suffix_samples: Samples per row of the current batch.
      suffix_length: Steps the new chunk holds.
    """
    attentions._check_positive(  # pylint: disable=protected-access
        self, num_suffix_samples=num_suffix_samples,
        suffix_length=suffix_length)
    cache = dict(self.variables.get(base_layer.DECODE_CACHE, {}))
    chunk_id = len(self._prefix_chunks('value_state'))
    for name, state in cache.items():
      self.put_variable(base_layer.PREFIX_DECODE_CACHE,
                        f'{name}_{chunk_id}', state)
      shape = (state.shape[0] * num_suffix_samples, suffix_length)
      self.update_decode_state(
          name, jnp.zeros(shape + state.shape[2:], state.dtype))

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int,
      right_align_fn: DecodeStateTransformFn) -> None:
    """Moves the last `max_prefix_size` prefix steps into the current chunk
    and right-aligns it with `right_align_fn(state, 0, 1)`; the prefix chunks
    become empty (length 0), as in Pax.

    Args:
      max_prefix_size: How many prefix steps to keep.
      right_align_fn: The transform (e.g. decoder_utils.right_align_state_fn).
    """
    cache = dict(self.variables.get(base_layer.DECODE_CACHE, {}))
    for name, state in cache.items():
      if not isinstance(state, jax.Array):
        continue
      chunks = self._prefix_chunks(name)
      windows, left = [state], max_prefix_size
      for chunk in reversed(chunks):
        if left <= 0:
          break
        take = min(chunk.shape[1], left)
        left -= take
        recent = chunk[:, chunk.shape[1] - take:]
        # Each chunk row serves the samples of the rows after it.
        windows.insert(0, jnp.repeat(recent, state.shape[0] // chunk.shape[0],
                                     axis=0))
      joined = jnp.concatenate(windows, axis=1)
      self.update_decode_state(name, right_align_fn(joined, 0, 1))
      for i, chunk in enumerate(chunks):
        self.put_variable(
            base_layer.PREFIX_DECODE_CACHE, f'{name}_{i}',
            jnp.zeros((chunk.shape[0], 0) + chunk.shape[2:], chunk.dtype))

  def transform_decode_state(
      self, transform_fn: DecodeStateTransformFn) -> None:
    """Transforms the current chunk (the prefix chunks stay as they are)."""
    super().transform_decode_state(transform_fn)
