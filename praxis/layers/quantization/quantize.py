"""Rewrites of experiment configs into quantized ones.

Public (Pax's names): `for_transformer`, `mixed_precision_for_transformer`,
`for_diffusion` (experiment class decorators); `set_transformer_quantization`,
`set_transformer_mixed_precision_quantization`, `set_diffusion_quantization`,
`set_inference_mode`, `quantize_transformer_layer_weights`,
`quantize_attention_layer_weights`,
`quantize_dot_product_attention_layer_weights`,
`quantize_mq_dot_product_attention_layer_weights`,
`quantize_transformer_feed_forward_layer_weights` (config rewrites).

Quantization-aware training of an existing experiment:

  @quantize.for_transformer(num_bits=8, quantization_type=QuantizationType.FQ)
  class MyLmQat(MyLm):
    pass

Serving int8 weights: `for_transformer(quantization_type=PTQ,
mode=INFERENCE)` (MATERIALIZE converts a float checkpoint, see
`paxml.tools.quantize_checkpoint`).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import fiddle as fdl
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.quantization import _rewrite
from praxis.layers.quantization import convolutions
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils

LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
QuantizationParams = quantization_hparams.QuantizationParams
QuantizationType = quantization_hparams.QuantizationType
QuantizationMode = quantization_hparams.QuantizationMode
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
ActQuantizationParams = quantization_hparams.ActQuantizationParams
TransformerLayer = quantization_hparams.TransformerLayer

_VALID_BITS = (2, 4, 8)
_LM_CLASSES = (transformer_models.TransformerLm,
               transformer_models.TransformerEncoderDecoder)


def quantize_dot_product_attention_layer_weights(
    attn_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
) -> None:
  """Quantizes the projections of a DotProductAttention config."""
  _rewrite.quantize_dot_product_attention(attn_tpl, _rewrite.params(
      quantization_type, mode, weight_quantization_params,
      act_quantization_params))


def quantize_mq_dot_product_attention_layer_weights(
    attn_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
) -> None:
  """Quantizes the projections of a MultiQueryDotProductAttention config."""
  _rewrite.quantize_mq_dot_product_attention(attn_tpl, _rewrite.params(
      quantization_type, mode, weight_quantization_params,
      act_quantization_params))


def quantize_attention_layer_weights(
    tr_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
) -> None:
  """Quantizes the self and/or cross attention of a Transformer config."""
  _rewrite.quantize_attention(
      tr_tpl,
      _rewrite.params(quantization_type, mode, weight_quantization_params,
                      act_quantization_params),
      quantize_self_attention, quantize_cross_attention,
  )


def quantize_transformer_feed_forward_layer_weights(
    tr_fflayer_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
    rank: int = -1,
) -> None:
  """Makes the linears of a TransformerFeedForward config quantized."""
  _rewrite.quantize_feed_forward(
      tr_fflayer_tpl,
      _rewrite.params(quantization_type, mode, weight_quantization_params,
                      act_quantization_params),
      rank,
  )


def quantize_transformer_layer_weights(
    tr_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
    linear_only: bool = False,
    rank: int = -1,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
) -> None:
  """Quantizes a Transformer config: its feed-forward (and attention)."""
  if not linear_only:
    quantize_attention_layer_weights(
        tr_tpl, quantization_type, mode, weight_quantization_params,
        act_quantization_params, quantize_self_attention,
        quantize_cross_attention,
    )
  quantize_transformer_feed_forward_layer_weights(
      tr_tpl.tr_fflayer_tpl, quantization_type, mode,
      weight_quantization_params, act_quantization_params, rank,
  )


def _act_params(weight_quant_only, num_bits_act, use_symmetric_act):
  given = num_bits_act is not None or use_symmetric_act is not None
  if weight_quant_only:
    if given:
      raise ValueError(
          'Activation quantization params (`num_bits_act` and'
          ' `use_symmetric_act`) should not be set when `weight_quant_only` is'
          ' set to True.'
      )
    return None
  if num_bits_act is None or use_symmetric_act is None:
    raise ValueError(
        'Activation quantization params (`num_bits_act` and'
        ' `use_symmetric_act`) have to be set when  `weight_quant_only` is'
        ' set to false.'
    )
  return ActQuantizationParams(precision=num_bits_act,
                               symmetric=use_symmetric_act)


def set_transformer_quantization(
    config: LayerTpl,
    quantization_type: QuantizationType = QuantizationType.PTQ,
    mode: QuantizationMode = QuantizationMode.INFERENCE,
    num_bits: int = 8,
    linear_only: bool = False,
    use_symmetric: bool = True,
    rank: int = -1,
    *,
    weight_quant_only: bool = True,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
    quantize_embedding_softmax: bool = False,
    transposed_embedding_softmax: bool = False,
    softmax_only: bool = True,
    quantize_ngrammer_embedding: bool = False,
    dtype: Any = jnp.int8,
    block_size: int = 0,
    use_int4_packed_weights: bool = True,
    int4_packed_weights_container_dtype: Any = jnp.int32,
    num_bits_act: int | None = None,
    use_symmetric_act: bool | None = None,
    skip_transformers: list[str] | None = None,
    num_optimize_clipping: int | None = None,
    min_clipping: float | None = None,
    clipping_coeff: float = 1.0,
    optimize_clipping_per_channel: bool | None = None,
    vn_scale: float | None = None,
) -> None:
  """Quantizes every Transformer (and optionally softmax) in `config`.

  Args mirror `for_transformer`'s; `config` (a model or layer config) is
  changed in place.
  """
  wp = WeightQuantizationParams(
      precision=num_bits, use_symmetric=use_symmetric, dtype=dtype,
      block_size=block_size, use_int4_packed_weights=use_int4_packed_weights,
      int4_packed_weights_container_dtype=int4_packed_weights_container_dtype,
      num_optimize_clipping=num_optimize_clipping, min_clipping=min_clipping,
      clipping_coeff=clipping_coeff,
      optimize_clipping_per_channel=bool(optimize_clipping_per_channel),
      vn_scale=vn_scale,
  )
  ap = _act_params(weight_quant_only, num_bits_act, use_symmetric_act)
  skip = set(skip_transformers or ())
  for tr_tpl in utils.find_target_tpl(config, transformers.Transformer):
    if tr_tpl.name in skip:
      continue
    quantize_transformer_layer_weights(
        tr_tpl, quantization_type, mode, wp, ap, linear_only, rank,
        quantize_self_attention, quantize_cross_attention,
    )
  if not (quantize_embedding_softmax or quantize_ngrammer_embedding):
    return
  for lm_tpl in utils.find_target_tpl(config, _LM_CLASSES):
    if quantize_embedding_softmax:
      _rewrite.quantize_embedding_softmax(
          lm_tpl, _rewrite.params(quantization_type, mode, wp, ap),
          transposed_embedding_softmax, softmax_only,
      )
    if quantize_ngrammer_embedding:
      _rewrite.quantize_ngrammer(
          lm_tpl, _rewrite.params(quantization_type, mode, wp)
      )


def set_transformer_mixed_precision_quantization(
    config: LayerTpl,
    quantization_type: QuantizationType = QuantizationType.PTQ,
    mode: QuantizationMode = QuantizationMode.INFERENCE,
    num_bits: dict[TransformerLayer, int] | None = None,
    sub_channel_blocksize: dict[TransformerLayer, int] | None = None,
    use_symmetric: dict[TransformerLayer, bool] | None = None,
    dtype: dict[TransformerLayer, Any] | None = None,
    *,
    default_sub_channel_blocksize: int = 0,
    default_use_symmetric: bool = True,
    default_dtype: Any = jnp.int8,
    transposed_embedding_softmax: bool = False,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
) -> None:
  """Quantizes each part of the transformers named in `num_bits` with its
  own bits (parts not in `num_bits` stay float)."""
  num_bits = num_bits or {}
  blocks, symmetric, dtypes = (sub_channel_blocksize or {},
                               use_symmetric or {}, dtype or {})

  def weight_params(part):
    part_dtype = dtypes.get(part, default_dtype)
    return WeightQuantizationParams(
        precision=num_bits[part],
        use_symmetric=symmetric.get(part, default_use_symmetric),
        dtype=part_dtype, use_int4_packed_weights=part_dtype != jnp.int4,
        block_size=blocks.get(part, default_sub_channel_blocksize),
    )

  def act_params(part):
    if part not in num_bits:
      return None
    return ActQuantizationParams(
        precision=num_bits[part],
        symmetric=symmetric.get(part, default_use_symmetric))

  def qp(weights, acts):
    return _rewrite.params(quantization_type, mode, weight_params(weights),
                           act_params(acts))

  tr_tpls = utils.find_target_tpl(config, transformers.Transformer)
  if TransformerLayer.LINEAR in num_bits:
    for tr_tpl in tr_tpls:
      _rewrite.quantize_feed_forward(
          tr_tpl.tr_fflayer_tpl,
          qp(TransformerLayer.LINEAR, TransformerLayer.LINEAR_ACT))
  if TransformerLayer.ATTENTION in num_bits:
    for tr_tpl in tr_tpls:
      _rewrite.quantize_attention(
          tr_tpl, qp(TransformerLayer.ATTENTION,
                     TransformerLayer.ATTENTION_ACT),
          quantize_self_attention, quantize_cross_attention)
  lm_tpls = utils.find_target_tpl(config, _LM_CLASSES)
  if TransformerLayer.EMBEDDING_SOFTMAX in num_bits:
    for lm_tpl in lm_tpls:
      _rewrite.quantize_embedding_softmax(
          lm_tpl, qp(TransformerLayer.EMBEDDING_SOFTMAX,
                     TransformerLayer.EMBEDDING_SOFTMAX_ACT),
          transposed_embedding_softmax, softmax_only=True)
  if TransformerLayer.EMBEDDING_NGRAMMER in num_bits:
    for lm_tpl in lm_tpls:
      _rewrite.quantize_ngrammer(lm_tpl, _rewrite.params(
          quantization_type, mode,
          weight_params(TransformerLayer.EMBEDDING_NGRAMMER)))


def set_diffusion_quantization(
    config: LayerTpl,
    target: type[base_layer.BaseLayer],
    quantization_type: QuantizationType = QuantizationType.PTQ,
    mode: QuantizationMode = QuantizationMode.INFERENCE,
    num_bits: int = 8,
    use_symmetric: bool = True,
    weight_quant_only: bool = True,
    dtype: Any = jnp.int8,
) -> None:
  """Makes the `conv_tpl` of every `target` config a quantized Conv2D."""
  wp = WeightQuantizationParams(precision=num_bits,
                                use_symmetric=use_symmetric, dtype=dtype)
  ap = None if weight_quant_only else ActQuantizationParams(precision=num_bits)
  for tpl in utils.find_target_tpl(config, target):
    if hasattr(tpl, 'conv_tpl'):
      tpl.conv_tpl = pax_fiddle.Config(
          convolutions.Conv2D,
          quantization=_rewrite.params(quantization_type, mode, wp, ap),
      )


def set_inference_mode(config: LayerTpl) -> None:
  """Sets `quantization.mode` to INFERENCE everywhere in `config`."""
  pending = [config]
  while pending:
    node = pending.pop()
    for elem in node if isinstance(node, Sequence) and not isinstance(
        node, str) else [node]:
      quantization = getattr(elem, 'quantization', None)
      if quantization is not None and hasattr(quantization, 'mode'):
        quantization.mode = QuantizationMode.INFERENCE
      if isinstance(elem, fdl.Config):
        pending.extend(fdl.ordered_arguments(elem).values())


def _check_bits(num_bits: int, what: str = 'num_bits') -> None:
  if num_bits not in _VALID_BITS:
    raise ValueError(f'{what} must be one of {_VALID_BITS}, got {num_bits}.')


def _task_models(task_p: Any, with_checkpoint_rules: bool) -> list[Any]:
  models = [task_p.model]
  rules = getattr(getattr(task_p, 'train', None),
                  'init_from_checkpoint_rules', None)
  if with_checkpoint_rules and rules:
    models.extend(rule.task_p.model for rule in rules.values())
  return models


def _experiment_decorator(rewrite_task):
  """A class decorator whose subclass's `task()` is rewritten."""

  def decorator(cls):
    @functools.wraps(cls, updated=())
    class Wrapper(cls):

      def task(self):
        return rewrite_task(self, super())

    return Wrapper

  return decorator


