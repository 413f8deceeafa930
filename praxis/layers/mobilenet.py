"""MobileNetV2 classifiers of depthwise-separable convolutions.

Public names: InvertedResidualBlock, MobileNet.

`InvertedResidualBlock` (https://arxiv.org/abs/1801.04381) expands the
channels with a 1x1 conv, filters each channel with a kxk depthwise conv and
projects back with a linear 1x1 conv, adding the input when the shapes
match. `MobileNet` is an entry conv, a chain of such blocks, a 1x1 conv to
`output_channels`, an optional global pooling and an optional dense layer to
`num_classes`. Its children sit under one `Sequential` named `body`.

Example:

  net = base_layer.instantiate(pax_fiddle.Config(
      mobilenet.MobileNet, name='mobilenet', num_classes=10))
  variables = net.init(jax.random.PRNGKey(0), images)  # [B, H, W, 3]
  logits = net.apply(variables, images, mutable=['batch_stats'])[0]
"""

from __future__ import annotations

from collections.abc import Sequence

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import sequential

NestedMap = py_utils.NestedMap
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field


def _make_divisible(
    v: int | float, divisor: int, min_value: int | None = None
) -> int:
  """`v` rounded to a multiple of `divisor`, at least `min_value`.

  Rounds to the nearest multiple (halves up), then adds one `divisor` if
  that lost more than 10% of `v` (the rule of TF-slim's MobileNet).
  """
  if min_value is None:
    min_value = divisor
  rounded = max(min_value, int(v + divisor / 2) // divisor * divisor)
  if rounded < 0.9 * v:
    rounded += divisor
  return rounded


class InvertedResidualBlock(base_layer.BaseLayer):
  """MobileNetV2 inverted residual block.

  Children under `body` (a Sequential): `expansion` (1x1 conv to
  `expansion * input_dim`, absent when `expansion` is 1), `depthwise_conv`
  (kxk, strided) and `project` (1x1 conv to `output_dim`, no activation).

  Attributes:
    input_dim: Input channels.
    output_dim: Output channels.
    expansion: Channel expansion factor of the inverted bottleneck.
    conv_params: Template of the Conv-BN-activation layers.
    kernel_size: Kernel size of the depthwise conv.
    stride: Stride of the depthwise conv.
    activation_tpl: Activation after the expansion and depthwise convs.
  """

  input_dim: int = 0
  output_dim: int = 0
  expansion: int = 6
  conv_params: LayerTpl = template_field(convolutions.ConvBNAct)
  kernel_size: int = 3
  stride: int = 1
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU6)
  )

  def _conv(
      self, name: str, shape: Sequence[int], stride: int,
      activation_tpl: pax_fiddle.Config[activations.BaseActivation],
  ) -> LayerTpl:
    return self.conv_params.clone().set(
        name=name,
        filter_shape=tuple(shape),
        filter_stride=(stride, stride),
        activation_tpl=activation_tpl,
    )

  def setup(self) -> None:
    if self.input_dim <= 0 or self.output_dim <= 0:
      raise ValueError(
          f'InvertedResidualBlock {self.name!r}: `input_dim` and `output_dim` '
          f'must be positive, got {self.input_dim} and {self.output_dim}.'
      )
    body = []
    hidden = self.input_dim
    if self.expansion != 1:
      hidden = self.expansion * self.input_dim
      body.append(self._conv(
          'expansion', (1, 1, self.input_dim, hidden), 1, self.activation_tpl
      ))
    k = self.kernel_size
    # A filter input dim of 1 makes the convolution depthwise.
    body.append(self._conv(
        'depthwise_conv', (k, k, 1, hidden), self.stride, self.activation_tpl
    ))
    body.append(self._conv(
        'project', (1, 1, hidden, self.output_dim), 1,
        pax_fiddle.Config(activations.Identity),
    ))
    self.create_child(
        'body', pax_fiddle.Config(sequential.Sequential, layers=body)
    )

  @property
  def _in_out_same_shape(self) -> bool:
    return self.input_dim == self.output_dim and self.stride == 1

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps [B, H, W, input_dim] to [B, H', W', output_dim]."""
    outputs = self.body(inputs)
    if self._in_out_same_shape:
      outputs += inputs
    return outputs


@pax_fiddle.auto_config
def _mobile_net_conv_params_default():
  return pax_fiddle.Config(
      convolutions.ConvBNAct,
      activation_tpl=pax_fiddle.Config(activations.ReLU6),
      batch_norm_tpl=pax_fiddle.Config(normalizations.BatchNorm, decay=0.9),
      params_init=WeightInit.GaussianSqrtFanOut(1.4141),
  )


@pax_fiddle.auto_config
def _mobile_net_output_spatial_pooling_params_default():
  return pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2))


@pax_fiddle.auto_config
def _mobile_net_final_prediction_params_default():
  return pax_fiddle.Config(linears.FeedForward)


# The 17 blocks of MobileNetV2, in 5 groups of equal resolution.
# pyformat: disable
_EXPANSIONS = (1, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6)
_STRIDES = (1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1)
_CHANNELS = (16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96,
             160, 160, 160, 320)
# pyformat: enable


class MobileNet(base_layer.BaseLayer):
  """MobileNetV2: entry conv, inverted residual blocks, 1x1 conv, pooling.

  Children under `body` (a Sequential): `entryflow_conv`, `block_0` ...
  `block_{n-1}`, `final_conv`, then `output_spatial_pooling` and
  `predictions` when configured.

  Attributes:
    conv_params: Template of the Conv-BN-activation layers (also given to
      the blocks).
    block_params: Template of the blocks.
    expansions: Expansion factor of each block.
    strides: Stride of each block.
    channels: Output channels of each block (before `multiplier`).
    output_channels: Channels of the final 1x1 conv.
    num_classes: If nonzero, a final dense layer to this many classes.
    entryflow_conv_kernel: (height, width, input channels) of the entry conv.
    entryflow_conv_stride: (height, width) stride of the entry conv.
    output_spatial_pooling_params: Pooling before the output; None: none.
    predict_params: Template of the final dense layer.
    multiplier: Width multiplier of all layers.
    divisible_by: Channel counts are rounded to multiples of this.
    min_depth: Smallest channel count after the multiplier.
  """

  conv_params: LayerTpl = pax_fiddle.fdl_field(
      default_factory=_mobile_net_conv_params_default
  )
  block_params: LayerTpl = template_field(InvertedResidualBlock)
  expansions: Sequence[int] = _EXPANSIONS
  strides: Sequence[int] = _STRIDES
  channels: Sequence[int] = _CHANNELS
  output_channels: int = 1280
  num_classes: int = 0
  entryflow_conv_kernel: Sequence[int] = (3, 3, 3)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  output_spatial_pooling_params: LayerTpl | None = pax_fiddle.fdl_field(
      default_factory=_mobile_net_output_spatial_pooling_params_default
  )
  predict_params: LayerTpl = pax_fiddle.fdl_field(
      default_factory=_mobile_net_final_prediction_params_default
  )
  multiplier: float = 1.0
  divisible_by: int = 8
  min_depth: int = 8

  def _check(self) -> None:
    num_blocks = len(self.expansions)
    for field in ('strides', 'channels'):
      if len(getattr(self, field)) != num_blocks:
        raise ValueError(
            f'MobileNet {self.name!r}: `{field}` has '
            f'{len(getattr(self, field))} entries, but `expansions` has '
            f'{num_blocks}; they need one per block.'
        )

  def _blocks(self, input_dim: int) -> tuple[list[LayerTpl], int]:
    """The block configs and their last output dim."""
    block_params = self.block_params.clone()
    if hasattr(block_params, 'conv_params'):
      block_params.conv_params = self.conv_params.clone()
    blocks = []
    specs = zip(self.expansions, self.strides, self.channels)
    for i, (expansion, stride, channel) in enumerate(specs):
      output_dim = _make_divisible(channel * self.multiplier, self.divisible_by)
      blocks.append(block_params.clone().set(
          name=f'block_{i}',
          input_dim=input_dim,
          output_dim=output_dim,
          expansion=expansion,
          stride=stride,
      ))
      input_dim = output_dim
    return blocks, input_dim

  def setup(self) -> None:
    self._check()
    input_dim = _make_divisible(
        32 * self.multiplier, self.divisible_by, self.min_depth
    )
    entry = self.conv_params.clone().set(
        name='entryflow_conv',
        filter_shape=(*self.entryflow_conv_kernel[:3], input_dim),
        filter_stride=tuple(self.entryflow_conv_stride),
    )
    blocks, input_dim = self._blocks(input_dim)
    output_channels = self.output_channels
    if self.multiplier > 1.0:
      output_channels = _make_divisible(
          output_channels * self.multiplier, self.divisible_by, self.min_depth
      )
    final = self.conv_params.clone().set(
        name='final_conv',
        filter_shape=(1, 1, input_dim, output_channels),
        filter_stride=(1, 1),
    )
    body = [entry, *blocks, final]
    if self.output_spatial_pooling_params is not None:
      body.append(self.output_spatial_pooling_params.clone().set(
          name='output_spatial_pooling'
      ))
    if self.num_classes:
      # As in Pax, the dense layer's input is `output_channels` before the
      # multiplier (they differ only when multiplier > 1).
      body.append(self.predict_params.clone().set(
          name='predictions',
          input_dims=self.output_channels,
          output_dims=self.num_classes,
      ))
    self.create_child(
        'body', pax_fiddle.Config(sequential.Sequential, layers=body)
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps images [B, H, W, C] to features (or logits).

    Returns:
      [B, H', W', D] (D = output_channels) without pooling; with the default
      pooling over dims (1, 2), [B, D]; [B, num_classes] with a prediction
      layer.
    """
    return self.body(inputs)
