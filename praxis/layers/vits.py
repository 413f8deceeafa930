"""Vision Transformer (ViT): patch entry, a transformer stack, and an exit.

Public names: image_to_patch, patch_to_image, interpolate_embedding_2d,
VitEntryLayers, VitExitLayers, VisionTransformer,
build_vision_transformer_hparams_for_test.

Shapes: B batch, H x W x C images, P patch size, N tokens, D model dims.
`VisionTransformer` is three templates (entry, transformer stack, exit), each
replaceable:

  vit_p = vits.build_vision_transformer_hparams_for_test(
      pos_emb_shapes=(4, 4), patch_size=4, image_channels=1, model_dims=32,
      mlp_dims=64, num_xformer_layers=2, num_heads=4)
"""

from __future__ import annotations

from typing import Sequence

import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import stochastics
from praxis.layers import transformers

JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
template_field = base_layer.template_field


def _patch_grid(height: int, width: int, patch_size: int) -> tuple[int, int]:
  if height % patch_size or width % patch_size:
    raise ValueError(
        f'Image height ({height}) and width ({width}) should be multiples '
        f'of patch_size ({patch_size}).')
  return height // patch_size, width // patch_size


def image_to_patch(img: JTensor, patch_size: int) -> JTensor:
  """[B, H, W, C] -> [B, (H/P)(W/P), P*P*C], patches in row-major order.

  Each patch is flattened row by row, channels innermost.
  """
  if img.ndim < 4:
    raise ValueError(
        f'Image should be formatted as 4D [B, H, W, C], Shape: {img.shape}')
  *lead, height, width, channels = img.shape
  rows, cols = _patch_grid(height, width, patch_size)
  x = img.reshape(*lead, rows, patch_size, cols, patch_size, channels)
  n = len(lead)
  x = jnp.transpose(x, list(range(n)) + [n, n + 2, n + 1, n + 3, n + 4])
  return x.reshape(*lead, rows * cols, patch_size * patch_size * channels)


def patch_to_image(patches: JTensor, img_shape: Sequence[int],
                   patch_size: int) -> JTensor:
  """Inverse of `image_to_patch`: patches back to an image of `img_shape`."""
  if len(img_shape) != 4:
    raise ValueError(
        f'Image shape is expected to be [B, H, W, C], got {img_shape}.')
  height, width, channels = img_shape[1:]
  rows, cols = _patch_grid(height, width, patch_size)
  *lead, _, _ = patches.shape
  x = patches.reshape(*lead, rows, cols, patch_size, patch_size, channels)
  n = len(lead)
  x = jnp.transpose(x, list(range(n)) + [n, n + 2, n + 1, n + 3, n + 4])
  return x.reshape(*lead, height, width, channels)


def interpolate_embedding_2d(emb: JTensor, source_emb_shape: Sequence[int],
                             target_emb_shape: Sequence[int]) -> JTensor:
  """Bilinearly resizes a flattened 2-D embedding [1, H1*W1, D] to H2 x W2."""
  if emb.ndim > 3 or emb.shape[0] != 1:
    raise ValueError('The shape of the embedding should be (1, H * W, D)')
  h1, w1 = source_emb_shape
  if emb.shape[1] != h1 * w1:
    raise ValueError(f'The embedding has {emb.shape[1]} positions, not '
                     f'{h1} x {w1} = {h1 * w1}.')
  h2, w2 = target_emb_shape
  d = emb.shape[2]
  grid = jax.image.resize(emb.reshape(h1, w1, d), (h2, w2, d), 'bilinear')
  return grid.reshape(1, h2 * w2, d)


