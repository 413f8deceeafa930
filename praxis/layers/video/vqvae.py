"""A causal 3-D CNN VQ-VAE video tokenizer (MAGVIT style) and discriminator.

Public names: Encoder, Decoder, Discriminator, VQVaeModel.

`Encoder` maps videos [B, 1 + k * 2**s, H, W, C] (s = number of True
`temporal_downsample` entries) through residual stages with strided causal
convs to latents [B, 1 + k, H / 2**(n-1), W / 2**(n-1), embedding_dim]
(n = len(channel_multipliers)). `Decoder` mirrors it, upsampling by conv and
depth-to-space, each stage normalized conditionally on the latents.
`VQVaeModel` runs encoder, quantizer (lookup-free by default) and decoder.

Example:

  model = base_layer.instantiate(pax_fiddle.Config(
      vqvae.VQVaeModel, name='vqvae', filters=32))
  variables = model.init(jax.random.PRNGKey(0), video)  # [B, 5, 16, 16, 3]
  reconstructed, info = model.apply(variables, video)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers.video import enc_dec_3dcnn
from praxis.layers.video import quantizer

template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap


def _with(layer: base_layer.BaseLayer, tpl: LayerTpl, name: str,
          **fields: Any) -> LayerTpl:
  """A clone of `tpl` named `name` with the layer's dtypes and `fields`."""
  return tpl.clone().set(
      name=name, dtype=layer.dtype, fprop_dtype=layer.fprop_dtype, **fields
  )


def _check_num_res_blocks(layer: base_layer.BaseLayer) -> None:
  if layer.num_res_blocks < 1:
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: `num_res_blocks` must be '
        f'>= 1, got {layer.num_res_blocks}.'
    )


