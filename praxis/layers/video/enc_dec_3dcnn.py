"""Building blocks of 3-D CNN video encoders, decoders and discriminators.

Public names: scan_function, depth_to_space, GroupNormSpatial, CondNormLayer,
CausalConv, ResBlock, BlurPool3D, DiscriminatorResBlock.

Videos are [B, T, H, W, C]. `CausalConv` pads time on the left only (with
edge frames), so output frame t sees input frames <= t; `ResBlock` is
norm-act-conv twice plus a shortcut; `DiscriminatorResBlock` is the
StyleGAN discriminator block with blur pooling
(https://arxiv.org/abs/1904.11486).

Example:

  block = base_layer.instantiate(pax_fiddle.Config(
      enc_dec_3dcnn.ResBlock, name='res', input_dim=32, output_dim=64))
  variables = block.init(jax.random.PRNGKey(0), video)  # [B, T, H, W, 32]
  out = block.apply(variables, video)  # [B, T, H, W, 64]
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any

import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import normalizations

template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
JTensor = pytypes.JTensor

# Binomial rows: the 1-D blur kernels of BlurPool3D by filter size.
_BLUR_KERNELS = {
    2: (1.0, 1.0),
    3: (1.0, 2.0, 1.0),
    4: (1.0, 3.0, 3.0, 1.0),
    5: (1.0, 4.0, 6.0, 4.0, 1.0),
    6: (1.0, 5.0, 10.0, 10.0, 5.0, 1.0),
    7: (1.0, 6.0, 15.0, 20.0, 15.0, 6.0, 1.0),
}


def _check_axis(x: JTensor, in_axis: int) -> None:
  if x.ndim <= in_axis:
    raise ValueError(
        f'in_axis {in_axis} must be less than the input rank {x.ndim}.'
    )


def _to_scan_layout(x: JTensor, in_axis: int) -> JTensor:
  """[..., n, ...] (n at in_axis) -> [n, ..., 1, ...] (1 at in_axis)."""
  _check_axis(x, in_axis)
  x = jnp.moveaxis(x, in_axis, 0)
  return jnp.expand_dims(x, axis=in_axis + 1)


def _from_scan_layout(x: JTensor, in_axis: int) -> JTensor:
  """[n, ..., m, ...] (m at in_axis + 1) -> [..., n * m, ...]."""
  _check_axis(x, in_axis)
  x = jnp.moveaxis(x, 0, in_axis)
  s = x.shape
  return jnp.reshape(
      x, (*s[:in_axis], s[in_axis] * s[in_axis + 1], *s[in_axis + 2:])
  )


def scan_function(
    fn: Callable[..., Any], in_axis: int = 0
) -> Callable[..., Any]:
  """`fn` applied slice by slice along `in_axis` with `jax.lax.scan`.

  The returned function takes the same positional arguments as `fn`, each
  with a dimension n at `in_axis`; it calls `fn` n times on slices keeping a
  size-1 dimension there and concatenates the results along `in_axis` (each
  result may have any size there). Cuts peak memory when `fn` treats the
  slices independently. Not for Flax modules (use `nn.scan`).

  Args:
    fn: The function, independent across slices of `in_axis`.
    in_axis: The axis to scan over.

  Returns:
    The scanning function.
  """

  def scanned(*args):
    args = jax.tree_util.tree_map(lambda x: _to_scan_layout(x, in_axis), args)
    _, results = jax.lax.scan(lambda carry, xs: (carry, fn(*xs)), (), args)
    return jax.tree_util.tree_map(
        lambda x: _from_scan_layout(x, in_axis), results
    )

  return scanned


def depth_to_space(x: JTensor, t_stride: int, filters: int) -> JTensor:
  """[B, T, H, W, t_stride * 4 * filters] -> [B, T * t_stride, 2H, 2W, filters].

  Channels are read as (t_stride, 2, 2, filters), time-major; the work is
  scanned over frames.
  """

  def one_frame(x):
    b, t, h, w, _ = x.shape
    x = x.reshape(b, t, h, w, t_stride, 2, 2, filters)
    x = x.transpose(0, 1, 4, 2, 5, 3, 6, 7)
    return x.reshape(b, t * t_stride, h * 2, w * 2, filters)

  return scan_function(one_frame, in_axis=1)(x)


class GroupNormSpatial(normalizations.GroupNorm):
  """GroupNorm of each frame: statistics over H, W (not time).

  Attributes:
    num_ignored_dims: Leading dims after batch folded into the batch (1:
      time).
  """

  num_ignored_dims: int = 1
  epsilon: float = 1e-6
  input_rank: int = 4

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes [B, T, H, W, C]; `paddings` is ignored."""
    del paddings
    prefix = inputs.shape[:1 + self.num_ignored_dims]
    folded = inputs.reshape(-1, *inputs.shape[2:])
    out = super().__call__(folded)
    return out.reshape(*prefix, *folded.shape[1:])


