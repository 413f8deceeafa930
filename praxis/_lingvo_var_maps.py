"""Variable trees of praxis layers laid out as Lingvo's layers name them.

Pax's layer tests compare a praxis layer with its Lingvo (TensorFlow)
counterpart: they build both, then load the praxis layer's initial variables
into the Lingvo layer. The helpers here rename and regroup one praxis
layer's variables the way the Lingvo layer expects them. They are re-exported
by `praxis.test_utils` under Pax's names (`replace_jax_*_vars_to_tf`).

Each helper takes the praxis variables as a (nested) mapping, returns a new
`NestedMap` and leaves its argument unchanged (Pax's versions also add the
Lingvo keys to parts of their argument; nothing here relies on that). The
arrays are shared, not copied. Lingvo expects entries for its parameterless
sub-layers (dropouts, activations, poolings): they are empty `NestedMap`s,
or the placeholder values Pax puts there (1.0 for some dropouts).

Only the light-convolution and conformer helpers return TensorFlow tensors
(as Pax's do); they import TensorFlow through `test_utils.to_tf_nmap`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from praxis import py_utils

NestedMap = py_utils.NestedMap


def _nmap(tree: Mapping[str, Any]) -> NestedMap:
  """A NestedMap copy of the mapping structure of `tree` (arrays shared)."""
  return NestedMap.FromNestedDict(dict(tree))


def _empty_pair() -> list[NestedMap]:
  return [NestedMap(), NestedMap()]


def _dense(ffn: Mapping[str, Any]) -> NestedMap:
  """Lingvo's {w, b} of a praxis FeedForward ({linear: {w}, bias: {b}})."""
  return NestedMap(w=ffn['linear']['w'], b=ffn['bias']['b'])


def _two_layer_ffn(block: Mapping[str, Any], dropout: Any) -> NestedMap:
  """Lingvo's FeedForwardNet of a praxis feed-forward block's two layers."""
  return NestedMap(
      fc=[_dense(block['ffn_layer1']), _dense(block['ffn_layer2'])],
      dropout=dropout,
  )


def _layer_norm(norm: Mapping[str, Any]) -> NestedMap:
  return NestedMap(bias=norm['bias'], scale=norm['scale'])


def _attention(atten: Mapping[str, Any]) -> NestedMap:
  """A praxis attention's variables plus Lingvo's dropout entry."""
  out = _nmap(atten)
  out.atten_dropout = NestedMap()
  return out


