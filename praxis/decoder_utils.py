"""Helpers shared by the decoding algorithms (sample decode, beam search).

Public names:
  types: ExtendStepFn, ExpandedExtendStepFn, FPropFn, TransformStateFn,
    LazyBroadcastPrefixFn, ProcessResultFn;
  config: StreamingResultCallback, ControlledDecodingHParams, DUMMY_PRNG_KEY;
  scoring: length_norm, gather_output_id, gather_logprobs, two_stage_topk;
  decode-state transforms (functions `(state, batch_dim, time_dim) -> state`
    handed to a model's `transform_decode_state`): pad_state_fn,
    slice_state_fn, batch_broadcast_state_fn, right_align_state_fn;
  alignment: right_align_tensors, left_align_tensor;
  end of sequence: has_any_eos, end_with_sequences;
  coerce_to_expanded_extend_step_fn, maybe_decode_mesh_transpose.

A decoding loop runs `extend_step_fn(model, ids, segment_pos)` for one step;
the prefix is either fed step by step or run once with `fprop_fn`, after which
`transform_state_fn(model, pad_state_fn(n))` makes room in the caches:

  transform_state_fn(model, decoder_utils.pad_state_fn(4))
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import inspect
from typing import Any

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
DecodeStateTransformFn = Callable[[JTensor, int, int], JTensor]

# extend_step_fn(model, ids [B], segment_pos [B]) -> logits [B, V].
ExtendStepFn = Callable[[base_layer.BaseLayer, JTensor, JTensor], JTensor]
# The same, also given the loop state.
ExpandedExtendStepFn = Callable[
    [base_layer.BaseLayer, JTensor, JTensor, NestedMap], JTensor
]
# fprop_fn(model, prefix_ids, prefix_paddings) fills the decoder caches.
FPropFn = Callable[[base_layer.BaseLayer, JTensor, JTensor], None]
# transform_state_fn(model, fn) applies fn to every decoder cache.
TransformStateFn = Callable[[base_layer.BaseLayer, DecodeStateTransformFn],
                            None]
LazyBroadcastPrefixFn = Callable[[base_layer.BaseLayer, int, int], None]
# process_result_fn(model, result) post-processes the decoding results.
ProcessResultFn = Callable[[base_layer.BaseLayer, NestedMap], NestedMap]

# A key meaning "no per-example key given: use the model's RNG stream".
DUMMY_PRNG_KEY = 0


@dataclasses.dataclass(frozen=True)
class StreamingResultCallback:
  """Callbacks for streaming decoding results (not called by our loops).

  Attributes:
    callback_fn: Called with partial results every `interval_steps` steps.
    interval_steps: Steps between calls.
    init_fn: Called with the batch shape before decoding.
    done_fn: Called after decoding.
  """

  callback_fn: Callable[[NestedJTensor], None]
  interval_steps: int = 1
  init_fn: Callable[[int | Sequence[int]], None] | None = None
  done_fn: Callable[[], None] | None = None


@dataclasses.dataclass
class ControlledDecodingHParams:
  """Blockwise controlled decoding (not supported by our loops).

  Attributes:
    interval: Steps between reranking (0: disabled).
    block_num_samples: Samples per block.
  """

  interval: int = 0
  block_num_samples: int = 0


def length_norm(t: JTensor, length_norm_alpha: float) -> JTensor:
  """The beam-search length penalty ((t + 5) / 5) ** length_norm_alpha."""
  return jnp.power((jnp.asarray(t, jnp.float32) + 5.0) / 5.0,
                   length_norm_alpha)


def gather_output_id(long_output_ids: JTensor, topk_indices: JTensor
                     ) -> JTensor:
  """`long_output_ids[b, topk_indices[b, k]]`: [B, N], [B, K] -> [B, K]."""
  return jnp.take_along_axis(long_output_ids, topk_indices, axis=-1).astype(
      jnp.int32)


def gather_logprobs(logprobs: JTensor, hyp_ids: JTensor, ids: JTensor
                    ) -> JTensor:
  """`logprobs[b, hyp_ids[b, k], ids[b, k]]`: [B, K, V] -> [B, K]."""
  per_hyp = jnp.take_along_axis(logprobs, hyp_ids[..., None], axis=1)
  return jnp.take_along_axis(per_hyp, ids[..., None], axis=-1)[..., 0]


def two_stage_topk(
    logits: JTensor,
    hyp_scores: JTensor,
    terminal_ids: Sequence[int],
    tokens_per_beam: int | None = None,
) -> tuple[JTensor, JTensor, JTensor, JTensor]:
  """The best K extensions of K hypotheses, via a top-k within each first.

  Args:
    logits: [B, K, V] log-probabilities of the next token of each hypothesis.
    hyp_scores: [B, K] scores of the hypotheses.
    terminal_ids: Tokens whose extensions are pushed down by 1e9.
    tokens_per_beam: Tokens kept per hypothesis in the first stage (None: K).

  Returns:
    (topk_value, topk_indices) [B, K * tokens_per_beam]: the candidates'
    scores and token ids; (final_topk_value, final_topk_indices) [B, K]: the
    best K candidates' scores and positions among the candidates (position //
    tokens_per_beam is the hypothesis they extend).
  """
  b, k, _ = logits.shape
  n = tokens_per_beam or k
  value, indices = jax.lax.top_k(logits, n)
  value = value + hyp_scores[..., None]
  for terminal_id in terminal_ids:
    value = value - 1e9 * (indices == terminal_id).astype(value.dtype)
  value, indices = value.reshape(b, k * n), indices.reshape(b, k * n)
  final_value, final_indices = jax.lax.top_k(value, k)
  return value, indices, final_value, final_indices


def pad_state_fn(state_padding_size: int) -> DecodeStateTransformFn:
  """Pads a state's time dim with `state_padding_size` zeros at the end."""

  def fn(x: JTensor, batch_dim: int, time_dim: int) -> JTensor:
    del batch_dim
    if time_dim < 0 or state_padding_size <= 0:
      return x
    pads = [(0, state_padding_size if d == time_dim else 0)
            for d in range(x.ndim)]
    return jnp.pad(x, pads)

  return fn


