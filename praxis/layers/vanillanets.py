"""VanillaNet: ResNet-shaped convolution stacks with no skips and no norms.

Public names: tailored_lrelu, VanillaBlock, VanillaNet.

Trainable without skip connections or batch norm through a scaled leaky ReLU
and delta-orthogonal initialisation (https://openreview.net/forum?id=U0k7XNTiFEq).
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import convolutions
from praxis.layers import poolings

JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field


def tailored_lrelu(negative_slope: float, x: JTensor) -> JTensor:
  """leaky_relu(x) * sqrt(2 / (1 + slope^2)): variance-preserving."""
  gain = math.sqrt(2.0 / (1 + negative_slope**2))
  return gain * jax.nn.leaky_relu(x, negative_slope=negative_slope)


def _conv_default() -> pax_fiddle.Config[convolutions.Conv2D]:
  return pax_fiddle.Config(
      convolutions.Conv2D, bias=True,
      params_init=base_layer.WeightInit.ScaledDeltaOrthogonal(1.0))


class VanillaBlock(base_layer.BaseLayer):
  """1x1 down to D/4, KxK (strided), 1x1 up to D, each with tailored_lrelu.

  Attributes:
    input_dim: Input channels.
    output_dim: D, the output channels.
    conv_params: The convolution.
    kernel_size: K of the middle convolution.
    stride: Stride of the middle convolution.
    negative_slope: Of the leaky ReLU.
  """

  input_dim: int = 0
  output_dim: int = 0
  conv_params: LayerTpl = template_field(_conv_default)
  kernel_size: int = 3
  stride: int = 1
  negative_slope: float = 0.4

  def setup(self) -> None:
    inner = self.output_dim // 4
    shapes = (
        ('conv_in', (1, 1, self.input_dim, inner), (1, 1)),
        ('conv_mid', (self.kernel_size, self.kernel_size, inner, inner),
         (self.stride, self.stride)),
        ('conv_out', (1, 1, inner, self.output_dim), (1, 1)),
    )
    self.create_children('body', [
        self.conv_params.clone().set(name=name, filter_shape=shape,
                                     filter_stride=stride)
        for name, shape, stride in shapes])

  def __call__(self, inputs: JTensor) -> JTensor:
    """[B, H, W, input_dim] -> [B, H', W', output_dim]."""
    x = inputs
    for conv in self.body:
      x = tailored_lrelu(self.negative_slope, conv(x))
    return x


class VanillaNet(base_layer.BaseLayer):
  """Entry convolution and max-pool, stages of VanillaBlocks, pooling.

  Attributes:
    conv_params: The convolution of the entry and the blocks.
    block_params: The block.
    strides: Per stage, the stride of its first block.
    channels: Per stage, its output channels (the entry makes channels[0]/4).
    blocks: Per stage, its number of blocks.
    kernels: Per stage, its kernel size.
    entryflow_conv_kernel: Kernel of the entry convolution.
    entryflow_conv_stride: Stride of the entry convolution.
    output_spatial_pooling_params: Final pooling (None: none).
    negative_slope: Of the leaky ReLUs.
  """

  conv_params: LayerTpl = template_field(_conv_default)
  block_params: LayerTpl = template_field(VanillaBlock)
  strides: Sequence[int] = (1, 2, 2, 2)
  channels: Sequence[int] = (256, 512, 1024, 2048)
  blocks: Sequence[int] = (3, 4, 6, 3)
  kernels: Sequence[int] = (3, 3, 3, 3)
  entryflow_conv_kernel: Sequence[int] = (7, 7)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  output_spatial_pooling_params: LayerTpl | None = template_field(
      poolings.GlobalPooling)
  negative_slope: float = 0.4

  @classmethod
  def HParamsVanillaNet5(cls) -> pax_fiddle.Config[VanillaNet]:  # pylint: disable=invalid-name
    """A one-block net for tests."""
    return pax_fiddle.Config(cls, strides=[1], channels=[16], blocks=[1],
                             kernels=[1])

  @classmethod
  def HParamsVanillaNet50(cls) -> pax_fiddle.Config[VanillaNet]:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls)

  @classmethod
  def HParamsVanillaNet101(cls) -> pax_fiddle.Config[VanillaNet]:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls, blocks=[3, 4, 23, 3])

  @classmethod
  def HParamsVanillaNet152(cls) -> pax_fiddle.Config[VanillaNet]:  # pylint: disable=invalid-name
    return pax_fiddle.Config(cls, blocks=[3, 8, 36, 3])

  def _stage_blocks(self):
    """(name, stage index, block index) of every block, in order."""
    for stage, count in enumerate(self.blocks):
      for block in range(count):
        yield f'stage_{stage}_block_{block}', stage, block

  def setup(self) -> None:
    stages = len(self.strides)
    for field in ('channels', 'blocks', 'kernels'):
      if len(getattr(self, field)) != stages:
        raise ValueError(
            f'num_stages {stages} != {field} {len(getattr(self, field))}.')
    entry = self.conv_params.clone()
    entry.filter_shape = (*self.entryflow_conv_kernel, 3,
                          self.channels[0] // 4)
    entry.filter_stride = self.entryflow_conv_stride
    self.create_child('entryflow_conv', entry)
    self.create_child('entryflow_maxpool', pax_fiddle.Config(
        poolings.Pooling, name='entryflow_maxpool', window_shape=(3, 3),
        window_stride=(2, 2), pooling_type='MAX'))
    block_tpl = self.block_params.clone().set(
        negative_slope=self.negative_slope)
    if hasattr(block_tpl, 'conv_params'):
      block_tpl.conv_params = self.conv_params
    input_dim = self.channels[0] // 4
    for name, stage, block in self._stage_blocks():
      self.create_child(name, block_tpl.clone().set(
          name=name, kernel_size=self.kernels[stage], input_dim=input_dim,
          output_dim=self.channels[stage],
          stride=self.strides[stage] if block == 0 else 1))
      input_dim = self.channels[stage]
    if self.output_spatial_pooling_params is not None:
      self.create_child('output_spatial_pooling',
                        self.output_spatial_pooling_params)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Images [B, H, W, 3] to features [B, H', W', D] (or pooled)."""
    x = tailored_lrelu(self.negative_slope, self.entryflow_conv(inputs))
    x, _ = self.entryflow_maxpool(x)
    for name, _, _ in self._stage_blocks():
      x = getattr(self, name)(x)
    if self.output_spatial_pooling_params is not None:
      x = self.output_spatial_pooling(x)
    return x
