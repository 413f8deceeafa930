"""The sampling loop behind `sample_decode` (see praxis/sample_decode.py).

The loop state `val` is a NestedMap carried by `flax.linen.while_loop` (or
`nn.scan` without early exit, so that summaries are stacked per step): step t
feeds `output_ids[:, t]` and writes the chosen id at t + 1. Inputs are first
flattened to [B * num_samples, ...] (with classifier-free guidance the batch
is [cond_a, uncond_a, cond_b, ...], each repeated num_samples times), and
split back into [B, num_samples, ...] at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
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
RANDOM = base_layer.RANDOM
DECODE_CACHE = base_layer.DECODE_CACHE
DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY
MAX_NUM_PER_TOKEN_LOGPROBS = 5


def reorder_with_indices(x: JTensor, indices: JTensor) -> JTensor:
  """`x[b, indices[b, i]]` for x [B, n, ...] and indices [B, n]."""
  if indices.ndim != 2 or x.ndim < 2:
    raise ValueError(f'reorder_with_indices: x {x.shape} must be [B, n, ...] '
                     f'and indices {indices.shape} [B, n].')
  idx = indices.reshape(indices.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, idx, axis=1)


def sort_samples_by_scores(result: NestedMap,
                           top_k_recall_target: float = 0.85) -> NestedMap:
  """Sorts every [B, n, ...] entry by the samples' total log-probability.

  Args:
    result: Has `.logprobs` [B, n, T] (values >= 1.0 mark positions not
      decoded and count as 0).
    top_k_recall_target: Below 1, the order comes from
      `jax.lax.approx_max_k` (exact on CPU).

  Returns:
    The entries reordered along dim 1, best sample first.
  """
  scores = jnp.sum(jnp.where(result.logprobs >= 1.0, 0.0, result.logprobs),
                   axis=-1)
  n = scores.shape[-1]
  if top_k_recall_target < 1.0:
    _, indices = jax.lax.approx_max_k(scores, n,
                                      recall_target=top_k_recall_target)
  else:
    _, indices = jax.lax.top_k(scores, n)
  return jax.tree.map(functools.partial(reorder_with_indices,
                                        indices=indices), result)


def split_batch_dim(x: JTensor, batch_dim: int, num_samples: int) -> JTensor:
  """[..., B * n, ...] -> [..., B, n, ...] at `batch_dim`."""
  shape = list(x.shape)
  if shape[batch_dim] % num_samples:
    raise ValueError(f'split_batch_dim: dim {batch_dim} of {x.shape} is not a '
                     f'multiple of {num_samples}.')
  shape[batch_dim:batch_dim + 1] = [shape[batch_dim] // num_samples,
                                    num_samples]
  return jnp.reshape(x, shape)


def top_candidates(num_per_token_logprobs: JTensor, logprobs: JTensor
                   ) -> tuple[JTensor, JTensor]:
  """The best MAX_NUM_PER_TOKEN_LOGPROBS log-probabilities and their ids.

  Args:
    num_per_token_logprobs: [B] how many to keep per row.
    logprobs: [B, V].

  Returns:
    (logprobs, ids) [B, MAX_NUM_PER_TOKEN_LOGPROBS], descending; entries past
    a row's count (or past V) are 1.0 and 0.
  """
  m = MAX_NUM_PER_TOKEN_LOGPROBS
  k = min(logprobs.shape[-1], m)
  values, ids = jax.lax.top_k(logprobs, k)
  values = jnp.pad(values, [(0, 0), (0, m - k)], constant_values=1.0)
  ids = jnp.pad(ids, [(0, 0), (0, m - k)])
  keep = jnp.arange(m)[None, :] < num_per_token_logprobs[:, None]
  return jnp.where(keep, values, 1.0), jnp.where(keep, ids, 0)


def broadcast_inputs(c: NestedMap, num_samples: int, cfg: bool,
                      original_batch: int) -> None:
  """Repeats the per-example inputs of `c` num_samples times (in place)."""
  expected = original_batch // 2 if cfg else original_batch

  def repeat(x, name):
    if x.shape[0] != expected:
      raise ValueError(f'sample_decode: {name} should have {expected} rows '
                       f'(one per example), got shape {x.shape}.')
    return jnp.repeat(x, num_samples, axis=0)

  if isinstance(c.temperature, jax.Array):
    if c.temperature.ndim == 2:
      if c.temperature.shape != (expected, num_samples):
        raise ValueError(f'sample_decode: a 2-D temperature should have shape '
                         f'{(expected, num_samples)}, got '
                         f'{c.temperature.shape}.')
      c.temperature = c.temperature.reshape(-1)
    else:
      c.temperature = repeat(c.temperature, 'temperature')
  if c.per_example_max_decode_steps is not None:
    c.per_example_max_decode_steps = repeat(
        c.per_example_max_decode_steps.astype(jnp.int32),
        'per_example_max_decode_steps')
  for name in ('per_example_top_p', 'per_example_top_k',
               'num_per_token_logprobs'):
    if c[name] is not None:
      c[name] = repeat(c[name], name)
  if isinstance(c.eos_id, jax.Array):
    if c.eos_id.ndim != 2:
      raise ValueError(f'sample_decode: an eos_id array must be [B, L], got '
                       f'{c.eos_id.shape}.')
    c.eos_id = repeat(c.eos_id, 'eos_id').astype(jnp.int32)


def cf_scale(scale: Any, num_samples: int) -> Any:
  """The guidance scale shaped against [B, num_samples, V] logits."""
  if isinstance(scale, Sequence):
    if len(scale) != num_samples:
      raise ValueError(f'sample_decode: cf_guidance_scale has {len(scale)} '
                       f'values for {num_samples} samples.')
    return jnp.asarray(scale)[None, :, None]
  if isinstance(scale, jax.Array):
    if scale.ndim == 2:
      if scale.shape[-1] != num_samples:
        raise ValueError(f'sample_decode: cf_guidance_scale {scale.shape} '
                         f'must be [B, {num_samples}].')
      return scale[:, :, None]
    if scale.ndim == 1:
      return scale[:, None, None]
    raise ValueError(f'sample_decode: cf_guidance_scale must be of rank 1 or '
                     f'2, got {scale.shape}.')
  return scale


def init_state(c: NestedMap, next_token_sampler: Any, model: Any
                ) -> NestedMap:
  """The loop state before the first step."""
  b, seq_len = c.batch_size, c.seq_len
  output_ids = jnp.zeros((b, seq_len), jnp.int32)
  val = NestedMap()
  if c.fprop_for_prefix:
    output_ids = jax.lax.dynamic_update_slice(
        output_ids, c.prefix_ids.astype(jnp.int32), [0, 0])
    val.segment_pos = c.prefix_lengths - 1
  else:
    output_ids = output_ids.at[:, 0].set(c.prefix_ids[:, 0])
    val.segment_pos = jnp.zeros((b,), jnp.int32)
  val.start_step = c.start_step
  val.step = c.start_step
  val.output_ids = output_ids
  val.done = jnp.zeros((b,), jnp.bool_)
  val.has_eos = jnp.zeros((b,), jnp.bool_)
  val.decode_lengths = jnp.ones_like(c.prefix_lengths) * seq_len
  # 1.0 marks positions where nothing was chosen.
  val.logprobs = jnp.ones((b, seq_len), jnp.float32)
  if c.num_per_token_logprobs is not None:
    val.top_candidate_ids = jnp.zeros(
        (b, seq_len, MAX_NUM_PER_TOKEN_LOGPROBS), jnp.int32)
    val.top_candidate_logprobs = jnp.ones_like(val.top_candidate_ids,
                                               jnp.float32)
  if c.optimize_eos:
    val.eos_logprobs = jnp.ones((b, seq_len), jnp.float32)
    val.eos_ids = jnp.zeros((b, seq_len), jnp.float32)
  if c.return_entropy_score:
    val.entropy = jnp.zeros((b, seq_len), jnp.float32)
  return next_token_sampler.init_decode_loop_state(val, model, b, c.eos_id)


def _step_keys(c: NestedMap, step: JTensor) -> JTensor | None:
  """Per-row keys for this step: split num_samples ways, folded with step."""
  if c.gumbel_prng_key is None:
    return None
  keys = c.gumbel_prng_key
  if c.get('split_keys', True):
    keys = jax.vmap(lambda k: jax.random.split(k, c.num_samples))(keys)
    keys = keys.reshape((-1,) + c.gumbel_prng_key.shape[1:])
  keys = jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)
  return jax.lax.cond(jnp.all(c.gumbel_prng_key == DUMMY_PRNG_KEY),
                      lambda: jnp.ones_like(keys) * DUMMY_PRNG_KEY,
                      lambda: keys)


def _guided(logits: JTensor, c: NestedMap) -> JTensor:
  """uncond + scale * (cond - uncond) for [cond x n, uncond x n] groups."""
  split = split_batch_dim(logits, 0, 2 * c.num_samples)
  cond, uncond = split[:, :c.num_samples], split[:, c.num_samples:]
  guided = uncond + c.cf_guidance_scale * (cond - uncond)
  return guided.reshape((-1,) + guided.shape[2:])


def _no_early_eos(logits: JTensor, c: NestedMap, step: JTensor) -> JTensor:
  """EOS logits get a large negative number before min_decode_steps."""
  offset = c.max_prefix_len if c.fprop_for_prefix else c.prefix_lengths
  too_early = (step + 1 - offset < c.min_decode_steps)
  too_early = jnp.broadcast_to(too_early, logits.shape[:1])[:, None]
  is_eos = jnp.isin(jnp.arange(logits.shape[-1]), jnp.asarray(c.eos_id))
  return jnp.where(too_early & is_eos,
                   py_utils.get_large_negative_number(logits.dtype), logits)


def _loop_body(model: Any, val: NestedMap, c: NestedMap) -> NestedMap:
  """From the ids at `step`, the ids and log-probabilities at step + 1."""
  step = val.step
  logits = c.extend_step_fn(model, val.output_ids[:, step], val.segment_pos,
                            val)
  if c.cf_guidance_scale is not None:
    logits = _guided(logits, c)
  if c.min_decode_steps and c.eos_id is not None:
    logits = _no_early_eos(logits, c, step)
  sampler_logits = logits
  if c.optimize_eos:
    sampler_logits = logits.at[:, c.eos_id].set(
        py_utils.get_large_negative_number(jnp.float32))
  out = c.next_token_sampler(
      model, sampler_logits, c.temperature, val,
      per_example_top_p=c.per_example_top_p,
      per_example_top_k=c.per_example_top_k,
      gumbel_prng_key=_step_keys(c, step))
  new_ids = out.new_ids
  # The sampler may update its own entries of the loop state.
  for key in out.keys() & val.keys():
    val[key] = out[key]
  if new_ids.shape != (out.logits.shape[0],) or new_ids.dtype != jnp.int32:
    raise ValueError(f'sample_decode: the sampler returned new_ids '
                     f'{new_ids.shape} {new_ids.dtype}; expected int32 '
                     f'[{out.logits.shape[0]}].')
  model.add_summary('new_ids', new_ids)
  model.add_summary('sample_logits', out.logits)
  if c.cf_guidance_scale is not None:
    # The unconditioned rows follow the ids of the conditioned ones.
    new_ids = split_batch_dim(new_ids, 0, c.num_samples)
    new_ids = jnp.concatenate([new_ids, new_ids], axis=1).reshape(-1)
  if not c.fprop_for_prefix:
    # Within a prefix fed step by step, its next id is forced.
    new_ids = jnp.where(step < c.prefix_lengths - 1,
                        c.prefix_ids[:, step + 1], new_ids)
  prev_done = val.done
  new_ids = jnp.where(prev_done, 0, new_ids)
  val.output_ids = val.output_ids.at[:, step + 1].set(new_ids)
  _update_done(val, c, step, new_ids, prev_done)
  logprobs = jax.nn.log_softmax(logits.astype(jnp.float32))
  if c.use_top_k_for_logprobs and 'logprobs_at_new_ids' in out:
    new_lp = out.logprobs_at_new_ids
  else:
    # With guidance the logits have half the rows: like Pax, the rows past
    # them read the last one.
    rows = jnp.minimum(jnp.arange(new_ids.shape[0]), logprobs.shape[0] - 1)
    new_lp = logprobs[rows, new_ids]
  val.logprobs = val.logprobs.at[:, step + 1].set(
      jnp.where(prev_done, 1.0, new_lp))
  _record_extras(val, c, step, logits, logprobs)
  if c.get('result_callback') is not None:
    _stream(val, c, step)
  val.step += 1
  return val


def _interval_slice(x: JTensor, start: JTensor, interval: int, axis_len: int,
                    pad_value: float) -> JTensor:
  """x[:, start:start + interval] (x padded at the end to fit)."""
  short = axis_len % interval
  if short:
    pads = [(0, 0), (0, interval - short)] + [(0, 0)] * (x.ndim - 2)
    x = jnp.pad(x, pads, constant_values=pad_value)
  return jax.lax.dynamic_slice_in_dim(x, start, interval, axis=1)


def _stream(val: NestedMap, c: NestedMap, step: JTensor) -> None:
  """Calls result_callback.callback_fn with the last interval's tokens.

  It runs every `interval_steps` steps and once every row is done, with
  [B, num_samples, interval] slices (see StreamingResultCallback).
  """
  interval = c.result_callback.interval_steps
  done_steps = step - c.start_step
  start = (done_steps // interval) * interval

  def outfeed():
    seq_len = val.output_ids.shape[1]
    at = start + c.start_step + 1
    out = NestedMap(output_ids=_interval_slice(
        val.output_ids, at, interval, seq_len - 1 - c.start_step, 0))
    logprobs = _interval_slice(val.logprobs, at, interval,
                               seq_len - 1 - c.start_step, 1.0)
    if c.num_per_token_logprobs is not None:
      out.num_per_token_logprobs = c.num_per_token_logprobs
      out.top_candidate_ids = _interval_slice(
          val.top_candidate_ids, start, interval, seq_len, 0)
      out.top_candidate_logprobs = _interval_slice(
          val.top_candidate_logprobs, start, interval, seq_len, 1.0)
      out.logprobs = logprobs
    out.decode_lengths = jnp.ones_like(val.decode_lengths) * interval
    out.scores = val.prefix_scores if 'prefix_scores' in val else jnp.sum(
        jnp.minimum(logprobs, 0.0), axis=-1)
    out.done = val.done
    out = jax.tree.map(lambda x: split_batch_dim(x, 0, c.num_samples), out)
    out.prefix_lengths = jnp.zeros((c.original_batch,), jnp.int32)
    c.result_callback.callback_fn(out)

  jax.lax.cond(((done_steps + 1) % interval == 0) | jnp.all(val.done),
               outfeed, lambda: None)


def _update_done(val: NestedMap, c: NestedMap, step: JTensor,
                 new_ids: JTensor, prev_done: JTensor) -> None:
  """EOS, sample constraints and step limits end rows; lengths recorded."""
  if c.eos_id is not None:
    if isinstance(c.eos_id, jax.Array):
      has_eos = decoder_utils.end_with_sequences(c.eos_id, val.output_ids,
                                                 step + 1)
    else:
      has_eos = decoder_utils.has_any_eos(new_ids, c.eos_id)
    val.done = prev_done | has_eos
    val.has_eos = val.has_eos | has_eos
  if c.fprop_for_prefix:
    offset = c.max_prefix_len
    lengths = c.prefix_lengths + (step - c.max_prefix_len + 2)
  else:
    # An EOS inside the prefix does not count.
    val.done = jnp.where(step < c.prefix_lengths - 1, prev_done, val.done)
    offset = c.prefix_lengths
    lengths = jnp.ones_like(val.decode_lengths) * (step + 2)
  val.segment_pos += 1
  if c.sample_constraint is not None:
    val.done = c.sample_constraint(c.enforce_sample_constraints, val)
  at_limit = (jnp.ones_like(c.prefix_lengths) * (step + 2) - offset
              >= c.per_example_max_decode_steps)
  val.done = val.done | at_limit
  val.decode_lengths = jnp.where(~prev_done & val.done, lengths,
                                 val.decode_lengths)


def _record_extras(val: NestedMap, c: NestedMap, step: JTensor,
                   logits: JTensor, logprobs: JTensor) -> None:
  """Top candidates, best EOS (optimize_eos) and entropy of this step."""
  if c.num_per_token_logprobs is not None:
    n = c.num_per_token_logprobs
    values, ids = jax.lax.cond(
        jnp.any(n > 0), lambda: top_candidates(n, logprobs),
        lambda: (jnp.ones_like(val.top_candidate_logprobs[:, 0]),
                 jnp.zeros_like(val.top_candidate_ids[:, 0])))
    at = step - c.start_step
    val.top_candidate_logprobs = val.top_candidate_logprobs.at[:, at].set(
        values)
    val.top_candidate_ids = val.top_candidate_ids.at[:, at].set(ids)
  if c.optimize_eos:
    best_eos = jnp.argmax(logits.at[:, c.eos_id].add(1e6), axis=-1)
    val.eos_ids = val.eos_ids.at[:, step + 1].set(best_eos)
    val.eos_logprobs = val.eos_logprobs.at[:, step + 1].set(
        jnp.take_along_axis(logprobs, best_eos[:, None], axis=-1)[:, 0])
  if 'entropy' in val:
    val.entropy = val.entropy.at[:, step + 1].set(
        -jnp.sum(logprobs * jnp.exp(logprobs), axis=-1))


def run_while(model: Any, val: NestedMap, c: NestedMap) -> NestedMap:
  """One while loop per max_decode_steps bucket, padding the caches between."""
  for i, stop in enumerate(c.max_decode_steps):
    if i:
      c.transform_state_fn(model, decoder_utils.pad_state_fn(
          stop - c.max_decode_steps[i - 1]))
    last = jnp.minimum(c.seq_len - 1, c.start_step + stop)

    def cond_fn(model, val, last=last):
      del model
      return (val.step < last) & ~jnp.all(val.done)

    val = nn.while_loop(
        cond_fn, lambda model, val: _loop_body(model, val, c), model, val,
        split_rngs={RANDOM: True}, carry_variables=[DECODE_CACHE])
  return val


def run_scan(model: Any, val: NestedMap, c: NestedMap) -> NestedMap:
  """A fixed-length scan, stacking summaries and aux losses per step."""

  def body(model, val, unused):
    del unused
    return _loop_body(model, val, c), {}

  scan = nn.scan(
      body,
      variable_axes={base_layer.AUX_LOSS: 0, base_layer.SUMMARIES: 0,
                     base_layer.HYPER_PARAMS: 0},
      variable_broadcast=[base_layer.PARAMS, base_layer.NON_TRAINABLE],
      variable_carry=[DECODE_CACHE, base_layer.PREFIX_DECODE_CACHE],
      split_rngs={RANDOM: True}, in_axes=0, out_axes=0)
  stashed = None
  if model.is_mutable_collection(base_layer.SUMMARIES):
    # The loop's stacked summaries must not collide with earlier ones.
    col = _summaries(model)
    stashed = {key: col.pop(key) for key in list(col.keys())}
  length = c.seq_len - (c.max_prefix_len or 0)
  val, _ = scan(model, val, {'dummy': jnp.zeros([length, 2])})
  if stashed is not None:
    _merge_missing(_summaries(model), stashed)
  return val


def _summaries(model: Any) -> Any:
  """The model's mutable summaries collection (a dict, edited in place)."""
  # Flax has no public way to pop entries of a collection being scanned.
  get = getattr(model.scope, '_mutable_collection')
  return get(base_layer.SUMMARIES)


