"""Config builders of Grok-1-style MoE decoders (Pax after 1.4).

Public names:
  GrokStackedTransformerHParams: a one-layer StackedTransformer block with
    multi-query (grouped key/value) attention, MoE (or dense) feed-forward;
  GrokUniTransformerLmHParams: a decoder-only TransformerLm of such blocks.

Unlike GLaM (`praxis.layers.glam`), every layer of the MoE model is MoE,
the attention is MultiQueryDotProductAttention with `attention_num_groups`
key/value heads and biased projections, and there is no relative position
bias. The normalizations are bias-free RmsNorms (direct scale) and the
softmax, shared with the embedding, has an optional z-loss.

  lm_p = grok.GrokUniTransformerLmHParams(
      vocab_size=128, model_dim=16, ff_dim=32, attention_num_heads=4,
      attention_num_groups=2, attention_key_value_dim=4,
      num_transformer_layers=2, moe=True, e_dim=4, c_dim=8)
"""

from __future__ import annotations

from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import checkpoint_policy as checkpoint_policy_lib
from praxis.layers import glam
from praxis.layers import multi_query_attention
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.injection import fp8_nvidia_gpu as fp8_ops

AutodiffCheckpointType = checkpoint_policy_lib.AutodiffCheckpointType
LanguageModelType = transformer_models.LanguageModelType

# pylint: disable=protected-access


def _use_fp8(p: pax_fiddle.Config, combine_qkv: bool) -> None:
  """Routes the einsums of the attention and feed-forward blocks via FP8."""
  fp8 = lambda: pax_fiddle.Config(fp8_ops.Fp8EinsumOp)
  layer = p.transformer_layer_params_tpl
  layer.tr_atten_tpl.proj_tpl.einsum_tpl = fp8()
  if combine_qkv:
    layer.tr_atten_tpl.combined_qkv_proj_tpl.einsum_tpl = fp8()
  layer.tr_fflayer_tpl.fflayer_tpl.linear_tpl.einsum_tpl = fp8()
  moe = p.moe_layer_tpl
  if not all(hasattr(moe, f) for f in ('einsum_tpl', 'einsum_gated_tpl')):
    raise ValueError(
        'grok: use_fp8 needs a moe_layer_tpl with einsum_tpl and '
        'einsum_gated_tpl fields; this TransformerFeedForwardMoe has none.')
  moe.einsum_tpl = fp8()
  moe.einsum_gated_tpl = pax_fiddle.Config(fp8_ops.Fp8EinsumGatedOp)


def GrokStackedTransformerHParams(  # pylint: disable=invalid-name
    model_dim,
    ff_dim,
    attention_num_heads,
    attention_num_groups,
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
    use_fp8=False,
) -> pax_fiddle.Config[transformers.StackedTransformer]:
  """A Grok block: one layer, MoE (if `moe`) with multi-query attention.

  The attention-shaping arguments GLaM uses (logit cap, extra logit,
  relative bias, bidirectional) are accepted as in Pax and, as in Pax,
  have no effect: the attention is a plain MultiQueryDotProductAttention.

  Args:
    model_dim: Model depth.
    ff_dim: Hidden depth of the feed-forward blocks.
    attention_num_heads: Query heads.
    attention_num_groups: Key/value heads.
    attention_key_value_dim: Depth per attention head.
    name: Name of the StackedTransformer.
    moe: Make the layer's feed-forward block MoE.
    moe_hidden_dim: Hidden depth of the experts (default ff_dim).
    moe_gating_embedding_level: What the router sees: 'token' or 'sentence'
      (TransformerFeedForwardMoe.moe_gating_embedding_level).
    ffn_activation_cls: Activation class of the experts.
    use_gated_activation: Gate the experts.
    mask_self_attention: Causal self-attention.
    cross_attention: Add cross-attention to an encoder.
    atten_logit_cap: Unused (see above).
    attention_extra_logit: Unused.
    relative_attention_num_buckets: Unused.
    relative_attention_max_distance: Unused.
    moe_load_balance_loss_weight: Weight of the MoE load-balancing loss.
    moe_gating_func: The MoE gating function ('top2').
    moe_gating_logit_cap: Cap of the router logits (tanh), if positive.
    num_groups: Token groups of the MoE dispatch.
    c_dim: Expert capacity.
    capacity_factor: Expert capacity relative to uniform routing.
    e_dim: Number of experts.
    combine_qkv: Kept for Pax; the multi-query attention never combines.
    bidirectional: Unused.
    use_fp8: Run the projections' einsums through FP8 ops.

  Returns:
    The config of a StackedTransformer.
  """
  del atten_logit_cap, attention_extra_logit, bidirectional
  del relative_attention_num_buckets, relative_attention_max_distance
  p = glam._stacked_transformer(
      name, model_dim, ff_dim, attention_num_heads, attention_key_value_dim,
      moe, 1, e_dim, num_groups, mask_self_attention, cross_attention)
  glam._set_moe(p.moe_layer_tpl, model_dim=model_dim,
                hidden_dim=moe_hidden_dim or ff_dim, e_dim=e_dim,
                num_groups=num_groups, c_dim=c_dim,
                capacity_factor=capacity_factor,
                gating_logit_cap=moe_gating_logit_cap,
                load_balance_loss_weight=moe_load_balance_loss_weight,
                gating_func=moe_gating_func,
                gating_embedding_level=moe_gating_embedding_level)
  p.moe_layer_tpl.add_skip_connection = True
  p.moe_layer_tpl.activation_tpl = pax_fiddle.Config(ffn_activation_cls)
  p.moe_layer_tpl.use_gated_activation = use_gated_activation
  atten = pax_fiddle.Config(
      multi_query_attention.MultiQueryDotProductAttention,
      num_kv_heads=attention_num_groups, combine_qkv=False)
  atten.proj_tpl.use_bias = True
  p.transformer_layer_params_tpl.tr_atten_tpl = atten
  if use_fp8:
    _use_fp8(p, combine_qkv)
  return p


