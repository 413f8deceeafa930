"""Transformer language models: decoder-only (TransformerLm) and seq2seq.

Public names: LanguageModelType, TransformerLm, TransformerEncoderDecoder,
set_embedding_softmax_sharding, set_stacked_transformer_sharding,
sum_aux_losses.

`TransformerLm` embeds ids (with the softmax's own table unless
`separate_embedding_tpl`), adds position embeddings, runs a stack of
Transformer layers under a causal, prefix or bidirectional segment mask, a
final layer norm, and the softmax loss:

  lm_p = pax_fiddle.Config(
      transformer_models.TransformerLm, name='lm', model_dims=16,
      vocab_size=32)
  lm_p.stacked_transformer_tpl.set(num_layers=2, num_heads=4, hidden_dims=32)
  lm = base_layer.instantiate(lm_p)
  labels = NestedMap(class_ids=labels, class_weights=weights)     # [B, T]
  variables = lm.init(jax.random.PRNGKey(0), ids, paddings, labels)
  out = lm.apply(variables, ids, paddings, labels)  # out.total_loss, ...

Decoding: run the LM with the `decoder_cache` collection mutable (this
fills the attention caches and sets `time_step` to `start_time_step`), pad
the caches with `transform_decode_state`, then call `extend_step(ids [B])`
once per position; it returns the next-token logits and advances
`time_step`.

With `ngrammer_tpl` (an n-grammer of `praxis.layers.ngrammer`) the token
embeddings pass through it before the position embeddings. To decode, the
LM keeps the previous step's id and embedding (`ngrammer_prefix`,
`ngrammer_prefix_emb`, `ngrammer_prefix_segment_pos` in `decoder_cache`)
so that each step's bi-gram pairs it with its predecessor; as in Pax, the
forward pass leaves them zero (the first step then pairs with the pad id).

`set_sharding_params_v1` annotates a config's weights and activations for a
[replica, data, mdl] mesh as praxis does (weights over data x mdl, batch over
replica x data, heads / hidden / vocab over mdl).

The file is past 800 lines because both models and the sharding annotations
they share stay together, as in praxis.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import enum
from typing import Any

from absl import logging
import fiddle as fdl
import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import normalizations
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field
AuxLossStruct = base_layer.AuxLossStruct


@enum.unique
class LanguageModelType(str, enum.Enum):
  """Which earlier tokens each token sees."""

  CAUSAL = 'causal'
  PREFIX = 'prefix'
  BIDIRECTIONAL = 'bidirectional'


# ----------------------------------------------------------------------------
# Sharding annotations (applied to configs).
# ----------------------------------------------------------------------------


def _fields(cfg: Any) -> set[str]:
  return {f.name for f in dataclasses.fields(fdl.get_callable(cfg))}


def _set_existing(cfg: Any, **values: Any) -> None:
  """Sets the given fields of `cfg` that its class has."""
  names = _fields(cfg)
  for name, value in values.items():
    if name in names:
      setattr(cfg, name, value)


def _swap(mapping: SplitDimsMapping) -> SplitDimsMapping:
  return None if mapping is None else [mapping[1], mapping[0]]


def _stack_block(stack_p: LayerTpl) -> LayerTpl:
  """The StackedTransformer config inside a (repeated/pipelined) stack config."""
  cls = fdl.get_callable(stack_p)
  if issubclass(cls, transformers.PipelinedTransformer):
    return _stack_block(stack_p.pipeline_stage)
  if issubclass(cls, transformers.StackedTransformerRepeated):
    return stack_p.block
  return stack_p


def set_embedding_softmax_sharding(
    p: LayerTpl,
    *,
    ici_mesh_shape: Sequence[int] | None,
    dcn_mesh_shape: Sequence[int] | None,
    mesh_axis_names: Sequence[str] | None,
    w_vd: SplitDimsMapping,
    a_blv: SplitDimsMapping,
    a_bld: SplitDimsMapping,
) -> LayerTpl:
  """Annotates an embedding or softmax config, given the [V, D] sharding.

  Args:
    p: Config of an Embedding, FullSoftmax, SharedEmbeddingSoftmax or
      GShardSharedEmbeddingSoftmax.
    ici_mesh_shape: The mesh shape.
    dcn_mesh_shape: The mesh shape across slices.
    mesh_axis_names: The mesh axis names.
    w_vd: Sharding of a [vocab, dims] table (transposed for the layers that
      store [dims, vocab]).
    a_blv: Sharding of the logits [B, L, V].
    a_bld: Sharding of the embeddings [B, L, D].

  Returns:
    `p`, annotated.
  """
  p.ici_mesh_shape = ici_mesh_shape
  p.dcn_mesh_shape = dcn_mesh_shape
  p.mesh_axis_names = mesh_axis_names
  cls = fdl.get_callable(p)
  if issubclass(cls, embedding_softmax.GShardSharedEmbeddingSoftmax):
    p.weight_split_dims_mapping.wt = w_vd
  elif issubclass(cls, (embedding_softmax.FullSoftmax,
                        embedding_softmax.Embedding)):
    p.weight_split_dims_mapping.wt = _swap(w_vd)
    if 'lookup_style' in _fields(p):
      p.lookup_style = 'matmul'
  else:
    raise NotImplementedError(
        f'set_embedding_softmax_sharding: {cls.__name__} is not supported.')
  if cls is not embedding_softmax.FullSoftmax:
    _set_existing(p.activation_split_dims_mapping, out=a_blv,
                  emb_out_split_dims_mapping=a_bld)
  return p


def _set_attention_sharding(atten_p: LayerTpl, w_dnh, a_blnh, a_bld) -> None:
  dconv = None if w_dnh is None else [w_dnh[1], None]
  _set_existing(atten_p.weight_split_dims_mapping, proj=w_dnh, dconv=dconv,
                dnh=w_dnh)
  _set_existing(atten_p.activation_split_dims_mapping, blnh=a_blnh, bld=a_bld,
                btnh=a_blnh, btd=a_bld)


def set_stacked_transformer_sharding(
    stack_p: LayerTpl,
    *,
    w_df: SplitDimsMapping,
    w_dnh: SplitDimsMapping,
    w_emh: SplitDimsMapping,
    a_bld: SplitDimsMapping,
    a_blf: SplitDimsMapping,
    a_blnh: SplitDimsMapping,
    a_egch: SplitDimsMapping,
    a_egcm: SplitDimsMapping,
    a_blh: SplitDimsMapping = None,
) -> LayerTpl:
  """Annotates the layers of a (repeated) stack config.

  Args:
    stack_p: A StackedTransformer or StackedTransformerRepeated config.
    w_df: Of the first feed-forward weight [D, F] (the second is [F, D]).
    w_dnh: Of the attention projections [D, N, H].
    w_emh: Of the first MoE weight [E, M, H] (the second is [E, H, M]).
    a_bld: Of the layer outputs [B, L, D].
    a_blf: Of the feed-forward hidden activations [B, L, F].
    a_blnh: Of the attention heads [B, L, N, H].
    a_egch: Of the MoE hidden activations.
    a_egcm: Of the MoE outputs.
    a_blh: Unused (multi-query attention).

  Returns:
    `stack_p`, annotated.
  """
  del a_blh
  block = _stack_block(stack_p)
  layers = block.transformer_layer_params_tpl
  for layer_p in layers if isinstance(layers, (list, tuple)) else [layers]:
    for atten_p in (layer_p.tr_atten_tpl, layer_p.cross_atten_tpl):
      if atten_p is not None:
        _set_attention_sharding(atten_p, w_dnh, a_blnh, a_bld)
    ff_p = layer_p.tr_fflayer_tpl
    _set_existing(ff_p.weight_split_dims_mapping, ffn0=w_df, ffn1=_swap(w_df))
    _set_existing(ff_p.activation_split_dims_mapping, ffn0=a_blf, ffn1=a_bld)
  if block.moe_layer_tpl is not None:
    ehm = None if w_emh is None else [w_emh[0], w_emh[2], w_emh[1]]
    _set_existing(block.moe_layer_tpl.weight_split_dims_mapping,
                  me=[None, None], emh=w_emh, ehm=ehm)
    # As Pax: the expert dim of the activations from a_egch (routing) and
    # a_egcm (outputs), the model dim from a_egcm.
    e = None if a_egch is None else a_egch[0]
    e_out = None if a_egcm is None else a_egcm[0]
    m = None if a_egcm is None else a_egcm[3]
    _set_existing(block.moe_layer_tpl.activation_split_dims_mapping,
                  gs=[e, None], gsec=[e, None, None, None],
                  gecs=[e, None, None, None], gec=[e, None, None],
                  egch=a_egch, gsm=[e_out, None, m], egcm=a_egcm,
                  gecm=a_egcm)
  return stack_p


def _canonical_sharding(replica_axis, data_axis, mdl_axis, batch_axes,
                        seq_axis, training_optimized) -> dict[str, Any]:
  """The praxis v1 shardings (weights over data x mdl, batch over both)."""
  batch = tuple(batch_axes) if batch_axes else (replica_axis, data_axis)
  bld = [batch, seq_axis, mdl_axis if training_optimized else None]
  return {
      'w_df': [data_axis, mdl_axis],
      'w_dnh': [data_axis, mdl_axis, None],
      'w_emh': [data_axis, None, mdl_axis],
      'w_vd': [mdl_axis, data_axis],
      'a_bld': bld,
      'a_blf': [batch, seq_axis, mdl_axis],
      'a_blnh': [batch, seq_axis, mdl_axis, None],
      'a_blv': [batch, seq_axis, mdl_axis],
      'a_egch': [data_axis, None, None, mdl_axis],
      'a_egcm': ([data_axis, None, None, mdl_axis] if training_optimized
                 else [batch, None, None, None]),
  }


_STACK_KEYS = ('w_df', 'w_dnh', 'w_emh', 'a_bld', 'a_blf', 'a_blnh', 'a_egch',
               'a_egcm', 'a_blh')
_EMB_KEYS = ('w_vd', 'a_blv', 'a_bld')


def _set_trainable_pos_emb_sharding(p: LayerTpl | None, w_ld, a_bld) -> None:
  if p is not None and issubclass(
      fdl.get_callable(p), embedding_softmax.TrainablePositionalEmbedding):
    p.weight_split_dims_mapping.wt = w_ld
    p.activation_split_dims_mapping.emb_out_split_dims_mapping = a_bld


# ----------------------------------------------------------------------------
# Losses.
# ----------------------------------------------------------------------------


def sum_aux_losses(aux_collection: Any, dtype: Any = jnp.float32
                   ) -> tuple[JTensor, JTensor]:
  """(sum of values, sum of weights) of the AuxLossStructs in a collection."""
  leaves = jax.tree.leaves(aux_collection,
                           is_leaf=lambda x: isinstance(x, AuxLossStruct))
  value = jnp.zeros((), dtype)
  weight = jnp.zeros((), dtype)
  for leaf in leaves:
    value = value + jnp.sum(leaf.value).astype(dtype)
    weight = weight + jnp.sum(leaf.weight).astype(dtype)
  return value, weight


def _logits_output(softmax: base_layer.BaseLayer, activations: JTensor
                   ) -> NestedMap:
  """NestedMap(logits, log_probs, probs) of activations [..., D]."""
  logits = softmax.get_logits(activations)
  x = logits.astype(jnp.float32)
  return NestedMap(
      logits=logits,
      log_probs=jax.nn.log_softmax(x).astype(logits.dtype),
      probs=jax.nn.softmax(x).astype(logits.dtype),
  )


def _xent_output(layer: base_layer.BaseLayer, activations: JTensor,
                 labels: NestedMap, skip_aux_loss: bool,
                 entropy_loss_weight: float | None = None) -> NestedMap:
  """The softmax loss of [B, T, D] activations, plus the auxiliary losses."""
  class_ids = labels.get('class_ids')
  out = layer.softmax(
      activations, labels.class_weights[..., None],
      class_ids=None if class_ids is None else class_ids[..., None],
      class_probabilities=labels.get('class_probabilities'))
  per_token = out.per_example_xent * labels.class_weights.astype(jnp.float32)
  out.per_token_xent = per_token
  out.per_sequence_xent = jnp.sum(per_token, axis=-1, dtype=jnp.float32)
  out.total_loss = out.avg_xent
  if entropy_loss_weight and out.get('log_probs') is not None:
    log_p = out.log_probs.astype(jnp.float32)
    entropy = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
    out.entropy_loss = entropy_loss_weight * jnp.sum(
        entropy * out.per_example_weight) / (out.total_weight + 1e-6)
    out.total_loss = out.total_loss + out.entropy_loss
  if not skip_aux_loss:
    out.aux_loss, out.aux_loss_weight = sum_aux_losses(
        layer.variables.get(base_layer.AUX_LOSS, {}))
    layer.add_summary('total_aux_loss', out.aux_loss)
    layer.add_summary('total_aux_loss_weight', out.aux_loss_weight)
    out.total_loss = out.total_loss + out.aux_loss
  return out


def _default_segments(paddings: JTensor, segment_ids, segment_pos, where):
  """Segment ids (1 - paddings) and positions (0..T-1) when not given."""
  if segment_ids is None:
    if segment_pos is not None:
      raise ValueError(f'{where}: segment_pos needs segment_ids.')
    b, t = paddings.shape
    segment_ids = (1 - paddings).astype(jnp.int32)
    segment_pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  elif segment_pos is None:
    raise ValueError(f'{where}: segment_ids need segment_pos.')
  return segment_ids, segment_pos


_NGRAMMER_STATES = ('ngrammer_prefix', 'ngrammer_prefix_emb',
                    'ngrammer_prefix_segment_pos')


# (layer, side) pairs already warned that their post-attention n-grammers
# do nothing (setup runs at every init and apply).
_WARNED_IGNORED_NGRAMMERS = set()


def _check_one_ngrammer_a_layer(where: str, field: str, tpls: Sequence[Any],
                                stack: str, num_layers: int) -> None:
  """Pax's check that post-attention n-grammers come one a layer."""
  if len(tpls) != num_layers:
    raise ValueError(f'{where}: {field} has {len(tpls)} entries; the {stack} '
                     f'has {num_layers} layers.')


