"""Attention layers and the additive attention masks they take.

Public names:
  masks (0 where attention is allowed, a large negative number where not,
    shaped to broadcast against logits [B, N, T, S]): causal_mask,
    segment_mask, causal_segment_mask, convert_paddings_to_mask,
    limited_context_mask, merge_masks, shift_1d;
  math: per_dim_scale, cap_logits, softmax_with_extra_logit,
    relative_position_bucket, causal_depthwise_conv1d, dot_product_attention;
  layers: PerDimScale, RelativeBias, AttentionProjection,
    CombinedQKVProjectionLayer, CausalDepthwiseConv1D, DotProductAttention,
    DotProductAttentionWithLPB (lazy prefix broadcast, in _attention_lpb).

The attention math lives in `dot_product_attention`, a function the layers
call (as flax's `MultiHeadDotProductAttention` calls its function): einsums
over all heads at once, logits capped and masked in float32, softmax in
float32, probabilities cast back to the activation dtype. Keys and values may
have fewer heads than queries (grouped-query / multi-query attention):

  atten = base_layer.instantiate(pax_fiddle.Config(
      attentions.DotProductAttention, name='atten', input_dim=16,
      hidden_dim=16, num_heads=4, num_kv_heads=2))
  mask = attentions.causal_mask(x)                  # x: [B, T, 16]
  variables = atten.init(jax.random.PRNGKey(0), x, x, x, mask)
  y, probs = atten.apply(variables, x, x, x, mask)  # [B, T, 16], [B, 4, T, T]

Incremental decoding: a forward pass run with the `decoder_cache` collection
mutable stores the projected keys and values ([B, S, K, H]); `extend_step`
then writes step `time_step` into them and attends over the cache.

The masks and math functions live in the private sibling `_attention_math`
and are re-exported here by name. The file is still long (past 1,000 lines)
because `DotProductAttention` carries upstream's 40 fields and every decoding
path (rotary, Primer depthwise convolutions, relative bias, cross attention)
next to its forward pass, which reads best in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

import fiddle as fdl
import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _attention_math
from praxis.layers import _bias_add
from praxis.layers import base_ops
from praxis.layers import embedding_softmax
from praxis.layers import stochastics

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
DecodeStateTransformFn = Callable[[JTensor, int, int], JTensor]

# Masks and math, defined in _attention_math.
causal_mask = _attention_math.causal_mask
segment_mask = _attention_math.segment_mask
causal_segment_mask = _attention_math.causal_segment_mask
convert_paddings_to_mask = _attention_math.convert_paddings_to_mask
limited_context_mask = _attention_math.limited_context_mask
merge_masks = _attention_math.merge_masks
shift_1d = _attention_math.shift_1d
per_dim_scale = _attention_math.per_dim_scale
cap_logits = _attention_math.cap_logits
softmax_with_extra_logit = _attention_math.softmax_with_extra_logit
relative_position_bucket = _attention_math.relative_position_bucket
causal_depthwise_conv1d = _attention_math.causal_depthwise_conv1d
dot_product_attention = _attention_math.dot_product_attention


# ---------------------------------------------------------------------------
# Layers.
# ---------------------------------------------------------------------------


def _where(layer: base_layer.BaseLayer) -> str:
  return f'{type(layer).__name__} ({layer.name})'


def _check_positive(layer: base_layer.BaseLayer, **fields: Any) -> None:
  for name, value in fields.items():
    if not value or value <= 0:
      raise ValueError(
          f'{_where(layer)}: {name} must be positive, got {value}.'
      )


def _merge_axes(*entries: Any) -> tuple[Any, ...]:
  """One sharding entry for dims merged from dims sharded as `entries`."""
  merged = ()
  for entry in entries:
    if isinstance(entry, (list, tuple)):
      merged += tuple(entry)
    elif entry is not None:
      merged += (entry,)
  return merged


class PerDimScale(base_layer.BaseLayer):
  """Scales each dim of the last axis by a learned factor (see per_dim_scale).

  Attributes:
    dim: Size of the last axis.
  """

  dim: int = 0

  def setup(self) -> None:
    _check_positive(self, dim=self.dim)
    self.create_variable(
        'per_dim_scale',
        WeightHParams(shape=[self.dim], init=WeightInit.Constant(0.0)),
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns the scaled `inputs` [..., dim]."""
    if inputs.shape[-1] != self.dim:
      raise ValueError(
          f'{_where(self)}: inputs {inputs.shape} do not end in dim={self.dim}.'
      )
    return per_dim_scale(inputs, self.theta.per_dim_scale)


class RelativeBias(base_layer.BaseLayer):
  """A learned bias per head and bucketed key - query offset (as in T5).

  Attributes:
    num_heads: Number of attention heads.
    use_length_as_position: In training, use 0..T-1 as positions (ignoring
      segment positions) to save memory; the batch dim of the bias is then 1.
    relative_attention_num_buckets: Number of buckets.
    relative_attention_max_distance: Offset at which the last bucket starts.
    bidirectional: Whether keys after the query get their own buckets.
    use_xavier_init: Initialise the bias with Xavier instead of a Gaussian.
  """

  num_heads: int = 1
  use_length_as_position: bool = True
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  bidirectional: bool = False
  use_xavier_init: bool = False

  def setup(self) -> None:
    buckets = self.relative_attention_num_buckets
    if self.use_xavier_init:
      init = WeightInit.Xavier()
    else:
      init = WeightInit.Gaussian((self.num_heads * buckets) ** -0.5)
    self.create_variable(
        'wrb', WeightHParams(shape=[self.num_heads, buckets], init=init)
    )

  def __call__(
      self, query_segment_pos: JTensor, key_segment_pos: JTensor | None = None
  ) -> JTensor:
    """The bias [B|1, N, T, S] for positions [B, T] (queries), [B, S] (keys)."""
    if key_segment_pos is None:
      key_segment_pos = query_segment_pos
    if self.use_length_as_position and not self.do_eval:
      key_pos = jnp.arange(key_segment_pos.shape[1])[None, None, :]
      query_pos = jnp.arange(query_segment_pos.shape[1])[None, :, None]
    else:
      key_pos = key_segment_pos[:, None, :]
      query_pos = query_segment_pos[:, :, None]
    return self._bias(key_pos - query_pos)

  def _relative_position_bucket(self, relative_position: JTensor) -> JTensor:
    """The bucket (int32 in [0, relative_attention_num_buckets)) of each key -
    query offset in `relative_position` (any shape); needs no variables."""
    return relative_position_bucket(
        relative_position,
        self.relative_attention_num_buckets,
        self.relative_attention_max_distance,
        self.bidirectional,
    )

  def _bias(self, relative_position: JTensor) -> JTensor:
    """[B, T, S] offsets -> [B, N, T, S] biases (a gather of `wrb`)."""
    buckets = self._relative_position_bucket(relative_position)
    return jnp.moveaxis(jnp.take(self.theta.wrb.T, buckets, axis=0), -1, 1)

  def extend_step(
      self, seq_length: int, time_step: int | JTensor | None = None
  ) -> JTensor:
    """The bias [1, N, 1, S] of the query at `time_step` over S keys."""
    key_pos = jnp.arange(seq_length, dtype=jnp.int32)
    return self._bias((key_pos - time_step)[None, None, :])