def slice_state_fn(slice_start: int, slice_limit: int
                   ) -> DecodeStateTransformFn:
  """Keeps time steps [slice_start, slice_limit) (negative: from the end)."""

  def fn(x: JTensor, batch_dim: int, time_dim: int) -> JTensor:
    del batch_dim
    if time_dim < 0:
      return x
    n = x.shape[time_dim]
    start = slice_start + n if slice_start < 0 else slice_start
    limit = slice_limit + n if slice_limit < 0 else slice_limit
    return jax.lax.slice_in_dim(x, start, limit, axis=time_dim)

  return fn


def batch_broadcast_state_fn(multiplier: int) -> DecodeStateTransformFn:
  """Repeats each example `multiplier` times along the batch dim."""

  def fn(x: JTensor, batch_dim: int, time_dim: int) -> JTensor:
    del time_dim
    if batch_dim < 0:
      return x
    return jnp.repeat(x, multiplier, axis=batch_dim)

  return fn


def right_align_tensors(x: JTensor, lengths: JTensor, align_dim: int = 1
                        ) -> JTensor:
  """Moves the first `lengths[b]` entries of each row to the row's end.

  [P, P, 0, 0] with length 2 becomes [0, 0, P, P].

  Args:
    x: [B, ..., T, ...], left-aligned along `align_dim`.
    lengths: [B] valid lengths.
    align_dim: The time dim (>= 1).

  Returns:
    x right-aligned, with zeros before.
  """
  if not 1 <= align_dim < x.ndim:
    raise ValueError(f'right_align_tensors: align_dim {align_dim} must be in '
                     f'[1, {x.ndim}) for x of shape {x.shape}.')
  t = x.shape[align_dim]

  def one(row: JTensor, length: JTensor) -> JTensor:
    axis = align_dim - 1
    pads = [(t, 0) if d == axis else (0, 0) for d in range(row.ndim)]
    return jax.lax.dynamic_slice_in_dim(jnp.pad(row, pads), length, t, axis)

  return jax.vmap(one)(x, lengths)