def for_transformer(
    num_bits: int = 8,
    quantization_type: QuantizationType = QuantizationType.FQ,
    mode: QuantizationMode = QuantizationMode.TRAINING,
    use_symmetric: bool = True,
    rank: int = -1,
    *,
    weight_quant_only: bool = True,
    quantize_embedding_softmax: bool = False,
    transposed_embedding_softmax: bool = False,
    softmax_only: bool = True,
    quantize_ngrammer_embedding: bool = False,
    linear_only: bool = False,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
    dtype: Any = jnp.int8,
    quantize_init_from_checkpoint_rules_task: bool = False,
    block_size: int = 0,
    num_bits_act: int | None = None,
    use_symmetric_act: bool | None = None,
    skip_transformers: list[str] | None = None,
    num_optimize_clipping: int | None = None,
    min_clipping: float | None = None,
    clipping_coeff: float = 1.0,
    optimize_clipping_per_channel: bool = False,
    vn_scale: float | None = None,
):
  """Decorates an experiment class: its task's transformers get quantized.

  Default: int8 fake-quant (QAT) training of the feed-forward and attention
  weights. `num_bits` must be 2, 4 or 8; the other arguments are those of
  `set_transformer_quantization`.

  Returns:
    A class decorator.
  """
  _check_bits(num_bits)
  options = dict(
      quantization_type=quantization_type, mode=mode, num_bits=num_bits,
      linear_only=linear_only, use_symmetric=use_symmetric, rank=rank,
      weight_quant_only=weight_quant_only,
      quantize_embedding_softmax=quantize_embedding_softmax,
      transposed_embedding_softmax=transposed_embedding_softmax,
      quantize_ngrammer_embedding=quantize_ngrammer_embedding, dtype=dtype,
      block_size=block_size, quantize_self_attention=quantize_self_attention,
      quantize_cross_attention=quantize_cross_attention,
      softmax_only=softmax_only, use_symmetric_act=use_symmetric_act,
      num_bits_act=num_bits_act, skip_transformers=skip_transformers,
      num_optimize_clipping=num_optimize_clipping, min_clipping=min_clipping,
      clipping_coeff=clipping_coeff,
      optimize_clipping_per_channel=optimize_clipping_per_channel,
      vn_scale=vn_scale,
  )

  def rewrite(experiment, parent):
    del experiment
    task_p = parent.task()
    for model in _task_models(task_p,
                              quantize_init_from_checkpoint_rules_task):
      set_transformer_quantization(model, **options)
    return task_p

  return _experiment_decorator(rewrite)