def _merge_missing(target: Any, data: dict[str, Any]) -> None:
  """Inserts the entries of `data` missing from `target`, recursively."""
  for key, value in data.items():
    if key not in target:
      target[key] = value
    elif isinstance(target[key], dict) and isinstance(value, dict):
      _merge_missing(target[key], value)


def finish(result: NestedMap, c: NestedMap, prefix_paddings: JTensor,
            next_token_sampler: Any) -> NestedMap:
  """Left-aligns, adds the prefix fields and splits the samples dim."""
  del result.segment_pos
  lengths = c.prefix_lengths
  result.prefix_lengths = lengths
  result.original_lengths = jnp.sum(1.0 - prefix_paddings, axis=1).astype(
      jnp.int32)
  prefix_ids = c.prefix_ids
  if c.fprop_for_prefix:
    p = c.max_prefix_len
    prefix_ids = decoder_utils.left_align_tensor(prefix_ids, lengths, p)
    for name in ('output_ids', 'logprobs', 'entropy'):
      if name in result:
        result[name] = decoder_utils.left_align_tensor(result[name], lengths,
                                                       p)
  # Ids past a prefix's length are cleared (tokenizers may leave some).
  in_prefix = jnp.arange(prefix_ids.shape[1])[None, :] < lengths[:, None]
  result.prefix_ids = jnp.where(in_prefix, prefix_ids, 0)
  del result.start_step, result.step, result.done, result.has_eos
  result = next_token_sampler.post_process_decode_loop_state(result)
  n = c.num_samples
  if c.cf_guidance_scale is not None:
    return jax.tree.map(lambda x: split_batch_dim(x, 0, 2 * n)[:, :n],
                        result)
  return jax.tree.map(lambda x: split_batch_dim(x, 0, n), result)