class Encoder(base_layer.BaseLayer):
  """Causal 3-D CNN encoder.

  Children: `conv_first`; `res_blocks_{i}` (num_res_blocks per stage, one
  stage per channel multiplier, then one more stage at the last width);
  `conv_downsample_layers_{i}` (4x4x4, stride (2 or 1, 2, 2)) between
  stages; `norm`, `activation`, `conv_last` (1x1x1 to embedding_dim).

  Attributes:
    filters: Base channel count.
    input_dim: Input channels.
    embedding_dim: Latent channels.
    num_res_blocks: Residual blocks per stage.
    temporal_downsample: Whether each downsampling also halves time.
    conv_downsample: Must be True (strided-conv downsampling).
    channel_multipliers: Width of each stage, in units of `filters`.
    norm_tpl: Template of the final norm.
    conv_tpl: Template of the convs.
    res_block_tpl: Template of the residual blocks.
    activation_tpl: Template of the final activation.
  """

  filters: int = 128
  input_dim: int = 3
  embedding_dim: int = 8
  num_res_blocks: int = 4
  temporal_downsample: Sequence[bool] = (False, True, True)
  conv_downsample: bool = True
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.GroupNormSpatial)
  conv_tpl: LayerTpl = template_field(enc_dec_3dcnn.CausalConv)
  res_block_tpl: LayerTpl = template_field(enc_dec_3dcnn.ResBlock)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.Swish)
  )

  def _check_input(self, x: JTensor) -> None:
    if x.ndim != 5:
      raise ValueError(
          f'Encoder {self.name!r}: inputs must be [b, t, h, w, c], got '
          f'shape {x.shape}.'
      )
    factor = 2 ** sum(self.temporal_downsample)
    if (x.shape[1] - 1) % factor:
      raise ValueError(
          f'Encoder {self.name!r}: a causal tokenizer needs 1 + k * {factor} '
          f'frames (no truncation in downsampling), got {x.shape[1]}.'
      )

  def _res_block(self, name: str, input_dim: int, output_dim: int):
    return _with(
        self, self.res_block_tpl, name, input_dim=input_dim,
        output_dim=output_dim, use_conv_shortcut=False,
    )

  def setup(self) -> None:
    if not self.conv_downsample:
      raise ValueError(
          f'Encoder {self.name!r}: `conv_downsample` must be True.'
      )
    _check_num_res_blocks(self)
    self.create_child('conv_first', _with(
        self, self.conv_tpl, 'conv_first', bias=False,
        filter_shape=(3, 3, 3, self.input_dim, self.filters),
    ))
    res_blocks, downsamples = [], []
    input_dim = output_dim = self.filters
    num_stages = len(self.channel_multipliers)
    for i, multiplier in enumerate(self.channel_multipliers):
      output_dim = self.filters * multiplier
      for j in range(self.num_res_blocks):
        res_blocks.append(self._res_block(
            f'res_block_{i}_{j}', input_dim if j == 0 else output_dim,
            output_dim,
        ))
      if i < num_stages - 1:
        t_stride = 2 if self.temporal_downsample[i] else 1
        downsamples.append(_with(
            self, self.conv_tpl, f'conv_downsample_{i}', bias=True,
            filter_shape=(4, 4, 4, output_dim, output_dim),
            filter_stride=(t_stride, 2, 2),
        ))
      input_dim = output_dim
    for j in range(self.num_res_blocks):
      res_blocks.append(self._res_block(
          f'res_block_{num_stages}_{j}', output_dim, output_dim
      ))
    self.create_children('res_blocks', res_blocks)
    self.create_children('conv_downsample_layers', downsamples)
    self.create_child('norm', _with(self, self.norm_tpl, 'norm',
                                    dim=output_dim))
    self.create_child('activation', self.activation_tpl.clone())
    self.create_child('conv_last', _with(
        self, self.conv_tpl, 'conv_last', bias=True,
        filter_shape=(1, 1, 1, output_dim, self.embedding_dim),
    ))

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps a video [B, T, H, W, input_dim] to latents [..., embedding_dim]."""
    self._check_input(inputs)
    x = self.conv_first(inputs)
    n = self.num_res_blocks
    num_stages = len(self.channel_multipliers)
    for i in range(num_stages + 1):
      for block in self.res_blocks[i * n:(i + 1) * n]:
        x = block(x)
      if i < num_stages - 1:
        x = self.conv_downsample_layers[i](x)
    return self.conv_last(self.activation(self.norm(x)))


class Decoder(base_layer.BaseLayer):
  """Causal 3-D CNN decoder, conditioned on its input latents.

  Children: `conv_first`; `res_blocks_{i}` (a stage at the widest width,
  then one per channel multiplier from the last); `cond_norm_layers_{i}`
  (one before each of those stages, modulated by the latents resized to
  the current resolution); `conv_upsample_layers_{i}` (3x3x3 convs whose
  output goes through depth-to-space); `norm`, `activation`, `conv_last`.

  Attributes:
    filters: Base channel count.
    embedding_dim: Latent channels.
    output_dim: Output channels.
    num_res_blocks: Residual blocks per stage.
    temporal_downsample: As in the Encoder (upsampling mirrors it).
    channel_multipliers: As in the Encoder.
    cond_norm_tpl: Template of the conditional norms.
    norm_tpl: Template of the final norm.
    conv_tpl: Template of the convs.
    res_block_tpl: Template of the residual blocks.
    activation_tpl: Template of the final activation.
  """

  filters: int = 128
  embedding_dim: int = 8
  output_dim: int = 3
  num_res_blocks: int = 4
  temporal_downsample: Sequence[bool] = (False, True, True)
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  cond_norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.CondNormLayer)
  norm_tpl: LayerTpl = template_field(enc_dec_3dcnn.GroupNormSpatial)
  conv_tpl: LayerTpl = template_field(enc_dec_3dcnn.CausalConv)
  res_block_tpl: LayerTpl = template_field(enc_dec_3dcnn.ResBlock)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.Swish)
  )

  def _t_stride(self, stage: int) -> int:
    """Time upsampling after `stage` (> 0)."""
    return 2 if self.temporal_downsample[stage - 1] else 1

  def setup(self) -> None:
    _check_num_res_blocks(self)
    width = self.filters * self.channel_multipliers[-1]
    self.create_child('conv_first', _with(
        self, self.conv_tpl, 'conv_first', bias=True,
        filter_shape=(3, 3, 3, self.embedding_dim, width),
    ))
    res_blocks = [
        _with(self, self.res_block_tpl, f'res_block_0_{j}', input_dim=width,
              output_dim=width, use_conv_shortcut=False)
        for j in range(self.num_res_blocks)
    ]
    cond_norms, upsamples = [], []
    input_dim = output_dim = width
    for i in reversed(range(len(self.channel_multipliers))):
      # As in Pax, the norm's dim is the previous stage's output width.
      cond_norms.append(_with(
          self, self.cond_norm_tpl, f'cond_norm_{i}',
          emb_dim=self.embedding_dim, dim=output_dim,
      ))
      output_dim = self.filters * self.channel_multipliers[i]
      for j in range(self.num_res_blocks):
        res_blocks.append(_with(
            self, self.res_block_tpl, f'res_block_{i}_{j}',
            input_dim=input_dim if j == 0 else output_dim,
            output_dim=output_dim, use_conv_shortcut=False,
        ))
      if i > 0:
        out_channels = output_dim * 4 * self._t_stride(i)
        upsamples.append(_with(
            self, self.conv_tpl, f'conv_upsample_{i}', bias=True,
            filter_shape=(3, 3, 3, output_dim, out_channels),
        ))
      input_dim = output_dim
    self.create_children('cond_norm_layers', cond_norms)
    self.create_children('res_blocks', res_blocks)
    self.create_children('conv_upsample_layers', upsamples)
    self.create_child('norm', _with(self, self.norm_tpl, 'norm',
                                    dim=output_dim))
    self.create_child('activation', self.activation_tpl.clone())
    self.create_child('conv_last', _with(
        self, self.conv_tpl, 'conv_last', bias=True,
        filter_shape=(3, 3, 3, output_dim, self.output_dim),
    ))

  def _upsample(
      self, k: int, i: int, x: JTensor, cond: JTensor
  ) -> tuple[JTensor, JTensor]:
    """Upsampling `k` (after stage `i`) of x and the resized latents."""
    t_stride = self._t_stride(i)
    x = self.conv_upsample_layers[k](x)
    filters = self.filters * self.channel_multipliers[i]
    x = enc_dec_3dcnn.depth_to_space(x, t_stride, filters)
    cond = jax.image.resize(
        cond, (*x.shape[:-1], cond.shape[-1]), method='nearest',
        antialias=False,
    )
    # Causal: the first latent frame decodes to one frame, not t_stride.
    return x[:, t_stride - 1:], cond[:, t_stride - 1:]

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps latents [B, t, h, w, embedding_dim] to a video."""
    cond = inputs
    x = self.conv_first(inputs)
    n = self.num_res_blocks
    for block in self.res_blocks[:n]:
      x = block(x)
    num_stages = len(self.channel_multipliers)
    for k, i in enumerate(reversed(range(num_stages))):
      x = self.cond_norm_layers[k](x, cond)
      for block in self.res_blocks[(k + 1) * n:(k + 2) * n]:
        x = block(x)
      if i > 0:
        x, cond = self._upsample(k, i, x, cond)
    return self.conv_last(self.activation(self.norm(x)))


