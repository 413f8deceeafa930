"""ResNet layers (https://arxiv.org/abs/1512.03385).

Public names: ResNetBlock, ResNetBasicBlock, ResNet.

`ResNetBlock` is the bottleneck block (1x1 -> kxk -> 1x1, width
`output_dim // 4`), `ResNetBasicBlock` the two-conv block of ResNet-18/34.
Both add a shortcut (a strided 1x1 ConvBNAct when the shape changes) and apply
`activation_tpl` after the sum. `ResNet` is an entry conv and max pool, then
stages of blocks, then an optional global pooling; its classmethods
`HParamsResNet5/18/34/50/56/83/101/152()` return configs of the usual depths
(56 and 83 are the CIFAR nets: 3x3 stride-1 entry, no max pool, 3 stages).

Example:

  net = base_layer.instantiate(
      resnets.ResNet.HParamsResNet18().set(name='resnet'))
  variables = net.init(jax.random.PRNGKey(0), images)  # [B, H, W, 3]
  features = net.apply(variables, images)  # [B, 512]
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import stochastics

JTensor = pytypes.JTensor
WeightInit = base_layer.WeightInit
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field


def _configured_template_field(factory: Callable[[], LayerTpl]) -> Any:
  """A template field whose default is the config `factory()` returns."""
  return pax_fiddle.field(
      default_factory=factory,
      tags=pax_fiddle.DoNotBuild,
      metadata={'pax_field_kind': 'template', 'pax_config_factory': factory},
  )


def _default_conv_params() -> LayerTpl:
  return pax_fiddle.Config(
      convolutions.ConvBNAct,
      batch_norm_tpl=pax_fiddle.Config(normalizations.BatchNorm, decay=0.9),
      params_init=WeightInit.GaussianSqrtFanOut(1.4141),
  )


def _default_entryflow_maxpool() -> LayerTpl:
  return pax_fiddle.Config(
      poolings.Pooling,
      window_shape=(3, 3),
      window_stride=(2, 2),
      pooling_type='MAX',
  )


def _default_output_pooling() -> LayerTpl:
  return pax_fiddle.Config(poolings.GlobalPooling, pooling_dims=(1, 2))


def _identity() -> LayerTpl:
  return pax_fiddle.Config(activations.Identity)


def _conv(
    conv_params: LayerTpl,
    shape: Sequence[int],
    stride: int,
    activation_tpl: LayerTpl,
    **extra: Any,
) -> LayerTpl:
  """`conv_params` with a (k, k, in, out) filter, a stride and activation."""
  return conv_params.clone().set(
      filter_shape=tuple(shape),
      filter_stride=(stride, stride),
      activation_tpl=activation_tpl.clone(),
      **extra,
  )


class ResNetBlock(base_layer.BaseLayer):
  """Bottleneck residual block: 1x1 -> kxk (strided) -> 1x1, plus shortcut.

  Children: `body_0..2` (ConvBNAct), `shortcut` when the input and output
  shapes differ, `residual_droppath` when `residual_droppath_prob` > 0, and
  `postact`.

  Attributes:
    input_dim: Input channels.
    output_dim: Output channels (the bottleneck is `output_dim // 4` wide).
    conv_params: Template of the Conv-BN-activation layers.
    kernel_size: Kernel size of the middle (bottleneck: only) kxk conv.
    stride: Stride of the block (on the kxk conv and the shortcut).
    activation_tpl: Activation inside the body and after the residual sum.
    residual_droppath_prob: Probability of dropping an example's residual
      branch in training (stochastic depth).
    zero_init_residual: Start the last batch norm of the residual branch at
      scale 0, so each block starts as its shortcut
      (https://arxiv.org/abs/2105.07576). Needs a batch norm.
  """

  input_dim: int = 0
  output_dim: int = 0
  conv_params: LayerTpl = template_field(convolutions.ConvBNAct)
  kernel_size: int = 3
  stride: int = 1
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU)
  )
  residual_droppath_prob: float = 0.0
  zero_init_residual: bool = False

  # ResNet's entry conv writes `channels[0] // entry_contraction` channels.
  entry_contraction = 4

  def _check(self) -> None:
    where = f'{type(self).__name__} {self.name!r}'
    for field in ('input_dim', 'output_dim', 'kernel_size', 'stride'):
      if getattr(self, field) <= 0:
        raise ValueError(
            f'{where}: `{field}` must be positive, got {getattr(self, field)}.'
        )
    if self.output_dim % self.entry_contraction:
      raise ValueError(
          f'{where}: `output_dim` ({self.output_dim}) must be a multiple of '
          f'{self.entry_contraction}.'
      )
    if not 0.0 <= self.residual_droppath_prob < 1.0:
      raise ValueError(
          f'{where}: `residual_droppath_prob` must be in [0, 1), got '
          f'{self.residual_droppath_prob}.'
      )
    if self.zero_init_residual and self._batch_norm_tpl() is None:
      raise NotImplementedError(
          f'{where}: `zero_init_residual` needs `conv_params.batch_norm_tpl`.'
      )

  def _batch_norm_tpl(self) -> LayerTpl | None:
    return getattr(self.conv_params, 'batch_norm_tpl', None)

  def _last_conv_extra(self) -> dict[str, Any]:
    """Overrides of the last conv of the residual branch."""
    if not self.zero_init_residual:
      return {}
    bn = self._batch_norm_tpl().clone()
    # BatchNorm scales by 1 + gamma, so gamma = -1 is a zero scale.
    bn.gamma_init = WeightInit.Constant(-1.0)
    return {'batch_norm_tpl': bn}

  def body_configs(self) -> list[LayerTpl]:
    """The configs of the residual branch, in order."""
    mid = self.output_dim // 4
    k, act = self.kernel_size, self.activation_tpl
    return [
        _conv(self.conv_params, (1, 1, self.input_dim, mid), 1, act),
        _conv(self.conv_params, (k, k, mid, mid), self.stride, act),
        _conv(
            self.conv_params, (1, 1, mid, self.output_dim), 1, _identity(),
            **self._last_conv_extra(),
        ),
    ]

  @property
  def _in_out_same_shape(self) -> bool:
    return self.input_dim == self.output_dim and self.stride == 1

  def setup(self) -> None:
    self._check()
    self.create_children('body', self.body_configs())
    if not self._in_out_same_shape:
      shortcut = _conv(
          self.conv_params, (1, 1, self.input_dim, self.output_dim),
          self.stride, _identity(),
      )
      self.create_child('shortcut', shortcut)
    if self.residual_droppath_prob > 0:
      droppath = pax_fiddle.Config(
          stochastics.StochasticResidual,
          survival_prob=1.0 - self.residual_droppath_prob,
      )
      self.create_child('residual_droppath', droppath)
    self.create_child('postact', self.activation_tpl)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps NHWC inputs [B, H, W, input_dim] to [B, H', W', output_dim]."""
    outputs = inputs
    for layer in self.body:
      outputs = layer(outputs)
    if not self._in_out_same_shape:
      inputs = self.shortcut(inputs)
    if self.residual_droppath_prob > 0:
      outputs = self.residual_droppath(inputs, outputs)
    else:
      outputs = outputs + inputs
    return self.postact(outputs)


class ResNetBasicBlock(ResNetBlock):
  """Basic residual block: two kxk convs (the first strided), plus shortcut.

  Same fields and children as `ResNetBlock` (`body_0..1`); both convs are
  `output_dim` wide.
  """

  entry_contraction = 1

  def body_configs(self) -> list[LayerTpl]:
    """The configs of the residual branch, in order."""
    k, out = self.kernel_size, self.output_dim
    return [
        _conv(
            self.conv_params, (k, k, self.input_dim, out), self.stride,
            self.activation_tpl,
        ),
        _conv(
            self.conv_params, (k, k, out, out), 1, _identity(),
            **self._last_conv_extra(),
        ),
    ]


def _stage_configs(
    block_params: LayerTpl,
    input_dim: int,
    channels: Sequence[int],
    blocks: Sequence[int],
    kernels: Sequence[int],
    strides: Sequence[int],
) -> list[tuple[str, LayerTpl]]:
  """(name, config) of every block; a stage strides in its first block."""
  configs = []
  for stage, (channel, num, kernel, stride) in enumerate(
      zip(channels, blocks, kernels, strides)
  ):
    for block in range(num):
      p = block_params.clone().set(
          kernel_size=kernel,
          input_dim=input_dim,
          output_dim=channel,
          stride=stride if block == 0 else 1,
      )
      configs.append((f'stage_{stage}_block_{block}', p))
      input_dim = channel
  return configs


class ResNet(base_layer.BaseLayer):
  """ResNet; the defaults are ResNet-50.

  inputs -> entryflow_conv -> entryflow_maxpool -> stage_{s}_block_{b} ...
  -> output_spatial_pooling.

  Attributes:
    conv_params: Template of every Conv-BN-activation layer (entry conv and
      blocks).
    block_params: Template of the blocks (the same in every stage).
    strides: Stride of each stage (applied by its first block).
    channels: Output channels of each stage.
    blocks: Number of blocks in each stage.
    kernels: Kernel size of each stage.
    entryflow_conv_kernel: (height, width, input channels) of the entry conv;
      it writes `channels[0] // 4` channels for bottleneck blocks and
      `channels[0]` for basic blocks.
    entryflow_conv_stride: (height, width) stride of the entry conv.
    entryflow_maxpool_params: Pooling after the entry conv (3x3, stride 2,
      MAX); None skips it (the CIFAR nets).
    output_spatial_pooling_params: Pooling of the final features (global
      average over H and W); None returns [B, H', W', channels[-1]].
    return_block_features: Return `{2 + stage: features}` of every stage
      instead of the pooled output.
    entry_max_pool: Apply the entry pooling (Pax's switch; False skips it
      as `entryflow_maxpool_params=None` does, keeping the child).
  """

  conv_params: LayerTpl = _configured_template_field(_default_conv_params)
  block_params: LayerTpl = template_field(ResNetBlock)
  strides: Sequence[int] = (1, 2, 2, 2)
  channels: Sequence[int] = (256, 512, 1024, 2048)
  blocks: Sequence[int] = (3, 4, 6, 3)
  kernels: Sequence[int] = (3, 3, 3, 3)
  entryflow_conv_kernel: Sequence[int] = (7, 7, 3)
  entryflow_conv_stride: Sequence[int] = (2, 2)
  entryflow_maxpool_params: LayerTpl | None = _configured_template_field(
      _default_entryflow_maxpool
  )
  output_spatial_pooling_params: LayerTpl | None = (
      _configured_template_field(_default_output_pooling)
  )
  return_block_features: bool = False
  entry_max_pool: bool = True

  @classmethod
  def HParamsResNet5(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """A one-block ResNet (16 channels, 1x1 kernels) for tests."""
    return pax_fiddle.Config(
        cls, strides=[1], channels=[16], blocks=[1], kernels=[1]
    )

  @classmethod
  def HParamsResNet18(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """ResNet-18: basic blocks (2, 2, 2, 2), 64..512 channels."""
    return pax_fiddle.Config(
        cls,
        channels=(64, 128, 256, 512),
        block_params=pax_fiddle.Config(ResNetBasicBlock),
        blocks=[2, 2, 2, 2],
    )

  @classmethod
  def HParamsResNet34(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """ResNet-34: basic blocks (3, 4, 6, 3), 64..512 channels."""
    return pax_fiddle.Config(
        cls,
        channels=(64, 128, 256, 512),
        block_params=pax_fiddle.Config(ResNetBasicBlock),
        blocks=[3, 4, 6, 3],
    )

  @classmethod
  def HParamsResNet50(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """ResNet-50 (the defaults): bottleneck blocks (3, 4, 6, 3)."""
    return pax_fiddle.Config(cls)

  @classmethod
  def HParamsResNet56(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """CIFAR ResNet-56: basic blocks (9, 9, 9), 16..64 channels."""
    return cls._cifar_config(ResNetBasicBlock, (16, 32, 64))

  @classmethod
  def HParamsResNet83(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """CIFAR ResNet-83: bottleneck blocks (9, 9, 9), 64..256 channels."""
    return cls._cifar_config(ResNetBlock, (64, 128, 256))

  @classmethod
  def HParamsResNet101(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """ResNet-101: bottleneck blocks (3, 4, 23, 3)."""
    return pax_fiddle.Config(cls, blocks=[3, 4, 23, 3])

  @classmethod
  def HParamsResNet152(cls) -> LayerTpl:  # pylint: disable=invalid-name
    """ResNet-152: bottleneck blocks (3, 8, 36, 3)."""
    return pax_fiddle.Config(cls, blocks=[3, 8, 36, 3])

  @classmethod
  def _cifar_config(
      cls, block: type[ResNetBlock], channels: Sequence[int]
  ) -> LayerTpl:
    return pax_fiddle.Config(
        cls,
        block_params=pax_fiddle.Config(block),
        channels=tuple(channels),
        blocks=(9, 9, 9),
        strides=(1, 2, 2),
        kernels=(3, 3, 3),
        entryflow_conv_kernel=(3, 3, 3),
        entryflow_conv_stride=(1, 1),
        entryflow_maxpool_params=None,
    )

  def _check(self) -> None:
    where = f'ResNet {self.name!r}'
    num_stages = len(self.strides)
    for field in ('channels', 'blocks', 'kernels'):
      if len(getattr(self, field)) != num_stages:
        raise ValueError(
            f'{where}: `{field}` has {len(getattr(self, field))} entries but '
            f'`strides` has {num_stages} (one per stage).'
        )
    if num_stages == 0:
      raise ValueError(f'{where}: needs at least one stage.')
    if len(self.entryflow_conv_kernel) != 3:
      raise ValueError(
          f'{where}: `entryflow_conv_kernel` must be (height, width, '
          f'in_channels), got {self.entryflow_conv_kernel}.'
      )
    if len(self.entryflow_conv_stride) != 2:
      raise ValueError(
          f'{where}: `entryflow_conv_stride` must be (height, width), got '
          f'{self.entryflow_conv_stride}.'
      )

  def setup(self) -> None:
    self._check()
    block_params = self.block_params.clone()
    if 'conv_params' in pax_fiddle.signatures_of(block_params.cls):
      block_params.conv_params = self.conv_params.clone()
    contraction = getattr(self.block_params.cls, 'entry_contraction', 1)
    entry_dim = self.channels[0] // contraction
    entry = self.conv_params.clone().set(
        filter_shape=tuple(self.entryflow_conv_kernel) + (entry_dim,),
        filter_stride=tuple(self.entryflow_conv_stride),
    )
    self.create_child('entryflow_conv', entry)
    if self.entryflow_maxpool_params is not None:
      self.create_child('entryflow_maxpool', self.entryflow_maxpool_params)
    for name, p in _stage_configs(
        block_params, entry_dim, self.channels, self.blocks, self.kernels,
        self.strides,
    ):
      self.create_child(name, p)
    if self.output_spatial_pooling_params is not None:
      self.create_child(
          'output_spatial_pooling', self.output_spatial_pooling_params
      )

  def __call__(self, inputs: JTensor) -> JTensor | dict[int, JTensor]:
    """Applies the ResNet to images [B, H, W, C].

    Args:
      inputs: NHWC images.

    Returns:
      The pooled features (by default [B, channels[-1]]), the unpooled
      [B, H', W', channels[-1]] without `output_spatial_pooling_params`, or,
      with `return_block_features`, `{2 + stage: [B, H_s, W_s, channels[s]]}`.
    """
    outputs = self.entryflow_conv(inputs)
    if self.entryflow_maxpool_params is not None and self.entry_max_pool:
      outputs, _ = self.entryflow_maxpool(outputs)
    features = {}
    for stage, num_blocks in enumerate(self.blocks):
      for block in range(num_blocks):
        outputs = getattr(self, f'stage_{stage}_block_{block}')(outputs)
      features[2 + stage] = outputs
    if self.return_block_features:
      return features
    if self.output_spatial_pooling_params is not None:
      outputs = self.output_spatial_pooling(outputs)
    return outputs
