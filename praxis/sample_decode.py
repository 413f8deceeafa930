"""Sampling and greedy decoding with a model's `extend_step`.

Public names: sample_decode, sample_decode_after_fprop, greedy_decode,
vanilla_sample_decode, sample_init_decode_state, sample_decoding_step,
BaseSampleTerminationConstraint, split_batch_dim, reorder_with_indices,
sort_samples_by_scores, right_align_segment_position, right_align_prefix_ids,
MAX_NUM_PER_TOKEN_LOGPROBS, DUMMY_PRNG_KEY; re-exported from token_samplers:
BaseNextTokenSampler, DefaultNextTokenSampler, get_top_k, top_p_mask_logits,
epsilon_mask_logits, sample_from_top_k_and_top_p,
sample_from_top_p_given_top_k.

The loop (praxis/_sample_decode_loop.py) runs over the model, carrying its
`decoder_cache` and splitting its `random` stream per step: step t feeds
`output_ids[:, t]` to `extend_step_fn` and writes the chosen token at t + 1,
until `seq_len`, `max_decode_steps` or EOS in every row (without early exit,
a fixed-length `nn.scan` that also stacks the steps' summaries). Inside a
model method (e.g. `LanguageModel.decode`):

  result = sample_decode.greedy_decode(
      self.lm, extend_step_fn, prefix_ids, prefix_paddings, seq_len=16,
      fprop_fn=fprop_fn, transform_state_fn=transform_state_fn,
      prefix_lengths=prefix_lengths, eos_id=2)
  result.output_ids  # [B, 1, 16], prefix included

The prefix is fed either token by token (forced while t + 1 < its length) or,
with `fprop_for_prefix`, right-aligned through one forward pass; the outputs
are left-aligned either way.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import jax
from jax import numpy as jnp

from praxis import _sample_decode_loop as loop
from praxis import base_hyperparams
from praxis import base_layer
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes
from praxis import token_samplers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
StreamingResultCallback = decoder_utils.StreamingResultCallback
DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY
MAX_NUM_PER_TOKEN_LOGPROBS = loop.MAX_NUM_PER_TOKEN_LOGPROBS

BaseNextTokenSampler = token_samplers.BaseNextTokenSampler
DefaultNextTokenSampler = token_samplers.DefaultNextTokenSampler
get_top_k = token_samplers.get_top_k
top_p_mask_logits = token_samplers.top_p_mask_logits
epsilon_mask_logits = token_samplers.epsilon_mask_logits
sample_from_top_k_and_top_p = token_samplers.sample_from_top_k_and_top_p
sample_from_top_p_given_top_k = token_samplers.sample_from_top_p_given_top_k
_batch_rngs_random_gumbel = getattr(token_samplers,
                                    '_batch_rngs_random_gumbel')

split_batch_dim = loop.split_batch_dim
reorder_with_indices = loop.reorder_with_indices
sort_samples_by_scores = loop.sort_samples_by_scores


def right_align_segment_position(lengths: JTensor, max_length: int
                                 ) -> JTensor:
  """Positions of right-aligned rows: [0, .., 0, 0, 1, .., length - 1]."""
  pos = jnp.arange(max_length)[None, :] - (max_length - lengths[:, None])
  return jnp.maximum(pos, 0).astype(jnp.int32)


def right_align_prefix_ids(
    prefix_ids: JTensor, prefix_lengths: JTensor, paddings_dtype: Any
) -> tuple[JTensor, JTensor]:
  """Right-aligns [B, P] ids; returns (ids, paddings 1 on the left)."""
  p = prefix_ids.shape[1]
  ids = decoder_utils.right_align_tensors(prefix_ids, prefix_lengths)
  pads = jnp.arange(p)[None, :] < (p - prefix_lengths[:, None])
  return ids, pads.astype(paddings_dtype)


class BaseSampleTerminationConstraint(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Ends samples early that break a constraint (where it is enforced)."""

  @abc.abstractmethod
  def __call__(self, enforce_sample_constraints: JTensor | None,
               decode_loop_state: NestedMap) -> JTensor:
    """Returns the new `done` [B * num_samples] of the loop state."""