def mixed_precision_for_transformer(
    quantization_type: QuantizationType = QuantizationType.PTQ,
    mode: QuantizationMode = QuantizationMode.INFERENCE,
    num_bits: dict[TransformerLayer, int] | None = None,
    sub_channel_blocksize: dict[TransformerLayer, int] | None = None,
    use_symmetric: dict[TransformerLayer, bool] | None = None,
    dtype: dict[TransformerLayer, Any] | None = None,
    *,
    default_sub_channel_blocksize: int = 0,
    default_use_symmetric: bool = True,
    default_dtype: Any = jnp.int8,
    transposed_embedding_softmax: bool = False,
    quantize_self_attention: bool = True,
    quantize_cross_attention: bool = True,
):
  """Decorates an experiment class for per-part (mixed) precisions.

  The experiment must define `set_quant_mode(mode)` (as Pax's servable
  experiments do). See `set_transformer_mixed_precision_quantization`.
  """
  for part, bits in (num_bits or {}).items():
    if bits not in _VALID_BITS:
      raise ValueError(
          f'Valid bits are 2, 4, 8, but Layer {part} is having {bits} bits'
      )

  def rewrite(experiment, parent):
    del experiment
    parent.set_quant_mode(mode)
    task_p = parent.task()
    set_transformer_mixed_precision_quantization(
        task_p.model, quantization_type=quantization_type, mode=mode,
        num_bits=num_bits, sub_channel_blocksize=sub_channel_blocksize,
        use_symmetric=use_symmetric, dtype=dtype,
        default_sub_channel_blocksize=default_sub_channel_blocksize,
        default_use_symmetric=default_use_symmetric,
        default_dtype=default_dtype,
        transposed_embedding_softmax=transposed_embedding_softmax,
        # As Pax: cross attention follows quantize_self_attention.
        quantize_self_attention=quantize_self_attention,
        quantize_cross_attention=quantize_self_attention,
    )
    return task_p

  del quantize_cross_attention
  return _experiment_decorator(rewrite)


def for_diffusion(
    target: type[base_layer.BaseLayer],
    num_bits: int = 8,
    quantization_type: QuantizationType = QuantizationType.FQ,
    mode: QuantizationMode = QuantizationMode.TRAINING,
    use_symmetric: bool = True,
    dtype: Any = jnp.int8,
    weight_quant_only: bool = True,
    quantize_init_from_checkpoint_rules_task: bool = False,
):
  """Decorates an experiment class: the convolutions of `target` layers get
  quantized (see `set_diffusion_quantization`)."""
  _check_bits(num_bits)

  def rewrite(experiment, parent):
    del experiment
    task_p = parent.task()
    for model in _task_models(task_p,
                              quantize_init_from_checkpoint_rules_task):
      set_diffusion_quantization(
          model, target, quantization_type=quantization_type, mode=mode,
          num_bits=num_bits, use_symmetric=use_symmetric,
          weight_quant_only=weight_quant_only, dtype=dtype)
    return task_p

  return _experiment_decorator(rewrite)