def _halved(size: int) -> int:
  """Size after a stride-2 SAME blur pool (odd sizes round up)."""
  return size // 2 + size % 2


class Discriminator(base_layer.BaseLayer):
  """StyleGAN-style video discriminator: [B, T, H, W, C] -> logits [B, 1].

  Children: `activation` (leaky ReLU, slope 0.2), `conv_first`,
  `res_blocks_{i}` (each halves T, H and W), `conv_last` and `proj` (a
  2-layer MLPBlock on the flattened features).

  Attributes:
    filters: Base channel count.
    num_frames: Input frames T.
    image_height: Input height H.
    image_width: Input width W.
    input_dim: Input channels.
    blur_filter_size: Filter size of the blur pooling.
    channel_multipliers: Width of each block, in units of `filters`.
    conv_tpl: Template of the convs.
    res_block_tpl: Template of the blocks.
    activation_tpl: Template of the activation.
    proj_tpl: Template of the output MLP.
  """

  filters: int = 128
  num_frames: int = 1
  image_height: int = 256
  image_width: int = 256
  input_dim: int = 3
  blur_filter_size: int = 3
  channel_multipliers: Sequence[int] = (2, 4, 4, 4)
  conv_tpl: LayerTpl = template_field(convolutions.Conv3D)
  res_block_tpl: LayerTpl = template_field(
      enc_dec_3dcnn.DiscriminatorResBlock
  )
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.LeakyReLU)
  )
  proj_tpl: LayerTpl = template_field(linears.MLPBlock)

  def _conv(self, name: str, dims: tuple[int, int]) -> LayerTpl:
    return self.conv_tpl.clone().set(
        name=name, padding='SAME', bias=True, filter_shape=(3, 3, 3, *dims),
        filter_stride=(1, 1, 1),
    )

  def setup(self) -> None:
    activation_p = self.activation_tpl.clone().set(
        name='activation', negative_slope=0.2
    )
    self.create_child('activation', activation_p)
    self.create_child(
        'conv_first', self._conv('conv_first', (self.input_dim, self.filters))
    )
    res_blocks = []
    input_dim = output_dim = self.filters
    t, h, w = self.num_frames, self.image_height, self.image_width
    for i, multiplier in enumerate(self.channel_multipliers):
      output_dim = self.filters * multiplier
      res_blocks.append(self.res_block_tpl.clone().set(
          name=f'res_block_{i}', input_dim=input_dim, output_dim=output_dim,
          activation_tpl=activation_p.clone(),
          blur_filter_size=self.blur_filter_size,
      ))
      input_dim = output_dim
      t, h, w = _halved(t), _halved(h), _halved(w)
    self.create_children('res_blocks', res_blocks)
    self.create_child(
        'conv_last', self._conv('conv_last', (output_dim, output_dim))
    )
    proj_p = self.proj_tpl.clone().set(
        name='proj', num_layers=2, hidden_dims=output_dim,
        activate_final=False,
    )
    proj_p.ff_tpl.input_dims = output_dim * t * h * w
    proj_p.ff_tpl.output_dims = 1
    proj_p.ff_tpl.activation_tpl = activation_p.clone()
    self.create_child('proj', proj_p)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Logits [B, 1] of videos [B, num_frames, height, width, input_dim]."""
    x = self.activation(self.conv_first(inputs))
    for block in self.res_blocks:
      x = block(x)
    x = self.activation(self.conv_last(x))
    return self.proj(x.reshape((x.shape[0], -1)))


class VQVaeModel(base_layer.BaseLayer):
  """Encoder, quantizer and decoder of a VQ-VAE.

  The model's `temporal_downsample`, `channel_multipliers`, `embedding_dim`,
  `filters` and `num_res_blocks` override those of the encoder and decoder
  templates (and `embedding_dim` that of the quantizer).

  Attributes:
    encoder_tpl: Template of the encoder.
    decoder_tpl: Template of the decoder.
    quantizer_tpl: Template of the quantizer: maps latents to (quantized,
      NestedMap with `encoding_indices`, ...), with `decode_ids`.
    temporal_downsample: See Encoder.
    channel_multipliers: See Encoder.
    embedding_dim: Latent channels.
    filters: Base channel count.
    num_res_blocks: Residual blocks per stage.
  """

  encoder_tpl: LayerTpl = template_field(Encoder)
  decoder_tpl: LayerTpl = template_field(Decoder)
  quantizer_tpl: LayerTpl = template_field(quantizer.LookupFreeQuantizer)
  temporal_downsample: Sequence[bool] = (False, True, True)
  channel_multipliers: Sequence[int] = (1, 2, 2, 4)
  embedding_dim: int = 8
  filters: int = 32
  num_res_blocks: int = 4

  def setup(self) -> None:
    shared = dict(
        temporal_downsample=self.temporal_downsample,
        channel_multipliers=self.channel_multipliers,
        embedding_dim=self.embedding_dim,
        filters=self.filters,
        num_res_blocks=self.num_res_blocks,
    )
    self.create_child(
        'encoder', _with(self, self.encoder_tpl, 'encoder', **shared)
    )
    self.create_child(
        'decoder', _with(self, self.decoder_tpl, 'decoder', **shared)
    )
    self.create_child('quantizer', _with(
        self, self.quantizer_tpl, 'quantizer',
        embedding_dim=self.embedding_dim,
    ))

  def encode(self, inputs: JTensor) -> tuple[JTensor, NestedMap]:
    """(quantized latents, the quantizer's NestedMap) of a video."""
    return self.quantizer(self.encoder(inputs))

  def encode_to_indices(self, inputs: JTensor) -> JTensor:
    _, info = self.encode(inputs)
    return info['encoding_indices']

  def encode_to_latents(self, inputs: JTensor) -> JTensor:
    return self.encoder(inputs)

  def decode(self, inputs: JTensor) -> JTensor:
    return self.decoder(inputs)

  def decode_from_indices(self, ids: JTensor) -> JTensor:
    return self.decode(self.quantizer.decode_ids(ids))

  def decode_from_latents(self, latents: JTensor) -> JTensor:
    quantized, _ = self.quantizer(latents)
    return self.decode(quantized)

  def __call__(self, inputs: JTensor) -> tuple[JTensor, NestedMap]:
    """(reconstructed video, the quantizer's NestedMap)."""
    quantized, info = self.encode(inputs)
    return self.decoder(quantized), info