def _as_list(steps: int | Sequence[int] | None, seq_len: int) -> list[int]:
  if isinstance(steps, int):
    return [steps]
  return sorted(steps) if steps else [seq_len]


def _check_unsupported(controlled_decoding: Any) -> None:
  if controlled_decoding is not None:
    raise NotImplementedError('sample_decode: controlled_decoding is not '
                              'supported.')


def sample_decode_after_fprop(
    model: base_layer.BaseLayer,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    transform_state_fn: decoder_utils.TransformStateFn | None,
    lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None,
    next_token_sampler: BaseNextTokenSampler,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    num_samples: int,
    cf_guidance_scale: list[float] | float | JTensor | None = None,
    fprop_for_prefix: bool = False,
    temperature: float | JTensor = 1.0,
    gumbel_prng_key: JTensor | None = None,
    per_example_top_p: JTensor | None = None,
    per_example_top_k: JTensor | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | Sequence[int] | None = None,
    per_example_max_decode_steps: JTensor | None = None,
    prefix_lengths: JTensor | None = None,
    eos_id: int | Sequence[int] | JTensor | None = None,
    result_callback: StreamingResultCallback | None = None,
    return_result_for_suffix_score: bool = False,
    sort_samples: bool = True,
    top_k_recall_target: float = 0.85,
    early_exit: bool = True,
    use_top_k_for_logprobs: bool = False,
    controlled_decoding: decoder_utils.ControlledDecodingHParams | None = None,
    return_entropy_score: bool = False,
    optimize_eos: bool = False,
    sample_constraint: BaseSampleTerminationConstraint | None = None,
    enforce_sample_constraints: JTensor | None = None,
    num_per_token_logprobs: JTensor | None = None,
    min_decode_steps: int = 0,
) -> NestedMap:
  """`sample_decode` once the caches hold the prefix (same arguments)."""
  _check_unsupported(controlled_decoding)
  if seq_len <= 0:
    raise ValueError(f'sample_decode: seq_len must be > 0, got {seq_len}.')
  if (sample_constraint is None) != (enforce_sample_constraints is None):
    raise ValueError('sample_decode: give both sample_constraint and '
                     'enforce_sample_constraints, or neither.')
  if optimize_eos and (isinstance(eos_id, jax.Array) or eos_id is None
                       or use_top_k_for_logprobs):
    raise ValueError('sample_decode: optimize_eos needs a list of eos ids '
                     'and use_top_k_for_logprobs=False.')
  if fprop_for_prefix and max_prefix_len is None:
    max_prefix_len = prefix_ids.shape[1]
  original_batch = prefix_ids.shape[0]
  steps = _as_list(max_decode_steps, seq_len)
  c = NestedMap(
      extend_step_fn=decoder_utils.coerce_to_expanded_extend_step_fn(
          extend_step_fn),
      next_token_sampler=next_token_sampler,
      transform_state_fn=transform_state_fn, seq_len=seq_len,
      num_samples=num_samples, fprop_for_prefix=fprop_for_prefix,
      max_prefix_len=max_prefix_len, max_decode_steps=steps,
      temperature=temperature, per_example_top_p=per_example_top_p,
      per_example_top_k=per_example_top_k,
      per_example_max_decode_steps=per_example_max_decode_steps,
      num_per_token_logprobs=num_per_token_logprobs,
      eos_id=[eos_id] if isinstance(eos_id, int) else eos_id,
      use_top_k_for_logprobs=use_top_k_for_logprobs,
      return_entropy_score=return_entropy_score, optimize_eos=optimize_eos,
      sample_constraint=sample_constraint,
      enforce_sample_constraints=enforce_sample_constraints,
      min_decode_steps=min_decode_steps, result_callback=result_callback,
      original_batch=prefix_ids.shape[0])
  if num_samples > 1:
    prefix_ids = jnp.repeat(prefix_ids, num_samples, axis=0)
    prefix_paddings = jnp.repeat(prefix_paddings, num_samples, axis=0)
    if prefix_lengths is not None:
      prefix_lengths = jnp.repeat(prefix_lengths, num_samples, axis=0)
    loop.broadcast_inputs(c, num_samples, cf_guidance_scale is not None,
                           original_batch)
    if lazy_broadcast_prefix_fn is not None:
      if not fprop_for_prefix:
        raise ValueError('sample_decode: lazy_broadcast_prefix_fn needs '
                         'fprop_for_prefix.')
      # The last prefix token is fed again as the first suffix step.
      transform_state_fn(model, decoder_utils.slice_state_fn(0, -1))
      lazy_broadcast_prefix_fn(model, num_samples, steps[0] + 1)
    elif transform_state_fn is not None:
      transform_state_fn(model,
                         decoder_utils.batch_broadcast_state_fn(num_samples))
  c.cf_guidance_scale = loop.cf_scale(cf_guidance_scale, num_samples)
  if isinstance(c.temperature, jax.Array):
    c.temperature = c.temperature.flatten()[:, None]
  if isinstance(c.per_example_top_p, jax.Array):
    c.per_example_top_p = c.per_example_top_p[:, None]
  c.gumbel_prng_key = _raw_keys(gumbel_prng_key)
  limit = steps[-1] if c.per_example_max_decode_steps is None else (
      c.per_example_max_decode_steps)
  limit = jnp.minimum(limit, steps[-1])
  if cf_guidance_scale is not None and limit.ndim == 1:
    # Each limit covers the conditioned and unconditioned rows.
    limit = jnp.repeat(limit, 2)
  c.per_example_max_decode_steps = limit
  c.batch_size = prefix_ids.shape[0]
  if prefix_lengths is None:
    prefix_lengths = jnp.zeros((c.batch_size,), jnp.int32)
  c.prefix_ids, c.prefix_lengths = prefix_ids, prefix_lengths
  c.start_step = max_prefix_len - 1 if fprop_for_prefix else 0
  val = loop.init_state(c, next_token_sampler, model)
  if result_callback is not None and result_callback.init_fn is not None:
    result_callback.init_fn((original_batch, num_samples))
  if early_exit:
    result = loop.run_while(model, val, c)
  else:
    result = loop.run_scan(model, val, c)
  if result_callback is not None and result_callback.done_fn is not None:
    result_callback.done_fn()
  if optimize_eos:
    result = decoder_utils.collect_results_to_optimize_eos(
        result, decode_length_shift=max_prefix_len or 0)
  if return_result_for_suffix_score:
    return result
  result = loop.finish(result, c, prefix_paddings, next_token_sampler)
  if num_samples > 1 and sort_samples:
    return sort_samples_by_scores(result, top_k_recall_target)
  return result


