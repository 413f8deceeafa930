"""Helpers shared by the decoding algorithms (sample decode, beam search).

Public names:
  types: ExtendStepFn, ExpandedExtendStepFn, FPropFn, TransformStateFn,
    LazyBroadcastPrefixFn, ProcessResultFn;
  config: StreamingResultCallback, ControlledDecodingHParams, DUMMY_PRNG_KEY;
  scoring: length_norm, gather_output_id, gather_logprobs, two_stage_topk;
  decode-state transforms (functions `(state, batch_dim, time_dim) -> state`
    handed to a model's `transform_decode_state`): pad_state_fn,
    slice_state_fn, batch_broadcast_state_fn, right_align_state_fn;
  alignment: right_align_tensors, left_align_tensor, left_align_kv_cache,
    concat_suffix_and_left_align;
  end of sequence: has_any_eos, end_with_sequences,
    end_with_any_sequence_any_position, find_first_new_stop_seq_match,
    collect_results_to_optimize_eos;
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

# A per-example key whose every entry is this value means "no key given: use
# the model's RNG stream" (the value Pax uses).
DUMMY_PRNG_KEY = 15753


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
    logits: [B, K, V] (or [B * K, V]) log-probabilities of the next token of
      each hypothesis.
    hyp_scores: [B, K] scores of the hypotheses.
    terminal_ids: Tokens whose extensions are pushed down by 1e9.
    tokens_per_beam: Tokens kept per hypothesis in the first stage (None: K).

  Returns:
    (topk_value, topk_indices) [B, K * tokens_per_beam]: the candidates'
    scores and token ids; (final_topk_value, final_topk_indices) [B, K]: the
    best K candidates' scores and positions among the candidates (position //
    tokens_per_beam is the hypothesis they extend).
  """
  b, k = hyp_scores.shape
  n = tokens_per_beam or k
  value, indices = jax.lax.top_k(logits.reshape(b, k, logits.shape[-1]), n)
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


def has_any_eos(arr: JTensor,
                eos_ids: int | Sequence[int] | JTensor) -> JTensor:
  """Whether each entry of `arr` is (one of) `eos_ids`."""
  eos = jnp.atleast_1d(jnp.asarray(eos_ids, jnp.int32))
  return jnp.any(arr[..., None] == eos, axis=-1)


def _ends_with(stop_sequence: JTensor, output_ids: JTensor,
               decode_step: int | JTensor) -> JTensor:
  """Whether `output_ids[:decode_step + 1]` ends with `stop_sequence`.

  Both are 1-D; `stop_sequence` is left-padded with 0s, which match anything
  (so an all-0 stop sequence always matches, as in Pax).
  """
  length = stop_sequence.shape[0]
  padded = jnp.pad(output_ids, (length, 0))
  window = jax.lax.dynamic_slice_in_dim(
      padded, jnp.asarray(decode_step, jnp.int32) + 1, length)
  return jnp.all((window == stop_sequence) | (stop_sequence == 0))


def end_with_sequences(
    stop_sequences: JTensor, output_ids: JTensor, decode_step: int | JTensor
) -> JTensor:
  """Whether `output_ids[b, :decode_step + 1]` ends with `stop_sequences[b]`.

  Args:
    stop_sequences: [B, L] stop sequences, left-padded with 0s (a 0 matches
      any token).
    output_ids: [B, T].
    decode_step: Index of the last decoded token.

  Returns:
    [B] booleans.
  """
  return jax.vmap(_ends_with, in_axes=(0, 0, None))(
      stop_sequences, output_ids, decode_step)


def end_with_any_sequence_any_position(
    stop_sequence: JTensor, output_ids: JTensor, decode_step: JTensor
) -> JTensor:
  """For every example, position and stop sequence: does a match end there?

  Args:
    stop_sequence: [B, S, L] stop sequences, left-padded with 0s.
    output_ids: [B, T].
    decode_step: [B, P] positions (the index of a match's last token).

  Returns:
    [B, P, S] booleans.
  """
  per_seq = jax.vmap(_ends_with, in_axes=(0, None, None))
  per_pos = jax.vmap(per_seq, in_axes=(None, None, 0))
  return jax.vmap(per_pos)(stop_sequence, output_ids, decode_step)


def find_first_new_stop_seq_match(
    first_new_decode_idx: JTensor,
    num_new_tokens: int,
    stop_sequences: JTensor,
    sequences: JTensor,
) -> JTensor:
  """Where the first stop sequence ends among the newly decoded tokens.

  Example: with first_new_decode_idx [2], num_new_tokens 2, stop sequence
  [3, 4, 5] and sequence [2, 3, 4, 5], the match ends at index 3, one past
  the first new token: the result is [1].

  Args:
    first_new_decode_idx: [B] index of each example's first new token.
    num_new_tokens: How many new tokens to look at.
    stop_sequences: [B, S, L] stop sequences, left-padded with 0s.
    sequences: [B, T].

  Returns:
    [B] offsets from first_new_decode_idx of the first position where any
    stop sequence ends; num_new_tokens where none does.
  """
  positions = first_new_decode_idx[:, None] + jnp.arange(num_new_tokens)
  hit = jnp.any(end_with_any_sequence_any_position(
      stop_sequences, sequences, positions), axis=-1)
  # The number of leading positions without a hit.
  return jnp.sum(jnp.cumprod(1 - hit.astype(jnp.int32), axis=1), axis=1)


