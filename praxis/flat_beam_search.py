"""Flat beam search: hypotheses as masks over a buffer of decoded tokens.

Public names: flat_beam_search, init_loop_var, update_beam_mask,
get_final_output_ids, update_topk_scores_with_eos, post_process.

Instead of reordering whole decoded sequences after every step, the tokens
decoded at step t for beam slot j stay at buffer position t * K + j (K the
beam size), and hypothesis k is a 0/1 mask [T * K] over the buffer marking
its tokens. Reordering the beam permutes the K masks (an einsum with a
one-hot [K, K]) and adds the new step's slot. Only the last token of each
prefix is used (prefix handling is still to come, as in Pax 1.4):

  result = flat_beam_search.flat_beam_search(
      model, extend_step_fn, prefix_ids, prefix_paddings, seq_len=8,
      beam_size=4, fprop_dtype=jnp.float32, eos_id=2)
  result.output_ids  # [B, 4, 8], best first; result.scores [B, 4]

`extend_step_fn(model, ids [B, K], None)` returns the log-probabilities of
the next token, [B, K, V] (or [B * K, V]).
"""

from __future__ import annotations

from typing import Any

from flax import linen as nn
import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
# (mask [B, K, T * K], scores [B, K], length-normalized scores [B, K]).
MaskedHyps = tuple[JTensor, JTensor, JTensor]

_NEG = -1e9


def init_loop_var(target_prefix_ids: JTensor, beam_size: int, seq_len: int,
                  fprop_dtype: Any) -> NestedMap:
  """The loop state before the first step.

  Args:
    target_prefix_ids: [B, P]; the last id of each row is the first input.
    beam_size: K.
    seq_len: T, the steps the buffer holds.
    fprop_dtype: The dtype of the masks and scores.

  Returns:
    NestedMap: step 0; output_ids [T, B, K] (step 0 holds the last prefix
    ids); beam_mask [B, K, T * K] (hypothesis k holds slot k of step 0);
    hyp_scores [B, K] (0 for hypothesis 0, -1e9 * k for the others);
    end_mask, end_scores, end_scores_norm (no finished hypotheses: -1e9);
    done [B, K].
  """
  b = target_prefix_ids.shape[0]
  k = beam_size
  first = jnp.broadcast_to(target_prefix_ids[:, -1:].astype(jnp.int32), (b, k))
  output_ids = jnp.zeros((seq_len, b, k), jnp.int32).at[0].set(first)
  beam_mask = jnp.broadcast_to(
      jax.nn.one_hot(jnp.arange(k), k * seq_len, dtype=fprop_dtype),
      (b, k, k * seq_len))
  end_scores = jnp.full((b, k), _NEG, fprop_dtype)
  return NestedMap(
      step=0,
      output_ids=output_ids,
      beam_mask=beam_mask,
      hyp_scores=jnp.broadcast_to(
          -1e9 * jnp.arange(k, dtype=fprop_dtype), (b, k)),
      end_mask=jnp.zeros((b, k, k * seq_len), fprop_dtype),
      end_scores=end_scores,
      end_scores_norm=end_scores,
      done=jnp.zeros((b, k), jnp.bool_),
  )


def update_beam_mask(beam_mask: JTensor, hyp_id: JTensor,
                     time_step: int | JTensor | None) -> JTensor:
  """New hypothesis j continues old hypothesis hyp_id[b, j].

  Args:
    beam_mask: [B, K, T * K].
    hyp_id: [B, K] the old hypothesis each new one extends.
    time_step: If not None, hypothesis j also takes slot j of this step
      (buffer position time_step * K + j).

  Returns:
    The new masks [B, K, T * K].
  """
  k, n = beam_mask.shape[1], beam_mask.shape[2]
  idx = hyp_id.astype(jnp.int32)[:, :, None]
  new = jnp.take_along_axis(beam_mask, idx, axis=1)
  if time_step is not None:
    new = new + jax.nn.one_hot(jnp.arange(k) + time_step * k, n,
                               dtype=beam_mask.dtype)
  return new


def get_final_output_ids(beam_mask: JTensor, output_ids: JTensor
                         ) -> JTensor:
  """The token sequence each mask selects.

  Args:
    beam_mask: [B, K, T * K]; position t * K + j marks slot j of step t.
    output_ids: [B, K, T]: output_ids[b, j, t] is the token of slot j at
      step t.

  Returns:
    [B, K, T] int32: out[b, n, t] = the token of the slot hypothesis n holds
    at step t (0 where it holds none).
  """
  b, k, t = output_ids.shape
  mask = beam_mask.reshape(b, k, t, k).astype(jnp.int32)
  return jnp.einsum('bjt,bntj->bnt', output_ids.astype(jnp.int32),
                    mask).astype(jnp.int32)


def update_topk_scores_with_eos(end_hyps: MaskedHyps, cur_hyps: MaskedHyps
                                ) -> MaskedHyps:
  """The best K of both sets by normalized score, best first.

  Args:
    end_hyps: (mask [B, K, N], scores [B, K], scores_norm [B, K]).
    cur_hyps: The same for M candidates.

  Returns:
    (mask, scores, scores_norm) of the K best.
  """
  mask, scores, norm = (jnp.concatenate([e, c], axis=1)
                        for e, c in zip(end_hyps, cur_hyps))
  best_norm, idx = jax.lax.top_k(norm, end_hyps[0].shape[1])
  best_mask = jnp.take_along_axis(mask, idx[:, :, None], axis=1)
  return best_mask, jnp.take_along_axis(scores, idx, axis=1), best_norm