def transformer_ffwd(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """TransformerFeedForward -> Lingvo's TransformerFeedForwardLayer."""
  return NestedMap(
      fflayer=_two_layer_ffn(jax_initial_vars, _empty_pair()),
      layer_norm=_layer_norm(jax_initial_vars['layer_norm']),
      residual_dropout=NestedMap(),
      residual_droppath=NestedMap(),
  )


def attention(jax_initial_vars: Mapping[str, Any],
              cross_attention: bool | None = False) -> NestedMap:
  """Transformer -> Lingvo's TransformerLayer (its praxis keys kept)."""
  out = _nmap(jax_initial_vars)
  ff = jax_initial_vars['ff_layer']
  fflayer = _nmap(ff)
  if 'gate' in ff:  # A mixture of experts.
    fflayer.fflayer = NestedMap(
        layer_norm=_layer_norm(ff['layer_norm']),
        gate=ff['gate'], wi_0=ff['wi_0'], wo_0=ff['wo_0'])
  else:
    fflayer.fflayer = _two_layer_ffn(ff, [1.0, 1.0])
  fflayer.residual_dropout = NestedMap()
  out.fflayer = fflayer
  # Pax gives the cross-attention block the self-attention's layer norm.
  blocks = [('self_atten', 'self_attention')]
  if cross_attention:
    blocks.append(('cross_atten', 'cross_attention'))
  for lingvo_name, praxis_name in blocks:
    out[lingvo_name] = NestedMap(
        layer_norm=_nmap(jax_initial_vars['layer_norm']),
        atten=_attention(jax_initial_vars[praxis_name]),
        residual_dropout=1.0,
    )
  return out


def _softmax_projection(variables: Mapping[str, Any]) -> tuple[NestedMap,
                                                               Any, Any]:
  out = _nmap(variables)
  ffn = out.pop('logits_ffn')
  return out, ffn['linear']['w'], ffn['bias']['b']


def single_shard_full_softmax(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """FullSoftmax -> Lingvo's SingleShardFullSoftmax ({linear, bias})."""
  out, w, b = _softmax_projection(jax_initial_vars)
  out.linear = NestedMap(w=w)
  out.bias = NestedMap(b=b)
  return out


def simple_full_softmax(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """FullSoftmax -> Lingvo's SimpleFullSoftmax (weight_0, bias_0)."""
  out, w, b = _softmax_projection(jax_initial_vars)
  out.weight_0 = w
  out.bias_0 = b
  return out


def conv_bnact(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """ConvBNAct -> Lingvo's ConvBNAct ({conv: {w}, act})."""
  out = _nmap(jax_initial_vars)
  out.conv = NestedMap(w=out.pop('w'))
  out.act = NestedMap()
  return out


def res_net_block(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """ResNetBlock -> Lingvo's ResNetBlock (`body` a list of its body_i)."""
  out = _nmap(jax_initial_vars)
  body_keys = sorted((k for k in out if k.startswith('body_')),
                     key=lambda k: int(k[len('body_'):]))
  out.body = [conv_bnact(out[k]) for k in body_keys]
  if 'shortcut' in out:
    out.shortcut = conv_bnact(out.shortcut)
  out.postact = NestedMap()
  return out


def res_net(jax_initial_vars: Mapping[str, Any]) -> NestedMap:
  """ResNet -> Lingvo's ResNet (every stage_s_block_b converted)."""
  out = _nmap(jax_initial_vars)
  out.entryflow_conv = conv_bnact(out.entryflow_conv)
  out.entryflow_maxpool = NestedMap()
  out.output_spatial_pooling = NestedMap()
  stage = 0
  while f'stage_{stage}_block_0' in out:
    block = 0
    while f'stage_{stage}_block_{block}' in out:
      name = f'stage_{stage}_block_{block}'
      out[name] = res_net_block(out[name])
      block += 1
    stage += 1
  return out


def _light_conv_numpy(variables: Mapping[str, Any],
                      non_trainable: Mapping[str, Any]) -> NestedMap:
  gated, act = variables['linear_start_gated'], variables['linear_start_act']
  norm, stats = variables['conv_norm'], non_trainable['conv_norm']
  return NestedMap(
      ln=_layer_norm(variables['ln']),
      norm=NestedMap(beta=norm['beta'], gamma=norm['gamma'],
                     moving_mean=stats['moving_mean'],
                     moving_variance=stats['moving_variance']),
      dropout=_empty_pair(),
      # Lingvo's depthwise filter has a channel-multiplier axis.
      depthwise_conv1d=NestedMap(
          w=np.expand_dims(variables['depthwise_conv1d']['w'], axis=-1)),
      linear_end=_dense(variables['linear_end']),
      # Lingvo's GLU input projection is one matrix: [gated | activation].
      linear_start=NestedMap(
          w=np.concatenate([gated['linear']['w'], act['linear']['w']],
                           axis=-1),
          b=np.concatenate([gated['bias']['b'], act['bias']['b']], axis=-1)),
  )


def light_conv(
    jax_initial_vars: Mapping[str, Any],
    jax_initial_non_trainable_vars: Mapping[str, Any]) -> NestedMap:
  """LightConv1D (and its batch-norm statistics) -> Lingvo's LConvLayer,
  as TensorFlow tensors."""
  from praxis import test_utils  # pylint: disable=g-import-not-at-top
  return test_utils.to_tf_nmap(
      _light_conv_numpy(jax_initial_vars, jax_initial_non_trainable_vars))


def _conformer_ffn(block: Mapping[str, Any]) -> NestedMap:
  return NestedMap(
      residual_dropout=NestedMap(),
      layer_norm=_nmap(block['layer_norm']),
      fflayer=_two_layer_ffn(block, _empty_pair()),
  )


def conformer_layer(
    jax_initial_vars: Mapping[str, Any],
    jax_initial_non_trainable_vars: Mapping[str, Any]) -> NestedMap:
  """Conformer -> Lingvo's ConformerLayer, as TensorFlow tensors."""
  from praxis import test_utils  # pylint: disable=g-import-not-at-top
  trans = jax_initial_vars['trans_atten']
  out = NestedMap(
      lconv=_light_conv_numpy(jax_initial_vars['lconv'],
                              jax_initial_non_trainable_vars['lconv']),
      final_ln=_layer_norm(jax_initial_vars['final_ln']),
      fflayer_start=_conformer_ffn(jax_initial_vars['fflayer_start']),
      fflayer_end=_conformer_ffn(jax_initial_vars['fflayer_end']),
      trans_atten=NestedMap(
          layer_norm=_nmap(trans['norm']),
          residual_dropout=NestedMap(),
          atten=_attention(trans['self_atten']),
      ),
  )
  return test_utils.to_tf_nmap(out)