class VitEntryLayers(base_layer.BaseLayer):
  """Patchify, project, add position embeddings (and dropout), add CLS tokens.

  Attributes:
    pos_emb_shapes: (rows, cols) of the position embedding; images of another
      patch grid get it bilinearly resized.
    patch_size: P.
    input_dims: Dims of a patch before the projection (P * P * C).
    output_dims: D.
    pos_emb_dropout_prob: Dropout after adding the position embeddings.
    prepend_cls_tokens: Number of learned tokens put before the patches.
    append_cls_tokens: Number of learned tokens put after them.
    pos_emb_tpl: The position embedding (None: none).
    input_fc_has_bias: Whether the projection has a bias.
  """

  pos_emb_shapes: tuple[int, int] = (0, 0)
  patch_size: int = 0
  input_dims: int = 0
  output_dims: int = 0
  pos_emb_dropout_prob: float = 0.0
  prepend_cls_tokens: int = 0
  append_cls_tokens: int = 0
  pos_emb_tpl: LayerTpl | None = template_field(
      embedding_softmax.TrainablePositionalEmbedding)
  input_fc_has_bias: bool = True

  def setup(self) -> None:
    self.create_child('patch_projection', pax_fiddle.Config(
        linears.FeedForward, name='proj', input_dims=self.input_dims,
        output_dims=self.output_dims, has_bias=self.input_fc_has_bias,
        activation_tpl=pax_fiddle.Config(activations.Identity)))
    if self.pos_emb_tpl:
      self.create_child('pos_emb', self.pos_emb_tpl.clone().set(name='emb'))
    if self.pos_emb_dropout_prob > 0.0:
      self.create_child('dropout', pax_fiddle.Config(
          stochastics.Dropout, name='dropout',
          keep_prob=1.0 - self.pos_emb_dropout_prob))
    for name, count in (('prepend_cls_embs', self.prepend_cls_tokens),
                        ('append_cls_embs', self.append_cls_tokens)):
      if count > 0:
        self.create_variable(name, WeightHParams(
            shape=[1, count, self.output_dims],
            init=WeightInit.Constant(0.0)))

  def _position_embedding(self, inputs: JTensor) -> JTensor:
    emb = self.pos_emb(seq_length=int(np.prod(self.pos_emb_shapes)))
    if inputs.ndim == 4 and len(self.pos_emb_shapes) == 2:
      grid = _patch_grid(inputs.shape[1], inputs.shape[2], self.patch_size)
      if tuple(self.pos_emb_shapes) != grid:
        emb = interpolate_embedding_2d(emb, self.pos_emb_shapes, grid)
    return emb

  def __call__(self, inputs: JTensor) -> JTensor:
    """Images [B, H, W, C], or patches/embeddings [B, N, D], to [B, N', D]."""
    if inputs.ndim == 4:
      patches = image_to_patch(inputs, self.patch_size)
    elif inputs.ndim == 3:
      patches = inputs
    else:
      raise ValueError(f'{type(self).__name__} {self.name!r}: inputs must be '
                       f'[B, H, W, C] or [B, N, D], got {inputs.shape}.')
    features = self.patch_projection(patches)
    if self.pos_emb_tpl:
      features = features + self._position_embedding(inputs)
    if self.pos_emb_dropout_prob > 0.0:
      features = self.dropout(features)
    batch = inputs.shape[0]
    if self.prepend_cls_tokens > 0:
      cls = jnp.tile(self.theta.prepend_cls_embs, (batch, 1, 1))
      features = jnp.concatenate([cls, features], axis=1)
    if self.append_cls_tokens > 0:
      cls = jnp.tile(self.theta.append_cls_embs, (batch, 1, 1))
      features = jnp.concatenate([features, cls], axis=1)
    return features


class VitExitLayers(base_layer.BaseLayer):
  """Layer norm, pooling over tokens, a projection and dropout.

  Attributes:
    hidden_dim: D of the input.
    output_dim: Dims of the output.
    output_dropout_prob: Dropout on the output.
    pooled: Pool over the tokens ([B, N, D] -> [B, D]).
    pre_ln: Normalize the input first.
    output_fc_tanh: Project with a tanh FeedForward.
    output_fc_has_bias: Whether the output projection has a bias.
    pooling_tpl: The pooling (global max pooling by default).
    ln_tpl: The normalization.
  """

  hidden_dim: int = 0
  output_dim: int = 0
  output_dropout_prob: float = 0.0
  pooled: bool = True
  pre_ln: bool = True
  output_fc_tanh: bool = True
  output_fc_has_bias: bool = True
  pooling_tpl: LayerTpl = template_field(poolings.GlobalPooling)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)

  @property
  def _projects(self) -> bool:
    return self.output_dim != 0 and self.hidden_dim != self.output_dim

  def setup(self) -> None:
    if self.pre_ln:
      self.create_child('ln', self.ln_tpl.clone().set(name='ln',
                                                      dim=self.hidden_dim))
    if self.pooled:
      self.create_child('pooling', self.pooling_tpl)
    head = pax_fiddle.Config(
        linears.FeedForward, input_dims=self.hidden_dim,
        output_dims=self.output_dim, has_bias=self.output_fc_has_bias)
    if self.output_fc_tanh:
      head.activation_tpl = pax_fiddle.Config(activations.Tanh)
      self.create_child('fc_tanh', head)
    elif self._projects:
      head.activation_tpl = pax_fiddle.Config(activations.Identity)
      self.create_child('output_projection', head)
    if self.output_dropout_prob > 0.0:
      self.create_child('dropout', pax_fiddle.Config(
          stochastics.Dropout, keep_prob=1.0 - self.output_dropout_prob))

  def __call__(self, inputs: JTensor) -> JTensor:
    """[B, N, D] -> [B, output_dim] ([B, N, output_dim] unpooled)."""
    x = self.ln(inputs) if self.pre_ln else inputs
    if self.pooled:
      x = self.pooling(x)
    if self.output_fc_tanh:
      x = self.fc_tanh(x)
    elif self._projects:
      x = self.output_projection(x)
    if self.output_dropout_prob > 0.0:
      x = self.dropout(x)
    return x


