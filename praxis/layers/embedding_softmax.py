"""Embedding, softmax and position-embedding layers.

Public names: compute_z_loss, soft_cap, smoothed_one_hot, softmax_xent,
softmax_xent_of_ids, sigmoid_xent, chunked_softmax_xent, embedding_lookup,
sinusoidal_position_embedding, sinusoidal_2d_position_embedding,
apply_rotary_position_embedding,
TokenCounter, Embedding, FullSoftmax, SharedEmbeddingSoftmax,
SigmoidCrossEntropy, GShardSharedEmbeddingSoftmax, PositionalEmbedding,
PositionalEmbedding2D, RotaryPositionalEmbedding,
TrainablePositionalEmbedding.

Softmax layers are called as `layer(inputs, class_weights, class_ids=None,
class_probabilities=None)` with inputs [..., input_dims], class weights and
ids [..., 1] (a trailing 1 may be left out), and return a NestedMap of
`logits`, `log_probs`, `per_example_argmax`, `per_example_xent`,
`per_example_weight`, `total_xent`, `total_weight` and `avg_xent` (FullSoftmax
and SharedEmbeddingSoftmax add `accuracy` when given class ids).

Example:

  softmax = base_layer.instantiate(pax_fiddle.Config(
      embedding_softmax.SharedEmbeddingSoftmax, name='softmax',
      input_dims=8, num_classes=32))
  variables = softmax.init(key, x, weights, class_ids=labels)
  out = softmax.apply(variables, x, weights, class_ids=labels)
  embs = softmax.apply(variables, ids, method=softmax.emb_lookup)

The file is about 1,100 lines because it keeps the ten layers of praxis's
`embedding_softmax` module (whose path users import) together; the math they
share is in the module-level functions at the top.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import _softmax_xent
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers import linears

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field
instance_field = base_layer.instance_field

_LOOKUP_STYLES = ('index', 'matmul')


# ----------------------------------------------------------------------------
# Math.
# ----------------------------------------------------------------------------


def compute_z_loss(logits: JTensor) -> JTensor:
  """logsumexp(logits)**2 over the last axis (no gradient through the max)."""
  max_logit = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
  log_z = jnp.log(jnp.sum(jnp.exp(logits - max_logit), axis=-1)) + max_logit[
      ..., 0
  ]
  return jnp.square(log_z)


def soft_cap(logits: JTensor, cap: float | None) -> JTensor:
  """cap * tanh(logits / cap); unchanged when `cap` is 0 or None."""
  if not cap:
    return logits
  return cap * jnp.tanh(logits / cap)


def smoothed_one_hot(
    ids: JTensor, num_classes: int, smoothing: float, spread_over_all=False
) -> JTensor:
  """One-hot targets with `smoothing` of the mass moved off the label.

  Args:
    ids: Class ids, any shape.
    num_classes: Number of classes.
    smoothing: The probability mass taken from the label.
    spread_over_all: Spread it over all classes (GShard style: the label gets
      1 - s + s / n) instead of over the other n - 1 classes.

  Returns:
    float32 [*ids.shape, num_classes] rows summing to 1.
  """
  one_hot = jax.nn.one_hot(ids, num_classes, dtype=jnp.float32)
  if not smoothing:
    return one_hot
  if spread_over_all:
    off = smoothing / num_classes
    return (1.0 - smoothing + off) * one_hot + off * (1.0 - one_hot)
  off = smoothing / (num_classes - 1)
  return (1.0 - smoothing) * one_hot + off * (1.0 - one_hot)


def softmax_xent(
    logits: JTensor, class_probabilities: JTensor
) -> tuple[JTensor, JTensor]:
  """(per-example cross entropy [...], log_probs [..., n]) in float32."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
  xent = -jnp.sum(log_probs * class_probabilities, axis=-1, dtype=jnp.float32)
  return xent, log_probs


def softmax_xent_of_ids(
    logits: JTensor, class_ids: JTensor
) -> tuple[JTensor, JTensor]:
  """`softmax_xent(logits, one_hot(class_ids))` without the one-hot rows.

  The same cross entropy from the label's log-probability alone, with a
  gradient that XLA computes in one pass (`_softmax_xent.py`); an id outside
  [0, num_classes) gives 0, as its row of zeros does.
  """
  logits = logits.astype(jnp.float32)
  return (_softmax_xent.xent_of_ids(logits, class_ids),
          jax.nn.log_softmax(logits))


def sigmoid_xent(logits: JTensor, labels: JTensor) -> JTensor:
  """Elementwise sigmoid cross entropy, max(x, 0) - x * z + log1p(e^-|x|)."""
  return (
      jnp.maximum(logits, 0.0)
      - logits * labels
      + jnp.log1p(jnp.exp(-jnp.abs(logits)))
  )