class CondNormLayer(base_layer.BaseLayer):
  """Group norm (no scale or bias) modulated by an embedding.

  Returns norm(x) * (1 + gamma(emb)) + beta(emb), gamma and beta each a
  Linear then a Bias (children `gamma_linear`, `gamma_bias`, `beta_linear`,
  `beta_bias`).

  Attributes:
    group_norm_tpl: Template of the normalization.
    linear_tpl: Template of the projections of the embedding.
    bias_tpl: Template of their biases.
    emb_dim: Embedding channels.
    dim: Input channels.
  """

  group_norm_tpl: LayerTpl = template_field(GroupNormSpatial)
  linear_tpl: LayerTpl = template_field(linears.Linear)
  bias_tpl: LayerTpl = template_field(linears.Bias)
  emb_dim: int = 0
  dim: int = 0

  def _child(self, name: str, tpl: LayerTpl, **fields: Any) -> None:
    p = tpl.clone().set(
        name=name, dtype=self.dtype, fprop_dtype=self.fprop_dtype, **fields
    )
    self.create_child(name, p)

  def setup(self) -> None:
    self._child(
        'group_norm', self.group_norm_tpl, dim=self.dim, use_scale=False,
        use_bias=False,
    )
    for kind in ('gamma', 'beta'):
      self._child(
          f'{kind}_linear', self.linear_tpl, input_dims=self.emb_dim,
          output_dims=self.dim,
      )
      self._child(f'{kind}_bias', self.bias_tpl, dims=self.dim)

  def __call__(self, inputs: JTensor, emb: JTensor) -> JTensor:
    """Normalizes `inputs` [..., dim] modulated by `emb` [..., emb_dim]."""
    x = self.group_norm(inputs)
    gamma = self.gamma_bias(self.gamma_linear(emb))
    beta = self.beta_bias(self.beta_linear(emb))
    return x * (gamma + 1.0) + beta