def right_align_state_fn(seq_lengths: JTensor) -> DecodeStateTransformFn:
  """Right-aligns states along their time dim (see right_align_tensors)."""

  def fn(x: JTensor, batch_dim: int, time_dim: int) -> JTensor:
    del batch_dim
    if time_dim < 0:
      return x
    return right_align_tensors(x, seq_lengths, time_dim)

  return fn


def left_align_tensor(
    x: JTensor,
    prefix_lengths: JTensor,
    max_prefix_len: int,
    pad_value: float = 0.0,
) -> JTensor:
  """Turns rows whose prefix ends at `max_prefix_len` into left-aligned rows.

  [0, 0, P, P, X, X] (prefix length 2, max_prefix_len 4) becomes
  [P, P, X, X, 0, 0].

  Args:
    x: [B, T].
    prefix_lengths: [B].
    max_prefix_len: Where every prefix ends.
    pad_value: Value filled in at the end.

  Returns:
    The left-aligned [B, T].
  """
  if x.ndim != 2:
    raise ValueError(f'left_align_tensor takes [B, T], got {x.shape}.')
  t = x.shape[1]

  def one(row: JTensor, length: JTensor) -> JTensor:
    padded = jnp.pad(row, (0, max_prefix_len), constant_values=pad_value)
    return jax.lax.dynamic_slice_in_dim(padded, max_prefix_len - length, t)

  return jax.vmap(one)(x, prefix_lengths)


def has_any_eos(x: JTensor, eos_id: int | Sequence[int] | JTensor) -> JTensor:
  """Whether each entry of `x` is (one of) `eos_id`."""
  eos = jnp.atleast_1d(jnp.asarray(eos_id, jnp.int32))
  return jnp.any(x[..., None] == eos, axis=-1)


def end_with_sequences(
    end_sequences: JTensor, output_ids: JTensor, decode_step: int | JTensor
) -> JTensor:
  """Whether `output_ids[b, :decode_step + 1]` ends with `end_sequences[b]`.

  Args:
    end_sequences: [B, L] stop sequences, left-padded with 0s.
    output_ids: [B, T].
    decode_step: Index of the last decoded token.

  Returns:
    [B] booleans.
  """
  length = end_sequences.shape[1]
  padded = jnp.pad(output_ids, [(0, 0), (length, 0)])
  window = jax.lax.dynamic_slice_in_dim(
      padded, jnp.asarray(decode_step, jnp.int32) + 1, length, axis=1)
  match = (window == end_sequences) | (end_sequences == 0)
  return jnp.all(match, axis=1) & jnp.any(end_sequences != 0, axis=1)


def coerce_to_expanded_extend_step_fn(
    extend_step_fn: ExtendStepFn | ExpandedExtendStepFn,
) -> ExpandedExtendStepFn:
  """A 4-argument extend_step_fn (with the loop state) from either form."""
  params = inspect.signature(extend_step_fn).parameters
  if len(params) >= 4:
    return extend_step_fn  # pytype: disable=bad-return-type

  def expanded(model, ids, segment_pos, decode_loop_state):
    del decode_loop_state
    return extend_step_fn(model, ids, segment_pos)

  return expanded


def maybe_decode_mesh_transpose(
    model: base_layer.BaseLayer, mesh_transpose: dict[str, str] | None
) -> Any:
  """A JaxContext renaming mesh axes as `mesh_transpose` says, if given."""
  context = base_layer.JaxContext.top()
  hparams = (context.hparams.clone() if context
             else base_layer.JaxContext.HParams())
  if mesh_transpose is not None and not model.is_initializing():
    hparams.mesh_axes_transpose = mesh_transpose
  return base_layer.JaxContext.new_context(hparams=hparams)