class VisionTransformer(base_layer.BaseLayer):
  """Entry layers, a transformer stack, exit layers.

  Attributes:
    entry_layers_tpl: The entry (None: the inputs are already [B, N, D]).
    transformer_layers_tpl: The transformer stack (required).
    exit_layers_tpl: The exit (None: return the stack's [B, N, D]).
    full_data_parallel_on_entry_exit: Shard the entry and exit layers'
      activations over all mesh axes on the batch dim.
  """

  entry_layers_tpl: LayerTpl | None = template_field(VitEntryLayers)
  transformer_layers_tpl: LayerTpl | None = template_field(
      transformers.StackedTransformer)
  exit_layers_tpl: LayerTpl | None = template_field(VitExitLayers)
  full_data_parallel_on_entry_exit: bool = False

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      network_inputs: Of the transformer stack's [B, N, D] inputs and
        outputs.
    """

    network_inputs: base_layer.SplitDimsMapping = None

  def setup(self) -> None:
    if self.transformer_layers_tpl is None:
      raise ValueError('transformer_layers_tpl should not be None')
    if self.entry_layers_tpl is not None:
      self.create_child('entry_stack', self.entry_layers_tpl)
    self.create_child('transformers_stack', self.transformer_layers_tpl)
    if self.exit_layers_tpl is not None:
      self.create_child('exit_stack', self.exit_layers_tpl)

  def shard_entry_exit(self, x: JTensor) -> JTensor:
    """x sharded on its batch dim over every mesh axis, when asked."""
    if self.mesh_axis_names is None or not (
        self.full_data_parallel_on_entry_exit):
      return x
    spec = [tuple(self.mesh_axis_names)] + [None] * (x.ndim - 1)
    return base_layer.maybe_shard(x, spec, self.mesh_axis_names)

  def _shard_network(self, x: JTensor) -> JTensor:
    return base_layer.maybe_shard(
        x, self.activation_split_dims_mapping.network_inputs,
        self.mesh_axis_names)

  def __call__(self, inputs: JTensor,
               paddings: JTensor | None = None) -> JTensor:
    """Images [B, H, W, C] or tokens [B, N, D] (with paddings [B, N])."""
    x = inputs
    if self.entry_layers_tpl is not None:
      x = self.shard_entry_exit(self.entry_stack(self.shard_entry_exit(x)))
      x = self._shard_network(x)
    if paddings is None:
      paddings = jnp.zeros(x.shape[:-1], dtype=x.dtype)
    x = self.transformers_stack(x, paddings)
    if self.exit_layers_tpl is not None:
      x = self.shard_entry_exit(self._shard_network(x))
      x = self.shard_entry_exit(self.exit_stack(x))
    return x


def build_vision_transformer_hparams_for_test(
    pos_emb_shapes: tuple[int, int], patch_size: int, image_channels: int,
    model_dims: int, mlp_dims: int, num_xformer_layers: int, num_heads: int,
) -> pax_fiddle.Config[VisionTransformer]:
  """A small VisionTransformer config (no dropout, no per-dim scale)."""
  pos_emb_tpl = pax_fiddle.Config(
      embedding_softmax.TrainablePositionalEmbedding,
      max_seq_length=int(np.prod(pos_emb_shapes)), embedding_dims=model_dims,
      params_init=WeightInit.Gaussian(scale=0.02))
  entry = pax_fiddle.Config(
      VitEntryLayers, name='entry', pos_emb_shapes=pos_emb_shapes,
      patch_size=patch_size, input_dims=patch_size**2 * image_channels,
      output_dims=model_dims, pos_emb_tpl=pos_emb_tpl)
  stack = pax_fiddle.Config(
      transformers.StackedTransformer, model_dims=model_dims,
      hidden_dims=mlp_dims, num_heads=num_heads, mask_self_attention=False,
      use_cross_attention=False, packed_input=False,
      num_layers=num_xformer_layers)
  stack.transformer_layer_params_tpl.tr_atten_tpl.internal_enable_per_dim_scale = (  # pylint: disable=line-too-long
      False)
  exit_p = pax_fiddle.Config(VitExitLayers, name='exit',
                             hidden_dim=model_dims, output_dim=model_dims)
  return pax_fiddle.Config(
      VisionTransformer, name='vit', entry_layers_tpl=entry,
      transformer_layers_tpl=stack, exit_layers_tpl=exit_p)