def _raw_keys(keys: JTensor | None) -> JTensor | None:
  """Per-example keys as uint32 [B, key_size] (a [B] seed is repeated)."""
  if keys is None:
    return None
  keys = keys.astype(jnp.uint32)
  if keys.ndim == 1:
    size = jax.random.key_data(jax.random.key(0)).shape[0]
    keys = jnp.stack([keys] * size, axis=-1)
  return keys


def sample_decode(
    model: base_layer.BaseLayer,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    transform_state_fn: decoder_utils.TransformStateFn | None,
    lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None,
    next_token_sampler: BaseNextTokenSampler,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    num_samples: int = 1,
    fprop_fn: decoder_utils.FPropFn | None = None,
    cf_guidance_scale: list[float] | float | JTensor | None = None,
    fprop_for_prefix: bool = False,
    temperature: float | JTensor = 1.0,
    gumbel_prng_key: JTensor | None = None,
    per_example_top_p: JTensor | float | None = None,
    per_example_top_k: JTensor | int | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | Sequence[int] | None = None,
    per_example_max_decode_steps: JTensor | None = None,
    prefix_lengths: JTensor | None = None,
    eos_id: int | Sequence[int] | JTensor | None = None,
    result_callback: StreamingResultCallback | None = None,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
    return_result_for_suffix_score: bool = False,
    sort_samples: bool = True,
    top_k_recall_target: float = 0.85,
    early_exit: bool = True,
    use_top_k_for_logprobs: bool = False,
    controlled_decoding: decoder_utils.ControlledDecodingHParams | None = None,
    return_entropy_score: bool = False,
    process_result_fn: decoder_utils.ProcessResultFn | None = None,
    optimize_eos: bool = False,
    sample_constraint: BaseSampleTerminationConstraint | None = None,
    enforce_sample_constraints: JTensor | None = None,
    num_per_token_logprobs: JTensor | None = None,
    min_decode_steps: int = 0,
) -> NestedMap:
  """Decodes `num_samples` continuations of each prefix.

  Args:
    model: The (bound) model whose caches the steps use.
    extend_step_fn: `fn(model, ids [B], segment_pos [B][, loop_state])
      -> logits [B, V]`.
    transform_state_fn: `fn(model, state_fn)` transforming the caches.
    lazy_broadcast_prefix_fn: If given (with fprop_for_prefix), makes
      per-sample suffix states instead of repeating the caches.
    next_token_sampler: Chooses the ids (e.g. DefaultNextTokenSampler).
    prefix_ids: [B, P] prefix ids (an SOS first if used); right-aligned with
      `fprop_for_prefix`.
    prefix_paddings: [B, P], 1 at padding.
    seq_len: Length of the outputs, prefix included.
    num_samples: Samples per example.
    fprop_fn: If set, `fn(model, prefix_ids, prefix_paddings)` fills the
      caches first; they are then padded by the first max_decode_steps
      (`fprop_for_prefix`) or seq_len - 1.
    cf_guidance_scale: Classifier-free guidance: the batch is [cond_a,
      uncond_a, cond_b, ...]; sampling uses uncond + scale * (cond - uncond)
      and both rows take the sampled ids; only the conditioned rows are
      returned. A float, a list of num_samples floats, [B / 2] or
      [B / 2, num_samples].
    fprop_for_prefix: The prefix went through `fprop_fn`; decoding starts at
      step max_prefix_len - 1.
    temperature: A float, [B] or [B, num_samples].
    gumbel_prng_key: [B] seeds or [B, key_size] keys for the sampling noise,
      split per sample and folded with the step; all DUMMY_PRNG_KEY (or
      None): the model's `random` stream.
    per_example_top_p: [B] top-p per example.
    per_example_top_k: [B] top-k per example (<= the sampler's top_k).
    max_prefix_len: Where the right-aligned prefixes end.
    max_decode_steps: Steps decoded after the prefix; a list decodes up to
      each in turn, padding the caches in between (None: seq_len).
    per_example_max_decode_steps: [B] smaller limits per example.
    prefix_lengths: [B] prefix lengths (default 0: only the first id given).
    eos_id: End-of-sequence id(s), or [B, L] stop sequences (left-padded
      with 0); a row stops after producing one.
    result_callback: Streams [B, num_samples, interval_steps] slices of the
      new tokens (output_ids, scores, done, decode_lengths, prefix_lengths;
      with num_per_token_logprobs also logprobs and top candidates) to
      `callback_fn` every interval_steps steps and when all rows are done
      (the function runs traced: use host callbacks inside it).
    decode_loop_mesh_axes_transpose: Mesh axis renames inside the loop (the
      variables are not resharded).
    model_var_pspecs: Unused.
    return_result_for_suffix_score: Return the raw loop state.
    sort_samples: Sort each example's samples, most likely first.
    top_k_recall_target: Below 1, sort with approximate top-k.
    early_exit: Stop when every row is done (else a fixed-length scan).
    use_top_k_for_logprobs: Record the sampler's top-k log-probabilities.
    controlled_decoding: Not supported (must be None).
    return_entropy_score: Also return `entropy` [B, n, seq_len] of each
      step's distribution.
    process_result_fn: `fn(model, result) -> result` applied at the end.
    optimize_eos: Never sample EOS; instead record the best EOS at every step
      and end each row where ending is most likely.
    sample_constraint: Ends samples early (see
      BaseSampleTerminationConstraint).
    enforce_sample_constraints: Passed to `sample_constraint`.
    num_per_token_logprobs: [B] (<= MAX_NUM_PER_TOKEN_LOGPROBS): also return
      each step's top candidates `top_candidate_ids` / `top_candidate_logprobs`
      [B, n, seq_len, MAX_NUM_PER_TOKEN_LOGPROBS] (0 / 1.0 past the count).
    min_decode_steps: EOS is not chosen before this many steps (not in Pax's
      sample_decode; our LanguageModel passes its decoder's value).

  Returns:
    NestedMap of [B, num_samples, ...] arrays: output_ids [.., seq_len]
    (prefix, then decoded ids, then 0s); logprobs [.., seq_len] (1.0 where
    nothing was chosen); decode_lengths (prefix included); prefix_lengths;
    original_lengths (unpadded prefix lengths); prefix_ids.
  """
  del model_var_pspecs
  if fprop_fn is not None:
    fprop_fn(model, prefix_ids, prefix_paddings)
  with decoder_utils.maybe_decode_mesh_transpose(
      model, decode_loop_mesh_axes_transpose):
    if (fprop_fn is not None and lazy_broadcast_prefix_fn is None
        and transform_state_fn is not None):
      first = _as_list(max_decode_steps, seq_len)[0]
      pad = first if fprop_for_prefix else seq_len - 1
      transform_state_fn(model, decoder_utils.pad_state_fn(pad))
    result = sample_decode_after_fprop(
        model, extend_step_fn, transform_state_fn, lazy_broadcast_prefix_fn,
        next_token_sampler, prefix_ids, prefix_paddings, seq_len,
        num_samples, cf_guidance_scale, fprop_for_prefix, temperature,
        gumbel_prng_key, per_example_top_p, per_example_top_k,
        max_prefix_len, max_decode_steps, per_example_max_decode_steps,
        prefix_lengths, eos_id, result_callback,
        return_result_for_suffix_score, sort_samples, top_k_recall_target,
        early_exit, use_top_k_for_logprobs, controlled_decoding,
        return_entropy_score, optimize_eos, sample_constraint,
        enforce_sample_constraints, num_per_token_logprobs, min_decode_steps)
    if process_result_fn is not None:
      result = process_result_fn(model, result)
  return result


