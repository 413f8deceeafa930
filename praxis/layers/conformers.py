"""Conformer layers (arXiv:2005.08100), built from our attentions, convolutions
and transformer feed-forward layers.

Public: `DotProductAttentionWithContext`, `DotProductAttentionWithContextXL`
(global attention limited to a left/right context by a mask),
`SelfAttentionWithNormAndResidual` (norm, self-attention, residual),
`Conformer` (half FFN, MHSA, light conv, half FFN, layer norm). Children and
variables are named as in Pax: `fflayer_start`, `trans_atten` (`norm`,
`self_atten`), `lconv`, `fflayer_end`, `final_ln`.

  p = pax_fiddle.Config(Conformer, name='conformer', input_dims=16,
                        model_dims=16, kernel_size=3, atten_num_heads=2)
  layer = base_layer.instantiate(p)
  variables = layer.init(prng_key, x, paddings)  # x: [B, T, 16]
  y = layer.apply(variables, x, paddings)         # [B, T, 16]
"""

from __future__ import annotations

import fiddle as fdl
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import convolutions
from praxis.layers import normalizations
from praxis.layers import stochastics
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]

_NORM_POLICIES = ('pre', 'post', 'post_skip', 'primer_hybrid')
_LAYER_ORDERS = ('mhsa', 'conv', 'mhsa_before_conv', 'conv_before_mhsa')


def _with_context(layer, atten_mask: JTensor, time_size: int) -> JTensor:
  """`atten_mask` further limited to the layer's left/right context."""
  if layer.left_context is None and layer.right_context is None:
    return atten_mask
  context = attentions.limited_context_mask(
      layer.left_context, layer.right_context, time_size)
  return jnp.minimum(context, atten_mask)


class DotProductAttentionWithContext(attentions.DotProductAttention):
  """DotProductAttention that sees only `left_context` positions to the left
  (counting itself) and `right_context` to the right; None: unlimited.

  Attributes:
    left_context: Left context, or None.
    right_context: Right context, or None.
  """

  left_context: int | None = None
  right_context: int | None = None

  def _attend(self, query, key, value, atten_mask, relative_bias, dropout):
    atten_mask = _with_context(self, atten_mask, query.shape[1])
    return super()._attend(query, key, value, atten_mask, relative_bias,
                           dropout)


class DotProductAttentionWithContextXL(attentions.DotProductAttentionXL):
  """DotProductAttentionXL limited to a left/right context (see
  `DotProductAttentionWithContext`).

  Attributes:
    left_context: Left context, or None.
    right_context: Right context, or None.
  """

  left_context: int | None = None
  right_context: int | None = None

  def _attend(self, query, key, value, atten_mask, relative_bias, dropout):
    atten_mask = _with_context(self, atten_mask, query.shape[1])
    return super()._attend(query, key, value, atten_mask, relative_bias,
                           dropout)


class SelfAttentionWithNormAndResidual(base_layer.BaseLayer):
  """Normalization, self-attention and a residual connection.

  out = dropout(attention(x')) * residual_weight + x * input_weight, with x'
  normalized per the norm policy.

  Attributes:
    residual_weight: Weight of the attention branch.
    input_weight: Weight of the skip branch.
    self_atten_tpl: The self-attention layer.
    norm_tpl: The normalization layer.
    pre_layer_norm: True: 'pre'; False: 'post_skip'. Set this or
      norm_policy, not both.
    residual_dropout_prob: Dropout on the attention branch.
    residual_dropout_tpl: The dropout layer (keep_prob set from the above).
    norm_policy: 'pre' (before attention), 'post' (after attention),
      'post_skip' (after the residual sum) or 'primer_hybrid' (before and
      after attention: children `pre_norm`, `post_norm`).
  """

  residual_weight: float = 1.0
  input_weight: float = 1.0
  self_atten_tpl: LayerTpl = template_field(DotProductAttentionWithContext)
  norm_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  pre_layer_norm: bool | None = True
  residual_dropout_prob: float = 0.0
  residual_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  norm_policy: str | None = None

  def _check_config(self) -> None:
    name = type(self).__name__
    if self.self_atten_tpl is None:
      raise ValueError(f'{name}.self_atten_tpl must be set.')
    if self.pre_layer_norm is not None and self.norm_policy is not None:
      raise ValueError(f'{name}: set pre_layer_norm or norm_policy, not both '
                       f'(got {self.pre_layer_norm}, {self.norm_policy!r}).')
    if self.norm_policy and self.norm_policy not in _NORM_POLICIES:
      raise ValueError(f'{name}.norm_policy must be one of {_NORM_POLICIES}, '
                       f'got {self.norm_policy!r}.')

  def _create_self_atten(self) -> None:
    self.create_child('self_atten', self.self_atten_tpl)

  def setup(self) -> None:
    self._check_config()
    if self.unified_norm_policy() == 'primer_hybrid':
      self.create_child('pre_norm', self.norm_tpl)
      self.create_child('post_norm', self.norm_tpl)
    else:
      self.create_child('norm', self.norm_tpl)
    self._create_self_atten()
    dropout = self.residual_dropout_tpl.clone()
    dropout.keep_prob = 1.0 - self.residual_dropout_prob
    self.create_child('residual_dropout', dropout)

  def unified_norm_policy(self) -> str | None:
    """The norm policy, with `pre_layer_norm` translated."""
    if self.pre_layer_norm is not None:
      return 'pre' if self.pre_layer_norm else 'post_skip'
    return self.norm_policy

  def _padding_mask(self, paddings: JTensor, dtype) -> JTensor:
    """[B, 1, 1|T, S] mask; with a limited context padded queries also see
    nothing (so the emulated local attention matches the block one)."""
    mask = attentions.convert_paddings_to_mask(paddings, dtype)
    tpl = self.self_atten_tpl
    if issubclass(fdl.get_callable(tpl), (DotProductAttentionWithContext,
                                          DotProductAttentionWithContextXL)):
      if tpl.left_context is not None or tpl.right_context is not None:
        mask = jnp.minimum(mask, jnp.transpose(mask, (0, 1, 3, 2)))
    return mask

  def __call__(self, inputs: JTensor, paddings: JTensor,
               atten_mask: JTensor | None = None) -> JTensor:
    """`inputs` [B, T, D], `paddings` [B, T], optional extra additive mask."""
    policy = self.unified_norm_policy()
    skip = inputs
    if policy == 'pre':
      inputs = self.norm(inputs)
    elif policy == 'primer_hybrid':
      inputs = self.pre_norm(inputs)
    mask = self._padding_mask(paddings, inputs.dtype)
    if atten_mask is not None:
      mask = jnp.minimum(atten_mask, mask)
    result = self.self_atten(query_vec=inputs, key_vec=inputs,
                             value_vec=inputs, atten_mask=mask)[0]
    if policy == 'primer_hybrid':
      result = self.post_norm(result)
    elif policy == 'post':
      result = self.norm(result)
    result = (self.residual_dropout(result) * self.residual_weight
              + skip * self.input_weight)
    if policy == 'post_skip':
      result = self.norm(result)
    return result