def chunked_softmax_xent(
    inputs: JTensor,
    logits_fn: Callable[[JTensor], JTensor],
    targets_fn: Callable[[JTensor], JTensor] | None,
    targets: JTensor,
    chunk_size: int,
) -> tuple[JTensor, JTensor, JTensor]:
  """Softmax cross entropy of [B, T, D] inputs computed T-chunk by T-chunk.

  Only one [B, chunk_size, num_classes] block of logits is live at a time.

  Args:
    inputs: [B, T, D].
    logits_fn: Maps an input chunk [B, c, D] to logits [B, c, n].
    targets_fn: Maps a target chunk to class probabilities [B, c, n]; None
      when the targets are class ids [B, T] (one-hot targets, computed as
      `softmax_xent_of_ids` does).
    targets: [B, T, ...] (ids or probabilities), chunked with the inputs.
    chunk_size: Steps per chunk; T is padded up to a multiple of it.

  Returns:
    (per-example xent, argmax, z-loss term), each [B, T].
  """
  batch, time = inputs.shape[:2]
  num_chunks = -(-time // chunk_size)
  pad = num_chunks * chunk_size - time

  def split(x):
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    x = jnp.reshape(x, (batch, num_chunks, chunk_size) + x.shape[2:])
    return jnp.moveaxis(x, 1, 0)

  def one_chunk(args):
    x, target = args
    logits = logits_fn(x).astype(jnp.float32)
    if targets_fn is None:
      xent = _softmax_xent.xent_of_ids(logits, target)
    else:
      xent, _ = softmax_xent(logits, targets_fn(target))
    return xent, jnp.argmax(logits, axis=-1), compute_z_loss(logits)

  outs = jax.lax.map(one_chunk, (split(inputs), split(targets)))

  def merge(x):
    return jnp.reshape(jnp.moveaxis(x, 0, 1), (batch, -1))[:, :time]

  return tuple(merge(o) for o in outs)


def embedding_lookup(
    table: JTensor,
    ids: JTensor,
    lookup_style: str = 'index',
    lookup_fn: Callable[[JTensor, JTensor], JTensor] | None = None,
    einsum_fn: Callable[..., JTensor] | None = None,
) -> JTensor:
  """Rows `table[ids]` by gather ('index') or one-hot matmul ('matmul').

  Args:
    table: [num_classes, dims].
    ids: Integer ids, any shape.
    lookup_style: 'index' or 'matmul'.
    lookup_fn: Replaces the gather `table[ids]`.
    einsum_fn: Replaces `jnp.einsum` in the matmul.

  Returns:
    [*ids.shape, dims].
  """
  if lookup_style == 'index':
    return (lookup_fn or (lambda t, i: t[i]))(table, ids)
  if lookup_style == 'matmul':
    one_hot = jax.nn.one_hot(ids, table.shape[0], dtype=table.dtype)
    return (einsum_fn or jnp.einsum)('...y,yz->...z', one_hot, table)
  raise ValueError(
      f'lookup_style must be one of {_LOOKUP_STYLES}, got {lookup_style!r}.'
  )


def sinusoidal_position_embedding(
    position: JTensor,
    embedding_dims: int,
    min_timescale: float = 1,
    max_timescale: float = 10_000,
) -> JTensor:
  """[sin(p * f_i), cos(p * f_i)] over i < embedding_dims // 2, zero-padded.

  f_i = min_timescale * exp(-i * log(max / min) / max(n - 1, 1)) with n =
  embedding_dims // 2 (Pax scales by min_timescale, not by its inverse).

  Args:
    position: [B, T] positions.
    embedding_dims: Output depth (an odd depth gets a zero last column).
    min_timescale: See above.
    max_timescale: See above.

  Returns:
    float32 [B, T, embedding_dims].
  """
  num_timescales = embedding_dims // 2
  increment = math.log(float(max_timescale) / float(min_timescale)) / max(
      num_timescales - 1, 1
  )
  inv_timescales = min_timescale * jnp.exp(
      jnp.arange(num_timescales, dtype=jnp.float32) * -increment
  )
  scaled = position.astype(jnp.float32)[:, :, None] * inv_timescales
  signal = jnp.concatenate([jnp.sin(scaled), jnp.cos(scaled)], axis=2)
  return jnp.pad(signal, [(0, 0), (0, 0), (0, embedding_dims % 2)])


def sinusoidal_2d_position_embedding(
    h: int, w: int, embedding_dims: int
) -> JTensor:
  """[h * w, embedding_dims]: row embeddings, then column embeddings (ViT).

  Positions run over -h/2 ... h/2 - 1 (and likewise for w); each half of the
  depth is [sin(p / 10000**(2i/d)), cos(...)] for its axis.

  Args:
    h: Number of rows.
    w: Number of columns.
    embedding_dims: Output depth (a multiple of 4).

  Returns:
    float32 [h * w, embedding_dims], row-major over (h, w).
  """

  def one_axis(length: int, dims: int) -> JTensor:
    position = jnp.arange(-length / 2, length / 2, dtype=jnp.float32)
    half = dims // 2
    inv_freq = 1.0 / 10000 ** (jnp.arange(half, dtype=jnp.float32) / half)
    angles = position[:, None] * inv_freq[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)

  rows = one_axis(h, embedding_dims // 2)
  cols = one_axis(w, embedding_dims // 2)
  grid = jnp.concatenate(
      [
          jnp.broadcast_to(rows[:, None, :], (h, w, rows.shape[-1])),
          jnp.broadcast_to(cols[None, :, :], (h, w, cols.shape[-1])),
      ],
      axis=-1,
  )
  return jnp.reshape(grid, (h * w, -1))


def apply_rotary_position_embedding(
    inputs: JTensor,
    position: JTensor,
    min_timescale: float = 1,
    max_timescale: float = 10_000,
) -> JTensor:
  """Rotates (x1, x2) halves of the last axis of [B, T, N, H] by position.

  Feature i < H/2 is paired with feature i + H/2 and rotated by the angle
  position / (min * (max / min) ** (2i / H)).

  Args:
    inputs: [B, T, N, H], H even.
    position: [B or 1, T].
    min_timescale: Shortest wavelength.
    max_timescale: Longest wavelength.

  Returns:
    [B, T, N, H], in the promoted dtype of inputs and float32 angles.
  """
  dims = inputs.shape[-1]
  fraction = 2 * jnp.arange(dims // 2, dtype=jnp.float32) / dims
  timescale = min_timescale * (max_timescale / min_timescale) ** fraction
  angle = position.astype(jnp.float32)[:, :, None, None] / timescale
  sin, cos = jnp.sin(angle), jnp.cos(angle)
  first, second = jnp.split(inputs, 2, axis=-1)
  return jnp.concatenate(
      [first * cos - second * sin, second * cos + first * sin], axis=-1
  )


# ----------------------------------------------------------------------------
# Helpers of the layers.
# ----------------------------------------------------------------------------


def _require_positive(layer: base_layer.BaseLayer, *fields: str) -> None:
  for field in fields:
    value = getattr(layer, field)
    if not value or value <= 0:
      raise ValueError(
          f'{type(layer).__name__} {layer.name!r}: `{field}` must be a '
          f'positive int, got {value}.'
      )


def _computed_lookup_style(layer: base_layer.BaseLayer, vocab_split: Any,
                           plain_einsum: bool = True) -> str:
  """How `layer.lookup_style` is computed: 'matmul' may run as a gather.

  A one-hot matmul takes the same rows as a gather (each output is one table
  entry plus zeros), and its gradient adds the same rows into the table, in
  another order; but it costs 2 x ids x vocabulary x dims FLOPs forward and
  as many backward (on a 32k vocabulary, more than the rest of a small LM).
  TPUs want it (their gathers are slow, and a vocabulary split over devices
  partitions as a matmul), and so does a replaced einsum (quantized, FP8);
  elsewhere, with the whole vocabulary on each device, the gather runs.

  Args:
    layer: The embedding layer.
    vocab_split: The mesh axis (or axes) the vocabulary dim is split over.
    plain_einsum: The layer's matmul is a plain einsum.

  Returns:
    'index' or 'matmul'.
  """
  style = layer.lookup_style
  if (style != 'matmul' or not plain_einsum or jax.default_backend() == 'tpu'
      or layer.get_shard_count_on_dim(vocab_split) > 1):
    return style
  return 'index'


def _one_hot_rows(table: JTensor, ids: JTensor) -> JTensor:
  """`one_hot(ids) @ table` as a gather: ids outside the table give zeros."""
  valid = (ids >= 0) & (ids < table.shape[0])
  rows = table[jnp.clip(ids, 0, table.shape[0] - 1)]
  return jnp.where(valid[..., None], rows, jnp.zeros((), table.dtype))


def _layer_lookup(layer: base_layer.BaseLayer, table: JTensor, ids: JTensor,
                  vocab_split: Any, lookup_fn: Any = None,
                  einsum_fn: Any = None) -> JTensor:
  """`embedding_lookup` by `layer.lookup_style`, a 'matmul' one as a gather
  where `_computed_lookup_style` says so."""
  plain = einsum_fn is None or type(einsum_fn) is base_ops.EinsumOp
  if _computed_lookup_style(layer, vocab_split, plain) != layer.lookup_style:
    return _one_hot_rows(table, ids)
  return embedding_lookup(table, ids, layer.lookup_style, lookup_fn,
                          einsum_fn)


def _require_lookup_style(layer: base_layer.BaseLayer) -> None:
  if layer.lookup_style not in _LOOKUP_STYLES:
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: `lookup_style` must be one '
        f'of {_LOOKUP_STYLES}, got {layer.lookup_style!r}.'
    )


def _per_example(x: JTensor, shape: tuple[int, ...], what: str) -> JTensor:
  """`x` ([..., 1] or [...]) broadcast to the per-example `shape`."""
  x = jnp.asarray(x)
  if x.ndim == len(shape) + 1 and x.shape[-1] == 1:
    x = x[..., 0]
  try:
    fits = x.ndim == len(shape) and np.broadcast_shapes(x.shape, shape) == shape
  except ValueError:
    fits = False
  if not fits:
    raise ValueError(
        f'{what} of shape {x.shape} does not fit inputs with leading shape '
        f'{shape}; expected {shape + (1,)}.'
    )
  return jnp.broadcast_to(x, shape)


def _feed_forward_config(
    layer: base_layer.BaseLayer, tpl: LayerTpl, bias_init: float | None
) -> LayerTpl:
  """The logits projection input_dims -> num_classes, without activation."""
  p = tpl.clone().set(
      input_dims=layer.input_dims,
      output_dims=layer.num_classes,
      activation_tpl=pax_fiddle.Config(activations.Identity),
      bias_init=bias_init,
  )
  p.weight_split_dims_mapping.wt = layer.weight_split_dims_mapping.wt
  ap = layer.activation_split_dims_mapping
  p.activation_split_dims_mapping.out = ap.out
  step_out = getattr(ap, 'extend_step_out', None)
  if step_out is not None:
    p.activation_split_dims_mapping.extend_step_out = step_out
  return p


def _xent_outputs(
    logits: JTensor | None,
    log_probs: JTensor | None,
    xent: JTensor,
    argmax: JTensor,
    weights: JTensor,
    inputs_dtype: Any,
) -> NestedMap:
  """The softmax NestedMap from per-example results and weights [...]."""
  weights = weights.astype(jnp.float32)
  total_xent = jnp.sum(xent * weights, dtype=jnp.float32)
  total_weight = jnp.sum(weights, dtype=jnp.float32)
  out = NestedMap(
      per_example_argmax=jax.lax.stop_gradient(argmax),
      per_example_xent=xent.astype(jnp.float32),
      per_example_weight=weights,
      total_xent=total_xent,
      total_weight=total_weight,
      avg_xent=(total_xent / (total_weight + 1e-6)).astype(jnp.float32),
  )
  out.logits = None if logits is None else logits.astype(inputs_dtype)
  out.log_probs = None if log_probs is None else log_probs.astype(
      inputs_dtype)
  return out


# ----------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------


class TokenCounter(base_layer.BaseLayer):
  """Counts non-padded tokens seen in training (in millions, float32)."""

  def setup(self) -> None:
    self.create_variable(
        'approx_total_tokens_mm',
        WeightHParams(
            shape=[],
            init=WeightInit.Constant(0.0),
            dtype=jnp.float32,
            collections=[
                base_layer.WeightHParamsCollection.REQUIRES_SUM_SYNC,
                base_layer.WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION,
            ],
        ),
        trainable=False,
    )

  def __call__(self, inputs: JTensor, paddings: JTensor) -> None:
    """Adds the count of `paddings` [B, T] == 0 (unless evaluating)."""
    del inputs
    if self.do_eval:
      return
    total = self.get_var('approx_total_tokens_mm')
    self.add_summary('approx_total_tokens_mm', total)
    batch_mm = jnp.sum(1.0 - paddings, dtype=jnp.float32) / 1e6
    self.update_var('approx_total_tokens_mm', total + batch_mm)


def _scale_and_shard_embeddings(layer: base_layer.BaseLayer,
                                embs: JTensor) -> JTensor:
  """Scales looked-up embeddings by sqrt(dims) if asked, and shards them."""
  if layer.scale_sqrt_depth:
    embs = embs * layer.input_dims**0.5
  return base_layer.maybe_shard(
      embs,
      layer.activation_split_dims_mapping.emb_out_split_dims_mapping,
      layer.mesh_axis_names,
  )


class Embedding(base_layer.BaseLayer):
  """Looks up rows of `emb_var` [num_classes, input_dims] by id.

  Attributes:
    num_classes: Vocabulary size.
    input_dims: Embedding depth (named as for the softmax layers).
    lookup_style: 'index' (gather) or 'matmul' (one-hot matmul).
    scale_sqrt_depth: Multiply the embeddings by sqrt(input_dims).
    set_nan_for_oob_id: Give ids >= num_classes NaN embeddings (debugging).
    array_lookup: The gather op ('index').
    einsum: The einsum op ('matmul').
  """

  num_classes: int = 0
  input_dims: int = 0
  lookup_style: str = 'index'
  scale_sqrt_depth: bool = False
  set_nan_for_oob_id: bool = False
  array_lookup: base_ops.ArrayLookup = instance_field(base_ops.ArrayLookup)
  einsum: base_ops.EinsumOp = instance_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      emb_out_split_dims_mapping: Split of the looked-up embeddings.
    """

    emb_out_split_dims_mapping: SplitDimsMapping = None

  def setup(self) -> None:
    _require_positive(self, 'num_classes', 'input_dims')
    _require_lookup_style(self)
    self.create_variable(
        'emb_var',
        WeightHParams(
            shape=[self.num_classes, self.input_dims],
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )

  def __call__(self, ids: JTensor) -> JTensor:
    """Same as `emb_lookup`."""
    return self.emb_lookup(ids)

  def emb_lookup(self, ids: JTensor) -> JTensor:
    """Maps integer `ids` [...] to embeddings [..., input_dims]."""
    in_range = None
    if self.set_nan_for_oob_id:
      in_range = ids < self.num_classes
      ids = jnp.where(in_range, ids, 0)
    wt = self.weight_split_dims_mapping.wt
    embs = _layer_lookup(self, self.theta.emb_var, ids, wt[0] if wt else None,
                         self.array_lookup, self.einsum)
    if in_range is not None:
      embs = jnp.where(in_range[..., None], embs, jnp.nan)
    return _scale_and_shard_embeddings(self, embs)

  def extend_step(self, ids: JTensor, *, time_step: JTensor) -> JTensor:
    """Embeds the ids of one decoding step."""
    del time_step
    return self.emb_lookup(ids)


class FullSoftmax(base_layer.BaseLayer):
  """A projection to logits with a softmax cross-entropy loss.

  Attributes:
    input_dims: Depth of the inputs.
    num_classes: Number of classes.
    soft_cap_logits: If set, logits become cap * tanh(logits / cap).
    bi_tempered_loss_tpl: If set, this layer computes the per-example loss
      from (logits, class probabilities) instead of cross entropy.
    label_smoothing_prob: Mass moved from the label to the other classes
      (with `class_ids` only).
    label_smoothing_apply_for_eval: Also smooth labels in eval.
    z_loss_weight: If > 0, adds weight * mean(logsumexp(logits)**2) as the
      auxiliary loss `aux_z_loss` (and output `z_loss`).
    bias_init: Initial value of the logits bias.
    feed_forward_tpl: The projection (child `logits_ffn`); None uses the
      inputs as logits.
    scale_before_logits: Multiply the inputs by 1 / sqrt(input_dims) first.
    chunk_size: If set, [B, T, D] inputs with class_ids are projected and
      scored T-chunk by T-chunk to save memory; `logits` and `log_probs` are
      then None. As in Pax, the whole softmax is computed instead (with its
      logits) for other inputs: class_probabilities given, inputs not
      [B, T, D] or T < chunk_size, or z_loss_weight > 0.
  """

  input_dims: int = 0
  num_classes: int = 0
  soft_cap_logits: float | None = 0.0
  bi_tempered_loss_tpl: LayerTpl | None = template_field(None)
  label_smoothing_prob: float = 0.0
  label_smoothing_apply_for_eval: bool = True
  z_loss_weight: float = 0.0
  bias_init: float | None = 0.0
  feed_forward_tpl: LayerTpl | None = template_field(linears.FeedForward)
  scale_before_logits: bool = False
  chunk_size: int | None = None

  def setup(self) -> None:
    _require_positive(self, 'input_dims', 'num_classes')
    if not 0.0 <= self.label_smoothing_prob < 1.0:
      raise ValueError(
          f'{type(self).__name__} {self.name!r}: `label_smoothing_prob` must '
          f'be in [0, 1), got {self.label_smoothing_prob}.'
      )
    if self.label_smoothing_prob and self.num_classes < 2:
      raise ValueError(
          f'{type(self).__name__} {self.name!r}: label smoothing needs '
          '`num_classes` >= 2.'
      )
    if self.feed_forward_tpl is not None:
      ff_p = _feed_forward_config(self, self.feed_forward_tpl, self.bias_init)
      self.create_child('logits_ffn', ff_p)
    elif self.input_dims != self.num_classes:
      raise ValueError(
          f'{type(self).__name__} {self.name!r}: without `feed_forward_tpl` '
          f'`input_dims` ({self.input_dims}) must equal `num_classes` '
          f'({self.num_classes}).'
      )
    if self.bi_tempered_loss_tpl is not None:
      self.create_child('bi_tempered_loss', self.bi_tempered_loss_tpl)

  def _scale_inputs(self, inputs: JTensor) -> JTensor:
    if self.scale_before_logits:
      return inputs * self.input_dims**-0.5
    return inputs

  def get_logits(
      self, inputs: JTensor, input_ids: JTensor | None = None
  ) -> JTensor:
    """Logits [..., num_classes] of inputs [..., input_dims]."""
    del input_ids
    inputs = self._scale_inputs(inputs)
    logits = inputs if self.feed_forward_tpl is None else self.logits_ffn(
        inputs
    )
    return soft_cap(logits, self.soft_cap_logits)

  def logits_to_logp(self, logits: JTensor) -> JTensor:
    """Log probabilities of `logits`."""
    return jax.nn.log_softmax(logits)

  def _smoothing(self) -> float:
    if self.do_eval and not self.label_smoothing_apply_for_eval:
      return 0.0
    return self.label_smoothing_prob

  def __call__(
      self,
      inputs: JTensor,
      class_weights: JTensor,
      class_ids: JTensor | None = None,
      class_probabilities: JTensor | None = None,
      input_ids: JTensor | None = None,
  ) -> NestedMap:
    """Logits, cross entropy and their weighted totals.

    Args:
      inputs: [..., input_dims].
      class_weights: [..., 1] weight of each example.
      class_ids: [..., 1] integer labels, or
      class_probabilities: [..., num_classes] target distributions.
      input_ids: Passed to `get_logits` (unused here).

    Returns:
      NestedMap of logits and log_probs [..., num_classes];
      per_example_argmax, per_example_xent and per_example_weight [...];
      scalars total_xent, total_weight, avg_xent = total_xent / total_weight;
      accuracy (weighted share of argmax == class_ids) when class_ids are
      given; and z_loss when `z_loss_weight` > 0.
    """
    if class_ids is None and class_probabilities is None:
      raise ValueError(
          f'{type(self).__name__}: give class_ids or class_probabilities.'
      )
    shape = tuple(inputs.shape[:-1])
    weights = _per_example(class_weights, shape, 'class_weights')
    if class_ids is not None and class_probabilities is None:
      class_ids = _per_example(class_ids, shape, 'class_ids')
    if self._chunks(inputs, class_probabilities):
      out, z = self._chunked(inputs, class_ids, class_probabilities, weights)
    else:
      out, z = self._full(inputs, class_ids, class_probabilities, weights,
                          input_ids)
    if class_ids is not None:  # As Pax: weighted argmax accuracy.
      hits = out.per_example_argmax == _per_example(class_ids, shape,
                                                    'class_ids')
      out.accuracy = jnp.sum(hits * weights) / out.total_weight
    if self.z_loss_weight > 0.0:
      z_loss = self.z_loss_weight * jnp.sum(z * out.per_example_weight) / (
          out.total_weight
      )
      self.add_summary('aux_z_loss', z_loss)
      self.add_aux_loss('aux_z_loss', z_loss)
      out.z_loss = z_loss
    return out

  def _targets(self, class_ids, class_probabilities) -> JTensor:
    if class_probabilities is not None:
      return class_probabilities
    probs = smoothed_one_hot(class_ids, self.num_classes, self._smoothing())
    return jax.lax.stop_gradient(probs)

  def _full(self, inputs, class_ids, class_probabilities, weights, input_ids):
    logits = self.get_logits(inputs, input_ids).astype(jnp.float32)
    if self.bi_tempered_loss_tpl is not None:
      targets = self._targets(class_ids, class_probabilities)
      log_probs = jax.nn.log_softmax(logits)
      xent = self.bi_tempered_loss(logits, targets)
    elif class_probabilities is None and not self._smoothing():
      xent, log_probs = softmax_xent_of_ids(logits, class_ids)
    else:
      xent, log_probs = softmax_xent(
          logits, self._targets(class_ids, class_probabilities))
    out = _xent_outputs(
        logits, log_probs, xent, jnp.argmax(logits, axis=-1), weights,
        inputs.dtype,
    )
    return out, compute_z_loss(logits)

  def _chunks(self, inputs, class_probabilities) -> bool:
    """Whether the loss is computed chunk by chunk (Pax's rule)."""
    return bool(self.chunk_size) and (
        class_probabilities is None and inputs.ndim == 3
        and inputs.shape[1] >= self.chunk_size and self.z_loss_weight <= 0.0)

  def _chunked(self, inputs, class_ids, class_probabilities, weights):
    if self.bi_tempered_loss_tpl is not None:
      raise ValueError(
          f'{type(self).__name__} {self.name!r}: `chunk_size` does not '
          'support the bi-tempered loss.'
      )
    project = self._pure_projection()
    scale = self.input_dims**-0.5 if self.scale_before_logits else 1.0
    cap = self.soft_cap_logits

    def logits_fn(x):
      return soft_cap(project(x * scale), cap)

    if class_probabilities is not None:
      targets, targets_fn = class_probabilities, lambda t: t
    else:
      smoothing, num_classes = self._smoothing(), self.num_classes
      targets = class_ids
      targets_fn = None if not smoothing else (
          lambda t: smoothed_one_hot(t, num_classes, smoothing))
    xent, argmax, z = chunked_softmax_xent(
        inputs, logits_fn, targets_fn, targets, self.chunk_size
    )
    return _xent_outputs(None, None, xent, argmax, weights, inputs.dtype), z

  def _pure_projection(self) -> Callable[[JTensor], JTensor]:
    """`logits_ffn` as a function of arrays only (usable inside lax.map)."""
    if self.feed_forward_tpl is None:
      return lambda x: x
    ffn = self.logits_ffn
    if not isinstance(ffn, linears.FeedForward):
      raise TypeError(
          f'{type(self).__name__} {self.name!r}: `chunk_size` supports a '
          f'linears.FeedForward projection, not {type(ffn).__name__}.'
      )
    w = ffn.linear.theta.w
    b = ffn.bias.theta.b if ffn.has_bias else 0.0
    return lambda x: _bias_add.add_bias(jnp.einsum('...y,yz->...z', x, w), b)


class SharedEmbeddingSoftmax(FullSoftmax):
  """A FullSoftmax whose projection transposed is also an embedding table.

  Attributes:
    lookup_style: 'index' or 'matmul' for `emb_lookup`.
    scale_sqrt_depth: Multiply the embeddings by sqrt(input_dims).
    array_lookup_tpl: The gather op of `emb_lookup` ('index'; child
      `array_lookup`).
    einsum_tpl: The einsum op of `emb_lookup` ('matmul'; child `einsum`).
  """

  lookup_style: str = 'index'
  scale_sqrt_depth: bool = False
  array_lookup_tpl: LayerTpl = template_field(base_ops.ArrayLookup)
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      emb_out_split_dims_mapping: Split of the looked-up embeddings.
      extend_step_out: Of the logits of a decoding step [B, V].
    """

    emb_out_split_dims_mapping: SplitDimsMapping = None
    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    _require_lookup_style(self)
    if self.feed_forward_tpl is None:
      raise ValueError(
          f'SharedEmbeddingSoftmax {self.name!r}: `feed_forward_tpl` is '
          'needed (its weight is the embedding table).'
      )
    super().setup()
    self.create_child('array_lookup', self.array_lookup_tpl.clone())
    self.create_child('einsum', self.einsum_tpl.clone())

  def emb_lookup(self, ids: JTensor) -> JTensor:
    """Maps ids [...] to rows of the transposed logits weight [..., dims]."""
    table = jnp.transpose(self.logits_ffn.linear.theta.w)
    wt = self.weight_split_dims_mapping.wt
    embs = _layer_lookup(self, table, ids, wt[-1] if wt else None,
                         self.array_lookup, self.einsum)
    return _scale_and_shard_embeddings(self, embs)

  def extend_step(self, ids: JTensor, *, time_step: JTensor) -> JTensor:
    """Embeds the ids of one decoding step."""
    del time_step
    return self.emb_lookup(ids)


class SigmoidCrossEntropy(base_layer.BaseLayer):
  """A projection to logits with an independent sigmoid loss per class.

  Attributes:
    input_dims: Depth of the inputs.
    num_classes: Number of classes.
    soft_cap_logits: If set, logits become cap * tanh(logits / cap).
    bias_init: Initial value of the logits bias.
    feed_forward_tpl: The projection (child `logits_ffn`); None uses the
      inputs as logits.
  """

  input_dims: int = 0
  num_classes: int = 0
  soft_cap_logits: float | None = 0.0
  bias_init: float | None = 0.0
  feed_forward_tpl: LayerTpl | None = template_field(linears.FeedForward)

  def setup(self) -> None:
    _require_positive(self, 'input_dims', 'num_classes')
    if self.feed_forward_tpl is not None:
      ff_p = _feed_forward_config(self, self.feed_forward_tpl, self.bias_init)
      self.create_child('logits_ffn', ff_p)
    elif self.input_dims != self.num_classes:
      raise ValueError(
          f'SigmoidCrossEntropy {self.name!r}: without `feed_forward_tpl` '
          '`input_dims` must equal `num_classes`.'
      )

  def get_logits(self, inputs: JTensor) -> JTensor:
    """Logits [..., num_classes] of inputs [..., input_dims]."""
    if self.feed_forward_tpl is None:
      return inputs
    return soft_cap(self.logits_ffn(inputs), self.soft_cap_logits)

  def __call__(
      self,
      inputs: JTensor,
      class_weights: JTensor,
      class_ids: JTensor | None = None,
      class_probabilities: JTensor | None = None,
  ) -> NestedMap:
    """Sigmoid cross entropy summed over classes.

    Args:
      inputs: [..., input_dims].
      class_weights: [..., 1] per-example or [..., num_classes] per-class
        weights.
      class_ids: [..., 1] integer labels, or
      class_probabilities: [..., num_classes] targets in [0, 1].

    Returns:
      The softmax layers' NestedMap (log_probs are log-sigmoids).
    """
    if class_ids is None and class_probabilities is None:
      raise ValueError('SigmoidCrossEntropy: give class_ids or '
                       'class_probabilities.')
    logits = self.get_logits(inputs).astype(jnp.float32)
    if class_probabilities is None:
      ids = _per_example(class_ids, tuple(inputs.shape[:-1]), 'class_ids')
      class_probabilities = jax.nn.one_hot(ids, self.num_classes)
    # As Pax, a trailing dim equal to num_classes means per-class weights,
    # also for num_classes == 1 (then per_example_xent is weighted).
    if class_weights.shape[-1] == self.num_classes:
      per_class, weights = class_weights, jnp.ones(class_weights.shape[:-1])
    else:
      per_class = 1.0
      weights = _per_example(
          class_weights, tuple(inputs.shape[:-1]), 'class_weights'
      )
    per_class_xent = sigmoid_xent(logits, class_probabilities)
    xent = jnp.sum(per_class_xent * per_class, axis=-1, dtype=jnp.float32)
    out = _xent_outputs(
        logits, jax.nn.log_sigmoid(logits), xent, jnp.argmax(logits, -1),
        weights, inputs.dtype,
    )
    out.total_weight = jnp.sum(class_weights, dtype=jnp.float32)
    out.avg_xent = out.total_xent / (out.total_weight + 1e-6)
    return out


class GShardSharedEmbeddingSoftmax(base_layer.BaseLayer):
  """GShard's softmax: a bias-free [num_classes, input_dims] shared table.

  Inputs are scaled by 1 / sqrt(input_dims) before the logits; the table
  (child `embedding`, a Linear) starts Gaussian; label smoothing spreads its
  mass over all classes and is off in eval; the z-loss is always added
  (times `z_loss_weight`).

  Attributes:
    input_dims: Depth of the inputs.
    num_classes: Number of classes.
    use_tgt_labels_size_as_loss_denominator: Divide by the number of target
      positions instead of the total weight.
    soft_cap_logits: If set, logits become cap * tanh(logits / cap).
    logits_abs_max: If set, logits are clipped to [-max, max].
    z_loss_weight: Weight of the z-loss.
    label_smoothing_prob: Label smoothing (training only).
  """

  input_dims: int = 0
  num_classes: int = 0
  use_tgt_labels_size_as_loss_denominator: bool = True
  soft_cap_logits: float | None = 0.0
  logits_abs_max: float | None = 0.0
  z_loss_weight: float = 0.0
  label_smoothing_prob: float = 0.0

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      emb_out_split_dims_mapping: Split of the looked-up embeddings.
      extend_step_out: Of the logits of a decoding step [B, V].
    """

    emb_out_split_dims_mapping: SplitDimsMapping = None
    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    _require_positive(self, 'input_dims', 'num_classes')
    emb_p = pax_fiddle.Config(
        linears.Linear,
        input_dims=self.num_classes,
        output_dims=self.input_dims,
        params_init=WeightInit.Gaussian(),
    )
    emb_p.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.wt
    self.create_child('embedding', emb_p)

  def emb_lookup(self, ids: JTensor) -> JTensor:
    """Maps ids [...] to rows of the table [..., input_dims] (matmul)."""
    one_hot = jax.nn.one_hot(ids, self.num_classes, dtype=self.fprop_dtype)
    embs = linears.project_last_dim(one_hot, self.embedding.theta.w)
    return base_layer.maybe_shard(
        embs,
        self.activation_split_dims_mapping.emb_out_split_dims_mapping,
        self.mesh_axis_names,
    )

  def extend_step(self, ids: JTensor, *, time_step: JTensor) -> JTensor:
    """Embeds the ids of one decoding step."""
    del time_step
    return self.emb_lookup(ids)

  def get_logits(self, inputs: JTensor,
                 input_ids: JTensor | None = None) -> JTensor:
    """Logits [..., num_classes] of inputs [..., input_dims] (`input_ids`
    unused: Pax's signature)."""
    del input_ids
    inputs = inputs * self.input_dims**-0.5
    logits = linears.project_last_dim(
        inputs, jnp.transpose(self.embedding.theta.w)
    )
    out = linears.step_sharding(self.activation_split_dims_mapping,
                                logits.ndim)
    logits = base_layer.maybe_shard(logits, out, self.mesh_axis_names)
    logits = soft_cap(logits, self.soft_cap_logits)
    if self.logits_abs_max:
      logits = jnp.clip(logits, -self.logits_abs_max, self.logits_abs_max)
    return logits

  def __call__(
      self,
      inputs: JTensor,
      class_weights: JTensor,
      class_ids: JTensor | None = None,
      class_probabilities: JTensor | None = None,
      input_ids: JTensor | None = None,
  ) -> NestedMap:
    """As FullSoftmax.__call__, plus `avg_xent_weight` (the denominator);
    `input_ids` is unused (Pax's signature)."""
    del input_ids
    if class_ids is None and class_probabilities is None:
      raise ValueError('GShardSharedEmbeddingSoftmax: give class_ids or '
                       'class_probabilities.')
    shape = tuple(inputs.shape[:-1])
    weights = _per_example(class_weights, shape, 'class_weights')
    logits = self.get_logits(inputs).astype(jnp.float32)
    smoothing = 0.0 if self.do_eval else self.label_smoothing_prob
    if class_probabilities is None:
      ids = _per_example(class_ids, shape, 'class_ids')
      targets = None if not smoothing else smoothed_one_hot(
          ids, self.num_classes, smoothing, True)
    else:
      targets = class_probabilities
      if smoothing:
        off = smoothing / self.num_classes
        targets = (1.0 - smoothing) * targets + off
    if targets is None:
      xent, log_probs = softmax_xent_of_ids(logits, ids)
    else:
      xent, log_probs = softmax_xent(logits, jax.lax.stop_gradient(targets))
    out = _xent_outputs(
        logits, log_probs, xent, jnp.argmax(logits, -1), weights, inputs.dtype
    )
    if self.use_tgt_labels_size_as_loss_denominator:
      denominator = jnp.asarray(weights.size, jnp.float32)
    else:
      denominator = out.total_weight
    out.avg_xent = out.total_xent / denominator
    out.avg_xent_weight = denominator
    z_loss = self.z_loss_weight * jnp.sum(
        compute_z_loss(logits) * out.per_example_weight
    ) / denominator
    self.add_summary('aux_z_loss', z_loss)
    self.add_aux_loss('aux_z_loss', z_loss)
    return out


class PositionalEmbedding(base_layer.BaseLayer):
  """Sinusoidal position embeddings (see `sinusoidal_position_embedding`).

  Attributes:
    min_timescale: Shortest wavelength.
    max_timescale: Longest wavelength.
    embedding_dims: Depth of the embeddings.
  """

  min_timescale: int = 1
  max_timescale: int = 10_000
  embedding_dims: int = 0

  def setup(self) -> None:
    _require_positive(self, 'embedding_dims')

  def _positions(
      self, seq_length: int | None, position: JTensor | None
  ) -> JTensor:
    if position is not None:
      if position.ndim != 2:
        raise ValueError(
            f'{type(self).__name__}: position must be [B, T], got '
            f'{position.shape}.'
        )
      return position
    if seq_length is None:
      raise ValueError(f'{type(self).__name__}: give seq_length or position.')
    return jnp.arange(seq_length, dtype=jnp.float32)[None, :]

  def __call__(
      self, seq_length: int | None = None, position: JTensor | None = None
  ) -> JTensor:
    """[1, seq_length, D] embeddings, or [B, T, D] for `position` [B, T]."""
    signal = sinusoidal_position_embedding(
        self._positions(seq_length, position), self.embedding_dims,
        self.min_timescale, self.max_timescale,
    )
    return signal.astype(self.fprop_dtype)


class PositionalEmbedding2D(base_layer.BaseLayer):
  """Fixed 2-D sinusoidal embeddings of h x w patches (ViT), flattened.

  Attributes:
    h: Number of patch rows.
    w: Number of patch columns.
    embedding_dims: Depth of the embeddings (a multiple of 4).
    pos_transform: How (h, w) are merged; only 'hwd->(hw)d' (row-major).
    num_prepend_cls_tokens: Zero embeddings added before the patches.
    num_append_cls_tokens: Zero embeddings added after the patches.
  """

  h: int = 0
  w: int = 0
  embedding_dims: int = 0
  pos_transform: str = 'hwd->(hw)d'
  num_prepend_cls_tokens: int = 0
  num_append_cls_tokens: int = 0

  def setup(self) -> None:
    _require_positive(self, 'h', 'w', 'embedding_dims')
    if self.embedding_dims % 4:
      raise ValueError(
          f'PositionalEmbedding2D {self.name!r}: `embedding_dims` must be a '
          f'multiple of 4, got {self.embedding_dims}.'
      )
    if self.pos_transform != 'hwd->(hw)d':
      raise ValueError(
          f"PositionalEmbedding2D {self.name!r}: only `pos_transform`="
          f"'hwd->(hw)d' is supported, got {self.pos_transform!r}."
      )

  def __call__(
      self, seq_length: int | None = None, position: JTensor | None = None
  ) -> JTensor:
    """[1, prepend + h * w + append, D]; the arguments are ignored."""
    del seq_length, position
    emb = sinusoidal_2d_position_embedding(self.h, self.w, self.embedding_dims)
    pad = [(self.num_prepend_cls_tokens, self.num_append_cls_tokens), (0, 0)]
    return jnp.pad(emb, pad)[None].astype(self.fprop_dtype)


class RotaryPositionalEmbedding(PositionalEmbedding):
  """Rotary position embedding (arXiv:2104.09864) of [B, T, N, H] inputs.

  Attributes:
    cast_as_fprop_dtype: Return `fprop_dtype` outputs.
  """

  cast_as_fprop_dtype: bool = True

  def setup(self) -> None:
    super().setup()
    if self.embedding_dims % 2:
      raise ValueError(
          f'RotaryPositionalEmbedding {self.name!r}: `embedding_dims` must be '
          f'even, got {self.embedding_dims}.'
      )

  def __call__(  # pytype: disable=signature-mismatch
      self, inputs: JTensor, position: JTensor | None = None
  ) -> JTensor:
    """Rotates `inputs` [B, T, N, H] by `position` [B, T] (default 0..T-1)."""
    if inputs.ndim != 4 or inputs.shape[-1] != self.embedding_dims:
      raise ValueError(
          f'RotaryPositionalEmbedding {self.name!r}: inputs must be [B, T, N, '
          f'{self.embedding_dims}], got {inputs.shape}.'
      )
    if position is None:
      position = jnp.arange(inputs.shape[1], dtype=jnp.float32)[None, :]
    out = apply_rotary_position_embedding(
        inputs, position, self.min_timescale, self.max_timescale
    )
    return out.astype(self.fprop_dtype) if self.cast_as_fprop_dtype else out

  def extend_step(
      self, inputs: JTensor, position: int | JTensor | None = None
  ) -> JTensor:
    """Rotates the last P steps [B, P, N, H] (or one step [B, N, H]).

    Args:
      inputs: [B, N, H] or [B, P, N, H].
      position: Position of the last step, a scalar or [B]; the P steps are
        at position - P + 1 ... position (clipped at 0).

    Returns:
      The rotated inputs, shaped like `inputs`.
    """
    if inputs.ndim not in (3, 4):
      raise ValueError(f'extend_step: inputs must be rank 3 or 4, got '
                       f'{inputs.shape}.')
    one_step = inputs.ndim == 3
    x = inputs[:, None] if one_step else inputs
    steps = jax.lax.iota(jnp.int32, x.shape[1])
    last = jnp.broadcast_to(jnp.asarray(position), (x.shape[0],))[:, None]
    positions = jnp.maximum(last - jnp.flip(steps)[None, :], 0)
    out = self(x, position=positions)
    return out[:, 0] if one_step else out


class TrainablePositionalEmbedding(PositionalEmbedding):
  """Learned position embeddings `emb_var` [max_seq_length, embedding_dims].

  Attributes:
    max_seq_length: Number of positions.
    lookup_style: 'index' (gather) or 'matmul' (one-hot matmul).
    array_lookup_tpl: The gather op ('index'; child `array_lookup`).
    einsum_tpl: The einsum op ('matmul'; child `einsum`).
  """

  max_seq_length: int = 10_240
  lookup_style: str = 'matmul'
  array_lookup_tpl: LayerTpl = template_field(base_ops.ArrayLookup)
  einsum_tpl: LayerTpl = template_field(base_ops.EinsumOp)

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      emb_out_split_dims_mapping: Split of the embeddings.
    """

    emb_out_split_dims_mapping: SplitDimsMapping = None

  def setup(self) -> None:
    super().setup()
    _require_positive(self, 'max_seq_length')
    _require_lookup_style(self)
    self.create_variable(
        'emb_var',
        WeightHParams(
            shape=[self.max_seq_length, self.embedding_dims],
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )
    self.create_child('array_lookup', self.array_lookup_tpl.clone())
    self.create_child('einsum', self.einsum_tpl.clone())

  def __call__(
      self, seq_length: int | None = None, position: JTensor | None = None
  ) -> JTensor:
    """[1, seq_length, D] rows of `emb_var`, or [B, T, D] for `position`."""
    position = self._positions(seq_length, position)
    if seq_length is None and self.lookup_style == 'matmul':
      seq_length = position.shape[1]  # As Pax; 'index' reads the whole table.
    if seq_length is not None and seq_length > self.max_seq_length:
      raise ValueError(
          f'TrainablePositionalEmbedding {self.name!r}: seq_length '
          f'{seq_length} exceeds `max_seq_length`={self.max_seq_length}.'
      )
    table = self.theta.emb_var[:seq_length]  # [:None]: the whole table.
    embs = embedding_lookup(table, position.astype(jnp.int32),
                            self.lookup_style, self.array_lookup,
                            self.einsum)
    return base_layer.maybe_shard(
        embs.astype(self.fprop_dtype),
        self.activation_split_dims_mapping.emb_out_split_dims_mapping,
        self.mesh_axis_names,
    )