def greedy_decode(
    model: base_layer.BaseLayer,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    fprop_for_prefix: bool = False,
    fprop_fn: decoder_utils.FPropFn | None = None,
    transform_state_fn: decoder_utils.TransformStateFn | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | Sequence[int] | None = None,
    prefix_lengths: JTensor | None = None,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
    eos_id: int | Sequence[int] | None = None,
    process_result_fn: decoder_utils.ProcessResultFn | None = None,
    min_decode_steps: int = 0,
) -> NestedMap:
  """`sample_decode` with the argmax at every step (one sample).

  Args: as `sample_decode`.

  Returns:
    As `sample_decode`, with num_samples = 1.
  """
  return sample_decode(
      model, extend_step_fn, transform_state_fn, None,
      DefaultNextTokenSampler(top_k=1), prefix_ids, prefix_paddings, seq_len,
      num_samples=1, fprop_fn=fprop_fn, fprop_for_prefix=fprop_for_prefix,
      temperature=0.0, max_prefix_len=max_prefix_len,
      max_decode_steps=max_decode_steps, prefix_lengths=prefix_lengths,
      eos_id=eos_id, decode_loop_mesh_axes_transpose=(
          decode_loop_mesh_axes_transpose),
      model_var_pspecs=model_var_pspecs, process_result_fn=process_result_fn,
      min_decode_steps=min_decode_steps)


