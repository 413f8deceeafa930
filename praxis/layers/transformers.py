"""Transformer layers: feed-forward blocks, layers and stacks of layers.

Public names: compute_attention_masks_for_fprop,
compute_attention_masks_for_extend_step, top2_gating, TransformerFeedForward,
TransformerFeedForwardMoe, Transformer, StackedTransformer,
StackedTransformerRepeated, PipelinedTransformer,
PipelineCompatibleStackedTransformerRepeated.

A stack builds its attention masks from paddings (and causality, segments)
and runs its layers; the repeated stack holds one block's variables stacked
`x_times` and runs it with `repeats.Repeat` (an `nn.scan`); the pipelined
stack runs stages of layers as a pipeline (`pipeline.py`):

  stack = base_layer.instantiate(pax_fiddle.Config(
      transformers.StackedTransformer, name='stack', num_layers=2,
      model_dims=16, hidden_dims=32, num_heads=4, mask_self_attention=True))
  variables = stack.init(jax.random.PRNGKey(0), x, paddings)  # x [B, T, 16]
  y = stack.apply(variables, x, paddings)                     # [B, T, 16]

Decoding: run the stack once with the `decoder_cache` collection mutable to
fill the attention caches, then call `extend_step` for each new position.

The feed-forward blocks (`top2_gating`, `TransformerFeedForward`,
`TransformerFeedForwardMoe`) and the norm-policy, residual and dropout
helpers that `Transformer` shares with them live in the private sibling
`_transformer_feedforward` and are re-exported here by name. The file is
still past 800 lines because each remaining layer carries upstream's full
field list (with docstrings) and its decoding path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flax import linen as nn
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _transformer_feedforward
from praxis.layers import attentions
from praxis.layers import checkpoint_policy
from praxis.layers import normalizations
from praxis.layers import pipeline
from praxis.layers import repeats
from praxis.layers import stochastics

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
DecodeStateTransformFn = attentions.DecodeStateTransformFn

# Feed-forward blocks, defined in _transformer_feedforward.
top2_gating = _transformer_feedforward.top2_gating
_get_sentence_embeddings = _transformer_feedforward._get_sentence_embeddings
TransformerFeedForward = _transformer_feedforward.TransformerFeedForward
TransformerFeedForwardMoe = _transformer_feedforward.TransformerFeedForwardMoe

# Helpers shared with the feed-forward blocks.
_check_norm_policy = _transformer_feedforward.check_norm_policy
_create_norms = _transformer_feedforward.create_norms
_pre_norm = _transformer_feedforward.pre_norm
_post_norm = _transformer_feedforward.post_norm
_residual = _transformer_feedforward.add_residual
_create_droppath = _transformer_feedforward.create_droppath
_dropout = _transformer_feedforward.dropout


# ---------------------------------------------------------------------------
# Attention masks.
# ---------------------------------------------------------------------------


def compute_attention_masks_for_fprop(
    inputs: JTensor,
    paddings: JTensor | None = None,
    causal_attention: bool | None = False,
    segment_mask: JTensor | None = None,
    cross_inputs: JTensor | None = None,
    cross_paddings: JTensor | None = None,
    cross_segment_mask: JTensor | None = None,
    fold_padding_with_segment_mask: bool | None = False,
) -> tuple[JTensor, JTensor | None]:
  """The additive self- and cross-attention masks of a forward pass.

  Args:
    inputs: [B, T, D]; its dtype is the masks' dtype.
    paddings: [B, T], 1 at padded positions (needed unless
      `fold_padding_with_segment_mask`).
    causal_attention: Also mask future positions.
    segment_mask: [B, 1, T, T], for packed inputs.
    cross_inputs: [B, S, D], the encoder outputs (for cross attention).
    cross_paddings: [B, S].
    cross_segment_mask: [B, 1, T, S].
    fold_padding_with_segment_mask: `segment_mask` already masks the padding.

  Returns:
    (attention_mask [1|B, 1, 1|T, T], cross_attention_mask [B, 1, 1|T, S] or
    None without cross inputs).
  """
  if fold_padding_with_segment_mask:
    if segment_mask is None:
      raise ValueError('fold_padding_with_segment_mask needs a segment_mask.')
    mask = segment_mask
  else:
    if paddings is None:
      raise ValueError('compute_attention_masks_for_fprop needs paddings.')
    mask = attentions.convert_paddings_to_mask(paddings, inputs.dtype)
    if segment_mask is not None:
      mask = attentions.merge_masks(mask, segment_mask)
  if causal_attention:
    mask = attentions.merge_masks(mask, attentions.causal_mask(inputs))
  cross_mask = None
  if cross_inputs is not None:
    if cross_paddings is None:
      raise ValueError('cross_inputs need cross_paddings.')
    cross_mask = attentions.convert_paddings_to_mask(
        cross_paddings, cross_inputs.dtype
    )
    if cross_segment_mask is not None:
      cross_mask = jnp.minimum(cross_mask, cross_segment_mask)
  return mask, cross_mask


def compute_attention_masks_for_extend_step(
    time_step: JTensor,
    seq_len: int,
    segment_mask: JTensor | None = None,
    cross_paddings: JTensor | None = None,
    cross_segment_mask: JTensor | None = None,
) -> tuple[JTensor, JTensor | None]:
  """The additive masks of decoding step `time_step`.

  Args:
    time_step: Scalar, the 0-based step; later cache positions are masked.
    seq_len: T, the length of the decoder cache.
    segment_mask: [B, 1, T], this step's segment mask.
    cross_paddings: [B, S], the encoder paddings.
    cross_segment_mask: [B, 1, S], this step's cross segment mask.

  Returns:
    (attention_mask [1|B, 1, T], cross_attention_mask [B, 1, 1, S] or None).
  """
  future = jnp.arange(seq_len)[None, :] > jnp.asarray(time_step, jnp.int32)
  mask = attentions.convert_paddings_to_mask(future)[:, 0]
  if segment_mask is not None:
    mask = jnp.minimum(mask, segment_mask)
  cross_mask = None
  if cross_paddings is not None:
    cross_mask = attentions.convert_paddings_to_mask(cross_paddings, mask.dtype)
    if cross_segment_mask is not None:
      cross_mask = jnp.minimum(cross_mask, cross_segment_mask[:, None])
  return mask, cross_mask


# ---------------------------------------------------------------------------
# Transformer layers.
# ---------------------------------------------------------------------------


class Transformer(base_layer.BaseLayer):
  """A Transformer layer: self-attention, optional cross-attention, FFN.

  Children: `layer_norm` (or `pre_`/`post_layer_norm`), `self_attention`,
  `residual_dropout`, `cross_layer_norm`, `cross_attention`,
  `residual_droppath`, `ff_layer`.

  Attributes:
    input_dims: D, the model depth.
    hidden_dims: Hidden depth of the feed-forward block.
    num_heads: Attention heads.
    dim_per_head: Dims per head (None: input_dims // num_heads).
    dropout_tpl: Template of the residual dropout.
    atten_dropout_prob: Dropout probability of the attention probabilities.
    residual_dropout_prob: Dropout probability of the residual branches.
    relu_dropout_prob: Dropout probability of the feed-forward hidden layer.
    residual_droppath_prob: Probability of dropping a residual branch per
      example.
    use_cross_attention: Attend to encoder outputs after self-attention.
    allow_skip_cross_attention: Skip the cross-attention when no cross inputs
      are given.
    cross_atten_tpl: Template of the cross-attention (None: tr_atten_tpl).
    ln_tpl: Template of the normalizations.
    norm_policy: 'pre', 'post', 'primer_hybrid' or 'post_skip'.
    tr_atten_tpl: Template of the attention.
    packed_input: Inputs pack several sequences (segment masks are given).
    tr_fflayer_tpl: Template of the feed-forward block.
    ngrammer_tpl: An n-grammer (a VQNgrammer) of the self-attention's
      output heads, before its output projection (the self-attention's
      `ngrammer_tpl`).
  """

  input_dims: int = 0
  hidden_dims: int = 0
  num_heads: int | None = None
  dim_per_head: int | None = None
  dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  atten_dropout_prob: float = 0.0
  residual_dropout_prob: float = 0.0
  relu_dropout_prob: float = 0.0
  residual_droppath_prob: float = 0.0
  use_cross_attention: bool = False
  allow_skip_cross_attention: bool = False
  cross_atten_tpl: LayerTpl | None = template_field(None)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_policy: str = 'pre'
  tr_atten_tpl: LayerTpl = template_field(attentions.DotProductAttention)
  packed_input: bool = False
  tr_fflayer_tpl: LayerTpl = template_field(TransformerFeedForward)
  ngrammer_tpl: LayerTpl | None = template_field(None)

  def _setup_attention(self, tpl: LayerTpl, name: str) -> None:
    p = tpl.clone().set(
        input_dim=self.input_dims,
        hidden_dim=self.input_dims,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        atten_dropout_prob=self.atten_dropout_prob,
    )
    if self.ngrammer_tpl is not None and name == 'self_attention':
      p.ngrammer_tpl = self.ngrammer_tpl
    self.create_child(name, p)

  def setup(self) -> None:
    _check_norm_policy(self)
    _create_norms(self, self.input_dims)
    self._setup_attention(self.tr_atten_tpl, 'self_attention')
    self.create_child(
        'residual_dropout',
        _dropout(self.dropout_tpl, self.residual_dropout_prob),
    )
    if self.use_cross_attention:
      _create_norms(self, self.input_dims, prefix='cross_')
      tpl = self.cross_atten_tpl or self.tr_atten_tpl
      self._setup_attention(tpl, 'cross_attention')
    _create_droppath(self)
    ff = self.tr_fflayer_tpl.clone().set(
        input_dims=self.input_dims,
        hidden_dims=self.hidden_dims,
        relu_dropout_prob=self.relu_dropout_prob,
        residual_dropout_prob=self.residual_dropout_prob,
        residual_droppath_prob=self.residual_droppath_prob,
        norm_policy=self.norm_policy,
    )
    self.create_child('ff_layer', ff)

  def _add_residual(self, x: JTensor, y: JTensor, prefix: str = '') -> JTensor:
    out = _residual(self, x, self.residual_dropout(_post_norm(self, y, prefix)))
    if self.norm_policy == 'post_skip':
      out = getattr(self, f'{prefix}layer_norm')(out)
    return out

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      attention_mask: JTensor,
      cross_inputs: JTensor | None = None,
      cross_attention_mask: JTensor | None = None,
      segment_pos: JTensor | None = None,
      segment_ids: JTensor | None = None,
  ) -> tuple[JTensor, NestedMap]:
    """Runs the layer.

    Args:
      inputs: [B, T, D].
      paddings: [B, T] (used by the feed-forward block).
      attention_mask: Additive self-attention mask [1|B, 1, 1|T, T].
      cross_inputs: [B, S, D], encoder outputs.
      cross_attention_mask: Additive mask [1|B, 1, 1|T, S].
      segment_pos: [B, T], positions within packed segments.
      segment_ids: [B, T], the segment of each token (unused).

    Returns:
      (outputs [B, T, D], NestedMap(self_atten=[B, N, T, T] probabilities,
      cross_atten=[B, N, T, S] with cross attention)).
    """
    del segment_ids
    x = _pre_norm(self, inputs)
    atten_out, probs = self.self_attention(
        x, x, x, atten_mask=attention_mask, query_segment_pos=segment_pos,
        key_segment_pos=segment_pos,
    )
    atten_probs = NestedMap(self_atten=probs)
    out = self._add_residual(inputs, atten_out)
    if self.use_cross_attention and (
        not self.allow_skip_cross_attention or cross_inputs is not None
    ):
      if cross_inputs is None or cross_attention_mask is None:
        raise ValueError(f'Transformer ({self.name}): cross attention needs '
                         'cross_inputs and cross_attention_mask.')
      cross_out, cross_probs = self.cross_attention(
          _pre_norm(self, out, 'cross_'), cross_inputs, cross_inputs,
          atten_mask=cross_attention_mask,
      )
      atten_probs.cross_atten = cross_probs
      out = self._add_residual(out, cross_out, 'cross_')
    return self.ff_layer(out, paddings=paddings), atten_probs

  def extend_step(
      self,
      inputs: JTensor,
      *,
      time_step: JTensor,
      segment_pos: JTensor | None = None,
      attention_mask: JTensor,
      cross_attention_mask: JTensor | None = None,
  ) -> JTensor:
    """Decodes one step (or L steps, with an attention that extends several).

    Args:
      inputs: [B, D], the input at `time_step` (or [B, L, D] from it).
      time_step: Scalar, the 0-based step.
      segment_pos: [B] (or [B, L]), positions within segments (None:
        time_step onwards).
      attention_mask: Additive mask [1|B, 1, T] (or [1|B, 1, L, T]) over the
        cache.
      cross_attention_mask: Additive mask [1|b|B, 1, 1, S] over the encoder.

    Returns:
      outputs: [B, D] (or [B, L, D]).
    """
    x = _pre_norm(self, inputs)
    atten_out = self.self_attention.extend_step(
        x, atten_mask=attention_mask, time_step=time_step,
        segment_pos=segment_pos,
    )
    out = self._add_residual(inputs, atten_out)
    if self.use_cross_attention and (
        not self.allow_skip_cross_attention or cross_attention_mask is not None
    ):
      if cross_attention_mask is None:
        raise ValueError(f'Transformer ({self.name}): cross attention needs '
                         'cross_attention_mask.')
      cross_out = self.cross_attention.extend_step(
          _pre_norm(self, out, 'cross_'),
          atten_mask=jnp.squeeze(cross_attention_mask, 2),
          time_step=time_step,
          segment_pos=segment_pos,
          is_cross_attention=True,
      )
      out = self._add_residual(out, cross_out, 'cross_')
    return self.ff_layer.extend_step(out, time_step=time_step)

  def init_states(self, target_batch_size: int, target_max_length: int) -> None:
    """Creates a zero self-attention cache (see DotProductAttention)."""
    self.self_attention.init_states(target_batch_size, target_max_length)

  def decoding_sequence_length(self) -> int:
    """The length of the self-attention cache."""
    return self.self_attention.decoding_state_sequence_length()

  def transform_decode_state(self, transform_fn: DecodeStateTransformFn):
    """Transforms the self-attention cache."""
    self.self_attention.transform_decode_state(transform_fn)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int
  ) -> None:
    """Delegates to the self-attention."""
    self.self_attention.lazy_broadcast_prefix(num_suffix_samples, suffix_length)

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int, right_align_fn: DecodeStateTransformFn
  ) -> None:
    """Delegates to the self-attention."""
    self.self_attention.right_align_decode_state_with_prefix(
        max_prefix_size, right_align_fn
    )


def _step_segment_mask(
    segment_pos: JTensor, time_step: JTensor, max_t: int, dtype: Any
) -> JTensor:
  """[B, 1, T]: the current segment started `segment_pos` steps ago."""
  start = time_step - segment_pos[:, None]
  before = jnp.arange(max_t)[None, :] < start
  return (before.astype(dtype) * py_utils.get_large_negative_number(dtype))[
      :, None
  ]


class StackedTransformer(base_layer.BaseLayer):
  """A stack of Transformer layers (children `x_layers_{i}`).

  Attributes:
    use_cross_attention: Layers attend to encoder outputs.
    mask_self_attention: Causal self-attention.
    num_layers: Number of layers.
    model_dims: D, the model depth.
    hidden_dims: Hidden depth of the feed-forward blocks.
    num_heads: Attention heads.
    dim_per_head: Dims per head (None: model_dims // num_heads).
    dropout_prob: Default of the three dropout probabilities below.
    atten_dropout_prob: Attention dropout (None: dropout_prob).
    residual_dropout_prob: Residual dropout (None: dropout_prob).
    relu_dropout_prob: Feed-forward hidden dropout (None: dropout_prob).
    residual_droppath_prob: Droppath probability of the top layer (layer i
      uses i / num_layers of it).
    input_dropout_prob: Dropout of the stack's input.
    gating_func: Routing of the MoE layers.
    unadjusted_expert_capacity_factor: Kept for configs.
    transformer_layer_params_tpl: Template of the layers, or a list of
      templates (num_layers a multiple of its length; tiled as a, a, b, b).
    packed_input: Inputs pack several sequences (segment masks needed).
    fold_padding_with_segment_mask: The segment mask also masks padding.
    moe_layer_tpl: Template of the MoE feed-forward blocks.
    num_experts: Experts of the MoE layers.
    num_groups: Kept for configs.
    min_group_size: Kept for configs.
    moe_layers: Indices of the layers with MoE feed-forward blocks.
    ngrammer_tpls: Post-attention n-grammers, one template (or None) a
      layer: each layer's `ngrammer_tpl`.
    remat: Rematerialize each layer in the backward pass.
    checkpoint_policy: What the rematerialization keeps.
  """

  use_cross_attention: bool = False
  mask_self_attention: bool = False
  num_layers: int = 0
  model_dims: int = 0
  hidden_dims: int = 0
  num_heads: int = 0
  dim_per_head: int | None = None
  dropout_prob: float = 0.0
  atten_dropout_prob: float | None = None
  residual_dropout_prob: float | None = None
  relu_dropout_prob: float | None = None
  residual_droppath_prob: float = 0.0
  input_dropout_prob: float = 0.0
  gating_func: str = 'top2'
  unadjusted_expert_capacity_factor: float = 2.0
  transformer_layer_params_tpl: LayerTpl | Sequence[LayerTpl] = (
      template_field(Transformer)
  )
  packed_input: bool = False
  fold_padding_with_segment_mask: bool = False
  moe_layer_tpl: LayerTpl | None = template_field(TransformerFeedForwardMoe)
  num_experts: int = 0
  num_groups: int = 1
  min_group_size: int | None = None
  moe_layers: Sequence[int] | None = ()
  ngrammer_tpls: Sequence[LayerTpl] | None = template_field(None)
  remat: bool = False
  checkpoint_policy: AutodiffCheckpointType = (
      AutodiffCheckpointType.SAVE_DOT_EXCEPT_LOGITS_FFN1
  )

  def _check_config(self) -> None:
    where = f'StackedTransformer ({self.name})'
    for name in ('num_layers', 'model_dims', 'hidden_dims', 'num_heads'):
      if getattr(self, name) <= 0:
        raise ValueError(f'{where}: {name} must be positive, got '
                         f'{getattr(self, name)}.')
    for name in ('dropout_prob', 'input_dropout_prob'):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f'{where}: {name} must be in [0, 1).')
    tpls = self.transformer_layer_params_tpl
    if isinstance(tpls, (list, tuple)) and self.num_layers % len(tpls):
      raise ValueError(f'{where}: num_layers {self.num_layers} is not a '
                       f'multiple of the {len(tpls)} layer templates.')
    if self.moe_layers and (self.num_experts <= 0 or not self.moe_layer_tpl):
      raise ValueError(f'{where}: moe_layers need num_experts > 0 and a '
                       'moe_layer_tpl.')
    if (self.ngrammer_tpls is not None
        and len(self.ngrammer_tpls) < self.num_layers):
      raise ValueError(f'{where}: ngrammer_tpls has {len(self.ngrammer_tpls)} '
                       f'entries, fewer than num_layers {self.num_layers}.')

  def _layer_params(self, i: int) -> LayerTpl:
    tpls = self.transformer_layer_params_tpl
    if isinstance(tpls, (list, tuple)):
      p = tpls[i // (self.num_layers // len(tpls))].clone()
    else:
      p = tpls.clone()
    prob = self.dropout_prob
    p.set(
        use_cross_attention=self.use_cross_attention,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        input_dims=self.model_dims,
        packed_input=self.packed_input,
        atten_dropout_prob=self.atten_dropout_prob or prob,
        residual_dropout_prob=self.residual_dropout_prob or prob,
        relu_dropout_prob=self.relu_dropout_prob or prob,
        hidden_dims=self.hidden_dims,
    )
    if self.residual_droppath_prob > 0.0:
      p.residual_droppath_prob = (
          self.residual_droppath_prob * i / max(1, self.num_layers)
      )
    if self.moe_layers and i in self.moe_layers:
      moe = self.moe_layer_tpl.clone().set(
          num_experts=self.num_experts,
          num_groups=self.num_groups,
          min_group_size=self.min_group_size,
          gating_func=self.gating_func,
      )
      if moe.hidden_dims:
        p.hidden_dims = moe.hidden_dims
      p.tr_fflayer_tpl = moe
    if self.ngrammer_tpls is not None and self.ngrammer_tpls[i] is not None:
      p.ngrammer_tpl = self.ngrammer_tpls[i]
    return p

  def setup(self) -> None:
    self._check_config()
    layers = [self._layer_params(i) for i in range(self.num_layers)]
    self.create_children('x_layers', layers)
    if self.input_dropout_prob > 0.0:
      self.create_child(
          'input_dropout',
          pax_fiddle.Config(
              stochastics.Dropout, keep_prob=1.0 - self.input_dropout_prob
          ),
      )

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      segment_mask: JTensor | None = None,
      cross_inputs: JTensor | None = None,
      cross_paddings: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
      segment_pos: JTensor | None = None,
  ) -> JTensor:
    """Runs the stack.

    Args:
      inputs: [B, T, D].
      paddings: [B, T].
      segment_mask: [B, 1, T, T], for packed inputs.
      cross_inputs: [B, S, D], encoder outputs.
      cross_paddings: [B, S].
      cross_segment_mask: [B, 1, T, S], for packed inputs.
      segment_pos: [B, T], positions within packed segments.

    Returns:
      The outputs [B, T, D].
    """
    where = f'StackedTransformer ({self.name})'
    if self.packed_input and segment_mask is None:
      raise ValueError(f'{where}: packed_input needs a segment_mask.')
    if self.use_cross_attention and (
        cross_inputs is None or cross_paddings is None
    ):
      raise ValueError(f'{where}: use_cross_attention needs cross_inputs and '
                       'cross_paddings.')
    mask, cross_mask = compute_attention_masks_for_fprop(
        inputs, paddings, self.mask_self_attention, segment_mask,
        cross_inputs, cross_paddings, cross_segment_mask,
        fold_padding_with_segment_mask=self.fold_padding_with_segment_mask,
    )
    x = self.input_dropout(inputs) if self.input_dropout_prob > 0 else inputs

    def fprop(layer, x, paddings, mask, cross_inputs, cross_mask, pos):
      return layer(x, paddings, mask, cross_inputs, cross_mask,
                   segment_pos=pos)[0]

    if self.remat:
      fprop = nn.remat(
          fprop, policy=checkpoint_policy.custom_policy(self.checkpoint_policy)
      )
    for layer in self.x_layers:
      x = fprop(layer, x, paddings, mask, cross_inputs, cross_mask, segment_pos)
      x = checkpoint_name(x, 'transformer_layer_out')
    return x

  def extend_step(
      self,
      inputs: JTensor,
      *,
      time_step: JTensor,
      segment_pos: JTensor | None = None,
      atten_mask: JTensor | None = None,
      cross_paddings: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
  ) -> JTensor:
    """Decodes one step through the stack (or L steps: see below).

    Args:
      inputs: [B, D], the input at `time_step`; or [B, L, D], L steps from
        it, with an attention that extends several steps and `atten_mask`.
      time_step: Scalar, the 0-based step.
      segment_pos: [B] (or [B, L]), positions within segments (None:
        time_step); the current segment is taken to have started
        segment_pos steps ago.
      atten_mask: [1|B, 1, T] (or [1|B, 1, L, T]), a complete self-attention
        mask (None: causal, with the segment mask of `segment_pos`; one step
        only).
      cross_paddings: [b|B, S], encoder paddings.
      cross_segment_mask: [b|B, 1, S].

    Returns:
      The top layer's output [B, D] (or [B, L, D]).
    """
    if inputs.ndim == 3 and atten_mask is None:
      raise ValueError(f'StackedTransformer ({self.name}): extending '
                       f'{inputs.shape[1]} steps at once needs atten_mask '
                       '[1|B, 1, L, T].')
    if self.use_cross_attention and cross_paddings is None:
      raise ValueError(f'StackedTransformer ({self.name}): cross attention '
                       'needs cross_paddings.')
    max_t = self.x_layers[0].decoding_sequence_length()
    seg_mask = None
    if atten_mask is None and segment_pos is not None:
      seg_mask = _step_segment_mask(segment_pos, time_step, max_t, inputs.dtype)
    mask, cross_mask = compute_attention_masks_for_extend_step(
        time_step, max_t, seg_mask, cross_paddings, cross_segment_mask
    )
    if atten_mask is not None:
      mask = atten_mask
    x = inputs
    for layer in self.x_layers:
      x = layer.extend_step(
          x, time_step=time_step, attention_mask=mask,
          segment_pos=segment_pos, cross_attention_mask=cross_mask,
      )
    return x

  def init_states(self, target_batch_size: int, target_max_length: int) -> None:
    """Creates zero decoder caches in every layer."""
    for layer in self.x_layers:
      layer.init_states(target_batch_size, target_max_length)

  def transform_decode_state(self, transform_fn: DecodeStateTransformFn):
    """Transforms the caches of every layer."""
    for layer in self.x_layers:
      layer.transform_decode_state(transform_fn)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int
  ) -> None:
    """Delegates to every layer."""
    for layer in self.x_layers:
      layer.lazy_broadcast_prefix(num_suffix_samples, suffix_length)

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int, right_align_fn: DecodeStateTransformFn
  ) -> None:
    """Delegates to every layer."""
    for layer in self.x_layers:
      layer.right_align_decode_state_with_prefix(max_prefix_size,
                                                 right_align_fn)


class StackedTransformerRepeated(base_layer.BaseLayer):
  """A stack of `x_times` copies of `block`, run by `repeats.Repeat`.

  The variables live under `<repeat_layer_name>/<sublayer_name>/...`, each
  with a leading dim of size x_times.

  Attributes:
    block: Template of the repeated block (e.g. a StackedTransformer of one
      or a few layers).
    x_times: Number of repetitions.
    checkpoint_policy: What the rematerialized loop body keeps.
    unroll_in_decode: Decode with a Python loop over per-layer caches.
    repeat_layer_name: Name of the Repeat child.
    sublayer_name: Name of the block inside it.
    repeat_optimizer_dims_mapping: Sharding of the repeat dim in the optimizer
      states.
    nd_prefix_shape: Only None is supported.
    return_intermediate_outputs: Return every block's output stacked
      [x_times, B, T, D].
    collect_intermediate_outputs: Sow every block's output.
  """

  block: LayerTpl = template_field(StackedTransformer)
  x_times: int = 0
  checkpoint_policy: AutodiffCheckpointType = (
      AutodiffCheckpointType.SAVE_NOTHING
  )
  unroll_in_decode: bool = True
  repeat_layer_name: str = 'repeat'
  sublayer_name: str = 'sub'
  repeat_optimizer_dims_mapping: SplitDimsMapping = None
  nd_prefix_shape: Sequence[int] | None = None
  return_intermediate_outputs: bool = False
  collect_intermediate_outputs: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the stacked variables.

    Attributes:
      block: Sharding of the repeat dim.
    """

    block: SplitDimsMapping = None

  def setup(self) -> None:
    p = pax_fiddle.Config(
        repeats.Repeat,
        sub_tpl=self.block,
        x_times=self.x_times,
        checkpoint_policy=self.checkpoint_policy,
        unpack_summaries=True,
        unroll_in_decode=self.unroll_in_decode,
        sublayer_name=self.sublayer_name,
        optimizer_dims_mapping=self.repeat_optimizer_dims_mapping,
        nd_prefix_shape=self.nd_prefix_shape,
        return_intermediate_outputs=self.return_intermediate_outputs,
        collect_intermediate_outputs=self.collect_intermediate_outputs,
    )
    p.weight_split_dims_mapping.sub = self.weight_split_dims_mapping.block
    self.create_child(self.repeat_layer_name, p)

  @property
  def repeat_layer(self) -> repeats.Repeat:
    """The Repeat child."""
    return getattr(self, self.repeat_layer_name)

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      segment_mask: JTensor | None = None,
      cross_inputs: JTensor | None = None,
      cross_paddings: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
      segment_pos: JTensor | None = None,
  ) -> JTensor:
    """Runs the stack; arguments as StackedTransformer.__call__."""
    return self.repeat_layer(
        inputs, paddings, segment_mask, cross_inputs, cross_paddings,
        cross_segment_mask, segment_pos,
    )

  def extend_step(
      self,
      inputs: JTensor,
      *,
      time_step: JTensor,
      segment_pos: JTensor | None = None,
      atten_mask: JTensor | None = None,
      cross_paddings: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
  ) -> JTensor:
    """Decodes one step; arguments as StackedTransformer.extend_step."""
    return self.repeat_layer.extend_step(
        inputs, time_step=time_step, segment_pos=segment_pos,
        atten_mask=atten_mask, cross_paddings=cross_paddings,
        cross_segment_mask=cross_segment_mask,
    )

  def init_states(self, *args: Any, **kwargs: Any) -> None:
    """Creates zero decoder caches in every block."""
    self.repeat_layer.init_states(*args, **kwargs)

  def transform_decode_state(self, transform_fn: DecodeStateTransformFn):
    """Transforms the caches of every block."""
    self.repeat_layer.transform_decode_state(transform_fn)

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int
  ) -> None:
    """Delegates to every block."""
    self.repeat_layer.lazy_broadcast_prefix(num_suffix_samples, suffix_length)

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int, right_align_fn: DecodeStateTransformFn
  ) -> None:
    """Delegates to every block."""
    self.repeat_layer.right_align_decode_state_with_prefix(
        max_prefix_size, right_align_fn
    )


