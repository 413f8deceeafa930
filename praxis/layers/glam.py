"""Config builders of GLaM (https://arxiv.org/abs/2112.06905) decoders.

Public names:
  GlamStackedTransformerHParams: a StackedTransformer block, dense (one
    layer) or MoE (two layers, the first with a TransformerFeedForwardMoe);
  GlamUniTransformerLmHParams: a decoder-only TransformerLm of such blocks.

GLaM's transformer layer differs from the default one in that its
feed-forward blocks are gated (two `wi`, one `wo`), no projection has a
bias, every normalization is a bias-free RmsNorm (direct scale), the
attention has a relative position bias, and the softmax (shared with the
embedding) has an optional z-loss.

  lm_p = glam.GlamUniTransformerLmHParams(
      vocab_size=128, model_dim=16, ff_dim=32, attention_num_heads=2,
      attention_key_value_dim=8, num_transformer_layers=4, moe=True,
      e_dim=4, c_dim=8)
"""

from __future__ import annotations

import fiddle as fdl
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import checkpoint_policy as checkpoint_policy_lib
from praxis.layers import embedding_softmax
from praxis.layers import normalizations
from praxis.layers import transformer_models
from praxis.layers import transformers

AutodiffCheckpointType = checkpoint_policy_lib.AutodiffCheckpointType
LanguageModelType = transformer_models.LanguageModelType


def _rms_norm() -> pax_fiddle.Config:
  return pax_fiddle.Config(normalizations.RmsNorm, direct_scale=True)


def _expect(tpl: pax_fiddle.Config, cls: type, where: str) -> None:
  if fdl.get_callable(tpl) is not cls:
    raise ValueError(
        f'glam: {where} must be a {cls.__name__} template, got '
        f'{fdl.get_callable(tpl).__name__}.')


def _set_attention(atten: pax_fiddle.Config, *, use_bias: bool,
                   atten_logit_cap: float, attention_extra_logit: float,
                   combine_qkv: bool) -> None:
  """GShard-style attention: no query scaling, merged-dims projections."""
  _expect(atten, attentions.DotProductAttention, 'tr_atten_tpl')
  atten.attention_extra_logit = attention_extra_logit
  atten.use_bias = use_bias
  atten.atten_logit_cap = atten_logit_cap
  atten.internal_gshard_gaussian_init = True
  atten.internal_enable_query_scale = False
  atten.internal_enable_per_dim_scale = False
  _expect(atten.proj_tpl, attentions.AttentionProjection, 'proj_tpl')
  atten.proj_tpl.attention_combine_dims = True
  atten.output_proj_use_nhd_shape = True
  if combine_qkv:
    atten.combine_qkv = True
    atten.combined_qkv_proj_tpl.use_bias = False
    atten.combined_qkv_proj_tpl.attention_combine_dims = True


def _set_moe(moe: pax_fiddle.Config, *, model_dim, hidden_dim, e_dim,
             num_groups, c_dim, capacity_factor, gating_logit_cap,
             load_balance_loss_weight, gating_func,
             gating_embedding_level) -> None:
  _expect(moe, transformers.TransformerFeedForwardMoe, 'moe_layer_tpl')
  moe.input_dims = model_dim
  moe.hidden_dims = hidden_dim
  moe.ln_tpl = _rms_norm()
  moe.num_experts = e_dim
  moe.num_groups = num_groups
  moe.gating_logit_cap = gating_logit_cap
  moe.expert_capacity_dim = c_dim
  moe.unadjusted_expert_capacity_factor = capacity_factor
  moe.internal_gshard_variance_scaling_fan_in_init = True
  moe.moe_load_balance_loss_weight = load_balance_loss_weight
  moe.gating_func = gating_func
  moe.moe_gating_embedding_level = gating_embedding_level