def vanilla_sample_decode(
    model: base_layer.BaseLayer,
    fprop_fn: decoder_utils.FPropFn,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    transform_state_fn: decoder_utils.TransformStateFn,
    next_token_sampler: BaseNextTokenSampler,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    temperature: float | JTensor = 1.0,
    gumbel_prng_key: JTensor | None = None,
    max_decode_steps: int = 0,
    eos_id: int | Sequence[int] | JTensor | None = None,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
) -> NestedMap:
  """One sample per right-aligned prefix, up to max_decode_steps tokens.

  The prefixes [B, P] must already be right-aligned (paddings 1 on the
  left); the caches are filled by `fprop_fn` and padded by max_decode_steps.
  Per-example keys are folded with the step (not split).

  Args: as `sample_decode`.

  Returns:
    NestedMap of [B, ...] arrays (no samples dim): output_ids and logprobs
    [B, P + max_decode_steps] (left-aligned), decode_lengths, prefix_lengths,
    prefix_ids (left-aligned) and the last segment_pos.
  """
  del model_var_pspecs
  if max_decode_steps <= 0:
    raise ValueError(f'vanilla_sample_decode: max_decode_steps must be > 0, '
                     f'got {max_decode_steps}.')
  fprop_fn(model, prefix_ids, prefix_paddings)
  prefix_lengths = jnp.sum(1 - prefix_paddings.astype(jnp.int32), axis=-1)
  b, p = prefix_ids.shape
  with decoder_utils.maybe_decode_mesh_transpose(
      model, decode_loop_mesh_axes_transpose):
    transform_state_fn(model, decoder_utils.pad_state_fn(max_decode_steps))
    c = NestedMap(
        extend_step_fn=decoder_utils.coerce_to_expanded_extend_step_fn(
            extend_step_fn),
        next_token_sampler=next_token_sampler,
        transform_state_fn=transform_state_fn, seq_len=p + max_decode_steps,
        num_samples=1, fprop_for_prefix=True, max_prefix_len=p,
        max_decode_steps=[max_decode_steps], temperature=temperature,
        per_example_top_p=None, per_example_top_k=None,
        per_example_max_decode_steps=max_decode_steps,
        num_per_token_logprobs=None,
        eos_id=[eos_id] if isinstance(eos_id, int) else eos_id,
        use_top_k_for_logprobs=False, return_entropy_score=False,
        optimize_eos=False, sample_constraint=None,
        enforce_sample_constraints=None, min_decode_steps=0,
        cf_guidance_scale=None, gumbel_prng_key=_raw_keys(gumbel_prng_key),
        split_keys=False, batch_size=b, prefix_ids=prefix_ids,
        prefix_lengths=prefix_lengths, start_step=p - 1)
    val = loop.init_state(c, next_token_sampler, model)
    del val.start_step
    result = loop.run_while(model, val, c)
  result.prefix_lengths = prefix_lengths
  result.prefix_ids = decoder_utils.left_align_tensor(prefix_ids,
                                                      prefix_lengths, p)
  result.output_ids = decoder_utils.left_align_tensor(result.output_ids,
                                                      prefix_lengths, p)
  result.logprobs = decoder_utils.left_align_tensor(result.logprobs,
                                                    prefix_lengths, p)
  del result.step, result.done, result.has_eos
  return next_token_sampler.post_process_decode_loop_state(result)


