"""Beam search with a model's `extend_step`.

Public names: beam_search, beam_search_after_prefix_fprop, update_global_beam,
shuffle_state, broadcast_beam_dim, default_compute_logprobs_fn.

The prefixes, right-aligned, go through one forward pass (`fprop_fn`); the
caches are then padded by `max_decode_steps`, repeated `beam_size` times and
reordered after every step to follow the surviving hypotheses. At every
step each live hypothesis, ended with its best EOS, competes for the final
beam with the score `sum(log p) / ((length + 5) / 5) ** length_norm_alpha`
(length = tokens generated, EOS included); the K best extensions without
EOS go on (with `early_exit`, EOS extensions go on too, marked done, and the
loop stops when all are). Hypotheses still live at the end are dropped, as
in Pax, so every result ends with an EOS (max_decode_steps counts it):

  result = beam_search.beam_search(
      self.lm, extend_step_fn, fprop_fn, transform_state_fn, prefix_ids,
      prefix_paddings, decoder_hparams.BeamSearchHParams(
          beam_size=4, max_decode_steps=8, eos_id=2, fprop_for_prefix=True))
  result.output_ids  # [B, 4, P + 8], best first; result.scores [B, 4]
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

from flax import linen as nn
import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
BeamSearchHParams = decoder_hparams.BeamSearchHParams
# (ids [B, K, T], lengths [B, K], scores [B, K], logprobs [B, K, T]).
GlobalBeam = tuple[JTensor, JTensor, JTensor, JTensor]
# fn(logits [B*K, V], model, ids [B*K], segment_pos [B*K], loop state)
#   -> log-probabilities [B*K, V].
ComputeLogprobsFn = Callable[
    [JTensor, base_layer.BaseLayer, JTensor, JTensor, NestedMap], JTensor
]

_NEG = -1e9


def update_global_beam(end_hyps: GlobalBeam, cur_hyps: GlobalBeam
                       ) -> GlobalBeam:
  """The best K of the finished hypotheses `end_hyps` and `cur_hyps`.

  Args:
    end_hyps: (ids, lengths, scores, logprobs) of K hypotheses per example.
    cur_hyps: The same for M new ones.

  Returns:
    The K best by score, best first.
  """
  k = end_hyps[0].shape[1]
  merged = [jnp.concatenate([a, c], axis=1) for a, c in zip(end_hyps,
                                                            cur_hyps)]
  scores, indices = jax.lax.top_k(merged[2], k)
  ids, lengths, _, logprobs = (shuffle_state(x, indices) for x in merged)
  return ids, lengths, scores, logprobs


def shuffle_state(x: Any, hyp_id: JTensor, use_one_hot_matmul: bool = False
                  ) -> Any:
  """`x[b, hyp_id[b, k]]` for x [B, K', ...] (x of rank < 2 unchanged)."""
  if not isinstance(x, jax.Array) or x.ndim < 2:
    return x
  if use_one_hot_matmul:
    one_hot = jax.nn.one_hot(hyp_id, x.shape[1], dtype=x.dtype)
    return jnp.einsum('bk...,bjk->bj...', x, one_hot)
  idx = hyp_id.reshape(hyp_id.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1)


def broadcast_beam_dim(x: JTensor, beam_dim: int, beam_size: int) -> JTensor:
  """Inserts dim `beam_dim` holding `beam_size` copies of `x`."""
  return jnp.repeat(jnp.expand_dims(x, beam_dim), beam_size, axis=beam_dim)


def default_compute_logprobs_fn(
    logits: JTensor,
    model: base_layer.BaseLayer,
    extend_ids: JTensor,
    segment_pos: JTensor,
    decode_loop_state: NestedMap,
) -> JTensor:
  """`log_softmax(logits)`."""
  del model, extend_ids, segment_pos, decode_loop_state
  return jax.nn.log_softmax(logits, axis=-1)


def _shuffle_state_fn(hyp_id: JTensor, beam_size: int, one_hot: bool,
                      lazy: bool = False):
  """A cache transform reordering states by hyp_id [B, K].

  The states are [B * K, ...] along their batch dim, or [B, K, ...] (`lazy`:
  lazily broadcast prefix states).
  """

  def fn(x: JTensor, batch_dim: int, time_dim: int) -> JTensor:
    del time_dim
    if lazy:
      return shuffle_state(x, hyp_id, one_hot)
    if batch_dim < 0:
      return x
    shape = list(x.shape)
    split = shape[:batch_dim] + [shape[batch_dim] // beam_size, beam_size]
    x = jnp.moveaxis(x.reshape(split + shape[batch_dim + 1:]), batch_dim, 0)
    x = jnp.moveaxis(shuffle_state(x, hyp_id, one_hot), 0, batch_dim)
    return x.reshape(shape)

  return fn


def _finished_here(val: NestedMap, logprobs: JTensor, eos: Sequence[int]
                   ) -> tuple[JTensor, JTensor, JTensor]:
  """Every hypothesis ended with its best EOS at step + 1.

  The EOS ids are tried in order; a later one replaces an earlier one only
  with a strictly higher score, and none is written (the score stays -1e9)
  when none beats -1e9.

  Returns:
    (ids [B, K, T], raw scores [B, K], logprobs [B, K, T]).
  """
  step = val.step
  scores = jnp.full_like(val.hyp_scores, _NEG)
  ids = val.output_ids[:, :, step + 1]
  lps = val.logprobs[:, :, step + 1]
  for eos_id in eos:
    candidate = val.hyp_scores + logprobs[:, :, eos_id]
    better = candidate > scores
    scores = jnp.maximum(scores, candidate)
    ids = jnp.where(better, eos_id, ids)
    lps = jnp.where(better, logprobs[:, :, eos_id], lps)
  return (val.output_ids.at[:, :, step + 1].set(ids), scores,
          val.logprobs.at[:, :, step + 1].set(lps))


def _step(model, val, hp, ctx):
  """From the ids at `step`, the hypotheses and finished ones at step + 1."""
  b, k = val.hyp_scores.shape
  step = val.step
  ids = val.output_ids[:, :, step].reshape(-1)
  logits = ctx.extend_fn(model, ids, val.segment_pos, val)
  logprobs = ctx.compute_logprobs_fn(
      logits.astype(jnp.float32), model, ids, val.segment_pos, val
  ).reshape(b, k, -1)
  if hp.min_decode_steps > 0:
    too_early = step < ctx.max_prefix_len - 1 + hp.min_decode_steps
    eos = jnp.array(ctx.eos)
    logprobs = logprobs.at[..., eos].set(
        jnp.where(too_early, -1e20, logprobs[..., eos]))
  # Every hypothesis, ended here with an EOS, competes for the final beam.
  generated = step + 2 - ctx.max_prefix_len
  end_ids, end_scores, end_logprobs = _finished_here(val, logprobs, ctx.eos)
  finished = (end_ids,
              jnp.broadcast_to(ctx.prefix_lengths + generated, (b, k)),
              end_scores / decoder_utils.length_norm(
                  generated, hp.length_norm_alpha), end_logprobs)
  val.end = update_global_beam(val.end, finished)
  # The best K extensions go on; EOS among them only with early_exit (which
  # marks them done).
  n = hp.tokens_per_beam or k
  _, top_ids, scores, positions = decoder_utils.two_stage_topk(
      logprobs, val.hyp_scores, [] if hp.early_exit else ctx.eos, n)
  hyp_id = positions // n
  new_ids = decoder_utils.gather_output_id(top_ids, positions)
  new_lp = decoder_utils.gather_logprobs(logprobs, hyp_id, new_ids)
  new_ids = new_ids + hp.output_id_offset
  one_hot = hp.use_matmul_beam_shuffle
  ctx.transform_state_fn(
      model, _shuffle_state_fn(hyp_id, k, one_hot, ctx.lazy))
  val.output_ids = shuffle_state(val.output_ids, hyp_id, one_hot).at[
      :, :, step + 1].set(new_ids)
  val.logprobs = shuffle_state(val.logprobs, hyp_id, one_hot).at[
      :, :, step + 1].set(new_lp)
  val.done = shuffle_state(val.done, hyp_id, one_hot) | (
      decoder_utils.has_any_eos(new_ids, ctx.eos))
  val.hyp_scores = scores
  val.hyp_ids = hyp_id
  val.step = step + 1
  val.segment_pos = val.segment_pos + 1
  return val


def _init_state(prefix_ids: JTensor, prefix_lengths: JTensor, k: int,
                seq_len: int) -> NestedMap:
  """The loop state: only hypothesis 0 is live; no finished ones yet."""
  b, p = prefix_ids.shape
  output_ids = jnp.pad(broadcast_beam_dim(prefix_ids.astype(jnp.int32), 1, k),
                       [(0, 0), (0, 0), (0, seq_len - p)])
  return NestedMap(
      step=jnp.array(p - 1, jnp.int32),
      output_ids=output_ids,
      logprobs=jnp.ones((b, k, seq_len), jnp.float32),
      hyp_scores=jnp.broadcast_to(_NEG * jnp.arange(k, dtype=jnp.float32),
                                  (b, k)),
      hyp_ids=jnp.zeros((b, k), jnp.int32),
      done=jnp.zeros((b, k), jnp.bool_),
      segment_pos=jnp.repeat(prefix_lengths - 1, k).astype(jnp.int32),
      end=(output_ids, jnp.full((b, k), seq_len, jnp.int32),
           jnp.full((b, k), _NEG, jnp.float32),
           jnp.zeros((b, k, seq_len), jnp.float32)),
  )


def beam_search_after_prefix_fprop(
    model: base_layer.BaseLayer,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    transform_state_fn: decoder_utils.TransformStateFn,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    beam_search_hparams: BeamSearchHParams,
    compute_logprobs_fn: ComputeLogprobsFn = default_compute_logprobs_fn,
    lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None = None,
) -> NestedMap:
  """`beam_search` once the caches hold the prefixes (same arguments)."""
  hp = beam_search_hparams
  if hp.max_decode_steps is None:
    raise ValueError('beam_search: set BeamSearchHParams.max_decode_steps.')
  if hp.beam_size < 1:
    raise ValueError(f'beam_search: beam_size must be >= 1, got '
                     f'{hp.beam_size}.')
  steps = sorted(hp.max_decode_steps if isinstance(hp.max_decode_steps,
                                                   Sequence)
                 else [hp.max_decode_steps])
  b, p = prefix_ids.shape
  k, seq_len = hp.beam_size, p + steps[-1]
  eos = tuple(hp.eos_id) if isinstance(hp.eos_id, Sequence) else (hp.eos_id,)
  if lazy_broadcast_prefix_fn is not None:
    # The last prefix token is fed again as the first step of the suffix.
    transform_state_fn(model, decoder_utils.slice_state_fn(0, -1))
    lazy_broadcast_prefix_fn(model, k, steps[0] + 1)
  else:
    transform_state_fn(model, decoder_utils.pad_state_fn(steps[0]))
    transform_state_fn(model, decoder_utils.batch_broadcast_state_fn(k))
  prefix_lengths = jnp.sum(1 - prefix_paddings.astype(jnp.int32), axis=1)
  ctx = NestedMap(
      extend_fn=decoder_utils.coerce_to_expanded_extend_step_fn(
          extend_step_fn),
      compute_logprobs_fn=compute_logprobs_fn,
      transform_state_fn=transform_state_fn,
      lazy=lazy_broadcast_prefix_fn is not None,
      eos=eos, max_prefix_len=p, prefix_lengths=prefix_lengths[:, None])
  val = _init_state(prefix_ids, prefix_lengths, k, seq_len)
  for i, stop in enumerate(steps):
    if i:
      transform_state_fn(model, decoder_utils.pad_state_fn(stop - steps[i - 1]))
    last = min(seq_len - 1, p + stop - 1)

    def cond_fn(model, val, last=last):
      del model
      go = val.step < last
      return go & ~jnp.all(val.done) if hp.early_exit else go

    val = nn.while_loop(
        cond_fn, lambda model, val: _step(model, val, hp, ctx), model, val,
        carry_variables=[base_layer.DECODE_CACHE],
        split_rngs={base_layer.RANDOM: True})
  return _result(val, prefix_ids, prefix_lengths, k)


def _result(val: NestedMap, prefix_ids: JTensor, prefix_lengths: JTensor,
            k: int) -> NestedMap:
  """The best finished hypotheses, left-aligned (Pax's result fields)."""
  b, p = prefix_ids.shape
  ids, lengths, scores, logprobs = val.end
  flat_lengths = jnp.repeat(prefix_lengths, k)

  def left_align(x):
    x = decoder_utils.left_align_tensor(x.reshape(b * k, -1), flat_lengths, p)
    return x.reshape(b, k, -1)

  beam_lengths = broadcast_beam_dim(prefix_lengths, 1, k)
  prefix = decoder_utils.left_align_tensor(prefix_ids, prefix_lengths, p)
  return NestedMap(
      output_ids=left_align(ids),
      logprobs=left_align(logprobs),
      end_logprobs=logprobs,
      scores=scores,
      decode_lengths=lengths,
      prefix_lengths=beam_lengths,
      original_lengths=beam_lengths,
      prefix_ids=prefix[:, None],
      done=val.done,
      hyp_ids=val.hyp_ids,
      segment_pos=val.segment_pos,
  )


def beam_search(
    model: base_layer.BaseLayer,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    fprop_fn: decoder_utils.FPropFn,
    transform_state_fn: decoder_utils.TransformStateFn,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    beam_search_hparams: BeamSearchHParams,
    compute_logprobs_fn: ComputeLogprobsFn = default_compute_logprobs_fn,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
    process_result_fn: decoder_utils.ProcessResultFn | None = None,
    lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None = None,
) -> NestedMap:
  """Beam search from right-aligned prefixes.

  Args:
    model: The (bound) model.
    extend_step_fn: `fn(model, ids [B*K], segment_pos [B*K][, loop_state])
      -> logits [B*K, V]`.
    fprop_fn: `fn(model, prefix_ids, prefix_paddings)` filling the caches.
    transform_state_fn: `fn(model, state_fn)` transforming the caches.
    prefix_ids: [B, P] right-aligned prefixes.
    prefix_paddings: [B, P], 1 on the left padding.
    beam_search_hparams: beam_size, max_decode_steps, eos_id,
      length_norm_alpha, min_decode_steps, tokens_per_beam, early_exit.
    compute_logprobs_fn: Log-probabilities from logits.
    decode_loop_mesh_axes_transpose: Mesh axis renames inside the loop.
    model_var_pspecs: Unused (variables are not resharded).
    process_result_fn: `fn(model, result) -> result` applied at the end.
    lazy_broadcast_prefix_fn: If given, `fn(model, K, steps + 1)` makes
      [B, K, ...] suffix states over the prefix states (minus their last
      step, which is fed again) instead of repeating the caches K times.

  Returns:
    NestedMap with output_ids [B, K, P + steps] (the finished hypotheses,
    left-aligned, best first), logprobs [B, K, P + steps] (1.0 after the
    EOS, 0.0 shifted in at the end), scores [B, K] (length-normalized),
    decode_lengths [B, K] (prefix included), prefix_lengths and
    original_lengths [B, K], prefix_ids [B, 1, P], and the last loop state's
    done, hyp_ids [B, K] and segment_pos [B * K].
  """
  del model_var_pspecs
  fprop_fn(model, prefix_ids, prefix_paddings)
  with decoder_utils.maybe_decode_mesh_transpose(
      model, decode_loop_mesh_axes_transpose):
    result = beam_search_after_prefix_fprop(
        model, extend_step_fn, transform_state_fn, prefix_ids,
        prefix_paddings, beam_search_hparams, compute_logprobs_fn,
        lazy_broadcast_prefix_fn)
    if process_result_fn is not None:
      result = process_result_fn(model, result)
  return result