def _causal_pads(filter_shape: Sequence[int]) -> list[tuple[int, int]]:
  """Pads of [B, T, H, W, C] for CausalConv: time all on the left."""
  kt, kh, kw = filter_shape[:3]
  return [
      (0, 0), (kt - 1, 0), ((kh - 1) // 2, kh // 2),
      ((kw - 1) // 2, kw // 2), (0, 0),
  ]


class CausalConv(convolutions.Conv3D):
  """Conv3D causal in time: inputs edge-padded by `_causal_pads`, then VALID.

  Output frame t depends on input frames t - kt + 1 .. t (the first frame
  repeats before the start). With stride 1 the shape is kept.
  """

  padding: str = 'VALID'
  filter_stride: Sequence[int] = (1, 1, 1)
  bias: bool = True

  def __call__(self, inputs: JTensor) -> JTensor:
    inputs = jnp.pad(inputs, _causal_pads(self.filter_shape), mode='edge')
    return super().__call__(inputs)


def _check_input_dim(layer: base_layer.BaseLayer, inputs: JTensor) -> None:
  if inputs.shape[-1] != layer.input_dim:
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: input dimension '
        f'{inputs.shape[-1]} does not match `input_dim` {layer.input_dim}.'
    )


class ResBlock(base_layer.BaseLayer):
  """Residual block: (norm, act, 3x3x3 conv) twice, plus a shortcut.

  Children: `norm_0`, `conv_0`, `norm_1`, `conv_1`, `activation` and, when
  the dims differ, `conv_shortcut` (1x1x1, or 3x3x3 if `use_conv_shortcut`).

  Attributes:
    input_dim: Input channels.
    output_dim: Output channels.
    use_conv_shortcut: A 3x3x3 (not 1x1x1) shortcut conv when dims differ.
    norm_layer_tpl: Template of the norms.
    conv_layer_tpl: Template of the convs (no bias).
    activation_tpl: Template of the activation.
  """

  input_dim: int = 0
  output_dim: int = 128
  use_conv_shortcut: bool = False
  norm_layer_tpl: LayerTpl = template_field(GroupNormSpatial)
  conv_layer_tpl: LayerTpl = template_field(CausalConv)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.Swish)
  )

  def _conv(self, name: str, kernel: int, dims: tuple[int, int]) -> LayerTpl:
    return self.conv_layer_tpl.clone().set(
        name=name, dtype=self.dtype, fprop_dtype=self.fprop_dtype,
        bias=False, filter_shape=(kernel, kernel, kernel, *dims),
    )

  def setup(self) -> None:
    io = (self.input_dim, self.output_dim)
    for i, dim in enumerate(io):
      self.create_child(f'norm_{i}', self.norm_layer_tpl.clone().set(
          name=f'norm_{i}', dtype=self.dtype, fprop_dtype=self.fprop_dtype,
          dim=dim,
      ))
    self.create_child('conv_0', self._conv('conv0', 3, io))
    self.create_child(
        'conv_1', self._conv('conv1', 3, (self.output_dim, self.output_dim))
    )
    if self.input_dim != self.output_dim:
      kernel = 3 if self.use_conv_shortcut else 1
      self.create_child(
          'conv_shortcut', self._conv('conv_shortcut', kernel, io)
      )
    self.create_child('activation', self.activation_tpl.clone())

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps [B, T, H, W, input_dim] to [B, T, H, W, output_dim]."""
    _check_input_dim(self, inputs)
    x = self.conv_0(self.activation(self.norm_0(inputs)))
    x = self.conv_1(self.activation(self.norm_1(x)))
    residual = inputs
    if self.input_dim != self.output_dim:
      residual = self.conv_shortcut(residual)
    return x + residual


def _conv_dimension_numbers(input_shape: Sequence[int]):
  """Channels-last input and output, [*spatial, in, out] filter."""
  ndim = len(input_shape)
  lhs = (0, ndim - 1) + tuple(range(1, ndim - 1))
  rhs = (ndim - 1, ndim - 2) + tuple(range(0, ndim - 2))
  return jax.lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _blur_filter(filter_size: int, dtype: Any = jnp.float32) -> JTensor:
  """The normalized separable binomial filter [k, k, k, 1, 1]."""
  if filter_size not in _BLUR_KERNELS:
    raise ValueError(
        f'BlurPool3D: `filter_size` must be one of {sorted(_BLUR_KERNELS)}, '
        f'got {filter_size}.'
    )
  row = np.asarray(_BLUR_KERNELS[filter_size], np.float64)
  cube = np.einsum('i,j,k->ijk', row, row, row)
  cube = jnp.asarray(cube / cube.sum(), dtype)
  return cube[..., None, None]


class BlurPool3D(base_layer.BaseLayer):
  """Channel-wise binomial blur, then subsampling by `strides`.

  Attributes:
    filter_size: Width of the binomial filter (2 to 7).
    strides: (time, height, width) strides.
    padding: Padding of the convolution ('SAME' or 'VALID').
  """

  filter_size: int = 3
  strides: tuple[int, int, int] = (2, 2, 2)
  padding: str = 'SAME'

  def setup(self) -> None:
    _blur_filter(self.filter_size)  # Checks the size early.

  def __call__(self, inputs: JTensor) -> JTensor:
    """Blurs and subsamples [B, T, H, W, C]."""
    channels = inputs.shape[-1]
    kernel = jnp.tile(
        _blur_filter(self.filter_size, self.dtype), [1, 1, 1, 1, channels]
    ).astype(self.fprop_dtype)
    precision = 'bfloat16' if self.dtype == jnp.bfloat16 else 'float32'
    with jax.default_matmul_precision(precision):
      return jax.lax.conv_general_dilated(
          inputs,
          kernel,
          self.strides,
          self.padding,
          feature_group_count=channels,
          dimension_numbers=_conv_dimension_numbers(inputs.shape),
      )


class DiscriminatorResBlock(base_layer.BaseLayer):
  """StyleGAN discriminator block: conv, act, blur-pool, conv, act + skip.

  The skip path is blur-pool then a 1x1x1 conv; the sum is divided by
  sqrt(2). Children: `conv_first`, `conv_residual`, `conv_last`,
  `blur_pool`, `activation`.

  Attributes:
    input_dim: Input channels.
    output_dim: Output channels.
    blur_filter_size: Filter size of the blur pooling.
    conv_layer_tpl: Template of the convs.
    activation_tpl: Template of the activation.
    blur_pool_tpl: Template of the blur pooling.
  """

  input_dim: int = 0
  output_dim: int = 128
  blur_filter_size: int = 3
  conv_layer_tpl: LayerTpl = template_field(convolutions.Conv3D)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.LeakyReLU)
  )
  blur_pool_tpl: LayerTpl = template_field(BlurPool3D)

  def _conv(
      self, name: str, kernel: int, out_dim: int, bias: bool
  ) -> LayerTpl:
    return self.conv_layer_tpl.clone().set(
        name=name, dtype=self.dtype, fprop_dtype=self.fprop_dtype,
        padding='SAME', bias=bias, filter_stride=(1, 1, 1),
        filter_shape=(kernel, kernel, kernel, self.input_dim, out_dim),
    )

  def setup(self) -> None:
    self.create_child('activation', self.activation_tpl.clone())
    self.create_child(
        'conv_first', self._conv('conv_first', 3, self.input_dim, True)
    )
    self.create_child(
        'conv_residual',
        self._conv('conv_residual', 1, self.output_dim, False),
    )
    self.create_child(
        'conv_last', self._conv('conv_last', 3, self.output_dim, True)
    )
    self.create_child('blur_pool', self.blur_pool_tpl.clone().set(
        name='blur_pool', dtype=self.dtype, fprop_dtype=self.fprop_dtype,
        filter_size=self.blur_filter_size,
    ))

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps [B, T, H, W, input_dim] to [B, T', H', W', output_dim]."""
    _check_input_dim(self, inputs)
    x = self.blur_pool(self.activation(self.conv_first(inputs)))
    residual = self.conv_residual(self.blur_pool(inputs))
    x = self.activation(self.conv_last(x))
    return (x + residual) / math.sqrt(2.0)