def left_align_kv_cache(
    x: JTensor,
    prefix_lengths: JTensor,
    max_prefix_len: int,
    pad_value: float = 0.0,
    batch_size: int = 1,
) -> JTensor:
  """`left_align_tensor` for a KV cache [B, T, N, H] or [B, T, H].

  Row b is shifted left by `max_prefix_len - prefix_lengths[b]` along T,
  `pad_value` filling the end.

  Args:
    x: [B, T, N, H] or [B, T, H].
    prefix_lengths: [B].
    max_prefix_len: Where every prefix ends.
    pad_value: Value filled in at the end.
    batch_size: How many leading rows to align (Pax's argument; x.shape[0]
      for all of them).

  Returns:
    x with its first `batch_size` rows left-aligned.
  """
  if x.ndim not in (3, 4):
    raise ValueError(f'left_align_kv_cache takes [B, T, N, H] or [B, T, H], '
                     f'got {x.shape}.')
  if not 0 < batch_size <= x.shape[0]:
    raise ValueError(f'left_align_kv_cache: batch_size {batch_size} must be '
                     f'in [1, {x.shape[0]}] for x of shape {x.shape}.')
  t = x.shape[1]

  def one(row: JTensor, length: JTensor) -> JTensor:
    pads = [(0, max_prefix_len)] + [(0, 0)] * (row.ndim - 1)
    padded = jnp.pad(row, pads, constant_values=pad_value)
    return jax.lax.dynamic_slice_in_dim(padded, max_prefix_len - length, t)

  aligned = jax.vmap(one)(x[:batch_size], prefix_lengths[:batch_size])
  return x.at[:batch_size].set(aligned.astype(x.dtype))


def concat_suffix_and_left_align(
    decoded_tensors: JTensor,
    suffix_tensors: JTensor,
    decode_end_indices: JTensor,
    prefix_lengths: JTensor,
    max_prefix_len: int,
    num_samples: int,
    num_suffix: int,
    pad_value: float,
) -> JTensor:
  """Writes each suffix after its decoded row, then left-aligns the rows.

  With max_prefix_len 6, a row [0, 0, 0, 0, P, P, X, X, X, 0, 0, 0] (prefix
  length 2, decoding ending at 9) and suffix [S, S] becomes
  [P, P, X, X, X, S, S, 0, 0, 0, 0, 0, 0, 0].

  Args:
    decoded_tensors: [B * num_samples, T].
    suffix_tensors: [B * num_samples * num_suffix, L]; the suffixes of each
      decoded row are consecutive.
    decode_end_indices: [B * num_samples] where each row's decoding ends.
    prefix_lengths: [B * num_samples].
    max_prefix_len: Where every prefix ends.
    num_samples: Samples per example.
    num_suffix: Suffixes per sample.
    pad_value: Value filled in at the end.

  Returns:
    [B, num_suffix, num_samples, T + L].
  """
  rows, length = suffix_tensors.shape
  decoded = jnp.repeat(decoded_tensors, num_suffix, axis=0)
  decoded = jnp.pad(decoded, [(0, 0), (0, length)],
                    constant_values=pad_value)
  ends = jnp.repeat(decode_end_indices, num_suffix, axis=0)
  joined = jax.vmap(
      lambda row, suffix, at: jax.lax.dynamic_update_slice(row, suffix, [at])
  )(decoded, suffix_tensors.astype(decoded.dtype), ends)
  aligned = left_align_tensor(joined, jnp.repeat(prefix_lengths, num_suffix),
                              max_prefix_len, pad_value)
  aligned = aligned.reshape(rows // (num_samples * num_suffix), num_samples,
                            num_suffix, -1)
  return jnp.swapaxes(aligned, 1, 2)


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


def collect_results_to_optimize_eos(
    result: NestedMap, decode_length_shift: int = 0
) -> NestedMap:
  """Ends every row where ending with an EOS is most likely (optimize_eos).

  The loop recorded at every position t the best EOS id `eos_ids[:, t]` and
  its log-probability `eos_logprobs[:, t]` next to the token it chose. Ending
  at t scores `sum(logprobs[:, start_step + 1:t]) + eos_logprobs[:, t]` for
  t > start_step; the best t gets the EOS, and everything after it is cleared
  (ids 0, logprobs 1.0).

  Args:
    result: The loop state: logprobs, eos_logprobs, output_ids, eos_ids
      ([B, T]), done, has_eos ([B]), start_step.
    decode_length_shift: Subtracted from the new decode_lengths (best t + 1).

  Returns:
    A copy with output_ids, logprobs, decode_lengths updated, done and
    has_eos all True, without eos_logprobs and eos_ids.
  """
  new = result.DeepCopy()
  t = jnp.arange(new.logprobs.shape[1])
  decoded = t <= result.start_step
  before = jnp.where(decoded, 0.0, jnp.cumsum(new.logprobs, axis=-1))
  eos_lp = jnp.where(decoded, py_utils.get_large_negative_number(jnp.float32),
                     new.eos_logprobs)
  end_scores = jnp.pad(before, [(0, 0), (1, 0)])[:, :-1] + eos_lp
  best = jnp.argmax(end_scores, axis=-1)
  rows = jnp.arange(new.output_ids.shape[0])
  after = t[None, :] > best[:, None]
  ids = new.output_ids.at[rows, best].set(
      new.eos_ids[rows, best].astype(new.output_ids.dtype))
  new.output_ids = jnp.where(after, 0, ids)
  logprobs = new.logprobs.at[rows, best].set(new.eos_logprobs[rows, best])
  new.logprobs = jnp.where(after, 1.0, logprobs).astype(new.logprobs.dtype)
  new.decode_lengths = best + 1 - decode_length_shift
  new.done = jnp.ones_like(new.done)
  new.has_eos = jnp.ones_like(new.has_eos)
  del new.eos_logprobs
  del new.eos_ids
  return new