def _stacked_transformer(name, model_dim, ff_dim, num_heads, dim_per_head,
                         moe, num_layers, e_dim, num_groups,
                         mask_self_attention, cross_attention):
  """A StackedTransformer with RmsNorm (direct scale) layer norms."""
  p = pax_fiddle.Config(transformers.StackedTransformer)
  p.name = name
  p.packed_input = True
  p.moe_layers = [0] if moe else None
  p.num_layers = num_layers
  p.model_dims = model_dim
  p.hidden_dims = ff_dim
  p.num_heads = num_heads
  p.dim_per_head = dim_per_head
  p.num_experts = e_dim
  p.num_groups = num_groups
  p.mask_self_attention = mask_self_attention
  p.use_cross_attention = cross_attention
  layer_tpls = p.transformer_layer_params_tpl
  if not isinstance(layer_tpls, (list, tuple)):
    layer_tpls = [layer_tpls]
  for layer_tpl in layer_tpls:
    layer_tpl.ln_tpl = _rms_norm()
  return p


def GlamStackedTransformerHParams(  # pylint: disable=invalid-name
    model_dim,
    ff_dim,
    attention_num_heads,
    attention_key_value_dim,
    name='transformer',
    moe=False,
    moe_hidden_dim=None,
    moe_gating_embedding_level='token',
    ffn_activation_cls=activations.GELU,
    use_gated_activation=True,
    mask_self_attention=True,
    cross_attention=False,
    atten_logit_cap=0.0,
    attention_extra_logit=0.0,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    moe_load_balance_loss_weight=0.01,
    moe_gating_func='top2',
    moe_gating_logit_cap=0.0,
    num_groups=1,
    c_dim=None,
    capacity_factor=0.0,
    e_dim=None,
    combine_qkv=False,
    bidirectional=False,
) -> pax_fiddle.Config[transformers.StackedTransformer]:
  """A GLaM block: one dense layer, or two layers whose first is MoE.

  Args:
    model_dim: Model depth.
    ff_dim: Hidden depth of the dense feed-forward blocks.
    attention_num_heads: Attention heads.
    attention_key_value_dim: Depth per attention head.
    name: Name of the StackedTransformer.
    moe: Build the two-layer MoE block (else the one-layer dense block).
    moe_hidden_dim: Hidden depth of the experts (default ff_dim).
    moe_gating_embedding_level: What the router sees: 'token' or 'sentence'
      (TransformerFeedForwardMoe.moe_gating_embedding_level).
    ffn_activation_cls: Activation class of the dense feed-forward blocks.
    use_gated_activation: Gate the dense feed-forward blocks.
    mask_self_attention: Causal self-attention.
    cross_attention: Add cross-attention to an encoder.
    atten_logit_cap: Cap of the attention logits (tanh), if positive.
    attention_extra_logit: Extra logit in the attention softmax.
    relative_attention_num_buckets: Buckets of the relative position bias.
    relative_attention_max_distance: Largest distinguished distance.
    moe_load_balance_loss_weight: Weight of the MoE load-balancing loss.
    moe_gating_func: The MoE gating function ('top2').
    moe_gating_logit_cap: Cap of the router logits (tanh), if positive.
    num_groups: Token groups of the MoE dispatch.
    c_dim: Expert capacity.
    capacity_factor: Expert capacity relative to uniform routing.
    e_dim: Number of experts.
    combine_qkv: Use one combined QKV projection.
    bidirectional: Bidirectional relative position buckets.

  Returns:
    The config of a StackedTransformer.
  """
  p = _stacked_transformer(
      name, model_dim, ff_dim, attention_num_heads, attention_key_value_dim,
      moe, 2 if moe else 1, e_dim, num_groups, mask_self_attention,
      cross_attention)
  atten = p.transformer_layer_params_tpl.tr_atten_tpl
  _set_attention(atten, use_bias=False, atten_logit_cap=atten_logit_cap,
                 attention_extra_logit=attention_extra_logit,
                 combine_qkv=combine_qkv)
  atten.relative_bias_tpl = pax_fiddle.Config(
      attentions.RelativeBias,
      relative_attention_num_buckets=relative_attention_num_buckets,
      relative_attention_max_distance=relative_attention_max_distance,
      bidirectional=bidirectional,
  )
  ff = p.transformer_layer_params_tpl.tr_fflayer_tpl
  _expect(ff, transformers.TransformerFeedForward, 'tr_fflayer_tpl')
  ff.input_dims = model_dim
  ff.hidden_dims = ff_dim
  ff.has_bias = False
  ff.apply_padding_first = True
  ff.ln_tpl = _rms_norm()
  ff.add_skip_connection = True
  ff.activation_tpl = pax_fiddle.Config(ffn_activation_cls)
  ff.use_gated_activation = use_gated_activation
  ff.internal_gshard_variance_scaling_fan_in_init = True
  _set_moe(p.moe_layer_tpl, model_dim=model_dim,
           hidden_dim=moe_hidden_dim or ff_dim, e_dim=e_dim,
           num_groups=num_groups, c_dim=c_dim,
           capacity_factor=capacity_factor,
           gating_logit_cap=moe_gating_logit_cap,
           load_balance_loss_weight=moe_load_balance_loss_weight,
           gating_func=moe_gating_func,
           gating_embedding_level=moe_gating_embedding_level)
  return p