def GrokUniTransformerLmHParams(  # pylint: disable=invalid-name
    vocab_size,
    model_dim,
    ff_dim,
    attention_num_heads,
    attention_num_groups,
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
    use_fp8=False,
) -> pax_fiddle.Config[transformer_models.TransformerLm]:
  """A decoder-only Grok TransformerLm (every layer MoE when `moe`).

  Args:
    vocab_size: Vocabulary size.
    model_dim: Model depth.
    ff_dim: Hidden depth of the feed-forward blocks.
    attention_num_heads: Query heads.
    attention_num_groups: Key/value heads.
    attention_key_value_dim: Depth per attention head.
    num_transformer_layers: Transformer layers.
    name: Name of the TransformerLm.
    moe: Make every feed-forward block MoE.
    moe_hidden_dim: Hidden depth of the experts (default ff_dim).
    moe_gating_embedding_level: What the router sees: 'token' or 'sentence'
      (TransformerFeedForwardMoe.moe_gating_embedding_level).
    ffn_activation_cls: Activation class of the experts.
    use_gated_activation: Gate the experts.
    atten_logit_cap: Unused (see GrokStackedTransformerHParams).
    attention_extra_logit: Unused.
    relative_attention_num_buckets: Unused.
    relative_attention_max_distance: Unused.
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
    combine_qkv: Kept for Pax.
    bidirectional: Unused.
    num_pipeline_stages: Pipeline stages (1: no pipeline).
    num_pipeline_microbatches: Microbatches of the pipeline.
    model_type: CAUSAL, PREFIX or BIDIRECTIONAL.
    checkpoint_policy: Rematerialization policy.
    use_fp8: Run the projections' einsums through FP8 ops.

  Returns:
    The config of a TransformerLm.
  """
  p = glam._lm_shell(name, vocab_size, model_dim, model_type,
                     use_tgt_labels_size_as_loss_denominator, z_loss_weight)
  block = GrokStackedTransformerHParams(
      model_dim=model_dim,
      ff_dim=ff_dim,
      attention_num_heads=attention_num_heads,
      attention_num_groups=attention_num_groups,
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
      use_fp8=use_fp8,
  )
  if num_pipeline_stages == 1:
    p.stacked_transformer_tpl = pax_fiddle.Config(
        transformers.StackedTransformerRepeated,
        name='decoder',
        unroll_in_decode=True,
        block=block,
        x_times=num_transformer_layers,
        checkpoint_policy=checkpoint_policy,
    )
    return p
  if num_transformer_layers % num_pipeline_stages:
    raise ValueError(
        f'grok: num_pipeline_stages={num_pipeline_stages} must divide '
        f'num_transformer_layers={num_transformer_layers}.')
  block.num_layers = num_transformer_layers // num_pipeline_stages
  block.moe_layers = list(range(block.num_layers)) if moe else None
  p.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.PipelinedTransformer,
      pipeline_stage=block,
      num_pipeline_stages=num_pipeline_stages,
      num_pipeline_microbatches=num_pipeline_microbatches,
      stream_io=True,
      checkpoint_policy=checkpoint_policy,
  )
  return p
