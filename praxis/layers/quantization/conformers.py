"""Quantized conformer layers.

Public: `DotProductAttentionWithContext` (as in Pax: the float
`conformers.DotProductAttentionWithContext`, left/right context mask
included, whose q.k and p.v einsums are AQT-quantized like
`quantization.DotProductAttention`'s), and `quantize_conformer_layer_weights`
(an addition to Pax: swaps a `conformers.Conformer` config's weight layers
for their quantized twins, as `quantize.quantize_transformer_layer_weights`
does for a Transformer).

  p = pax_fiddle.Config(conformers.Conformer, name='c', input_dims=16,
                        model_dims=16, kernel_size=3, atten_num_heads=2)
  quantize_conformer_layer_weights(
      p, QuantizationType.FQ, QuantizationMode.TRAINING,
      WeightQuantizationParams(precision=8))
"""

from __future__ import annotations

from praxis import pax_fiddle
from praxis.layers import conformers
from praxis.layers import linears
from praxis.layers.quantization import _rewrite
from praxis.layers.quantization import attentions as qattentions
from praxis.layers.quantization import linears as qlinears
from praxis.layers.quantization import quantization_hparams

QuantizationType = quantization_hparams.QuantizationType
QuantizationMode = quantization_hparams.QuantizationMode
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
ActQuantizationParams = quantization_hparams.ActQuantizationParams
LayerTpl = pax_fiddle.Config


class DotProductAttentionWithContext(
    conformers.DotProductAttentionWithContext,
    qattentions.DotProductAttention,
):
  """`conformers.DotProductAttentionWithContext` with AQT-quantized q.k and
  p.v einsums (`quantization.quantization_type` must be AQT).

  The context mask comes from the float layer's `_attend`, the quantized
  einsums from `quantization.DotProductAttention._attend_scaled`.
  """


def _quantize_linear(tpl: LayerTpl | None, qp) -> None:
  """A FeedForward config's `linear_tpl` becomes a quantized Linear."""
  if tpl is not None:
    tpl.linear_tpl = _rewrite.twin(
        qlinears.Linear, tpl.linear_tpl, linears.Linear,
        quantization=qp)


def quantize_conformer_layer_weights(
    conformer_tpl: LayerTpl,
    quantization_type: QuantizationType,
    mode: QuantizationMode,
    weight_quantization_params: WeightQuantizationParams,
    act_quantization_params: ActQuantizationParams | None = None,
) -> None:
  """Quantizes a `conformers.Conformer` config in place.

  The feed-forward linears, the attention projections and the light conv's
  start/end projections become their quantized twins; with AQT and
  `act_quantization_params`, the self-attention becomes this module's
  `DotProductAttentionWithContext` (its q.k and p.v einsums quantized too).
  The depthwise conv and the norms stay float, as in Pax.

  Args:
    conformer_tpl: A `pax_fiddle.Config` of `conformers.Conformer`.
    quantization_type: PTQ, FQ or AQT.
    mode: TRAINING, MATERIALIZE or INFERENCE.
    weight_quantization_params: How weights are quantized.
    act_quantization_params: How activations are quantized (None: weights
      only).
  """
  if not _rewrite.is_subclass(conformer_tpl, conformers.Conformer):
    raise ValueError(
        'quantize_conformer_layer_weights: conformer_tpl must configure a '
        f'conformers.Conformer, got {getattr(conformer_tpl, "cls", None)}.')
  qp = _rewrite.params(quantization_type, mode, weight_quantization_params,
                       act_quantization_params)
  for ff in (conformer_tpl.fflayer_start_tpl, conformer_tpl.fflayer_end_tpl):
    if ff is not None:
      _quantize_linear(ff.fflayer_tpl, qp)
  lconv = conformer_tpl.lconv_tpl
  if lconv is not None:
    _quantize_linear(lconv.linear_start_tpl, qp)
    _quantize_linear(lconv.linear_end_tpl, qp)
  atten = conformer_tpl.trans_atten_tpl.self_atten_tpl
  _rewrite.quantize_dot_product_attention(atten, qp)
  float_cls = conformers.DotProductAttentionWithContext
  if (quantization_type == QuantizationType.AQT
      and act_quantization_params is not None
      and _rewrite.is_subclass(atten, float_cls)):
    conformer_tpl.trans_atten_tpl.self_atten_tpl = _rewrite.twin(
        DotProductAttentionWithContext, atten, float_cls, quantization=qp)