def _set_stack_dims(stack_p: LayerTpl, model_dims: int, packed: bool,
                    where: str) -> LayerTpl:
  """Sets model_dims/packed_input of the stack's block; returns the block."""
  block = _stack_block(stack_p)
  if not issubclass(fdl.get_callable(block), transformers.StackedTransformer):
    raise TypeError(f'{where}: the stack must be a StackedTransformer or '
                    f'StackedTransformerRepeated, got '
                    f'{fdl.get_callable(stack_p).__name__}.')
  if block.model_dims not in (0, model_dims):
    raise ValueError(f'{where}: the stack has model_dims {block.model_dims}, '
                     f'the model {model_dims}.')
  block.model_dims = model_dims
  block.packed_input = packed
  return block


# ----------------------------------------------------------------------------
# Models.
# ----------------------------------------------------------------------------


class TransformerLm(base_layer.BaseLayer):
  """A decoder-only Transformer language model.

  Children: `position_emb`, `embedding_lookup` (separate embedding),
  `transformer`, `final_ln`, `softmax`.

  Attributes:
    position_emb_tpl: Position embedding (None: none).
    model_dims: D, the model depth.
    stacked_transformer_tpl: The stack (StackedTransformer or
      StackedTransformerRepeated); its model_dims, masking and packing are
      set from this layer.
    softmax_tpl: The softmax; by default it is also the embedding table.
    vocab_size: V.
    packed_input: Inputs pack several sequences (segment ids and positions).
    model_type: CAUSAL, PREFIX or BIDIRECTIONAL attention.
    ngrammer_tpl: An n-grammer (Ngrammer, VQNgrammer, ...) applied to the
      token embeddings before the position embeddings (None: none).
    post_attention_ngrammer_tpls: Not supported (must be None).
    separate_embedding_tpl: An embedding table apart from the softmax.
    final_ln_tpl: The final normalization (None: none).
    skip_compute_loss: `__call__` returns the final activations [B, T, D].
    skip_aux_loss: Do not add the `aux_loss` collection to the loss.
    record_activations_in_xent_output: Also return the activations.
    record_logits_in_xent_output: Also return the logits (when the softmax
      does not).
    entropy_loss_weight: If set, add this times the mean entropy of the
      predictions to `total_loss` (as `entropy_loss`).
  """

  position_emb_tpl: LayerTpl | None = template_field(
      embedding_softmax.PositionalEmbedding)
  model_dims: int = 0
  stacked_transformer_tpl: LayerTpl = template_field(
      transformers.StackedTransformer)
  softmax_tpl: LayerTpl = template_field(
      embedding_softmax.SharedEmbeddingSoftmax)
  vocab_size: int = 0
  packed_input: bool = False
  model_type: LanguageModelType = LanguageModelType.CAUSAL
  ngrammer_tpl: LayerTpl | None = template_field(None)
  post_attention_ngrammer_tpls: Sequence[LayerTpl] | None = template_field(
      None)
  separate_embedding_tpl: LayerTpl | None = template_field(None)
  final_ln_tpl: LayerTpl | None = template_field(normalizations.LayerNorm)
  skip_compute_loss: bool = False
  skip_aux_loss: bool = False
  record_activations_in_xent_output: bool = False
  record_logits_in_xent_output: bool = False
  entropy_loss_weight: float | None = None

  @classmethod
  def set_sharding_params_v1(
      cls,
      lm_p: LayerTpl,
      *,
      replica_axis: str,
      data_axis: str,
      mdl_axis: str,
      ici_mesh_shape: Sequence[int],
      dcn_mesh_shape: Sequence[int] | None = None,
      batch_axes: Sequence[str] | None = None,
      mesh_axis_names: Sequence[str],
      seq_axis: str | None = None,
      training_optimized: bool,
  ) -> LayerTpl:
    """Annotates `lm_p` for a [replica, data, mdl] mesh as praxis does.

    Weights are split over data x mdl (replicated over replica): [D, F] and
    [D, N, H] as [data, mdl(, None)], the [V, D] table as [mdl, data]. The
    batch of activations is split over `batch_axes` (default replica x
    data), heads / hidden / vocab over mdl, D over mdl only if
    `training_optimized`; `seq_axis` (if set) splits the length.

    Args:
      lm_p: A TransformerLm config.
      replica_axis: Name of the replica axis.
      data_axis: Name of the data axis.
      mdl_axis: Name of the model axis.
      ici_mesh_shape: The mesh shape.
      dcn_mesh_shape: The mesh shape across slices.
      batch_axes: Axes splitting the batch of activations.
      mesh_axis_names: The mesh axis names.
      seq_axis: Axis splitting the sequence of activations.
      training_optimized: Also split D of [B, L, D] activations over mdl.

    Returns:
      `lm_p`, annotated.
    """
    return cls.set_custom_sharding_params(
        lm_p, ici_mesh_shape=ici_mesh_shape, dcn_mesh_shape=dcn_mesh_shape,
        mesh_axis_names=mesh_axis_names,
        **_canonical_sharding(replica_axis, data_axis, mdl_axis, batch_axes,
                              seq_axis, training_optimized))

  @classmethod
  def set_custom_sharding_params(
      cls,
      lm_p: LayerTpl,
      *,
      ici_mesh_shape: Sequence[int],
      dcn_mesh_shape: Sequence[int] | None = None,
      mesh_axis_names: Sequence[str],
      **shardings: SplitDimsMapping,
  ) -> LayerTpl:
    """Annotates `lm_p` with explicit shardings.

    Args:
      lm_p: A TransformerLm config.
      ici_mesh_shape: The mesh shape.
      dcn_mesh_shape: The mesh shape across slices.
      mesh_axis_names: The mesh axis names.
      **shardings: Any of w_df, w_dnh, w_emh, w_vd, a_bld, a_blf, a_blh,
        a_blnh, a_blv, a_egch, a_egcm (see set_stacked_transformer_sharding
        and set_embedding_softmax_sharding).

    Returns:
      `lm_p`, annotated.
    """
    unknown = set(shardings) - set(_STACK_KEYS) - set(_EMB_KEYS)
    if unknown:
      raise ValueError(f'set_custom_sharding_params: unknown shardings '
                       f'{sorted(unknown)}.')
    get = lambda keys: {k: shardings.get(k) for k in keys}
    mesh = {
        'ici_mesh_shape': ici_mesh_shape,
        'dcn_mesh_shape': dcn_mesh_shape,
        'mesh_axis_names': mesh_axis_names,
    }
    for name, value in mesh.items():
      setattr(lm_p, name, value)
    if lm_p.ngrammer_tpl is not None:
      lm_p.ngrammer_tpl.weight_split_dims_mapping.wt = shardings.get('w_vd')
    _set_trainable_pos_emb_sharding(lm_p.position_emb_tpl,
                                    shardings.get('w_df'),
                                    shardings.get('a_bld'))
    lm_p.softmax_tpl = set_embedding_softmax_sharding(
        lm_p.softmax_tpl, **mesh, **get(_EMB_KEYS))
    if lm_p.separate_embedding_tpl is not None:
      lm_p.separate_embedding_tpl = set_embedding_softmax_sharding(
          lm_p.separate_embedding_tpl, **mesh, **get(_EMB_KEYS))
    lm_p.stacked_transformer_tpl = set_stacked_transformer_sharding(
        lm_p.stacked_transformer_tpl, **get(_STACK_KEYS))
    return lm_p

  @property
  def _where(self) -> str:
    return f'TransformerLm ({self.name})'

  def setup(self) -> None:
    where = self._where
    for name in ('model_dims', 'vocab_size'):
      if getattr(self, name) <= 0:
        raise ValueError(f'{where}: {name} must be positive, got '
                         f'{getattr(self, name)}.')
    model_type = LanguageModelType(self.model_type)
    if self.ngrammer_tpl is not None:
      self.create_child('ngrammer', self.ngrammer_tpl.clone())
    if self.position_emb_tpl is not None:
      self.create_child('position_emb', self.position_emb_tpl.clone().set(
          embedding_dims=self.model_dims))
    if self.separate_embedding_tpl is not None:
      self.create_child(
          'embedding_lookup', self.separate_embedding_tpl.clone().set(
              input_dims=self.model_dims, num_classes=self.vocab_size))
    stack_p = self.stacked_transformer_tpl.clone()
    block = _set_stack_dims(stack_p, self.model_dims, self.packed_input, where)
    block.mask_self_attention = model_type == LanguageModelType.CAUSAL
    block.fold_padding_with_segment_mask = True
    if self.post_attention_ngrammer_tpls is not None:
      _check_one_ngrammer_a_layer(where, 'post_attention_ngrammer_tpls',
                                  self.post_attention_ngrammer_tpls, 'stack',
                                  block.num_layers)
      block.ngrammer_tpls = self.post_attention_ngrammer_tpls
    self.create_child('transformer', stack_p)
    if self.final_ln_tpl is not None:
      self.create_child('final_ln',
                        self.final_ln_tpl.clone().set(dim=self.model_dims))
    self.create_child('softmax', self.softmax_tpl.clone().set(
        input_dims=self.model_dims, num_classes=self.vocab_size))

  def _embed(self, ids: JTensor) -> JTensor:
    if self.separate_embedding_tpl is not None:
      return self.embedding_lookup.emb_lookup(ids)
    return self.softmax.emb_lookup(ids)

  def _emb_var(self) -> JTensor:
    """The [V, D] embedding table (for the n-grammer's cache updates)."""
    if self.separate_embedding_tpl is not None:
      return self.embedding_lookup.theta.emb_var
    if hasattr(self.softmax, 'logits_ffn'):
      return jnp.transpose(self.softmax.logits_ffn.linear.theta.w)
    return self.softmax.theta.w  # Already [V, D].

  def _reset_ngrammer_states(self, batch_size: int, dtype: Any) -> None:
    """Zero previous-step id, embedding and position (Pax's t=0 marker)."""
    zeros = jnp.zeros([batch_size, 1], jnp.int32)
    self.update_decode_state('ngrammer_prefix', zeros)
    self.update_decode_state('ngrammer_prefix_emb', jnp.zeros(
        [batch_size, 1, self.model_dims], dtype))
    self.update_decode_state('ngrammer_prefix_segment_pos', zeros)

  def _ngrammer_step(self, ids: JTensor, emb: JTensor,
                     segment_pos: JTensor | None) -> JTensor:
    """The n-grammer's output [B, L, D] for ids [B, L] after the cached
    previous step; caches the last of them for the next."""
    prev_ids = self.get_decode_state('ngrammer_prefix')
    prev_emb = self.get_decode_state('ngrammer_prefix_emb')
    pair_pos = None
    if segment_pos is not None:
      pair_pos = jnp.concatenate(
          [self.get_decode_state('ngrammer_prefix_segment_pos'),
           segment_pos], axis=1)
      self.update_decode_state('ngrammer_prefix_segment_pos',
                               segment_pos[:, -1:])
    # Zero ids and embeddings in the previous step mark time step 0.
    out = self.ngrammer(
        jnp.concatenate([prev_ids, ids], axis=1),
        jnp.concatenate([prev_emb, emb.astype(prev_emb.dtype)], axis=1),
        segment_pos=pair_pos, check_time_step_zero=True)
    self.update_decode_state('ngrammer_prefix', ids[:, -1:])
    self.update_decode_state('ngrammer_prefix_emb', emb[:, -1:])
    return out[:, 1:]

  def _ngrammer_states(self) -> list[str]:
    return [name for name in _NGRAMMER_STATES
            if self.has_variable(base_layer.DECODE_CACHE, name)]

  def compute_loss(
      self,
      activations: JTensor,
      labels: NestedMap | None = None,
      input_ids: JTensor | None = None,
  ) -> NestedMap:
    """The logits, or the loss against `labels`, of activations [B, T, D].

    Args:
      activations: The final activations.
      labels: None, or NestedMap(class_weights [B, T], and class_ids [B, T] or
        class_probabilities [B, T, V]).
      input_ids: Unused.

    Returns:
      Without labels: NestedMap(logits, log_probs, probs). With labels: the
      softmax's outputs plus per_token_xent [B, T], per_sequence_xent [B],
      total_loss (avg_xent + aux_loss), aux_loss and aux_loss_weight (the
      sums over the `aux_loss` collection).
    """
    del input_ids
    if labels is None:
      out = _logits_output(self.softmax, activations)
    else:
      out = _xent_output(self, activations, labels, self.skip_aux_loss,
                         self.entropy_loss_weight)
      if self.record_logits_in_xent_output and 'logits' not in out:
        out.logits = self.softmax.get_logits(activations)
    if self.record_activations_in_xent_output:
      out.activations = activations
    return out

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      labels: NestedMap | None = None,
      segment_ids: JTensor | None = None,
      segment_pos: JTensor | None = None,
      causal_attention_mask: JTensor | None = None,
      segment_mask: JTensor | None = None,
      start_time_step: int | JTensor = 0,
      **input_kwargs: Any,
  ) -> NestedMap | JTensor:
    """Runs the model over ids [B, T].

    Args:
      inputs: [B, T] int ids.
      paddings: [B, T], 1 at padding.
      labels: See compute_loss.
      segment_ids: [B, T] segment of each token (packed inputs); default
        1 - paddings.
      segment_pos: [B, T] position within the segment; default 0..T-1.
      causal_attention_mask: [B, T], 0 where the keys are visible to all
        (the prefix of a PREFIX LM), 1 where causal.
      segment_mask: [B, 1, T, T] attention mask to use as is.
      start_time_step: The `time_step` of the first extend_step after this.
      **input_kwargs: Must be empty.

    Returns:
      compute_loss's NestedMap, or the activations with skip_compute_loss.
    """
    if input_kwargs:
      raise ValueError(f'{self._where}: unexpected inputs '
                       f'{sorted(input_kwargs)}.')
    if inputs.ndim != 2 or paddings.shape != inputs.shape:
      raise ValueError(f'{self._where}: inputs {inputs.shape} and paddings '
                       f'{paddings.shape} must both be [B, T].')
    self.add_summary('num_unpadded_tokens',
                     jnp.sum(1.0 - paddings.astype(jnp.float32)))
    segment_ids, segment_pos = _default_segments(
        paddings, segment_ids, segment_pos, self._where)
    x = self._embed(inputs)
    if self.ngrammer_tpl is not None:
      x = self.ngrammer(input_ids=inputs, input_embs=x, paddings=paddings,
                        segment_pos=segment_pos, emb_var=self._emb_var())
      self._reset_ngrammer_states(inputs.shape[0], x.dtype)
    if self.position_emb_tpl is not None:
      x = x + self.position_emb(seq_length=inputs.shape[1],
                                position=segment_pos)
    if segment_mask is None:
      if LanguageModelType(self.model_type) == LanguageModelType.BIDIRECTIONAL:
        segment_mask = attentions.segment_mask(segment_ids, segment_ids,
                                               x.dtype)
      else:
        segment_mask = attentions.causal_segment_mask(
            segment_ids, x.dtype, causal_attention_mask)
    self.update_decode_state('time_step',
                             jnp.asarray(start_time_step, jnp.int32))
    x = self.transformer(x, paddings, segment_mask=segment_mask,
                         segment_pos=segment_pos)
    if self.final_ln_tpl is not None:
      x = self.final_ln(x)
    if self.skip_compute_loss:
      return x
    return self.compute_loss(x, labels)

  def extend_step(
      self,
      inputs: JTensor,
      segment_pos: JTensor | None = None,
      atten_mask: JTensor | None = None,
  ) -> NestedMap:
    """Decodes from `time_step`: one position (ids [B]) or L ([B, L]).

    Several positions at once (e.g. to score a suffix after decoding) need
    an attention that extends by several steps (DotProductAttentionWithLPB,
    multi-query) and their `atten_mask`.

    Args:
      inputs: [B] ids at the current step, or [B, L] at the next L steps.
      segment_pos: [B] (or [B, L]) their positions (default: time_step
        onwards); the cache entries before time_step - segment_pos (left
        padding) are masked.
      atten_mask: [B, 1, S] (or [B, 1, L, S]) attention mask over the cache,
        used as is.

    Returns:
      NestedMap(logits, log_probs, probs), each [B, V] (or [B, L, V]).
    """
    if LanguageModelType(self.model_type) == LanguageModelType.BIDIRECTIONAL:
      raise ValueError(f'{self._where}: extend_step needs a CAUSAL or PREFIX '
                       'model.')
    if inputs.ndim not in (1, 2):
      raise ValueError(f'{self._where}: extend_step takes ids [B] or [B, L], '
                       f'got {inputs.shape}.')
    if segment_pos is not None and segment_pos.shape != inputs.shape:
      raise ValueError(f'{self._where}: segment_pos {segment_pos.shape} must '
                       f'have the shape of the ids {inputs.shape}.')
    single = inputs.ndim == 1
    if not single and atten_mask is None:
      raise ValueError(f'{self._where}: extend_step over {inputs.shape[1]} '
                       'positions needs their atten_mask [B, 1, L, S].')
    time_step = self.get_decode_state('time_step')
    ids = inputs[:, None] if single else inputs
    pos = None
    if segment_pos is not None:
      pos = segment_pos[:, None] if single else segment_pos
    x = self._embed(ids)
    if self.ngrammer_tpl is not None:
      x = self._ngrammer_step(ids, x, pos)
    if self.position_emb_tpl is not None:
      position = pos if pos is not None else jnp.broadcast_to(
          time_step + jnp.arange(ids.shape[1]), ids.shape)
      x = x + self.position_emb(position=position)
    x = self.transformer.extend_step(
        x[:, 0] if single else x, time_step=time_step,
        segment_pos=segment_pos, atten_mask=atten_mask)
    self.update_decode_state('time_step', time_step + ids.shape[1])
    if self.final_ln_tpl is not None:
      x = self.final_ln(x)
    out = _logits_output(self.softmax, x)
    if self.record_activations_in_xent_output:
      out.activations = x
    return out

  def init_states(self, target_batch_size: int, target_max_length: int
                  ) -> None:
    """Zero caches of `target_max_length` steps, and time_step 0."""
    self.transformer.init_states(target_batch_size, target_max_length)
    self.update_decode_state('time_step', jnp.zeros((), jnp.int32))
    if self.ngrammer_tpl is not None:
      self._reset_ngrammer_states(target_batch_size,
                                  self.fprop_dtype or self.dtype)

  def transform_decode_state(
      self, transform_fn: base_layer.DecodeStateTransformFn) -> None:
    """Applies `transform_fn(state, batch_dim, time_dim)` to the caches."""
    for name in self._ngrammer_states():
      # One previous step: a batch dim but no time dim to pad or slice.
      self.update_decode_state(
          name, transform_fn(self.get_decode_state(name), 0, -1))
    self.transformer.transform_decode_state(transform_fn)

  def lazy_broadcast_prefix(self, num_suffix_samples: int,
                            suffix_length: int) -> None:
    """Delegates to the stack; the n-grammer's previous step is tiled
    `num_suffix_samples` times over the batch (sample-major, as Pax)."""
    for name in self._ngrammer_states():
      state = self.get_decode_state(name)
      self.update_decode_state(name, jnp.reshape(
          jnp.broadcast_to(state, (num_suffix_samples,) + state.shape),
          (num_suffix_samples * state.shape[0],) + state.shape[1:]))
    self.transformer.lazy_broadcast_prefix(num_suffix_samples, suffix_length)

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int,
      right_align_fn: base_layer.DecodeStateTransformFn) -> None:
    """Delegates to the stack (unsupported by our attention layers)."""
    self.transformer.right_align_decode_state_with_prefix(max_prefix_size,
                                                          right_align_fn)