class Conformer(base_layer.BaseLayer):
  """One Conformer block (arXiv:2005.08100).

  With the defaults: x += FFN(x) / 2; x += MHSA(x); x += LConv(x);
  x += FFN(x) / 2; y = LayerNorm(x); the residuals live inside the blocks.

  Attributes:
    input_dims: Input depth (fflayer_start projects it to model_dims if
      different).
    model_dims: Model depth.
    kernel_size: Light convolution kernel size.
    ff_activation_tpl: Feed-forward activation.
    ff_residual_weight: Feed-forward residual weight.
    ffn_dim_multiplier: Feed-forward hidden depth / model_dims.
    atten_num_heads: Attention heads.
    layer_order: 'mhsa', 'conv', 'mhsa_before_conv' or 'conv_before_mhsa'.
    dropout_prob: If set, every dropout below (which must be None or equal).
    conv_residual_dropout: Conv block residual dropout.
    atten_residual_dropout: Attention block residual dropout.
    ffn_residual_dropout: Feed-forward residual dropout.
    atten_dropout: Attention probabilities dropout.
    ffn_relu_dropout: Feed-forward post-activation dropout.
    fflayer_start_tpl: The first feed-forward (None: none).
    trans_atten_tpl: The attention block.
    lconv_tpl: The convolution block (None: none).
    fflayer_end_tpl: The last feed-forward (None: none).
    fflayer_weight_sharing: Reuse fflayer_start in place of fflayer_end.
    final_ln_tpl: The final normalization (None: none).
  """

  input_dims: int | None = None
  model_dims: int = 512
  kernel_size: int = 32
  ff_activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.Swish))
  ff_residual_weight: float = 0.5
  ffn_dim_multiplier: int = 4
  atten_num_heads: int = 8
  layer_order: str = 'mhsa_before_conv'
  dropout_prob: float | None = None
  conv_residual_dropout: float | None = None
  atten_residual_dropout: float | None = None
  ffn_residual_dropout: float | None = None
  atten_dropout: float | None = None
  ffn_relu_dropout: float | None = None
  fflayer_start_tpl: LayerTpl | None = template_field(
      transformers.TransformerFeedForward)
  trans_atten_tpl: LayerTpl = template_field(SelfAttentionWithNormAndResidual)
  lconv_tpl: LayerTpl | None = template_field(convolutions.LightConv1D)
  fflayer_end_tpl: LayerTpl | None = template_field(
      transformers.TransformerFeedForward)
  fflayer_weight_sharing: bool = False
  final_ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)

  def _dropout_prob(self, prob: float | None) -> float:
    if self.dropout_prob is not None:
      return self.dropout_prob
    return 0.0 if prob is None else prob

  def _assert_layer_order(self) -> None:
    if self.layer_order not in _LAYER_ORDERS:
      raise ValueError(f'{type(self).__name__}.layer_order must be one of '
                       f'{_LAYER_ORDERS}, got {self.layer_order!r}.')

  def _check_config(self) -> None:
    self._assert_layer_order()
    name = type(self).__name__
    if self.dropout_prob is not None:
      for field in ('atten_dropout', 'atten_residual_dropout',
                    'conv_residual_dropout', 'ffn_residual_dropout',
                    'ffn_relu_dropout'):
        prob = getattr(self, field)
        if prob is not None and prob != self.dropout_prob:
          raise ValueError(f'{name}.{field}={prob} conflicts with '
                           f'dropout_prob={self.dropout_prob}.')
    if self.fflayer_weight_sharing and not self.fflayer_start_tpl:
      raise ValueError(f'{name}: fflayer_weight_sharing needs '
                       'fflayer_start_tpl.')
    if 'conv' in self.layer_order and self.lconv_tpl is None:
      raise ValueError(f'{name}: layer_order {self.layer_order!r} needs '
                       'lconv_tpl.')

  def _ffn_config(self, tpl: LayerTpl, name: str, input_dims: int | None,
                  output_dims: int | None = None) -> LayerTpl:
    p = tpl.clone().set(
        name=name,
        activation_tpl=self.ff_activation_tpl.clone(),
        input_dims=input_dims,
        hidden_dims=self.model_dims * self.ffn_dim_multiplier,
        residual_weight=self.ff_residual_weight,
        residual_dropout_prob=self._dropout_prob(self.ffn_residual_dropout),
        relu_dropout_prob=self._dropout_prob(self.ffn_relu_dropout))
    if output_dims is not None:
      p.output_dims = output_dims
    return p

  def _create_trans_atten(self) -> None:
    if 'mhsa' not in self.layer_order:
      return
    tpl = self.trans_atten_tpl
    p = tpl.clone().set(
        residual_dropout_prob=self._dropout_prob(self.atten_residual_dropout),
        self_atten_tpl=tpl.self_atten_tpl.clone().set(
            input_dim=self.model_dims,
            hidden_dim=self.model_dims,
            atten_dropout_prob=self._dropout_prob(self.atten_dropout),
            num_heads=self.atten_num_heads))
    p.norm_tpl = p.norm_tpl.clone().set(dim=self.model_dims)
    self.create_child('trans_atten', p)

  def _create_conv(self) -> None:
    if 'conv' not in self.layer_order:
      return
    self.create_child('lconv', self.lconv_tpl.clone().set(
        input_dims=self.model_dims,
        kernel_size=self.kernel_size,
        dropout_prob=self._dropout_prob(self.conv_residual_dropout)))

  def setup(self) -> None:
    self._check_config()
    if self.fflayer_start_tpl:
      projects = self.input_dims != self.model_dims
      self.create_child('fflayer_start', self._ffn_config(
          self.fflayer_start_tpl, 'fflayer_start', self.input_dims,
          self.model_dims if projects else None))
    if self.fflayer_end_tpl and not self.fflayer_weight_sharing:
      self.create_child('fflayer_end', self._ffn_config(
          self.fflayer_end_tpl, 'fflayer_end', self.model_dims))
    self._create_trans_atten()
    self._create_conv()
    if self.final_ln_tpl:
      self.create_child('final_ln', self.final_ln_tpl.clone().set(
          name='final_ln', dim=self.model_dims))

  @property
  def has_fflayer_start(self) -> bool:
    return self.fflayer_start_tpl is not None

  @property
  def has_fflayer_end(self) -> bool:
    return self.fflayer_end_tpl is not None and not self.fflayer_weight_sharing

  @property
  def has_final_ln(self) -> bool:
    return self.final_ln_tpl is not None

  def _attend(self, x, paddings, atten_mask):
    return self.trans_atten(inputs=x, paddings=paddings, atten_mask=atten_mask)

  def __call__(self, inputs: JTensor, paddings: JTensor,
               atten_mask: JTensor | None = None) -> JTensor:
    """`inputs` [B, T, input_dims], `paddings` [B, T] -> [B, T, model_dims]."""
    if atten_mask is not None and 'mhsa' not in self.layer_order:
      raise RuntimeError(f'{type(self).__name__}: atten_mask given but '
                       f'layer_order {self.layer_order!r} has no attention.')
    x = inputs
    if self.has_fflayer_start:
      x = self.fflayer_start(x, paddings)
    order = {
        'mhsa': ('mhsa',), 'conv': ('conv',),
        'mhsa_before_conv': ('mhsa', 'conv'),
        'conv_before_mhsa': ('conv', 'mhsa'),
    }[self.layer_order]
    for block in order:
      if block == 'mhsa':
        x = self._attend(x, paddings, atten_mask)
      else:
        x = self.lconv(x, paddings)
    if self.has_fflayer_end:
      x = self.fflayer_end(x, paddings)
    elif self.fflayer_weight_sharing:
      x = self.fflayer_start(x, paddings)
    if self.has_final_ln:
      x = self.final_ln(x)
    return x
