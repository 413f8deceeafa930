"""Sampling and greedy decoding with a model's `extend_step`.

Public names: sample_decode, greedy_decode, split_batch_dim,
reorder_with_indices, sort_samples_by_scores, right_align_segment_position,
right_align_prefix_ids; re-exported from token_samplers: BaseNextTokenSampler,
DefaultNextTokenSampler, get_top_k, top_p_mask_logits, epsilon_mask_logits,
sample_from_top_k_and_top_p, sample_from_top_p_given_top_k.

The loop is a `flax.linen.while_loop` over the model (its `decoder_cache`
carried, its `random` stream split per step) of fixed length: step t feeds
`output_ids[:, t]` to `extend_step_fn` and writes the chosen token at t + 1,
until `seq_len`, `max_decode_steps` or EOS in every row. Inside a model
method (e.g. `LanguageModel.decode`):

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

from collections.abc import Sequence
import dataclasses
import functools
from typing import Any

from flax import linen as nn
import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes
from praxis import token_samplers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor

BaseNextTokenSampler = token_samplers.BaseNextTokenSampler
DefaultNextTokenSampler = token_samplers.DefaultNextTokenSampler
get_top_k = token_samplers.get_top_k
top_p_mask_logits = token_samplers.top_p_mask_logits
epsilon_mask_logits = token_samplers.epsilon_mask_logits
sample_from_top_k_and_top_p = token_samplers.sample_from_top_k_and_top_p
sample_from_top_p_given_top_k = token_samplers.sample_from_top_p_given_top_k


def split_batch_dim(x: JTensor, batch_dim: int, num_samples: int) -> JTensor:
  """[..., B * n, ...] -> [..., B, n, ...] at `batch_dim`."""
  shape = list(x.shape)
  if shape[batch_dim] % num_samples:
    raise ValueError(f'split_batch_dim: dim {batch_dim} of {x.shape} is not a '
                     f'multiple of {num_samples}.')
  shape[batch_dim:batch_dim + 1] = [shape[batch_dim] // num_samples,
                                    num_samples]
  return jnp.reshape(x, shape)


def reorder_with_indices(x: JTensor, indices: JTensor) -> JTensor:
  """`x[b, indices[b, i]]` for x [B, n, ...] and indices [B, n]."""
  idx = indices.reshape(indices.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1)


def sort_samples_by_scores(result: NestedMap) -> NestedMap:
  """Sorts every [B, n, ...] entry by the samples' total log-probability.

  Args:
    result: Has `.logprobs` [B, n, T] (1.0 marks positions not decoded).

  Returns:
    The entries reordered along dim 1, best sample first.
  """
  scores = jnp.sum(jnp.where(result.logprobs >= 1.0, 0.0, result.logprobs),
                   axis=-1)
  _, indices = jax.lax.top_k(scores, scores.shape[-1])
  return jax.tree.map(functools.partial(reorder_with_indices,
                                        indices=indices), result)


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


@dataclasses.dataclass(frozen=True)
class _Spec:
  """The static settings of one decoding loop."""

  seq_len: int
  start_step: int
  last_step: int
  fprop_for_prefix: bool
  max_prefix_len: int
  eos_id: tuple[int, ...] | None
  min_decode_steps: int
  early_exit: bool


def _max_steps(max_decode_steps: Any, seq_len: int) -> int:
  if max_decode_steps is None:
    return seq_len
  if isinstance(max_decode_steps, Sequence):
    return max(max_decode_steps)
  return int(max_decode_steps)


def _repeat(x: Any, n: int) -> Any:
  if isinstance(x, jax.Array) and x.ndim >= 1 and n > 1:
    return jnp.repeat(x, n, axis=0)
  return x


def _init_state(spec: _Spec, inputs: NestedMap) -> NestedMap:
  """The loop state before the first step."""
  b = inputs.prefix_ids.shape[0]
  output_ids = jnp.zeros((b, spec.seq_len), jnp.int32)
  if spec.fprop_for_prefix:
    output_ids = jax.lax.dynamic_update_slice(
        output_ids, inputs.prefix_ids[:, :spec.seq_len].astype(jnp.int32),
        (0, 0))
    segment_pos = inputs.prefix_lengths - 1
  else:
    output_ids = output_ids.at[:, 0].set(inputs.prefix_ids[:, 0])
    segment_pos = jnp.zeros((b,), jnp.int32)
  return NestedMap(
      step=jnp.array(spec.start_step, jnp.int32),
      output_ids=output_ids,
      segment_pos=segment_pos.astype(jnp.int32),
      done=jnp.zeros((b,), jnp.bool_),
      has_eos=jnp.zeros((b,), jnp.bool_),
      decode_lengths=jnp.full((b,), spec.seq_len, jnp.int32),
      logprobs=jnp.ones((b, spec.seq_len), jnp.float32),
  )


def _step_keys(keys: JTensor | None, step: JTensor) -> JTensor | None:
  if keys is None:
    return None
  return jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)


def _decode_step(model, val, spec, inputs, extend_step_fn, sampler):
  """Feeds `output_ids[:, step]`, writes the chosen ids at step + 1."""
  step = val.step
  logits = extend_step_fn(model, val.output_ids[:, step], val.segment_pos)
  offset = (spec.max_prefix_len if spec.fprop_for_prefix
            else inputs.prefix_lengths)
  decoded_before = step + 1 - offset
  if spec.eos_id and spec.min_decode_steps > 0:
    too_early = (decoded_before < spec.min_decode_steps)[:, None]
    is_eos = jnp.isin(jnp.arange(logits.shape[-1]), jnp.array(spec.eos_id))
    logits = jnp.where(too_early & is_eos, py_utils.get_large_negative_number(
        logits.dtype), logits)
  out = sampler(model, logits, inputs.temperature, val,
                per_example_top_p=inputs.per_example_top_p,
                per_example_top_k=inputs.per_example_top_k,
                gumbel_prng_key=_step_keys(inputs.gumbel_prng_key, step))
  new_ids = out.new_ids.astype(jnp.int32)
  in_prefix = jnp.zeros_like(val.done)
  if not spec.fprop_for_prefix:
    in_prefix = step < inputs.prefix_lengths - 1
    new_ids = jnp.where(in_prefix, inputs.prefix_ids[:, step + 1], new_ids)
  if 'logprobs_at_new_ids' in out:
    new_logprobs = out.logprobs_at_new_ids
  else:
    logprobs = jax.nn.log_softmax(out.logits.astype(jnp.float32), axis=-1)
    new_logprobs = jnp.take_along_axis(logprobs, new_ids[:, None], -1)[:, 0]
  prev_done = val.done
  new_ids = jnp.where(prev_done, 0, new_ids)
  val.output_ids = val.output_ids.at[:, step + 1].set(new_ids)
  val.logprobs = val.logprobs.at[:, step + 1].set(
      jnp.where(prev_done, 1.0, new_logprobs))
  done = prev_done
  if spec.eos_id:
    has_eos = decoder_utils.has_any_eos(new_ids, spec.eos_id) & ~in_prefix
    val.has_eos = val.has_eos | has_eos
    done = done | has_eos
  done = done | (decoded_before + 1 >= inputs.max_decode_steps)
  length = (inputs.prefix_lengths + decoded_before + 1
            if spec.fprop_for_prefix else step + 2)
  val.decode_lengths = jnp.where(done & ~prev_done, length, val.decode_lengths)
  val.done = done
  val.segment_pos = val.segment_pos + 1
  val.step = step + 1
  return val


def _finish(spec: _Spec, inputs: NestedMap, val: NestedMap,
            prefix_paddings: JTensor) -> NestedMap:
  """Left-aligns the outputs and adds the prefix fields."""
  lengths = inputs.prefix_lengths
  prefix_ids = inputs.prefix_ids
  output_ids, logprobs = val.output_ids, val.logprobs
  if spec.fprop_for_prefix:
    p = spec.max_prefix_len
    prefix_ids = decoder_utils.left_align_tensor(prefix_ids[:, :p], lengths, p)
    output_ids = decoder_utils.left_align_tensor(output_ids, lengths, p)
    logprobs = decoder_utils.left_align_tensor(logprobs, lengths, p, 1.0)
  in_prefix = jnp.arange(prefix_ids.shape[1])[None, :] < lengths[:, None]
  return NestedMap(
      output_ids=output_ids,
      logprobs=logprobs,
      decode_lengths=val.decode_lengths,
      prefix_lengths=lengths,
      original_lengths=jnp.sum(1 - prefix_paddings.astype(jnp.int32), axis=1),
      prefix_ids=jnp.where(in_prefix, prefix_ids, 0),
  )


def _check_supported(**features: Any) -> None:
  for name, value in features.items():
    if value:
      raise NotImplementedError(f'sample_decode: {name} is not supported.')


def sample_decode(
    model: base_layer.BaseLayer,
    extend_step_fn: decoder_utils.ExtendStepFn,
    transform_state_fn: decoder_utils.TransformStateFn | None,
    lazy_broadcast_prefix_fn: decoder_utils.LazyBroadcastPrefixFn | None,
    next_token_sampler: BaseNextTokenSampler,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    num_samples: int = 1,
    fprop_fn: decoder_utils.FPropFn | None = None,
    fprop_for_prefix: bool = False,
    temperature: float | JTensor = 1.0,
    gumbel_prng_key: JTensor | None = None,
    per_example_top_p: JTensor | None = None,
    per_example_top_k: JTensor | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | Sequence[int] | None = None,
    per_example_max_decode_steps: JTensor | None = None,
    prefix_lengths: JTensor | None = None,
    eos_id: int | Sequence[int] | None = None,
    min_decode_steps: int = 0,
    sort_samples: bool | None = True,
    early_exit: bool = True,
    cf_guidance_scale: Any = None,
    controlled_decoding: Any = None,
    result_callback: decoder_utils.StreamingResultCallback | None = None,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
    process_result_fn: decoder_utils.ProcessResultFn | None = None,
) -> NestedMap:
  """Decodes `num_samples` continuations of each prefix.

  Args:
    model: The (bound) model whose caches the steps use.
    extend_step_fn: `fn(model, ids [B], segment_pos [B]) -> logits [B, V]`.
    transform_state_fn: `fn(model, state_fn)` transforming the caches.
    lazy_broadcast_prefix_fn: Not supported (must be None).
    next_token_sampler: Chooses the ids (e.g. DefaultNextTokenSampler).
    prefix_ids: [B, P] prefix ids (an SOS first if used); right-aligned and
      padded to at most seq_len with `fprop_for_prefix`.
    prefix_paddings: [B, P], 1 at padding.
    seq_len: Length of the outputs, prefix included.
    num_samples: Samples per example.
    fprop_fn: If set, `fn(model, prefix_ids, prefix_paddings)` fills the
      caches first, with max_prefix_len steps (`fprop_for_prefix`) or one;
      they are then padded to fit the decoded steps.
    fprop_for_prefix: The prefix went through `fprop_fn`; decoding starts at
      step max_prefix_len - 1.
    temperature: A float or [B].
    gumbel_prng_key: [B] keys for the sampling noise (default: the model's
      `random` stream).
    per_example_top_p: [B] top-p per example.
    per_example_top_k: [B] top-k per example.
    max_prefix_len: Where the right-aligned prefixes end (default P).
    max_decode_steps: Steps decoded after the prefix (a list: its largest).
    per_example_max_decode_steps: [B] smaller limits per example.
    prefix_lengths: [B] prefix lengths (default 0: only the first id given).
    eos_id: End-of-sequence id(s); a row stops after producing one.
    min_decode_steps: EOS is not chosen before this many steps.
    sort_samples: Sort each example's samples, most likely first.
    early_exit: Stop when every row is done.
    cf_guidance_scale: Not supported (must be None).
    controlled_decoding: Not supported (must be None).
    result_callback: Not supported (must be None).
    decode_loop_mesh_axes_transpose: Mesh axis renames inside the loop (the
      variables are not resharded).
    model_var_pspecs: Unused.
    process_result_fn: `fn(model, result) -> result` applied at the end.

  Returns:
    NestedMap of [B, num_samples, ...] arrays: output_ids [.., seq_len]
    (prefix, then decoded ids, then 0s); logprobs [.., seq_len] (1.0 where
    nothing was chosen); decode_lengths (prefix included); prefix_lengths;
    original_lengths (unpadded prefix lengths); prefix_ids.
  """
  del model_var_pspecs
  _check_supported(lazy_broadcast_prefix_fn=lazy_broadcast_prefix_fn,
                   cf_guidance_scale=cf_guidance_scale is not None,
                   controlled_decoding=controlled_decoding,
                   result_callback=result_callback)
  if seq_len <= 0:
    raise ValueError(f'sample_decode: seq_len must be > 0, got {seq_len}.')
  max_steps = _max_steps(max_decode_steps, seq_len)
  max_prefix_len = max_prefix_len or prefix_ids.shape[1]
  if fprop_for_prefix and max_prefix_len + max_steps > seq_len:
    raise ValueError(f'sample_decode: max_prefix_len {max_prefix_len} + '
                     f'max_decode_steps {max_steps} exceed seq_len {seq_len}.')
  if fprop_fn is not None:
    if transform_state_fn is None:
      raise ValueError('sample_decode: fprop_fn needs transform_state_fn.')
    fprop_fn(model, prefix_ids, prefix_paddings)
    pad = max_steps if fprop_for_prefix else seq_len - 1
    transform_state_fn(model, decoder_utils.pad_state_fn(pad))
  b = prefix_ids.shape[0]
  if prefix_lengths is None:
    prefix_lengths = jnp.zeros((b,), jnp.int32)
  per_example_max = jnp.full((b,), max_steps, jnp.int32)
  if per_example_max_decode_steps is not None:
    per_example_max = jnp.minimum(
        per_example_max_decode_steps.astype(jnp.int32), max_steps)
  if num_samples > 1:
    if transform_state_fn is None:
      raise ValueError('sample_decode: num_samples > 1 needs '
                       'transform_state_fn.')
    transform_state_fn(model,
                       decoder_utils.batch_broadcast_state_fn(num_samples))
  if gumbel_prng_key is not None and num_samples > 1:
    gumbel_prng_key = jax.vmap(lambda k: jax.random.split(k, num_samples))(
        gumbel_prng_key).reshape((-1,) + gumbel_prng_key.shape[1:])
  inputs = NestedMap(
      prefix_ids=_repeat(jnp.pad(prefix_ids, [(0, 0), (0, 1)]), num_samples),
      prefix_lengths=_repeat(prefix_lengths.astype(jnp.int32), num_samples),
      max_decode_steps=_repeat(per_example_max, num_samples),
      temperature=_repeat(temperature, num_samples),
      per_example_top_p=_repeat(per_example_top_p, num_samples),
      per_example_top_k=_repeat(per_example_top_k, num_samples),
      gumbel_prng_key=gumbel_prng_key,
  )
  start = max_prefix_len - 1 if fprop_for_prefix else 0
  spec = _Spec(
      seq_len=seq_len, start_step=start,
      last_step=min(seq_len - 1, start + max_steps),
      fprop_for_prefix=fprop_for_prefix, max_prefix_len=max_prefix_len,
      eos_id=None if eos_id is None else tuple(
          eos_id if isinstance(eos_id, Sequence) else [eos_id]),
      min_decode_steps=min_decode_steps, early_exit=early_exit)

  def cond_fn(model, val):
    del model
    go = val.step < spec.last_step
    return go & ~jnp.all(val.done) if spec.early_exit else go

  def body_fn(model, val):
    return _decode_step(model, val, spec, inputs, extend_step_fn,
                        next_token_sampler)

  with decoder_utils.maybe_decode_mesh_transpose(
      model, decode_loop_mesh_axes_transpose):
    val = nn.while_loop(
        cond_fn, body_fn, model, _init_state(spec, inputs),
        carry_variables=[base_layer.DECODE_CACHE],
        split_rngs={base_layer.RANDOM: True})
  inputs.prefix_ids = inputs.prefix_ids[:, :-1]
  result = _finish(spec, inputs, val, _repeat(prefix_paddings, num_samples))
  result = jax.tree.map(lambda x: split_batch_dim(x, 0, num_samples), result)
  if num_samples > 1 and sort_samples:
    result = sort_samples_by_scores(result)
  if process_result_fn is not None:
    result = process_result_fn(model, result)
  return result


def greedy_decode(
    model: base_layer.BaseLayer,
    extend_step_fn: decoder_utils.ExtendStepFn,
    prefix_ids: JTensor,
    prefix_paddings: JTensor,
    seq_len: int,
    fprop_fn: decoder_utils.FPropFn | None = None,
    fprop_for_prefix: bool = False,
    transform_state_fn: decoder_utils.TransformStateFn | None = None,
    max_prefix_len: int | None = None,
    max_decode_steps: int | Sequence[int] | None = None,
    prefix_lengths: JTensor | None = None,
    eos_id: int | Sequence[int] | None = None,
    min_decode_steps: int = 0,
    decode_loop_mesh_axes_transpose: dict[str, str] | None = None,
    model_var_pspecs: Any = None,
    process_result_fn: decoder_utils.ProcessResultFn | None = None,
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
      eos_id=eos_id, min_decode_steps=min_decode_steps,
      decode_loop_mesh_axes_transpose=decode_loop_mesh_axes_transpose,
      model_var_pspecs=model_var_pspecs, process_result_fn=process_result_fn)