def sample_init_decode_state(
    model: base_layer.BaseLayer,
    prefix_ids: JTensor,
    max_prefix_len: int | None = None,
    max_decode_steps: int | None = None,
    top_k: int | None = 1,
    top_p: float | JTensor | None = None,
    prefix_lengths: JTensor | None = None,
    eos_id: int | None = None,
    transform_state_fn: decoder_utils.TransformStateFn | None = None,
) -> NestedMap:
  """The state of step-wise decoding (continuous batching) after a prefix.

  Args:
    model: The model, its caches holding the right-aligned prefixes.
    prefix_ids: [B, P] right-aligned prefixes.
    max_prefix_len: P.
    max_decode_steps: The caches are padded by this much.
    top_k: The sampler's top_k.
    top_p: The sampler's top_p.
    prefix_lengths: [B] (default 0).
    eos_id: Passed to the sampler's init_decode_loop_state.
    transform_state_fn: Pads the caches if given.

  Returns:
    NestedMap: output_ids [B] (the last prefix ids), logprobs [B],
    start_step, step, per_sample_steps [B], done, has_eos, prefix_lengths,
    decode_lengths, segment_pos. The caller adds temperature,
    per_example_top_p, per_example_top_k and per_example_max_decode_steps
    before `sample_decoding_step`.
  """
  if max_prefix_len is None or max_decode_steps is None:
    raise ValueError('sample_init_decode_state: give max_prefix_len and '
                     'max_decode_steps.')
  if transform_state_fn is not None:
    transform_state_fn(model, decoder_utils.pad_state_fn(max_decode_steps))
  b = prefix_ids.shape[0]
  if prefix_lengths is None:
    prefix_lengths = jnp.zeros((b,), jnp.int32)
  start = max_prefix_len - 1
  output_ids = prefix_ids[:, start].astype(jnp.int32)
  state = NestedMap(
      start_step=start, step=start,
      per_sample_steps=jnp.full((b,), start, jnp.int32),
      output_ids=output_ids,
      logprobs=jnp.ones_like(output_ids, jnp.float32),
      done=jnp.zeros((b,), jnp.bool_), has_eos=jnp.zeros((b,), jnp.bool_),
      prefix_lengths=prefix_lengths,
      decode_lengths=jnp.ones_like(prefix_lengths) * (
          max_prefix_len + max_decode_steps),
      segment_pos=prefix_lengths - 1)
  sampler = DefaultNextTokenSampler(top_k=top_k, top_p=top_p)
  return sampler.init_decode_loop_state(state, model, b, eos_id)