class PipelinedTransformer(base_layer.BaseLayer):
  """A stack of transformer stages run as a pipeline (`pipeline.py`).

  The variables live under `pipeline/body/...` with a leading dim of
  num_pipeline_stages L; in the circular schedule they are
  [circular_repeat, L, ...] and [r, s] is the pipeline_stage copy r * L + s
  (stage s runs copies s, s + L, ...).

  Attributes:
    pipeline_stage: Template of one stage (a StackedTransformer or
      StackedTransformerRepeated).
    circular_repeat: Copies of pipeline_stage held by each stage, in the
      circular schedule (1: GPipe).
    num_pipeline_stages: Number of stages.
    num_pipeline_microbatches: Cut the batch into this many microbatches.
    pipeline_microbatch_size: Or into microbatches of this size.
    stream_io: Stream inputs and outputs through a stage-sharded buffer.
    pipeline_broadcast_inputs: Pass paddings and masks stage to stage.
    checkpoint_policy: What each rematerialized iteration keeps.
    enable_async_circular_transfer: Kept for configs (see
      CircularLayerwiseShardablePipelined).
    bf16_accum_in_fp32: Accumulate bfloat16 gradients in float32.
  """

  pipeline_stage: LayerTpl = template_field(StackedTransformer)
  circular_repeat: int = 1
  num_pipeline_stages: int | None = None
  num_pipeline_microbatches: int | None = None
  pipeline_microbatch_size: int | None = None
  stream_io: bool = False
  pipeline_broadcast_inputs: bool = False
  checkpoint_policy: AutodiffCheckpointType = (
      AutodiffCheckpointType.SAVE_ITERATION_INPUT
  )
  enable_async_circular_transfer: bool = True
  bf16_accum_in_fp32: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the stacked variables.

    Attributes:
      stages: One entry: the mesh axis of the stage dim.
    """

    stages: SplitDimsMapping = (None,)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      final_out: Of the output [B, T, D], after the pipeline.
    """

    final_out: SplitDimsMapping = None

  def setup(self) -> None:
    stages = self.num_pipeline_stages
    if stages is None or stages <= 0:
      raise ValueError(f'PipelinedTransformer ({self.name}): '
                       f'num_pipeline_stages must be positive, got {stages}.')
    fields = {
        'num_stages': stages,
        'single_stage_body': self.pipeline_stage.clone(),
        'num_microbatches': self.num_pipeline_microbatches,
        'microbatch_size': self.pipeline_microbatch_size,
        'stream_io': self.stream_io,
        'pipeline_broadcast_inputs': self.pipeline_broadcast_inputs,
        'checkpoint_policy': self.checkpoint_policy,
        'bf16_accum_in_fp32': self.bf16_accum_in_fp32,
    }
    if self.circular_repeat == 1:
      p = pax_fiddle.Config(pipeline.LayerwiseShardablePipelined, **fields)
    else:
      p = pax_fiddle.Config(
          pipeline.CircularLayerwiseShardablePipelined,
          circular_repeat=self.circular_repeat,
          enable_async_circular_transfer=self.enable_async_circular_transfer,
          **fields,
      )
    p.weight_split_dims_mapping.stages = self.weight_split_dims_mapping.stages
    self.create_child('pipeline', p)

  def _bld_mapping(self) -> SplitDimsMapping:
    """The [B, T, D] sharding of the stage's attention outputs."""
    stage = self.pipeline_stage
    if hasattr(stage, 'block'):  # StackedTransformerRepeated.
      stage = stage.block
    layer = getattr(stage, 'transformer_layer_params_tpl', None)
    if isinstance(layer, (list, tuple)):
      layer = layer[0]
    atten = getattr(layer, 'tr_atten_tpl', None)
    if atten is None:
      return None
    return getattr(atten.activation_split_dims_mapping, 'bld', None)

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      segment_mask: JTensor | None = None,
      cross_inputs: JTensor | None = None,
      cross_paddings: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
      segment_pos: JTensor | None = None,
  ) -> JTensor:
    """Runs the pipeline; arguments as StackedTransformer.__call__."""
    bld = self._bld_mapping()
    names = self.mesh_axis_names
    if not self.stream_io and bld is not None:  # Pin the batch sharding.
      inputs = base_layer.maybe_shard(inputs, bld, names)
      paddings = base_layer.maybe_shard(paddings, bld[:-1], names)
      if segment_pos is not None:
        segment_pos = base_layer.maybe_shard(segment_pos, bld[:-1], names)

      def batch_only(x):
        if x is None:
          return None
        rest = list(range(1, x.ndim))
        return base_layer.maybe_shard(
            x, [bld[0]] + [-1] * len(rest), names, rest
        )

      segment_mask, cross_inputs, cross_paddings, cross_segment_mask = map(
          batch_only,
          (segment_mask, cross_inputs, cross_paddings, cross_segment_mask),
      )
    outputs = self.pipeline(
        inputs, paddings, segment_mask=segment_mask,
        cross_inputs=cross_inputs, cross_paddings=cross_paddings,
        cross_segment_mask=cross_segment_mask, segment_pos=segment_pos,
    )
    if not self.stream_io:
      outputs = base_layer.maybe_shard(outputs, bld, names)
    return base_layer.maybe_shard(
        outputs, self.activation_split_dims_mapping.final_out, names
    )

  def init_states(self, *args: Any, **kwargs: Any) -> None:
    """Not supported (as in Pax); see `extend_step`."""
    del args, kwargs
    self.extend_step()

  def extend_step(self, *args: Any, **kwargs: Any) -> JTensor:
    """Not supported; decode with a PipelineCompatible...Repeated stack."""
    del args, kwargs
    raise NotImplementedError(
        f'PipelinedTransformer ({self.name}) does not decode; load its '
        'variables into a PipelineCompatibleStackedTransformerRepeated.'
    )


class PipelineCompatibleStackedTransformerRepeated(StackedTransformerRepeated):
  """A StackedTransformerRepeated with a GPipe PipelinedTransformer's layout.

  Its variables live under `pipeline/body/...`, so it runs (and decodes)
  with the variables of a PipelinedTransformer whose circular_repeat is 1
  and num_pipeline_stages equals x_times.
  """

  repeat_layer_name: str = 'pipeline'
  sublayer_name: str = 'body'