class TransformerEncoderDecoder(base_layer.BaseLayer):
  """A Transformer encoder-decoder sharing one softmax/embedding table.

  Children: `position_emb` (or `encoder_position_emb` and
  `decoder_position_emb`), `encoder_ngrammer`, `encoder`,
  `encoder_embedding_lookup`, `encoder_ln`, `decoder_ngrammer`, `decoder`,
  `decoder_embedding_lookup`, `decoder_ln`, `softmax`.

  An n-grammer of a side (`encoder_ngrammer_tpl`, `decoder_ngrammer_tpl`: a
  layer of `praxis.layers.ngrammer`) transforms that side's token embeddings
  before the position embeddings are added. It keeps no decode state: as in
  Pax, `extend_step` gets the previous target ids with the current one
  ([B, P], the last is decoded) when the decoder's n-grams should see them.

  Attributes:
    position_emb_tpl: Position embedding shared by both sides.
    encoder_position_emb_tpl: Encoder position embedding (instead).
    encoder_stacked_transformer_tpl: The encoder stack (not causal).
    encoder_ngrammer_tpl: An n-grammer of the source embeddings.
    encoder_post_attention_ngrammer_tpls: One template a layer of the
      encoder; ignored, as in Pax 1.4 (a warning says so).
    encoder_embedding_tpl: Separate source embedding table.
    decoder_position_emb_tpl: Decoder position embedding (instead).
    decoder_stacked_transformer_tpl: The decoder stack (causal, with cross
      attention).
    decoder_ngrammer_tpl: An n-grammer of the target embeddings.
    decoder_post_attention_ngrammer_tpls: One template a layer of the
      decoder; ignored, as in Pax 1.4 (a warning says so).
    decoder_embedding_tpl: Separate target embedding table.
    model_dims: D.
    softmax_tpl: The softmax (also the embedding table by default).
    packed_input: Inputs pack several sequences.
    encoder_ln_tpl: Normalization of the encoder output.
    decoder_ln_tpl: Normalization of the decoder output.
  """

  position_emb_tpl: LayerTpl | None = template_field(
      embedding_softmax.PositionalEmbedding)
  encoder_position_emb_tpl: LayerTpl | None = template_field(None)
  encoder_stacked_transformer_tpl: LayerTpl | None = template_field(None)
  encoder_ngrammer_tpl: LayerTpl | None = template_field(None)
  encoder_post_attention_ngrammer_tpls: Sequence[LayerTpl] | None = (
      template_field(None))
  encoder_embedding_tpl: LayerTpl | None = template_field(None)
  decoder_position_emb_tpl: LayerTpl | None = template_field(None)
  decoder_stacked_transformer_tpl: LayerTpl | None = template_field(None)
  decoder_ngrammer_tpl: LayerTpl | None = template_field(None)
  decoder_post_attention_ngrammer_tpls: Sequence[LayerTpl] | None = (
      template_field(None))
  decoder_embedding_tpl: LayerTpl | None = template_field(None)
  model_dims: int = 0
  softmax_tpl: LayerTpl = template_field(
      embedding_softmax.SharedEmbeddingSoftmax)
  packed_input: bool = False
  encoder_ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  decoder_ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)

  @classmethod
  def set_sharding_params_v1(
      cls,
      model_p: LayerTpl,
      *,
      replica_axis: str,
      data_axis: str,
      mdl_axis: str,
      ici_mesh_shape: Sequence[int],
      dcn_mesh_shape: Sequence[int] | None = None,
      mesh_axis_names: Sequence[str],
      training_optimized: bool,
  ) -> LayerTpl:
    """Annotates `model_p` as TransformerLm.set_sharding_params_v1 does."""
    s = _canonical_sharding(replica_axis, data_axis, mdl_axis, None, None,
                            training_optimized)
    mesh = {
        'ici_mesh_shape': ici_mesh_shape,
        'dcn_mesh_shape': dcn_mesh_shape,
        'mesh_axis_names': mesh_axis_names,
    }
    for name, value in mesh.items():
      setattr(model_p, name, value)
    emb = {k: s[k] for k in _EMB_KEYS}
    stack = {k: s.get(k) for k in _STACK_KEYS}
    model_p.softmax_tpl = set_embedding_softmax_sharding(
        model_p.softmax_tpl, **mesh, **emb)
    for side in ('encoder', 'decoder'):
      _set_trainable_pos_emb_sharding(
          getattr(model_p, f'{side}_position_emb_tpl'), s['w_df'], None)
      set_stacked_transformer_sharding(
          getattr(model_p, f'{side}_stacked_transformer_tpl'), **stack)
      emb_p = getattr(model_p, f'{side}_embedding_tpl')
      if emb_p is not None:
        set_embedding_softmax_sharding(emb_p, **mesh, **emb)
      ngrammer_p = getattr(model_p, f'{side}_ngrammer_tpl')
      if ngrammer_p is not None:
        ngrammer_p.weight_split_dims_mapping.wt = s['w_vd']
    _set_trainable_pos_emb_sharding(model_p.position_emb_tpl, s['w_df'], None)
    return model_p

  @property
  def _where(self) -> str:
    return f'TransformerEncoderDecoder ({self.name})'

  def _create_position_embs(self) -> None:
    shared = self.position_emb_tpl is not None
    for side in ('encoder', 'decoder'):
      tpl = getattr(self, f'{side}_position_emb_tpl')
      if tpl is not None and shared:
        raise ValueError(f'{self._where}: set position_emb_tpl or '
                         f'{side}_position_emb_tpl, not both.')
      if tpl is not None:
        self.create_child(f'{side}_position_emb', tpl.clone().set(
            embedding_dims=self.model_dims))
    if shared:
      self.create_child('position_emb', self.position_emb_tpl.clone().set(
          embedding_dims=self.model_dims))

  def _create_stack(self, side: str, causal: bool) -> None:
    tpl = getattr(self, f'{side}_stacked_transformer_tpl')
    if tpl is None:
      raise ValueError(f'{self._where}: set {side}_stacked_transformer_tpl.')
    stack_p = tpl.clone()
    block = _set_stack_dims(stack_p, self.model_dims, self.packed_input,
                            self._where)
    if bool(block.mask_self_attention) != causal:
      raise ValueError(f'{self._where}: the {side} stack must have '
                       f'mask_self_attention={causal}.')
    self._check_post_attention_ngrammers(side, block.num_layers)
    if not causal:
      layers = block.transformer_layer_params_tpl
      for layer_p in layers if isinstance(layers, (list, tuple)) else [layers]:
        _set_existing(layer_p.tr_atten_tpl, decode_cache=False)
    self.create_child(side, stack_p)
    emb_tpl = getattr(self, f'{side}_embedding_tpl')
    if emb_tpl is not None:
      self.create_child(f'{side}_embedding_lookup', emb_tpl.clone().set(
          input_dims=self.model_dims))
    ln_p = getattr(self, f'{side}_ln_tpl').clone()
    self.create_child(f'{side}_ln', ln_p.set(dim=self.model_dims))

  def _check_post_attention_ngrammers(self, side: str, num_layers: int
                                      ) -> None:
    """Checks `<side>_post_attention_ngrammer_tpls`, which do nothing.

    Pax 1.4's TransformerEncoderDecoder sets them on its stack's template
    after it has built the stack from a copy, so they never reach the
    layers: the same config here builds the same variables and outputs.
    """
    field = f'{side}_post_attention_ngrammer_tpls'
    tpls = getattr(self, field)
    if tpls is None:
      return
    _check_one_ngrammer_a_layer(self._where, field, tpls, f'{side} stack',
                                num_layers)
    if (self._where, side) not in _WARNED_IGNORED_NGRAMMERS:  # Once each.
      _WARNED_IGNORED_NGRAMMERS.add((self._where, side))
      logging.warning(
          '%s: %s_post_attention_ngrammer_tpls has no effect (as in Pax '
          '1.4, whose encoder-decoder builds its stacks without them).',
          self._where, side)

  def setup(self) -> None:
    if self.model_dims <= 0:
      raise ValueError(f'{self._where}: model_dims must be positive.')
    self._create_position_embs()
    for side in ('encoder', 'decoder'):
      ngrammer_tpl = getattr(self, f'{side}_ngrammer_tpl')
      if ngrammer_tpl is not None:
        self.create_child(f'{side}_ngrammer', ngrammer_tpl.clone())
    self._create_stack('encoder', causal=False)
    self._create_stack('decoder', causal=True)
    self.create_child('softmax', self.softmax_tpl.clone().set(
        input_dims=self.model_dims))

  def _embed(self, side: str, ids: JTensor, position: JTensor,
             paddings: JTensor | None = None,
             ngram_pos: JTensor | None = None) -> JTensor:
    """Embeddings of ids [B, T], through the side's n-grammer (given
    `paddings` and `ngram_pos`, its segment positions), plus the position
    embeddings at `position` [B, T]."""
    if side == 'encoder' and self.encoder_embedding_tpl is not None:
      x = self.encoder_embedding_lookup.emb_lookup(ids)
    elif self.decoder_embedding_tpl is not None:
      x = self.decoder_embedding_lookup.emb_lookup(ids)
    else:
      x = self.softmax.emb_lookup(ids)
    if getattr(self, f'{side}_ngrammer_tpl') is not None:
      x = getattr(self, f'{side}_ngrammer')(
          input_ids=ids, input_embs=x, paddings=paddings,
          segment_pos=ngram_pos)
    if self.position_emb_tpl is not None:
      x = x + self.position_emb(position=position)
    elif getattr(self, f'{side}_position_emb_tpl') is not None:
      x = x + getattr(self, f'{side}_position_emb')(position=position)
    return x

  def encode(
      self,
      inputs: JTensor,
      input_paddings: JTensor,
      input_segment_ids: JTensor | None = None,
      input_segment_pos: JTensor | None = None,
      input_segment_mask: JTensor | None = None,
  ) -> JTensor:
    """The encoder's output [B, S, D] for source ids [B, S]."""
    seg_ids, seg_pos = _default_segments(input_paddings, input_segment_ids,
                                         input_segment_pos, self._where)
    x = self._embed('encoder', inputs, seg_pos, input_paddings, seg_pos)
    if input_segment_mask is None:
      input_segment_mask = attentions.segment_mask(seg_ids, dtype=x.dtype)
    x = self.encoder(x, input_paddings, segment_mask=input_segment_mask,
                     segment_pos=seg_pos)
    return self.encoder_ln(x)

  def compute_loss(self, activations: JTensor,
                   labels: NestedMap | None = None) -> NestedMap:
    """As TransformerLm.compute_loss."""
    if labels is None:
      return _logits_output(self.softmax, activations)
    return _xent_output(self, activations, labels, skip_aux_loss=False)

  def __call__(
      self,
      inputs: JTensor,
      input_paddings: JTensor,
      targets: JTensor,
      target_paddings: JTensor,
      labels: NestedMap | None = None,
      input_segment_ids: JTensor | None = None,
      input_segment_pos: JTensor | None = None,
      input_segment_mask: JTensor | None = None,
      target_segment_ids: JTensor | None = None,
      target_segment_pos: JTensor | None = None,
      target_segment_mask: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
      start_time_step: int | JTensor = 0,
  ) -> NestedMap:
    """Encodes source ids [B, S] and scores target ids [B, T].

    Args:
      inputs: [B, S] source ids.
      input_paddings: [B, S].
      targets: [B, T] target ids (decoder inputs).
      target_paddings: [B, T].
      labels: See TransformerLm.compute_loss.
      input_segment_ids: [B, S] (packed inputs).
      input_segment_pos: [B, S].
      input_segment_mask: [B, 1, S, S].
      target_segment_ids: [B, T].
      target_segment_pos: [B, T].
      target_segment_mask: [B, 1, T, T].
      cross_segment_mask: [B, 1, T, S].
      start_time_step: `time_step` of the next extend_step.

    Returns:
      compute_loss's NestedMap.
    """
    encoded = self.encode(inputs, input_paddings, input_segment_ids,
                          input_segment_pos, input_segment_mask)
    return self.fprop_with_encoder_output(
        encoded, input_paddings, targets, target_paddings, labels,
        input_segment_ids, input_segment_pos, target_segment_ids,
        target_segment_pos, target_segment_mask, cross_segment_mask,
        start_time_step)

  def fprop_with_encoder_output(
      self,
      encoder_output: JTensor,
      input_paddings: JTensor,
      targets: JTensor,
      target_paddings: JTensor,
      labels: NestedMap | None = None,
      input_segment_ids: JTensor | None = None,
      input_segment_pos: JTensor | None = None,
      target_segment_ids: JTensor | None = None,
      target_segment_pos: JTensor | None = None,
      target_segment_mask: JTensor | None = None,
      cross_segment_mask: JTensor | None = None,
      start_time_step: int | JTensor = 0,
  ) -> NestedMap:
    """The decoder half of `__call__`: scores target ids [B, T] against an
    encoder output [B, S, D] (e.g. from `encode`); the other arguments as
    `__call__`'s."""
    src_ids, _ = _default_segments(input_paddings, input_segment_ids,
                                   input_segment_pos, self._where)
    tgt_ids, tgt_pos = _default_segments(
        target_paddings, target_segment_ids, target_segment_pos, self._where)
    # The n-grammer gets the segment positions as given (as in Pax).
    x = self._embed('decoder', targets, tgt_pos, target_paddings,
                    target_segment_pos)
    if cross_segment_mask is None:
      cross_segment_mask = attentions.segment_mask(tgt_ids, src_ids, x.dtype)
    if target_segment_mask is None:
      target_segment_mask = attentions.causal_segment_mask(tgt_ids, x.dtype)
    self.update_decode_state('time_step',
                             jnp.asarray(start_time_step, jnp.int32))
    self.update_decode_state('input_paddings', input_paddings)
    x = self.decoder(x, target_paddings, target_segment_mask,
                     cross_inputs=encoder_output, cross_paddings=input_paddings,
                     cross_segment_mask=cross_segment_mask,
                     segment_pos=tgt_pos)
    return self.compute_loss(self.decoder_ln(x), labels)

  def init_states(self, inputs: JTensor, input_paddings: JTensor,
                  *args: Any, **kwargs: Any) -> None:
    """Not supported, as in Pax: fill the decoding cache with a forward pass
    (DECODE_CACHE mutable), then call `extend_step`."""
    del inputs, input_paddings, args, kwargs
    raise NotImplementedError(
        f'{self._where}: init_states is not supported (as in Pax); run the '
        'forward pass with the decoder cache mutable, then extend_step.')

  def extend_step(self, targets: JTensor) -> NestedMap:
    """Decodes one target position from ids [B] (or the last of [B, P]).

    Args:
      targets: [B] ids, or [B, P]: the current ids last, after the previous
        ones that the decoder's n-grammer pairs them with (only the last
        are decoded).

    Returns:
      NestedMap(logits, log_probs, probs), each [B, V].
    """
    if targets.ndim == 1:
      targets = targets[:, None]
    if self.decoder_ngrammer_tpl is None:
      targets = targets[:, -1:]
    time_step = self.get_decode_state('time_step')
    # Positions only for the position embeddings: the n-grammer gets none.
    position = jnp.full(targets.shape, time_step)
    x = self._embed('decoder', targets, position)[:, -1]
    x = self.decoder.extend_step(
        x, time_step=time_step,
        cross_paddings=self.get_decode_state('input_paddings'))
    self.update_decode_state('time_step', time_step + 1)
    return self.compute_loss(self.decoder_ln(x))

  def transform_decode_state(
      self, transform_fn: base_layer.DecodeStateTransformFn) -> None:
    """Applies `transform_fn` to the decoder's self-attention caches."""
    self.decoder.transform_decode_state(transform_fn)