def post_process(result: NestedMap, eos_id: int, max_decoding_steps: int
                 ) -> NestedMap:
  """The finished hypotheses as sequences, with their EOS written.

  Args:
    result: The final loop state.
    eos_id: Written after each hypothesis's tokens.
    max_decoding_steps: Lengths are capped here (it must equal seq_len for
      the EOS to be written).

  Returns:
    result with output_ids [B, K, T], decode_lengths [B, K] (tokens of the
    hypothesis, step-0 token and EOS included, capped) and scores (the
    normalized ones); step, done and end_scores_norm removed.
  """
  ids = get_final_output_ids(result.end_mask,
                             jnp.transpose(result.output_ids, (1, 2, 0)))
  lengths = jnp.sum(result.end_mask, axis=-1).astype(jnp.int32)
  result.output_ids = ids + eos_id * jax.nn.one_hot(
      lengths, max_decoding_steps, dtype=jnp.int32)
  result.decode_lengths = jnp.minimum(lengths + 1, max_decoding_steps)
  result.scores = result.end_scores_norm
  del result.step, result.done, result.end_scores_norm
  return result


def _step(model: Any, val: NestedMap, extend_step_fn: Any, eos_id: int,
          length_norm_alpha: float) -> NestedMap:
  """From the ids at `step`, the hypotheses and finished ones at step + 1."""
  b, k = val.hyp_scores.shape
  step = val.step
  logprobs = extend_step_fn(model, val.output_ids[step], None)
  logprobs = logprobs.reshape(b, k, -1)
  # Every hypothesis, ended with EOS here, competes for the final beam.
  eos_scores = val.hyp_scores + logprobs[:, :, eos_id]
  norm = decoder_utils.length_norm(step + 1, length_norm_alpha)
  val.end_mask, val.end_scores, val.end_scores_norm = (
      update_topk_scores_with_eos(
          (val.end_mask, val.end_scores, val.end_scores_norm),
          (val.beam_mask, val.hyp_scores, eos_scores / norm)))
  # The best K extensions without EOS go on.
  _, top_ids, scores, positions = decoder_utils.two_stage_topk(
      logprobs, val.hyp_scores, [eos_id])
  hyp_id = positions // k
  val.hyp_scores = scores
  val.beam_mask = update_beam_mask(val.beam_mask, hyp_id, step + 1)
  new_ids = decoder_utils.gather_output_id(top_ids, positions)
  new_ids = jnp.where(val.done, 0, new_ids)
  val.done = val.done | (new_ids == eos_id)
  val.output_ids = val.output_ids.at[step + 1].set(new_ids)
  val.step = step + 1
  return val


def flat_beam_search(
    model: base_layer.BaseLayer,
    extend_step_fn: decoder_utils.ExtendStepFn,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    beam_size: int,
    fprop_dtype: Any,
    max_decode_steps: int | None = None,
    eos_id: int | None = None,
    length_norm_alpha: float = 0.8,
) -> NestedMap:
  """Beam search from the last token of each prefix (see the module doc).

  Args:
    model: The (bound) model; its `decoder_cache` is carried through steps.
    extend_step_fn: `fn(model, ids [B, K], None)` -> log-probabilities
      [B, K, V] (or [B * K, V]) of the next token.
    prefix_ids: [B, P]; only the last column is used.
    prefix_paddings: Unused.
    seq_len: T, the length of the outputs (the first input included).
    beam_size: K.
    fprop_dtype: The dtype of the masks and scores.
    max_decode_steps: Caps decode_lengths (default seq_len; the EOS is only
      written when it equals seq_len).
    eos_id: The end-of-sequence id (required).
    length_norm_alpha: Scores are divided by ((t + 5) / 5) ** alpha.

  Returns:
    NestedMap: output_ids [B, K, T] (best first), decode_lengths [B, K],
    scores [B, K] (normalized), end_scores [B, K], and the loop's masks,
    hyp_scores.
  """
  del prefix_paddings
  if seq_len <= 0:
    raise ValueError(f'flat_beam_search: seq_len must be > 0, got {seq_len}.')
  if eos_id is None:
    raise ValueError('flat_beam_search: eos_id is required.')
  max_decode_steps = max_decode_steps or seq_len
  val = init_loop_var(prefix_ids, beam_size, seq_len, fprop_dtype)

  def cond_fn(model, val):
    del model
    return (val.step < seq_len - 1) & ~jnp.all(val.done)

  def body_fn(model, val):
    return _step(model, val, extend_step_fn, eos_id, length_norm_alpha)

  val.step = jnp.asarray(val.step, jnp.int32)
  result = nn.while_loop(cond_fn, body_fn, model, val,
                         carry_variables=[base_layer.DECODE_CACHE])
  return post_process(result, eos_id, max_decode_steps)
