"""Config rewrites that swap float layers for their quantized twins.

Private module behind `praxis.layers.quantization.quantize`.
"""

from __future__ import annotations

import importlib
from typing import Any

from absl import logging
from praxis import pax_fiddle
from praxis.layers import attentions as float_attentions
from praxis.layers import embedding_softmax as float_embedding_softmax
from praxis.layers.quantization import attentions
from praxis.layers.quantization import embedding_softmax
from praxis.layers.quantization import linears
from praxis.layers.quantization import quantization_hparams

QuantizationParams = quantization_hparams.QuantizationParams


def optional_class(module: str, name: str) -> type | None:
  """`module.name`, or None while that module is not available."""
  try:
    return getattr(importlib.import_module(module), name)
  except (ImportError, AttributeError):
    return None


def is_subclass(tpl: Any, cls: type | None) -> bool:
  fn = getattr(tpl, '__fn_or_cls__', None)
  return cls is not None and isinstance(fn, type) and issubclass(fn, cls)


def params(qtype, mode, weight_params, act_params=None) -> QuantizationParams:
  return QuantizationParams(quantization_type=qtype, mode=mode,
                            weight_params=weight_params,
                            act_params=act_params)


def twin(cls: type, old_tpl: Any, float_cls: type | None, **fields) -> Any:
  """A config of `cls` with `fields`, and `old_tpl`'s fields if it is a
  `float_cls`."""
  new = pax_fiddle.Config(cls, **fields)
  if is_subclass(old_tpl, float_cls):
    new.copy_fields_from(old_tpl)
  return new


def quantize_dot_product_attention(attn_tpl, qp: QuantizationParams) -> None:
  attn_tpl.proj_tpl = twin(attentions.AttentionProjection, attn_tpl.proj_tpl,
                           float_attentions.AttentionProjection,
                           quantization=qp)
  attn_tpl.combined_qkv_proj_tpl = twin(
      attentions.CombinedQKVProjectionLayer, attn_tpl.combined_qkv_proj_tpl,
      float_attentions.CombinedQKVProjectionLayer, quantization=qp)


def quantize_mq_dot_product_attention(attn_tpl, qp: QuantizationParams):
  attn_tpl.proj_tpl = twin(attentions.AttentionProjection, attn_tpl.proj_tpl,
                           float_attentions.AttentionProjection,
                           quantization=qp)
  quantized = optional_class(
      'praxis.layers.quantization.multi_query_attention',
      'OneHeadedAttentionProjection')
  if quantized is None:
    raise NotImplementedError(
        'Quantizing MultiQueryDotProductAttention needs '
        'praxis.layers.quantization.multi_query_attention, which is not '
        'available yet.'
    )
  attn_tpl.headless_proj_tpl = twin(
      quantized, attn_tpl.headless_proj_tpl,
      optional_class('praxis.layers.multi_query_attention',
                     'OneHeadedAttentionProjection'),
      quantization=qp)


def quantize_attention(tr_tpl, qp, self_attention=True, cross_attention=True):
  mqa = optional_class('praxis.layers.multi_query_attention',
                       'MultiQueryDotProductAttention')

  def rewrite(name):
    atten_tpl = getattr(tr_tpl, name)
    if atten_tpl is None:
      return
    if is_subclass(atten_tpl, float_attentions.DotProductAttention):
      quantize_dot_product_attention(atten_tpl, qp)
    elif is_subclass(atten_tpl, mqa):
      quantize_mq_dot_product_attention(atten_tpl, qp)
    else:
      raise ValueError(
          f'tr_tpl.{name}.cls is : {atten_tpl.cls}'
          'but has to be DotProductAttention or MultiQueryDotProductAttention'
      )

  if cross_attention != self_attention and tr_tpl.cross_atten_tpl is None:
    tr_tpl.cross_atten_tpl = tr_tpl.tr_atten_tpl.clone()
  if self_attention:
    rewrite('tr_atten_tpl')
  if cross_attention:
    rewrite('cross_atten_tpl')


def quantize_feed_forward(tr_fflayer_tpl, qp, rank: int = -1) -> None:
  tr_fflayer_tpl.fflayer_tpl.linear_tpl = pax_fiddle.Config(
      linears.Linear, quantization=qp, rank=rank
  )


def quantize_embedding_softmax(lm_tpl, qp, transposed: bool,
                               softmax_only: bool) -> None:
  cls = (embedding_softmax.NClassMajorSharedEmbeddingSoftmax if transposed
         else embedding_softmax.SharedEmbeddingSoftmax)

  def rewrite(name):
    old = getattr(lm_tpl, name, None)
    if old is None:
      return
    if not is_subclass(old, float_embedding_softmax.SharedEmbeddingSoftmax):
      logging.info('layer_tpl.%s.cls is %s: only SharedEmbeddingSoftmax is '
                   'quantized.', name, old.cls)
      return
    new = pax_fiddle.Config(cls, quantization=qp)
    new.copy_fields_from(old)
    setattr(lm_tpl, name, new)

  rewrite('softmax_tpl')
  if not softmax_only:
    for name in ('separate_embedding_tpl', 'encoder_embedding_tpl',
                 'decoder_embedding_tpl'):
      rewrite(name)


def quantize_ngrammer(lm_tpl, qp) -> None:
  pairs = []
  for name in ('Ngrammer', 'VQNgrammer'):
    pairs.append((optional_class('praxis.layers.ngrammer', name), name))

  for field in ('ngrammer_tpl', 'encoder_ngrammer_tpl',
                'decoder_ngrammer_tpl'):
    old = getattr(lm_tpl, field, None)
    if old is None:
      continue
    for float_cls, name in pairs:
      if is_subclass(old, float_cls):
        quantized = optional_class('praxis.layers.quantization.ngrammer', name)
        if quantized is None:
          raise NotImplementedError(
              f'Quantizing {name} needs praxis.layers.quantization.ngrammer, '
              'which is not available yet.'
          )
        new = pax_fiddle.Config(quantized, quantization=qp)
        new.copy_fields_from(old)
        setattr(lm_tpl, field, new)
        break