class AttentionProjection(base_layer.BaseLayer):
  """Projects [..., D] to heads [..., N, H], or heads back to [..., D].

  The weight `w` is [D, N, H] ([N, H, D] for an output projection with
  `use_nhd_shape`); the bias `b` is [N, H] (input) or [D] (output).

  Attributes:
    input_dim: D.
    num_heads: N.
    dim_per_head: H.
    is_output_projection: Project heads back to D ('...NH,DNH->...D').
    use_bias: Whether to add a bias.
    attention_combine_dims: Keep N and H as one dim N*H in the variables.
    use_nhd_shape: Store the output projection's weight as [N, H, D].
    explicit_fan_in_fan_out_axes: Tell the initialiser which weight axes are
      fan-in and fan-out (else the default fans of a 3-D weight are used).
    einsum_tpl: The einsum op (replaceable, e.g. by a quantized one).
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  is_output_projection: bool = False
  use_bias: bool = True
  attention_combine_dims: bool = False
  use_nhd_shape: bool = False
  explicit_fan_in_fan_out_axes: bool = False
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  @property
  def _nhd(self) -> bool:
    return self.is_output_projection and self.use_nhd_shape

  def _weight_sharding(self) -> SplitDimsMapping:
    wt = self.weight_split_dims_mapping.wt
    if not self.attention_combine_dims or wt is None or len(wt) != 3:
      return wt
    if self._nhd:
      return [_merge_axes(wt[0], wt[1]), wt[2]]
    return [wt[0], _merge_axes(wt[1], wt[2])]

  def setup(self) -> None:
    _check_positive(
        self,
        input_dim=self.input_dim,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
    )
    if self.attention_combine_dims and self.use_bias:
      raise ValueError(f'{_where(self)}: attention_combine_dims needs '
                       'use_bias=False.')
    n, h, d = self.num_heads, self.dim_per_head, self.input_dim
    hd = [n * h] if self.attention_combine_dims else [n, h]
    shape = hd + [d] if self._nhd else [d] + hd
    if self._nhd:
      fans = ([-1], [-2]) if self.attention_combine_dims else ([-1], [-2, -3])
    else:
      fans = ([-2], [-1]) if self.attention_combine_dims else ([-3], [-1, -2])
    explicit = self.explicit_fan_in_fan_out_axes
    self.create_variable(
        'w',
        WeightHParams(
            shape=shape,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self._weight_sharding(),
            fan_in_axes=fans[0] if explicit else None,
            fan_out_axes=fans[1] if explicit else None,
        ),
    )
    if self.use_bias:
      self._create_bias()
    self.create_child('einsum', self.einsum_tpl.clone())

  def _create_bias(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    sharded = self.mesh_shape is not None and wt is not None
    if self.is_output_projection:
      shape = [self.input_dim]
      sharding = [wt[-1] if self._nhd else wt[0]] if sharded else None
    else:
      shape = [self.num_heads, self.dim_per_head]
      sharding = [wt[1], wt[2]] if sharded else None
    self.create_variable(
        'b',
        WeightHParams(
            shape=shape,
            init=WeightInit.Constant(0.0),
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=sharding,
        ),
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """[..., D] -> [..., N, H], or [..., N, H] -> [..., D] for the output."""
    n, h, d = self.num_heads, self.dim_per_head, self.input_dim
    w = self.theta.w
    if self.attention_combine_dims:
      w = w.reshape([n, h, d] if self._nhd else [d, n, h])
    inputs = self._cast_to_fprop_dtype(inputs)
    if self.is_output_projection:
      if inputs.shape[-2:] != (n, h):
        raise ValueError(
            f'{_where(self)}: inputs {inputs.shape} must end in [{n}, {h}].'
        )
      eqn = '...NH,NHD->...D' if self.use_nhd_shape else '...NH,DNH->...D'
    else:
      if inputs.shape[-1] != d:
        raise ValueError(
            f'{_where(self)}: inputs {inputs.shape} must end in input_dim={d}.'
        )
      eqn = '...D,DNH->...NH'
    out = self.einsum(eqn, inputs, w)
    return _bias_add.add_bias(out, self.theta.b) if self.use_bias else out

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> JTensor:
    """One decoding step: the same projection."""
    del time_step
    return self(inputs)


class CombinedQKVProjectionLayer(base_layer.BaseLayer):
  """Query, key and value projections from one [3, D, N, H] weight.

  Attributes:
    input_dim: D.
    num_heads: N.
    dim_per_head: H.
    use_bias: Whether to add a bias `b` [3, N, H].
    attention_combine_dims: Keep N and H as one dim N*H in the variables.
    explicit_fan_in_fan_out_axes: Tell the initialiser which weight axes are
      fan-in and fan-out.
    einsum_tpl: The einsum op.
  """

  input_dim: int = 0
  num_heads: int = 0
  dim_per_head: int = 0
  use_bias: bool = True
  attention_combine_dims: bool = False
  explicit_fan_in_fan_out_axes: bool = False
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  def setup(self) -> None:
    _check_positive(
        self,
        input_dim=self.input_dim,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
    )
    wt = self.weight_split_dims_mapping.wt
    w_sharding = b_sharding = None
    if wt is not None:
      if self.attention_combine_dims and len(wt) == 3:
        wt = [wt[0], _merge_axes(wt[1], wt[2])]
      w_sharding = [None] + list(wt)
      b_sharding = [None] + list(wt[1:])
    n, h = self.num_heads, self.dim_per_head
    hd = [n * h] if self.attention_combine_dims else [n, h]
    fans = ([-2], [-1]) if self.attention_combine_dims else ([-3], [-1, -2])
    explicit = self.explicit_fan_in_fan_out_axes
    self.create_variable(
        'w',
        WeightHParams(
            shape=[3, self.input_dim] + hd,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=w_sharding,
            fan_in_axes=fans[0] if explicit else None,
            fan_out_axes=fans[1] if explicit else None,
        ),
    )
    if self.use_bias:
      self.create_variable(
          'b',
          WeightHParams(
              shape=[3] + hd,
              init=WeightInit.Constant(0.0),
              mesh_shape=self.mesh_shape,
              tensor_split_dims_mapping=b_sharding,
          ),
      )
    self.create_child('einsum', self.einsum_tpl.clone())

  def __call__(self, inputs: JTensor) -> tuple[JTensor, JTensor, JTensor]:
    """[..., D] -> (query, key, value), each [..., N, H]."""
    n, h = self.num_heads, self.dim_per_head
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
          f'{_where(self)}: inputs {inputs.shape} must end in '
          f'input_dim={self.input_dim}.'
      )
    w = self.theta.w.reshape([3, self.input_dim, n, h])
    qkv = self.einsum('...D,KDNH->K...NH', inputs, w)
    qkv = checkpoint_name(qkv, 'combined_qkv_proj')
    if self.use_bias:
      b = self.theta.b.reshape([3, n, h])
      qkv = qkv + jnp.expand_dims(b, tuple(range(1, inputs.ndim)))
    query, key, value = qkv
    return (
        checkpoint_name(query, 'query_proj'),
        checkpoint_name(key, 'key_proj'),
        checkpoint_name(value, 'value_proj'),
    )

  def extend_step(
      self, inputs: JTensor, *, time_step: JTensor
  ) -> tuple[JTensor, JTensor, JTensor]:
    """One decoding step: the same projections."""
    del time_step
    return self(inputs)


class CausalDepthwiseConv1D(base_layer.BaseLayer):
  """Causal depthwise convolution over time, as in Primer (2109.08668).

  Variables `dconv_0` .. `dconv_{kernel_size-1}`, each shaped `hidden_dims`;
  `dconv_0` starts at 0.5 and the others at 0.5 / kernel_size.

  Attributes:
    kernel_size: Number of taps.
    hidden_dims: Shape of each tap (an int for the last dim only, or a list
      for several trailing dims, e.g. [N, H]).
  """

  kernel_size: int = 3
  hidden_dims: int | Sequence[int] = 0

  def _shape(self) -> list[int]:
    dims = self.hidden_dims
    return list(dims) if isinstance(dims, (list, tuple)) else [dims]

  def setup(self) -> None:
    _check_positive(self, kernel_size=self.kernel_size)
    if not all(d > 0 for d in self._shape()):
      raise ValueError(f'{_where(self)}: hidden_dims must be positive, got '
                       f'{self.hidden_dims}.')
    for i in range(self.kernel_size):
      value = 0.5 if i == 0 else 0.5 / self.kernel_size
      self.create_variable(
          f'dconv_{i}',
          WeightHParams(
              shape=self._shape(),
              init=WeightInit.Constant(value),
              mesh_shape=self.mesh_shape,
              tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
          ),
      )

  def _kernels(self) -> list[JTensor]:
    return [self.theta[f'dconv_{i}'] for i in range(self.kernel_size)]

  def __call__(
      self, inputs: JTensor, axis: int, segment_pos: JTensor | None = None
  ) -> JTensor:
    """Convolves `inputs` along `axis` (see causal_depthwise_conv1d)."""
    return causal_depthwise_conv1d(
        inputs, self._kernels(), axis, segment_pos
    )

  def extend_step(
      self,
      inputs: JTensor,
      axis: int,
      step: int | JTensor,
      segment_pos: JTensor | None,
  ) -> JTensor:
    """The convolution at time `step` of the full sequence `inputs`.

    Args:
      inputs: The whole sequence (e.g. a decode cache [B, L, N, H]).
      axis: Its time axis.
      step: The time index to compute.
      segment_pos: [B], the position of `step` within its segment (None:
        `step`).

    Returns:
      `inputs` convolved at `step`, without the time axis.
    """
    position = step if segment_pos is None else segment_pos
    position = jnp.reshape(
        jnp.asarray(position), (-1,) + (1,) * (inputs.ndim - 2)
    )
    out = 0.0
    for i, kernel in enumerate(self._kernels()):
      tap = jax.lax.dynamic_index_in_dim(
          inputs, jnp.maximum(step - i, 0), axis, keepdims=False
      )
      out = out + jnp.where(position >= i, tap, 0.0) * kernel
    return out


class DotProductAttention(base_layer.BaseLayer):
  """Multi-head dot-product attention (with grouped-query support).

  Children: `query`, `key`, `value` (or `combined_qkv`), `post`,
  `per_dim_scale`, `atten_dropout`, `qk_einsum`, `pv_einsum`, and, when
  enabled, `rotary_position_emb`, `relative_bias`, `dconv_{q,k,v}`,
  `layer_norm_{q,k}`.

  Attributes:
    input_dim: D, or a dict with 'query', 'key' and 'value' dims.
    hidden_dim: N * H; sets H when `dim_per_head` is None.
    num_heads: N, the number of query heads.
    dim_per_head: H (None: hidden_dim // num_heads).
    num_kv_heads: K, the number of key/value heads (None: N); K must divide
      N, and query head n uses key/value head n // (N // K).
    dropout_tpl: Template of the attention-probability dropout.
    atten_dropout_prob: Dropout probability of the attention probabilities.
    proj_tpl: Template of the query/key/value/output projections.
    dconv_qkv: Apply Primer's causal depthwise convolution after the q/k/v
      projections (self-attention only).
    dconv_kernel_size: Kernel size of that convolution.
    internal_gshard_gaussian_init: Initialise the projections with GShard's
      Gaussian scales.
    combine_qkv: Project q, k and v with one combined weight (self-attention
      only).
    combined_qkv_proj_tpl: Template of the combined projection.
    use_bias: Whether the projections have biases.
    output_proj_use_nhd_shape: Store the output weight as [N, H, D].
    internal_enable_query_scale: Scale the queries.
    internal_enable_per_dim_scale: Scale them with a learned PerDimScale
      (else by 1 / sqrt(H)).
    scale_query_by_dim_per_head: Without PerDimScale, scale by dim_per_head
      rather than hidden_dim // num_heads.
    scale_logits_by_head_dims: Also multiply the logits by 1 / sqrt(H).
    atten_logit_cap: If positive, cap the logits by `cap * tanh(x / cap)`.
    use_rotary_position_emb: Apply rotary position embeddings to q and k.
    consolidate_rope_key_state: Cache the rotated keys as `key_state` (no
      separate `key_post_rotary_pos_emb`).
    rotary_position_emb_tpl: Template of the rotary embedding.
    cast_rotary_position_emb: Whether the rotary embedding casts its output
      to the activation dtype.
    relative_bias_tpl: Template of an optional RelativeBias.
    attention_extra_logit: If set, an extra softmax logit of this value.
    ngrammer_tpl: A post-attention n-grammer (VQNgrammer) of the attention's
      output heads [B, T, N, H], before the output projection (cached as
      `encoded_pre_ngrammer` for extend_step). Only in the layers that use
      DotProductAttention's own forward pass and extend_step (and
      DotProductAttentionWithLPB, one step without a broadcast prefix).
    decode_cache: Whether the forward pass fills the decoder cache.
    attention_mask_summary: Record the attention mask as a summary.
    zero_fully_masked: Output zeros for queries that see no key.
    qk_einsum_tpl: The einsum op computing the logits.
    pv_einsum_tpl: The einsum op combining the values.
    per_dim_scale_tpl: Template of the PerDimScale.
    causal_depthwise_conv1d_tpl: Template of the Primer convolutions.
    ln_tpl: If set, a normalization of q and k per head (QK norm).
    decoding_maybe_shard_projections: Shard the one-step projections.
  """

  # extend_step applies `ngrammer_tpl` (see _check_config).
  _extend_step_applies_ngrammer = True

  input_dim: int | dict[str, int] = 0
  hidden_dim: int = 0
  num_heads: int = 1
  dim_per_head: int | None = None
  num_kv_heads: int | None = None
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  atten_dropout_prob: float = 0.0
  proj_tpl: LayerTpl = template_field(AttentionProjection)
  dconv_qkv: bool = False
  dconv_kernel_size: int = 3
  internal_gshard_gaussian_init: bool = False
  combine_qkv: bool = False
  combined_qkv_proj_tpl: LayerTpl = template_field(CombinedQKVProjectionLayer)
  use_bias: bool = True
  output_proj_use_nhd_shape: bool = False
  internal_enable_query_scale: bool = True
  internal_enable_per_dim_scale: bool = True
  scale_query_by_dim_per_head: bool = False
  scale_logits_by_head_dims: bool = False
  atten_logit_cap: float = 0.0
  use_rotary_position_emb: bool = False
  consolidate_rope_key_state: bool = False
  rotary_position_emb_tpl: LayerTpl | None = template_field(
      embedding_softmax.RotaryPositionalEmbedding
  )
  cast_rotary_position_emb: bool = True
  relative_bias_tpl: LayerTpl | None = template_field(None)
  attention_extra_logit: float | None = None
  ngrammer_tpl: LayerTpl | None = template_field(None)
  decode_cache: bool = True
  attention_mask_summary: bool = False
  zero_fully_masked: bool = False
  qk_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  pv_einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)
  per_dim_scale_tpl: LayerTpl = template_field(PerDimScale)
  causal_depthwise_conv1d_tpl: LayerTpl = template_field(CausalDepthwiseConv1D)
  ln_tpl: LayerTpl | None = template_field(None)
  decoding_maybe_shard_projections: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      proj: Of the [D, N, H] projection weights.
      dconv: Of the [N, H] depthwise convolution taps.
    """

    proj: SplitDimsMapping = None
    dconv: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      blnh: Of the [B, L, N, H] queries, keys, values and contexts.
      bld: Of the [B, L, D] output.
    """

    blnh: SplitDimsMapping = None
    bld: SplitDimsMapping = None

  # -- Set-up -----------------------------------------------------------------

  @property
  def head_dim(self) -> int:
    """H, the dims per head."""
    if self.dim_per_head is not None:
      return self.dim_per_head
    return self.hidden_dim // self.num_heads

  @property
  def kv_heads(self) -> int:
    """K, the number of key/value heads."""
    return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

  def _input_dims(self) -> tuple[int, int, int]:
    """(query, key, value) input dims."""
    if isinstance(self.input_dim, Mapping):
      return tuple(self.input_dim[k] for k in ('query', 'key', 'value'))
    return (self.input_dim,) * 3

  def _check_config(self) -> None:
    where = _where(self)
    _check_positive(self, num_heads=self.num_heads)
    if not all(d and d > 0 for d in self._input_dims()):
      raise ValueError(f'{where}: input_dim must be set, got {self.input_dim}.')
    if self.dim_per_head is None:
      _check_positive(self, hidden_dim=self.hidden_dim)
      if self.hidden_dim % self.num_heads:
        raise ValueError(
            f'{where}: hidden_dim {self.hidden_dim} is not a multiple of '
            f'num_heads {self.num_heads}; set dim_per_head.'
        )
    _check_positive(self, num_kv_heads=self.kv_heads)
    if self.num_heads % self.kv_heads:
      raise ValueError(
          f'{where}: num_kv_heads {self.kv_heads} must divide num_heads '
          f'{self.num_heads}.'
      )
    if self.combine_qkv and (
        self.kv_heads != self.num_heads or len(set(self._input_dims())) > 1
    ):
      raise ValueError(
          f'{where}: combine_qkv needs num_kv_heads == num_heads and one '
          'input_dim.'
      )
    if self.consolidate_rope_key_state and (
        not self.use_rotary_position_emb or self.dconv_qkv
    ):
      raise ValueError(
          f'{where}: consolidate_rope_key_state needs use_rotary_position_emb'
          ' and no dconv_qkv.'
      )
    if self.ngrammer_tpl is not None:
      cls = type(self)
      # The class whose extend_step runs must say that it applies the
      # n-grammer (DotProductAttention, and the LPB one, which hands one step
      # without a broadcast prefix to it).
      extend_owner = next(c for c in cls.__mro__ if 'extend_step' in vars(c))
      if (cls.__call__ is not DotProductAttention.__call__
          or not vars(extend_owner).get('_extend_step_applies_ngrammer')):
        raise ValueError(f'{where}: ngrammer_tpl is not supported by '
                         f'{cls.__name__}.')
      if not hasattr(fdl.get_callable(self.ngrammer_tpl),
                     'ngram_using_attention_scores'):
        raise ValueError(
            f'{where}: ngrammer_tpl must be an n-grammer of embeddings '
            'without ids (a VQNgrammer), got '
            f'{fdl.get_callable(self.ngrammer_tpl).__name__}.')

  def _proj_config(
      self, input_dim: int, num_heads: int, std: float | None
  ) -> LayerTpl:
    p = self.proj_tpl.clone().set(
        input_dim=input_dim,
        num_heads=num_heads,
        dim_per_head=self.head_dim,
        use_bias=self.use_bias,
    )
    if std:
      p.params_init = WeightInit.Gaussian(std)
    proj = self.weight_split_dims_mapping.proj
    if proj is not None and num_heads != self.num_heads:
      proj = [proj[0], None, proj[2]]  # Fewer K/V heads: replicated.
    p.weight_split_dims_mapping.wt = proj
    return p

  def _setup_projections(self) -> None:
    q_dim, k_dim, v_dim = self._input_dims()
    h, n = self.head_dim, self.num_heads
    gshard = self.internal_gshard_gaussian_init
    stds = [
        (q_dim * h) ** -0.5 if gshard else None,
        k_dim**-0.5 if gshard else None,
        v_dim**-0.5 if gshard else None,
        (n * h) ** -0.5 if gshard else None,
    ]
    if self.combine_qkv:
      p = self.combined_qkv_proj_tpl.clone().set(
          input_dim=q_dim, num_heads=n, dim_per_head=h, use_bias=self.use_bias
      )
      p.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.proj
      self.create_child('combined_qkv', p)
    else:
      self.create_child('query', self._proj_config(q_dim, n, stds[0]))
      self.create_child('key', self._proj_config(k_dim, self.kv_heads, stds[1]))
      self.create_child(
          'value', self._proj_config(v_dim, self.kv_heads, stds[2])
      )
    post = self._proj_config(q_dim, n, stds[3]).set(
        is_output_projection=True, use_nhd_shape=self.output_proj_use_nhd_shape
    )
    proj = self.weight_split_dims_mapping.proj
    if self.output_proj_use_nhd_shape and proj is not None and len(proj) == 3:
      post.weight_split_dims_mapping.wt = [proj[1], proj[2], proj[0]]
    self.create_child('post', post)

  def _setup_extras(self) -> None:
    h = self.head_dim
    if self.use_rotary_position_emb:
      p = self.rotary_position_emb_tpl.clone()
      p.embedding_dims = h
      if 'cast_as_fprop_dtype' in pax_fiddle.signatures_of(p.cls):
        p.cast_as_fprop_dtype = self.cast_rotary_position_emb
      self.create_child('rotary_position_emb', p)
    if self.relative_bias_tpl is not None:
      p = self.relative_bias_tpl.clone().set(num_heads=self.num_heads)
      self.create_child('relative_bias', p)
    if self.dconv_qkv:
      for name, heads in (('q', self.num_heads), ('k', self.kv_heads),
                          ('v', self.kv_heads)):
        p = self.causal_depthwise_conv1d_tpl.clone().set(
            kernel_size=self.dconv_kernel_size, hidden_dims=[heads, h]
        )
        p.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.dconv
        self.create_child(f'dconv_{name}', p)
    if self.ln_tpl is not None:
      self.create_child('layer_norm_q', self.ln_tpl.clone().set(dim=h))
      self.create_child('layer_norm_k', self.ln_tpl.clone().set(dim=h))
    if self.internal_enable_query_scale and self.internal_enable_per_dim_scale:
      p = self.per_dim_scale_tpl.clone().set(dim=h)
      self.create_child('per_dim_scale', p)
    if self.ngrammer_tpl is not None:
      self.create_child('ngrammer', self.ngrammer_tpl.clone())

  def setup(self) -> None:
    self._check_config()
    self._setup_projections()
    self._setup_extras()
    self.create_child(
        'atten_dropout',
        self.dropout_tpl.clone().set(keep_prob=1.0 - self.atten_dropout_prob),
    )
    self.create_child('qk_einsum', self.qk_einsum_tpl.clone())
    self.create_child('pv_einsum', self.pv_einsum_tpl.clone())

  # -- Sharding ---------------------------------------------------------------

  def _shard_blnh(self, x: JTensor) -> JTensor:
    blnh = self.activation_split_dims_mapping.blnh
    if blnh is not None and x.shape[2] != self.num_heads:
      blnh = [blnh[0], blnh[1], None, blnh[3]]  # Fewer K/V heads: replicated.
    return base_layer.maybe_shard(x, blnh, self.mesh_axis_names)

  def _shard_bnh(self, x: JTensor) -> JTensor:
    blnh = self.activation_split_dims_mapping.blnh
    if blnh is None:
      return x
    bnh = [blnh[0], blnh[2], blnh[3]]
    return base_layer.maybe_shard(x, bnh, self.mesh_axis_names)

  def _shard_bld(self, x: JTensor) -> JTensor:
    ap = self.activation_split_dims_mapping
    return base_layer.maybe_shard(x, ap.bld, self.mesh_axis_names)

  def _shard_bd(self, x: JTensor) -> JTensor:
    bld = self.activation_split_dims_mapping.bld
    if bld is None:
      return x
    return base_layer.maybe_shard(x, [bld[0], bld[2]], self.mesh_axis_names)

  # -- Attention --------------------------------------------------------------

  def _scale_query(self, query: JTensor) -> JTensor:
    if not self.internal_enable_query_scale:
      return query
    if self.internal_enable_per_dim_scale:
      return self.per_dim_scale(query)
    if self.scale_query_by_dim_per_head and self.dim_per_head is not None:
      dim = self.dim_per_head
    else:
      dim = self.hidden_dim // self.num_heads
    return query * jnp.asarray(dim**-0.5, query.dtype)

  def _attend(
      self,
      query: JTensor,
      key: JTensor,
      value: JTensor,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
      dropout: bool,
  ) -> tuple[JTensor, JTensor]:
    """`dot_product_attention` with this layer's options ([B, T, N, H])."""
    return self._attend_scaled(self._scale_query(query), key, value,
                               atten_mask, relative_bias, dropout)

  def _attend_step(
      self,
      query: JTensor,
      key: JTensor,
      value: JTensor,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
      time_step: JTensor | None,
  ) -> tuple[JTensor, JTensor]:
    """`_attend` for the query [B, 1, N, H] of decoding step `time_step` over
    the cached keys and values [B, S, N, H] (a hook for position-aware
    attentions)."""
    del time_step
    return self._attend(query, key, value, atten_mask, relative_bias,
                        dropout=False)

  def _attend_scaled(
      self,
      query: JTensor,
      key: JTensor,
      value: JTensor,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
      dropout: bool,
  ) -> tuple[JTensor, JTensor]:
    """`_attend` for queries already scaled by `_scale_query`."""
    h = query.shape[-1]
    return dot_product_attention(
        query,
        key,
        value,
        atten_mask,
        relative_bias=relative_bias,
        logits_scale=h**-0.5 if self.scale_logits_by_head_dims else None,
        logit_cap=self.atten_logit_cap,
        extra_logit=self.attention_extra_logit,
        probs_dropout=self.atten_dropout if dropout else None,
        zero_fully_masked=self.zero_fully_masked,
        qk_einsum=self.qk_einsum,
        pv_einsum=self.pv_einsum,
    )

  def _project(
      self, query_vec: JTensor, key_vec: JTensor, value_vec: JTensor
  ) -> tuple[JTensor, JTensor, JTensor]:
    if self.combine_qkv:
      if not (query_vec is key_vec and query_vec is value_vec):
        raise ValueError(f'{_where(self)}: combine_qkv is for self-attention '
                         'only (query_vec, key_vec and value_vec the same).')
      return self.combined_qkv(query_vec)
    return (
        checkpoint_name(self.query(query_vec), 'query_proj'),
        checkpoint_name(self.key(key_vec), 'key_proj'),
        checkpoint_name(self.value(value_vec), 'value_proj'),
    )

  def _relative_bias(
      self,
      query_vec: JTensor,
      key_vec: JTensor,
      query_segment_pos: JTensor | None,
      key_segment_pos: JTensor | None,
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

  def _check_mask(self, atten_mask: JTensor, b: int, t: int, s: int) -> None:
    shape = atten_mask.shape
    if (
        len(shape) != 4
        or shape[0] not in (1, b)
        or shape[1] != 1
        or shape[2] not in (1, t)
        or shape[3] != s
    ):
      raise ValueError(
          f'{_where(self)}: atten_mask {shape} must be [1|{b}, 1, 1|{t}, {s}].'
      )

  def __call__(
      self,
      query_vec: JTensor,
      key_vec: JTensor,
      value_vec: JTensor,
      atten_mask: JTensor,
      query_segment_pos: JTensor | None = None,
      key_segment_pos: JTensor | None = None,
  ) -> tuple[JTensor, JTensor]:
    """Attends from `query_vec` over `key_vec`/`value_vec`.

    Args:
      query_vec: [B, T, D].
      key_vec: [B, S, D].
      value_vec: [B, S, D].
      atten_mask: Additive mask [1|B, 1, 1|T, S].
      query_segment_pos: [B, T], positions (for rotary/relative positions).
      key_segment_pos: [B, S].

    Returns:
      (encoded [B, T, D], atten_probs [B, N, T, S]).
    """
    b, t = query_vec.shape[:2]
    self._check_mask(atten_mask, b, t, key_vec.shape[1])
    if self.attention_mask_summary:
      self.add_summary('attention_mask', atten_mask)
    query, key, value = self._project(query_vec, key_vec, value_vec)
    if not self.consolidate_rope_key_state:
      self._fprop_update_decode_state('key_state', key)
    self._fprop_update_decode_state('value_state', value)
    if self.dconv_qkv:
      self._fprop_update_decode_state('query_state', query)
      query = self.dconv_q(query, axis=1, segment_pos=query_segment_pos)
      key = self.dconv_k(key, axis=1, segment_pos=key_segment_pos)
      self._fprop_update_decode_state('key_post_dconv', key)
      value = self.dconv_v(value, axis=1, segment_pos=key_segment_pos)
      self._fprop_update_decode_state('value_post_dconv', value)
    if self.use_rotary_position_emb:
      query = self.rotary_position_emb(query, query_segment_pos)
      key = self.rotary_position_emb(key, key_segment_pos)
      self._fprop_update_decode_state(self._rotary_key_name(), key)
    relative_bias = self._relative_bias(
        query_vec, key_vec, query_segment_pos, key_segment_pos
    )
    if self.ln_tpl is not None:
      query, key = self.layer_norm_q(query), self.layer_norm_k(key)
    query, key, value = map(self._shard_blnh, (query, key, value))
    encoded, probs = self._attend(
        query, key, value, atten_mask, relative_bias, dropout=True
    )
    if self.ngrammer_tpl is not None:
      self._fprop_update_decode_state('encoded_pre_ngrammer', encoded)
      encoded = self.ngrammer(
          input_ids=None, input_embs=encoded, segment_pos=key_segment_pos,
          merge_heads=False, attention_scores=self._ngram_scores(probs))
    return _attention_math.output_projection(
        self.post, encoded, self._shard_blnh, self._shard_bld), probs

  def _ngram_scores(self, probs: JTensor) -> JTensor | None:
    """The attention probabilities, if the n-grammer pairs tokens by them."""
    return probs if self.ngrammer.ngram_using_attention_scores else None

  # -- Decoding ---------------------------------------------------------------

  def _rotary_key_name(self) -> str:
    return _attention_math.rotary_key_name(self.consolidate_rope_key_state)

  def _fprop_update_decode_state(self, name: str, value: JTensor) -> None:
    """Stores `value` in the decoder cache when it is mutable."""
    _attention_math.fprop_update_decode_state(self, name, value)

  def extend_decode_state(
      self, name: str, value: JTensor, time_step: JTensor, time_dim: int
  ) -> JTensor:
    """Writes `value` ([B, N, H]) at `time_step` of the cached `name`.

    Args:
      name: The decoder-cache entry, [B, T, N, H].
      value: The step's value, [B, N, H] (or [B, 1, N, H]).
      time_step: Scalar index into the time dim.
      time_dim: The time dim of the entry.

    Returns:
      The updated entry.
    """
    return _attention_math.write_decode_state(self, name, value, time_step,
                                              time_dim)

  def decoding_state_sequence_length(self) -> int:
    """The length of the cached sequences."""
    return self.get_decode_state('key_state').shape[1]

  def init_states(self, target_batch_size: int, target_max_length: int) -> None:
    """Creates a zero decoder cache for `target_max_length` steps.

    Args:
      target_batch_size: B.
      target_max_length: The number of steps the cache holds.
    """
    b, t, h = target_batch_size, target_max_length, self.head_dim
    kv_shape = [b, t, self.kv_heads, h]
    shapes = {'value_state': kv_shape}
    if not self.consolidate_rope_key_state:
      shapes['key_state'] = kv_shape
    if self.dconv_qkv:
      shapes['query_state'] = [b, t, self.num_heads, h]
      shapes['key_post_dconv'] = shapes['value_post_dconv'] = kv_shape
    if self.use_rotary_position_emb:
      shapes[self._rotary_key_name()] = kv_shape
    if self.ngrammer_tpl is not None:
      shapes['encoded_pre_ngrammer'] = [b, t, self.num_heads, h]
    for name, shape in shapes.items():
      self.update_decode_state(name, jnp.zeros(shape, self.fprop_dtype))

  def _project_step(
      self, query_vec: JTensor, time_step: JTensor, is_cross_attention: bool
  ) -> tuple[JTensor, JTensor | None, JTensor | None]:
    if self.combine_qkv:
      return self.combined_qkv.extend_step(query_vec, time_step=time_step)
    query = self.query.extend_step(query_vec, time_step=time_step)
    if is_cross_attention:
      return query, None, None
    key = self.key.extend_step(query_vec, time_step=time_step)
    value = self.value.extend_step(query_vec, time_step=time_step)
    if self.decoding_maybe_shard_projections:
      key, value = self._shard_bnh(key), self._shard_bnh(value)
      query = self._shard_bnh(query)
    return query, key, value

  def _dconv_step(
      self,
      query: JTensor,
      is_cross_attention: bool,
      time_step: JTensor,
      segment_pos: JTensor | None,
  ) -> tuple[JTensor, JTensor | None]:
    """Convolves at `time_step`, updating the Primer states; (query, key)."""
    extend = lambda n, v: self.extend_decode_state(n, v, time_step, 1)
    step = {'axis': 1, 'step': time_step, 'segment_pos': segment_pos}
    query = self.dconv_q.extend_step(extend('query_state', query), **step)
    if is_cross_attention:
      return query, None
    key_state = self.get_decode_state('key_state')
    value_state = self.get_decode_state('value_state')
    key = self.dconv_k.extend_step(key_state, **step)
    extend('key_post_dconv', key)
    extend('value_post_dconv', self.dconv_v.extend_step(value_state, **step))
    return query, key

  def _one_step_attention(self, *args: Any) -> JTensor:
    """`_one_step_attention_and_probs`'s output [B, N, H] alone."""
    return self._one_step_attention_and_probs(*args)[0]

  def _one_step_attention_and_probs(
      self,
      query: JTensor,
      key_name: str,
      value_name: str,
      atten_mask: JTensor,
      relative_bias: JTensor | None,
      time_step: JTensor | None = None,
  ) -> tuple[JTensor, JTensor | None]:
    """Attention of one query step [B, N, H] over the cache: the output
    [B, N, H] and the probabilities [B, N, S] (None from a fused kernel)."""
    key = self.get_decode_state(key_name)
    value = self.get_decode_state(value_name)
    q_b, k_b = query.shape[0], key.shape[0]
    if q_b != k_b:
      if q_b % k_b:
        raise ValueError(f'{_where(self)}: query batch {q_b} is not a multiple'
                         f' of the cached batch {k_b}.')
      key = jnp.repeat(key, q_b // k_b, axis=0)
      value = jnp.repeat(value, q_b // k_b, axis=0)
      if atten_mask.shape[0] == k_b and k_b != 1:
        atten_mask = jnp.repeat(atten_mask, q_b // k_b, axis=0)
    if self.ln_tpl is not None:
      query, key = self.layer_norm_q(query), self.layer_norm_k(key)
    key, value = self._shard_blnh(key), self._shard_blnh(value)
    if atten_mask.ndim != 3 or atten_mask.shape[-1] != key.shape[1]:
      raise ValueError(f'{_where(self)}: extend_step atten_mask '
                       f'{atten_mask.shape} must be [1|B, 1, {key.shape[1]}].')
    encoded, probs = self._attend_step(
        self._shard_bnh(query)[:, None], key, value,
        atten_mask[:, :, None, :], relative_bias, time_step)
    # A fused attention computes no probabilities.
    return self._shard_bnh(encoded[:, 0]), (
        None if probs is None else probs[:, :, 0])

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
      query_vec: [B, D], the input at `time_step`.
      atten_mask: Additive mask [1|b|B, 1, S] over the cached steps.
      time_step: Scalar, the 0-based step; its key and value are written
        into the cache (unless `is_cross_attention`).
      segment_pos: [B], positions within segments (None: `time_step`).
      is_cross_attention: The cache holds the encoder's keys and values
        (batch b, B a multiple of it) and is not updated.

    Returns:
      encoded: [B, D].
    """
    if query_vec.ndim != 2:
      raise ValueError(f'{_where(self)}: extend_step takes query_vec [B, D], '
                       f'got {query_vec.shape}.')
    time_step = jnp.asarray(time_step)
    query, key, value = self._project_step(
        query_vec, time_step, is_cross_attention
    )
    key_name, value_name = 'key_state', 'value_state'
    if not is_cross_attention:
      if not self.consolidate_rope_key_state:
        self.extend_decode_state('key_state', key, time_step, 1)
      self.extend_decode_state('value_state', value, time_step, 1)
    if self.dconv_qkv:
      key_name, value_name = 'key_post_dconv', 'value_post_dconv'
      query, key = self._dconv_step(
          query, is_cross_attention, time_step, segment_pos
      )
    if self.use_rotary_position_emb:
      key_name = self._rotary_key_name()
      position = segment_pos
      if position is None:
        position = jnp.broadcast_to(time_step, [query_vec.shape[0]])
      query = self.rotary_position_emb.extend_step(query, position)
      if not is_cross_attention:
        key = self.rotary_position_emb.extend_step(key, position)
        self.extend_decode_state(key_name, key, time_step, 1)
    relative_bias = None
    if self.relative_bias_tpl is not None:
      relative_bias = self.relative_bias.extend_step(
          seq_length=self.decoding_state_sequence_length(), time_step=time_step
      )
    encoded, probs = self._one_step_attention_and_probs(
        query, key_name, value_name, atten_mask, relative_bias,
        time_step=time_step)
    if self.ngrammer_tpl is not None:
      encoded = self.ngrammer.extend_step(
          self.extend_decode_state('encoded_pre_ngrammer', encoded,
                                   time_step, 1),
          step=time_step, merge_heads=False,
          attention_score=self._ngram_scores(probs))
    encoded = self.post.extend_step(encoded, time_step=time_step)
    return self._shard_bd(encoded)

  def transform_decode_state(
      self, transform_fn: DecodeStateTransformFn
  ) -> None:
    """Replaces each cached state by `transform_fn(state, 0, 1)`.

    Args:
      transform_fn: Called with (state, batch_dim, time_dim).
    """
    _attention_math.transform_decode_states(self, transform_fn,
                                            self._shard_blnh)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int
  ) -> None:
    """Not supported here: use DotProductAttentionWithLPB."""
    raise NotImplementedError(
        f'{_where(self)}: lazy_broadcast_prefix needs '
        'DotProductAttentionWithLPB.'
    )

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int, right_align_fn: DecodeStateTransformFn
  ) -> None:
    """Not supported (needs the lazy-prefix-broadcast attention)."""
    raise NotImplementedError(
        f'{_where(self)}: right_align_decode_state_with_prefix is not '
        'supported.'
    )


# The block-local attentions build on DotProductAttention above, so their
# private sibling is imported last.
from praxis.layers import _local_attention  # pylint: disable=g-import-not-at-top,wrong-import-position

convert_to_block = _local_attention.convert_to_block
extract_block_context = _local_attention.extract_block_context
LocalSelfAttention = _local_attention.LocalSelfAttention
LocalSelfAttentionRelativeBias = _local_attention.LocalSelfAttentionRelativeBias
LocalSelfAttentionAlibi = _local_attention.LocalSelfAttentionAlibi


def _make_local_mask(seq_len: int, block_size: int, left_context: int,
                     right_context: int) -> JTensor:
  """[U, W, C] booleans of the block-local band (Pax's name): query w of block
  u may see context slot c, i.e. keys from left_context - 1 before to
  right_context after it, inside the sequence."""
  return jnp.asarray(_local_attention.local_block_mask(
      seq_len, block_size, left_context, right_context))


# Transformer-XL attentions, built on the classes above.
from praxis.layers import _attention_xl  # pylint: disable=g-import-not-at-top,wrong-import-position

create_relative_positional_embedding = (
    _attention_xl.create_relative_positional_embedding)
DotProductAttentionXL = _attention_xl.DotProductAttentionXL
LocalSelfAttentionXL = _attention_xl.LocalSelfAttentionXL

# Lazy prefix broadcast for multi-sample decoding.
from praxis.layers import _attention_lpb  # pylint: disable=g-import-not-at-top,wrong-import-position

DotProductAttentionWithLPB = _attention_lpb.DotProductAttentionWithLPB

# Shown (repr, model_params.txt, pickles) under this module, as in Pax.
for _cls in (LocalSelfAttention, LocalSelfAttentionRelativeBias,
             LocalSelfAttentionAlibi, DotProductAttentionXL,
             LocalSelfAttentionXL, DotProductAttentionWithLPB):
  _cls.__module__ = __name__
del _cls
