"""Convolution layers.

Public names: causal_padding, conv_padding, conv, conv_output_paddings,
depthwise_conv1d, Conv2D, Conv3D, ConvBNAct, ConvBNActWithPadding,
BaseDepthwiseConv1D, DepthwiseConv1D, LightConv1D.

Images are NHWC (videos NTHWC); filters are HWIO (THWIO). Grouped and
depthwise convolutions follow from the filter's input-channel dim: the group
count is `in_channels // filter_shape[-2]` (see `Conv2D.HParamsDepthwise`).
Sequences for the 1-D layers are [B, T, D] with paddings [B, T].

Example:

  conv = base_layer.instantiate(pax_fiddle.Config(
      convolutions.Conv2D, name='conv', filter_shape=(3, 3, 1, 8),
      filter_stride=(1, 1)))
  variables = conv.init(jax.random.PRNGKey(0), images)  # images [B, H, W, 1]
  features = conv.apply(variables, images)  # [B, H, W, 8]
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import stochastics

JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]

_DIMENSION_NUMBERS = {
    1: ('NHC', 'HIO', 'NHC'),
    2: ('NHWC', 'HWIO', 'NHWC'),
    3: ('NTHWC', 'THWIO', 'NTHWC'),
}


# ----------------------------------------------------------------------------
# Math.
# ----------------------------------------------------------------------------


def _effective_kernel_size(size: int, dilation: int) -> int:
  return dilation * (size - 1) + 1


def causal_padding(filter_shape: int, dilation_rate: int) -> int:
  """Left padding that makes a convolution over time causal."""
  return _effective_kernel_size(filter_shape, dilation_rate) - 1


def conv_padding(
    kernel_sizes: Sequence[int],
    dilations: Sequence[int],
    padding: str = 'SAME',
    tf_equivalent_padding: bool = False,
    is_causal: bool = False,
) -> str | list[tuple[int, int]]:
  """The `padding` argument of `lax.conv_general_dilated` for a Pax conv.

  Without `tf_equivalent_padding`, SAME pads each spatial dim by
  `effective_kernel - 1` split evenly (extra at the end) whatever the stride;
  with it, XLA's own 'SAME'/'VALID' is used, except that a causal conv pads
  the first (time) dim only on the left.

  Args:
    kernel_sizes: Spatial sizes of the filter.
    dilations: Dilation of each spatial dim.
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: Use TensorFlow's padding rules.
    is_causal: Causal in the first spatial dim (needs tf_equivalent_padding).

  Returns:
    'SAME', 'VALID' or one (low, high) pair per spatial dim.
  """
  totals = [
      causal_padding(k, d) for k, d in zip(kernel_sizes, dilations)
  ]
  if tf_equivalent_padding and not is_causal:
    return padding
  if padding == 'VALID':
    return [(0, 0)] * len(totals)
  pads = [(t // 2, t - t // 2) for t in totals]
  if is_causal:
    pads[0] = (totals[0], 0)
  return pads


def conv(
    inputs: JTensor,
    w: JTensor,
    strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    dilations: Sequence[int],
) -> JTensor:
  """An N-D channels-last convolution; groups = in_channels // w.shape[-2].

  Args:
    inputs: [B, *spatial, C_in].
    w: [*kernel, C_in // groups, C_out].
    strides: Window strides, one per spatial dim.
    padding: As for `lax.conv_general_dilated`.
    dilations: Filter (rhs) dilations.

  Returns:
    [B, *spatial', C_out].
  """
  in_channels = inputs.shape[-1]
  filter_in, out_channels = w.shape[-2], w.shape[-1]
  if in_channels % filter_in:
    raise ValueError(
        f'Input channels {in_channels} (inputs {inputs.shape}) must be a '
        f'multiple of the filter input dim {filter_in} (filter {w.shape}).'
    )
  groups = in_channels // filter_in
  if out_channels % groups:
    raise ValueError(
        f'Filter output dim {out_channels} must be a multiple of the group '
        f'count {groups} (inputs {inputs.shape}, filter {w.shape}).'
    )
  return jax.lax.conv_general_dilated(
      inputs,
      w,
      window_strides=tuple(strides),
      padding=padding if isinstance(padding, str) else list(padding),
      rhs_dilation=tuple(dilations),
      dimension_numbers=_DIMENSION_NUMBERS[inputs.ndim - 2],
      feature_group_count=groups,
  )


def conv_output_paddings(
    paddings: JTensor,
    filter_size: int,
    stride: int,
    padding: str = 'SAME',
    compat_with_lingvo: bool = False,
) -> JTensor:
  """Paddings [B, T'] of a conv's output over time from input paddings [B, T].

  SAME: output step i reads input step i * stride (or, lingvo-compatible,
  step i * stride + stride - 1, padded beyond the input). VALID: an output
  step is padding only if every input step of its window is.

  Args:
    paddings: [B, T] (1 = padded).
    filter_size: Filter size over time.
    stride: Stride over time.
    padding: 'SAME' or 'VALID'.
    compat_with_lingvo: Lingvo's SAME rule.

  Returns:
    [B, T'] paddings.
  """
  length = paddings.shape[1]
  if padding == 'SAME':
    out_length = -(-length // stride)
    if not compat_with_lingvo:
      return paddings[:, ::stride]
    picked = paddings[:, stride - 1 :: stride]
    return jnp.pad(
        picked, [(0, 0), (0, out_length - picked.shape[1])], constant_values=1
    )
  # Static (numpy) indices: `paddings` may be a numpy array under a trace.
  starts = np.arange(0, length - filter_size + 1, stride)
  idx = starts[:, None] + np.arange(filter_size)[None, :]
  return jnp.min(jnp.asarray(paddings)[:, idx], axis=-1)


def depthwise_conv1d(
    inputs: JTensor, w: JTensor, dilation: int = 1, is_causal: bool = False
) -> JTensor:
  """Depthwise convolution over time of [B, T, C] with w [K, 1, C * M].

  Args:
    inputs: [B, T, C].
    w: [kernel, 1, C * multiplier].
    dilation: Filter dilation.
    is_causal: Pad on the left only, so step t sees steps <= t.

  Returns:
    [B, T, C * multiplier].
  """
  if is_causal:
    padding: Any = [(causal_padding(w.shape[0], dilation), 0)]
  else:
    padding = 'SAME'
  return jax.lax.conv_general_dilated(
      inputs,
      w,
      window_strides=(1,),
      padding=padding,
      rhs_dilation=(dilation,),
      dimension_numbers=_DIMENSION_NUMBERS[1],
      feature_group_count=inputs.shape[-1],
  )


# ----------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------


def _check_conv_config(layer: Any, rank: int) -> None:
  """Validates the shared fields of Conv2D / Conv3D."""
  where = f'{type(layer).__name__} {layer.name!r}'
  checks = (
      ('filter_shape', rank + 2), ('filter_stride', rank), ('dilations', rank)
  )
  for field, size in checks:
    value = tuple(getattr(layer, field))
    if len(value) != size or any(v <= 0 for v in value):
      raise ValueError(
          f'{where}: `{field}` must be {size} positive ints, got {value}.'
      )
  if layer.padding not in ('SAME', 'VALID'):
    raise ValueError(
        f"{where}: `padding` must be 'SAME' or 'VALID', got "
        f'{layer.padding!r}.'
    )
  if layer.is_causal and not layer.tf_equivalent_padding:
    raise ValueError(
        f'{where}: `is_causal` needs `tf_equivalent_padding=True`.'
    )
  if layer.is_causal and layer.padding == 'VALID':
    raise ValueError(f"{where}: `is_causal` needs `padding='SAME'`.")


def _create_conv_weights(layer: Any) -> None:
  """Declares `w` (filter_shape) and, if `layer.bias`, `b` [out_channels]."""
  layer.create_variable(
      'w',
      WeightHParams(
          shape=list(layer.filter_shape),
          init=layer.kernel_init,
          mesh_shape=layer.mesh_shape,
          tensor_split_dims_mapping=layer.weight_split_dims_mapping.wt,
      ),
  )
  if layer.bias:
    layer.create_variable(
        'b', WeightHParams(shape=[layer.filter_shape[-1]], init=layer.bias_init)
    )


def _depthwise_config(
    cls: type[Any],
    kernel_shape: Sequence[int],
    in_channels: int,
    channel_multipliers: int,
    hparams: dict[str, Any],
) -> pax_fiddle.Config:
  if 'filter_shape' in hparams:
    raise ValueError('HParamsDepthwise sets filter_shape itself.')
  filter_shape = tuple(kernel_shape) + (1, in_channels * channel_multipliers)
  return pax_fiddle.Config(cls, filter_shape=filter_shape, **hparams)


class Conv2D(base_layer.BaseLayer):
  """2-D convolution of NHWC inputs, with SAME/VALID and causal padding.

  Attributes:
    filter_shape: (height, width, in_channels, out_channels); in_channels may
      divide the input channels (grouped / depthwise convolution).
    filter_stride: (height, width) strides.
    dilations: (height, width) filter dilations.
    bias: Add a learned bias `b`.
    bias_init: Initializer of `b`.
    kernel_init: Initializer of `w` (None: the layer's `params_init`).
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: Use TensorFlow's SAME rule (by default SAME pads
      `kernel - 1` evenly whatever the stride).
    is_causal: Causal over height (time): pads on top only. Needs
      `tf_equivalent_padding` and SAME.
    weight_norm_tpl: Normalization applied to `w` before use.
  """

  filter_shape: Sequence[int] = (0, 0, 0, 0)
  filter_stride: Sequence[int] = (0, 0)
  dilations: Sequence[int] = (1, 1)
  bias: bool = False
  bias_init: WeightInit = dataclasses.field(
      default_factory=lambda: WeightInit.Constant(0.0)
  )
  kernel_init: WeightInit | None = None
  padding: str = 'SAME'
  tf_equivalent_padding: bool = False
  is_causal: bool = False
  weight_norm_tpl: pax_fiddle.Config[normalizations.BaseNormalization] = (
      template_field(normalizations.IdentityNorm)
  )

  @classmethod
  def HParamsDepthwise(  # pylint: disable=invalid-name
      cls,
      *,
      kernel_shape: Sequence[int],
      in_channels: int,
      channel_multipliers: int = 1,
      **hparams: Any,
  ) -> pax_fiddle.Config:
    """A config of a depthwise conv: filter (*kernel_shape, 1, C * mult)."""
    if len(kernel_shape) != 2:
      raise ValueError(f'kernel_shape must have 2 entries, got {kernel_shape}.')
    return _depthwise_config(
        cls, kernel_shape, in_channels, channel_multipliers, hparams
    )

  def check_dimensions(self) -> None:
    """Raises ValueError naming the field unless the shapes, strides,
    dilations and padding are consistent (Pax's name; setup calls it)."""
    _check_conv_config(self, 2)

  def setup(self) -> None:
    self.check_dimensions()
    _create_conv_weights(self)
    wn = self.weight_norm_tpl.clone().set(dim=self.filter_shape[-1])
    self.create_child('weight_norm', wn)

  def _shard(self, x: JTensor) -> JTensor:
    return base_layer.maybe_shard(
        x, self.activation_split_dims_mapping.out, self.mesh_axis_names
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """Convolves `inputs` [B, H, W, C_in] to [B, H', W', C_out]."""
    padding = conv_padding(
        self.filter_shape[:-2], self.dilations, self.padding,
        self.tf_equivalent_padding, self.is_causal,
    )
    inputs = self._shard(inputs.astype(self.fprop_dtype))
    w = self.weight_norm(self.theta.w)
    outputs = conv(inputs, w, self.filter_stride, padding, self.dilations)
    outputs = self._shard(outputs)
    if self.bias:
      outputs = _bias_add.add_bias(outputs, self.theta.b)
    return outputs


class Conv3D(base_layer.BaseLayer):
  """3-D convolution of NTHWC inputs (see Conv2D for the padding rules).

  Attributes:
    filter_shape: (time, height, width, in_channels, out_channels).
    filter_stride: (time, height, width) strides.
    dilations: (time, height, width) filter dilations.
    bias: Add a learned bias `b`.
    bias_init: Initializer of `b`.
    kernel_init: Initializer of `w` (None: the layer's `params_init`).
    padding: 'SAME' or 'VALID'.
    tf_equivalent_padding: Use TensorFlow's SAME rule.
    is_causal: Causal over time. Needs `tf_equivalent_padding` and SAME.
  """

  filter_shape: Sequence[int] = (0, 0, 0, 0, 0)
  filter_stride: Sequence[int] = (0, 0, 0)
  dilations: Sequence[int] = (1, 1, 1)
  bias: bool = False
  bias_init: WeightInit = dataclasses.field(
      default_factory=lambda: WeightInit.Constant(0.0)
  )
  kernel_init: WeightInit | None = None
  padding: str = 'SAME'
  tf_equivalent_padding: bool = False
  is_causal: bool = False

  @classmethod
  def HParamsDepthwise(  # pylint: disable=invalid-name
      cls,
      *,
      kernel_shape: Sequence[int],
      in_channels: int,
      channel_multipliers: int = 1,
      **hparams: Any,
  ) -> pax_fiddle.Config:
    """A config of a depthwise conv: filter (*kernel_shape, 1, C * mult)."""
    if len(kernel_shape) != 3:
      raise ValueError(f'kernel_shape must have 3 entries, got {kernel_shape}.')
    return _depthwise_config(
        cls, kernel_shape, in_channels, channel_multipliers, hparams
    )

  def setup(self) -> None:
    _check_conv_config(self, 3)
    _create_conv_weights(self)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Convolves `inputs` [B, T, H, W, C_in] to [B, T', H', W', C_out]."""
    padding = conv_padding(
        self.filter_shape[:-2], self.dilations, self.padding,
        self.tf_equivalent_padding, self.is_causal,
    )
    inputs = inputs.astype(self.fprop_dtype)
    outputs = conv(
        inputs, self.theta.w, self.filter_stride, padding, self.dilations
    )
    if self.bias:
      outputs = _bias_add.add_bias(outputs, self.theta.b)
    return outputs


class ConvBNAct(Conv2D):
  """Conv2D, then batch norm (optional), then an activation.

  Attributes:
    batch_norm_tpl: Template of the batch norm (None: no normalization);
      `dim` is set to the output channels.
    activation_tpl: Template of the activation.
  """

  batch_norm_tpl: LayerTpl | None = template_field(normalizations.BatchNorm)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU)
  )

  def setup(self) -> None:
    super().setup()
    if self.batch_norm_tpl is not None:
      bn = self.batch_norm_tpl.clone().set(
          dim=self.filter_shape[3], use_moving_avg_in_training=False
      )
      self.create_child('bn', bn)
    self.create_child('activation', self.activation_tpl.clone())

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns activation(bn(conv(inputs))) for NHWC inputs."""
    outputs = super().__call__(inputs)
    if self.batch_norm_tpl is not None:
      outputs = self.bn(outputs)
    return self.activation(outputs)


class ConvBNActWithPadding(ConvBNAct):
  """ConvBNAct over [B, T, F, C] inputs with time paddings [B, T].

  Padded steps are zeroed before the conv; the output paddings follow the
  stride over time (see `conv_output_paddings`) and zero padded outputs.

  Attributes:
    compat_with_lingvo: Lingvo's rule for output paddings (no dilation).
  """

  compat_with_lingvo: bool = False

  def setup(self) -> None:
    super().setup()
    if self.compat_with_lingvo and tuple(self.dilations) != (1, 1):
      raise ValueError(
          f'ConvBNActWithPadding {self.name!r}: `compat_with_lingvo` '
          'supports no `dilations`.'
      )

  def __call__(  # pytype: disable=signature-mismatch
      self, inputs: JTensor, paddings: JTensor
  ) -> tuple[JTensor, JTensor]:
    """Returns (outputs [B, T', F', C_out], paddings [B, T'])."""
    inputs = py_utils.apply_padding(inputs, paddings[:, :, None, None])
    outputs = super().__call__(inputs)
    if self.filter_stride[0] == 1 and self.padding == 'SAME':
      return outputs, paddings
    out_paddings = conv_output_paddings(
        paddings, self.filter_shape[0], self.filter_stride[0], self.padding,
        self.compat_with_lingvo,
    ).astype(outputs.dtype)
    outputs = outputs * (1.0 - out_paddings)[:, :, None, None]
    return outputs, out_paddings


class BaseDepthwiseConv1D(base_layer.BaseLayer):
  """Base class of depthwise 1-D convolutions over [B, T, C].

  Attributes:
    filter_shape: (kernel_size, in_channels, channel_multipliers).
    bias: Add a learned bias `b`.
    bias_init: Initializer of `b`.
    is_causal: Step t sees steps <= t only.
    use_2d_conv_weight_shape: Store `w` as [K, 1, C * M, 1] (checkpoint
      compatibility) instead of [K, 1, C * M].
    rhs_dilation_rate: Filter dilation (atrous convolution).
  """

  filter_shape: Sequence[int] = (0, 0, 0)
  bias: bool = False
  bias_init: WeightInit = dataclasses.field(
      default_factory=lambda: WeightInit.Constant(0.0)
  )
  is_causal: bool = False
  use_2d_conv_weight_shape: bool = False
  rhs_dilation_rate: int = 1

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Maps [B, T, C] (paddings [B, T]) to [B, T, C * channel_multipliers]."""
    raise NotImplementedError(f'{type(self).__name__} must define __call__.')


class DepthwiseConv1D(BaseDepthwiseConv1D):
  """Depthwise 1-D convolution with `lax.conv_general_dilated`."""

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of `w`.

    Attributes:
      him: Split of the weight [kernel, 1, channels].
    """

    him: SplitDimsMapping = None

  def setup(self) -> None:
    shape = tuple(self.filter_shape)
    if len(shape) != 3 or any(v <= 0 for v in shape):
      raise ValueError(
          f'DepthwiseConv1D {self.name!r}: `filter_shape` must be 3 positive '
          f'ints (kernel, in_channels, multiplier), got {shape}.'
      )
    if self.rhs_dilation_rate <= 0:
      raise ValueError(
          f'DepthwiseConv1D {self.name!r}: `rhs_dilation_rate` must be '
          'positive.'
      )
    channels = shape[1] * shape[2]
    w_shape = [shape[0], 1, channels]
    him = self.weight_split_dims_mapping.him
    if self.use_2d_conv_weight_shape:
      w_shape.append(1)
      if him:
        him = [him[0], None] + list(him[1:])
    self.create_variable(
        'w',
        WeightHParams(
            shape=w_shape,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=him,
        ),
    )
    if self.bias:
      self.create_variable(
          'b', WeightHParams(shape=[channels], init=self.bias_init)
      )

  def get_w(self) -> JTensor:
    """The filter as [kernel, 1, channels]."""
    if not self.use_2d_conv_weight_shape:
      return self.theta.w
    return base_layer.maybe_shard(
        jnp.squeeze(self.theta.w, -1),
        self.weight_split_dims_mapping.him,
        self.mesh_axis_names,
    )

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Convolves [B, T, C] (padded steps zeroed) to [B, T, C * multiplier]."""
    if paddings is not None:
      inputs = py_utils.apply_padding(inputs, paddings[:, :, None])
    inputs = inputs.astype(self.fprop_dtype)
    out = depthwise_conv1d(
        inputs, self.get_w(), self.rhs_dilation_rate, self.is_causal
    )
    if self.bias:
      out = _bias_add.add_bias(out, self.theta.b)
    return out


class LightConv1D(base_layer.BaseLayer):
  """Lightweight convolution block (as in Conformer), with a residual.

  inputs -> ln -> GLU(linear_start_act, linear_start_gated) ->
  depthwise_conv1d -> conv_norm -> conv_activation -> linear_end -> dropout,
  plus the inputs.

  Attributes:
    input_dims: Input (and output) depth.
    kernel_size: Kernel size of the depthwise conv.
    conv_activation_tpl: Activation after the conv norm.
    dropout_prob: Dropout probability of the output.
    ln_tpl: Input normalization.
    linear_start_tpl: Template of the two GLU projections.
    depthwise_conv_tpl: Template of the depthwise conv.
    conv_norm_layer_tpl: Normalization after the conv.
    linear_end_tpl: Template of the output projection.
    dropout_tpl: Template of the output dropout.
    is_causal: Causal depthwise conv.
    use_2d_conv_norm: Feed the conv norm [B, T, 1, D] (lingvo compatibility).
  """

  input_dims: int | None = None
  kernel_size: int | None = None
  conv_activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.Swish)
  )
  dropout_prob: float = 0.0
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  linear_start_tpl: LayerTpl = template_field(linears.FeedForward)
  depthwise_conv_tpl: LayerTpl = template_field(DepthwiseConv1D)
  conv_norm_layer_tpl: LayerTpl = template_field(normalizations.BatchNorm)
  linear_end_tpl: LayerTpl = template_field(linears.FeedForward)
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  is_causal: bool = False
  use_2d_conv_norm: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      df: Split of the start projections [d, f].
      him: Split of the depthwise conv weight.
    """

    df: SplitDimsMapping = None
    him: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      blf: Split of the GLU and conv activations [b, l, f].
      bld: Split of the output projection [b, l, d].
    """

    blf: SplitDimsMapping = None
    bld: SplitDimsMapping = None

  def _projection(self, tpl: LayerTpl, wt: Any, out: Any) -> LayerTpl:
    p = tpl.clone().set(
        input_dims=self.input_dims,
        output_dims=self.input_dims,
        activation_tpl=pax_fiddle.Config(activations.Identity),
        # The two start projections are halves of one [d, 2d] projection.
        params_init=WeightInit.Xavier(math.sqrt(3 / 2)),
    )
    p.weight_split_dims_mapping.wt = wt
    p.activation_split_dims_mapping.out = out
    return p

  def setup(self) -> None:
    for field in ('input_dims', 'kernel_size'):
      if not getattr(self, field) or getattr(self, field) <= 0:
        raise ValueError(
            f'LightConv1D {self.name!r}: `{field}` must be a positive int.'
        )
    wp, ap = self.weight_split_dims_mapping, self.activation_split_dims_mapping
    self.create_child('ln', self.ln_tpl.clone().set(dim=self.input_dims))
    start = self._projection(self.linear_start_tpl, wp.df, ap.blf)
    self.create_child('linear_start_act', start)
    self.create_child('linear_start_gated', start.clone())
    end_wt = list(reversed(wp.df)) if wp.df else None
    end = self._projection(self.linear_end_tpl, end_wt, ap.bld)
    self.create_child('linear_end', end)
    conv_p = self.depthwise_conv_tpl.clone().set(
        filter_shape=(self.kernel_size, self.input_dims, 1),
        is_causal=self.is_causal,
    )
    conv_p.weight_split_dims_mapping.him = wp.him
    self.create_child('depthwise_conv1d', conv_p)
    self.create_child(
        'conv_norm', self.conv_norm_layer_tpl.clone().set(dim=self.input_dims)
    )
    self.create_child('conv_activation', self.conv_activation_tpl.clone())
    self.create_child(
        'dropout', self.dropout_tpl.clone().set(keep_prob=1 - self.dropout_prob)
    )

  def _conv_norm(self, inputs: JTensor, paddings: JTensor) -> JTensor:
    if not self.use_2d_conv_norm:
      return self.conv_norm(inputs, paddings)
    return jnp.squeeze(self.conv_norm(inputs[:, :, None], paddings), 2)

  def __call__(self, inputs: JTensor, paddings: JTensor) -> JTensor:
    """Maps [B, T, D] with paddings [B, T] to [B, T, D]."""
    ap = self.activation_split_dims_mapping
    shard = lambda x: base_layer.maybe_shard(x, ap.blf, self.mesh_axis_names)
    x = self.ln(inputs)
    x = self.linear_start_act(x) * jax.nn.sigmoid(self.linear_start_gated(x))
    x = shard(self.depthwise_conv1d(x, paddings))
    x = shard(self._conv_norm(x, paddings))
    x = self.linear_end(self.conv_activation(x))
    return self.dropout(x) + inputs