def sample_decoding_step(
    model: base_layer.BaseLayer,
    decode_state: NestedMap,
    extend_step_fn: (decoder_utils.ExtendStepFn
                     | decoder_utils.ExpandedExtendStepFn),
    top_k: int | None = 1,
    top_p: float | JTensor | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | None = None,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    eos_id: int | None = None,
) -> NestedMap:
  """One decoding step of every slot of a step-wise decode state.

  Each slot keeps its own step (`per_sample_steps`); `output_ids` and
  `logprobs` hold only the latest token [B].

  Args:
    model: The model whose caches hold every slot.
    decode_state: From `sample_init_decode_state`, with temperature,
      per_example_top_p, per_example_top_k and per_example_max_decode_steps.
    extend_step_fn: As in `sample_decode`.
    top_k: The sampler's top_k.
    top_p: The sampler's top_p.
    max_prefix_len: P.
    max_decode_steps: Caps per_example_max_decode_steps.
    decode_loop_mesh_axes_transpose: Mesh axis renames.
    eos_id: End-of-sequence id(s).

  Returns:
    The updated state.
  """
  s = decode_state
  eos = [eos_id] if isinstance(eos_id, int) else eos_id
  extend = decoder_utils.coerce_to_expanded_extend_step_fn(extend_step_fn)
  sampler = DefaultNextTokenSampler(top_k=top_k, top_p=top_p)
  temperature = s.temperature
  if isinstance(temperature, jax.Array):
    temperature = temperature.flatten()[:, None]
  top_p_each = s.get('per_example_top_p')
  if isinstance(top_p_each, jax.Array):
    top_p_each = top_p_each[:, None]
  limit = jnp.minimum(s.per_example_max_decode_steps, max_decode_steps)
  with decoder_utils.maybe_decode_mesh_transpose(
      model, decode_loop_mesh_axes_transpose):
    logits = extend(model, s.output_ids, s.segment_pos, s)
    out = sampler(model, logits, temperature, s,
                  per_example_top_p=top_p_each,
                  per_example_top_k=s.get('per_example_top_k'))
    for key in out.keys() & s.keys():
      s[key] = out[key]
    model.add_summary('new_ids', out.new_ids)
    model.add_summary('sample_logits', out.logits)
    prev_done = s.done
    new_ids = jnp.where(prev_done, 0, out.new_ids)
    s.output_ids = new_ids
    if eos is not None:
      has_eos = decoder_utils.has_any_eos(new_ids, eos)
      s.done = prev_done | has_eos
      s.has_eos = s.has_eos | has_eos
    steps = s.per_sample_steps
    s.segment_pos += 1
    s.done = s.done | (steps + 2 - max_prefix_len >= limit)
    s.decode_lengths = jnp.where(
        ~prev_done & s.done,
        s.prefix_lengths + steps - max_prefix_len + 2, s.decode_lengths)
    logprobs = jax.nn.log_softmax(logits.astype(jnp.float32))
    new_lp = jnp.take_along_axis(logprobs, new_ids[:, None], axis=-1)[:, 0]
    s.logprobs = jnp.where(prev_done, 1.0, new_lp)
    s.step += 1
    s.per_sample_steps += 1
  return s