def _even_layers(num_layers: int) -> list[int]:
  return list(range(0, num_layers, 2))


def _lm_shell(name, vocab_size, model_dim, model_type,
             use_tgt_labels_size_as_loss_denominator, z_loss_weight):
  """A TransformerLm without positional embedding, final RmsNorm, GShard
  shared embedding-softmax (its stacked transformer is left to set)."""
  p = pax_fiddle.Config(transformer_models.TransformerLm)
  p.name = name
  p.packed_input = True
  p.model_dims = model_dim
  p.vocab_size = vocab_size
  p.position_emb_tpl = None
  p.model_type = model_type
  p.final_ln_tpl = pax_fiddle.Config(
      normalizations.RmsNorm, name='rms_norm', dim=model_dim)
  p.softmax_tpl = pax_fiddle.Config(
      embedding_softmax.GShardSharedEmbeddingSoftmax,
      name='emb',
      input_dims=model_dim,
      num_classes=vocab_size,
      z_loss_weight=z_loss_weight,
      use_tgt_labels_size_as_loss_denominator=(
          use_tgt_labels_size_as_loss_denominator),
  )
  return p


def GlamUniTransformerLmHParams(  # pylint: disable=invalid-name
    vocab_size,
    model_dim,
    ff_dim,
    attention_num_heads,
    attention_key_value_dim,
    num_transformer_layers,
    name='transformer',
    moe=False,
    moe_hidden_dim=None,
    moe_gating_embedding_level='token',
    ffn_activation_cls=activations.GELU,
    use_gated_activation=True,
    atten_logit_cap=0.0,
    attention_extra_logit=0.0,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    moe_gating_func='top2',
    moe_gating_logit_cap=0.0,
    num_groups=1,
    c_dim=None,
    capacity_factor=0.0,
    e_dim=None,
    use_tgt_labels_size_as_loss_denominator=True,
    moe_load_balance_loss_weight=0.01,
    z_loss_weight=1e-4,
    combine_qkv=False,
    bidirectional=False,
    num_pipeline_stages=1,
    num_pipeline_microbatches=1,
    model_type=LanguageModelType.CAUSAL,
    checkpoint_policy=AutodiffCheckpointType.SAVE_NOTHING,
    repeat=True,
) -> pax_fiddle.Config[transformer_models.TransformerLm]:
  """A decoder-only GLaM TransformerLm (dense, or MoE every other layer).

  Args:
    vocab_size: Vocabulary size.
    model_dim: Model depth.
    ff_dim: Hidden depth of the dense feed-forward blocks.
    attention_num_heads: Attention heads.
    attention_key_value_dim: Depth per attention head.
    num_transformer_layers: Transformer layers (even when `moe`).
    name: Name of the TransformerLm.
    moe: MoE feed-forward in every other layer (else all dense).
    moe_hidden_dim: Hidden depth of the experts (default ff_dim).
    moe_gating_embedding_level: What the router sees: 'token' or 'sentence'
      (TransformerFeedForwardMoe.moe_gating_embedding_level).
    ffn_activation_cls: Activation class of the dense feed-forward blocks.
    use_gated_activation: Gate the dense feed-forward blocks.
    atten_logit_cap: Cap of the attention logits (tanh), if positive.
    attention_extra_logit: Extra logit in the attention softmax.
    relative_attention_num_buckets: Buckets of the relative position bias.
    relative_attention_max_distance: Largest distinguished distance.
    moe_gating_func: The MoE gating function ('top2').
    moe_gating_logit_cap: Cap of the router logits (tanh), if positive.
    num_groups: Token groups of the MoE dispatch.
    c_dim: Expert capacity.
    capacity_factor: Expert capacity relative to uniform routing.
    e_dim: Number of experts.
    use_tgt_labels_size_as_loss_denominator: Divide the loss by the label
      tensor's size (else by the non-padded tokens).
    moe_load_balance_loss_weight: Weight of the MoE load-balancing loss.
    z_loss_weight: Weight of the softmax z-loss.
    combine_qkv: Use one combined QKV projection.
    bidirectional: Bidirectional relative position buckets.
    repeat: Repeat one block with StackedTransformerRepeated (else a single
      StackedTransformer of all the layers, MoE at the even ones).
    num_pipeline_stages: Pipeline stages (1: no pipeline).
    num_pipeline_microbatches: Microbatches of the pipeline.
    model_type: CAUSAL, PREFIX or BIDIRECTIONAL.
    checkpoint_policy: Rematerialization policy of the repeated block.

  Returns:
    The config of a TransformerLm.
  """
  p = _lm_shell(name, vocab_size, model_dim, model_type,
               use_tgt_labels_size_as_loss_denominator, z_loss_weight)
  block = GlamStackedTransformerHParams(
      model_dim=model_dim,
      ff_dim=ff_dim,
      attention_num_heads=attention_num_heads,
      attention_key_value_dim=attention_key_value_dim,
      name='decoder_block',
      moe=moe,
      moe_hidden_dim=moe_hidden_dim,
      ffn_activation_cls=ffn_activation_cls,
      use_gated_activation=use_gated_activation,
      mask_self_attention=True,
      cross_attention=False,
      atten_logit_cap=atten_logit_cap,
      attention_extra_logit=attention_extra_logit,
      relative_attention_num_buckets=relative_attention_num_buckets,
      relative_attention_max_distance=relative_attention_max_distance,
      moe_load_balance_loss_weight=moe_load_balance_loss_weight,
      moe_gating_func=moe_gating_func,
      moe_gating_logit_cap=moe_gating_logit_cap,
      num_groups=num_groups,
      c_dim=c_dim,
      capacity_factor=capacity_factor,
      e_dim=e_dim,
      combine_qkv=combine_qkv,
      bidirectional=bidirectional,
      moe_gating_embedding_level=moe_gating_embedding_level,
  )
  num_blocks = num_transformer_layers // 2 if moe else num_transformer_layers
  if num_pipeline_stages == 1 and repeat:
    p.stacked_transformer_tpl = pax_fiddle.Config(
        transformers.StackedTransformerRepeated,
        name='decoder',
        unroll_in_decode=True,
        block=block,
        x_times=num_blocks,
        checkpoint_policy=checkpoint_policy,
    )
  elif num_pipeline_stages == 1:
    block.num_layers = num_transformer_layers
    block.moe_layers = _even_layers(block.num_layers) if moe else None
    p.stacked_transformer_tpl = block
  else:
    if num_blocks % num_pipeline_stages:
      raise ValueError(
          f'glam: num_pipeline_stages={num_pipeline_stages} must divide the '
          f'{num_blocks} blocks.')
    block.num_layers = num_transformer_layers // num_pipeline_stages
    block.moe_layers = _even_layers(block.num_layers) if moe else None
    p.stacked_transformer_tpl = pax_fiddle.Config(
        transformers.PipelinedTransformer,
        pipeline_stage=block,
        num_pipeline_stages=num_pipeline_stages,
        num_pipeline_microbatches=num_pipeline_microbatches,
        stream_io=True,
    )
  return p
