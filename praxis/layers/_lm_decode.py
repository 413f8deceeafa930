"""How `models.LanguageModel` decodes: the decoder params checked, the
prefixes prepared and the algorithm of `decoder_tpl` run on its TransformerLm.

Private helpers of praxis.layers.models (check_decoder_params,
prepare_decode_data, next_token_sampler, decode_lm). The algorithms:

- GreedyDecoderHParams: `sample_decode.greedy_decode` (or `sample_decode`
  with a top-1 sampler when a `result_callback` streams the tokens);
- SampleDecoderHParams: `sample_decode.sample_decode`, or, with
  `vanilla_sample_decode`, `sample_decode.vanilla_sample_decode`;
- BeamSearchHParams: `beam_search.beam_search`;
- FlatBeamSearchHParams: `flat_beam_search.flat_beam_search`.

With `lazy_prefix_broadcast` (and `fprop_for_prefix`), sampling and beam
search keep the prefix cache once per example and make the samples' (or
beams') caches separately: the LM's attention layers must support it
(attentions.DotProductAttentionWithLPB or
multi_query_attention.MultiQueryDotProductAttentionLPB), and the decode must
run with the `prefix_decoder_cache` collection mutable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import fiddle as fdl
from jax import numpy as jnp

from praxis import base_layer
from praxis import beam_search
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import flat_beam_search
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis import sample_decode
from praxis.layers import transformer_models

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
LanguageModelType = transformer_models.LanguageModelType
DecoderHParams = decoder_hparams.DecoderHParams
SampleDecoderHParams = decoder_hparams.SampleDecoderHParams
BeamSearchHParams = decoder_hparams.BeamSearchHParams
FlatBeamSearchHParams = decoder_hparams.FlatBeamSearchHParams


def require(input_batch: NestedMap, keys: Sequence[str], where: str) -> None:
  """Raises if the batch lacks any of `keys`."""
  missing = [k for k in keys if k not in input_batch]
  if missing:
    raise ValueError(f'{where}: the input batch lacks {missing} (it has '
                     f'{sorted(input_batch)}).')


def check_decoder_params(p: DecoderHParams, where: str,
                         language_model: bool = True) -> None:
  """Rejects decoder params this model cannot decode with.

  Args:
    p: The decoder params.
    where: Names the model in errors.
    language_model: LanguageModel (lazy prefix broadcast, vanilla sampling
      and flat beam search allowed) rather than SequenceModel.
  """
  if not isinstance(p, DecoderHParams):
    raise TypeError(f'{where}: decoder_tpl must be a DecoderHParams, got '
                    f'{type(p).__name__}.')
  if p.seqlen <= 0 and not p.fprop_for_prefix:
    raise ValueError(f'{where}: set decoder_tpl.seqlen > 0, got {p.seqlen}.')
  unsupported = ['controlled_decoding']
  if not language_model:
    unsupported += ['lazy_prefix_broadcast', 'num_cache_slots',
                    'vanilla_sample_decode']
  for name in unsupported:
    if getattr(p, name, None):
      raise NotImplementedError(f'{where}: decoder_tpl.{name} is not '
                                'supported.')
  if isinstance(p, FlatBeamSearchHParams):
    if not language_model:
      raise NotImplementedError(f'{where}: flat beam search is not '
                                'supported.')
    if not isinstance(p.eos_id, int):
      raise ValueError(f'{where}: flat beam search needs one int '
                       f'decoder_tpl.eos_id, got {p.eos_id!r}.')
    return
  needs_steps = (isinstance(p, BeamSearchHParams) or p.fprop_for_prefix
                 or getattr(p, 'vanilla_sample_decode', False))
  if needs_steps and p.max_decode_steps is None:
    raise ValueError(f'{where}: fprop_for_prefix, beam search and '
                     'vanilla_sample_decode need decoder_tpl.max_decode_steps.')
  if (language_model and isinstance(p, BeamSearchHParams)
      and not p.fprop_for_prefix):
    raise ValueError(f'{where}: beam search needs fprop_for_prefix=True.')
  if p.lazy_prefix_broadcast and not p.fprop_for_prefix:
    raise ValueError(f'{where}: decoder_tpl.lazy_prefix_broadcast needs '
                     'fprop_for_prefix=True.')
  if getattr(p, 'vanilla_sample_decode', False) and (
      not isinstance(p.max_decode_steps, int) or not p.fprop_for_prefix):
    raise ValueError(f'{where}: vanilla_sample_decode needs fprop_for_prefix'
                     f'=True and an int max_decode_steps, got '
                     f'{p.fprop_for_prefix}, {p.max_decode_steps!r}.')


def prepare_decode_data(input_batch: NestedMap, p: DecoderHParams,
                        model_type: LanguageModelType, fprop_dtype: Any
                        ) -> NestedMap:
  """What the decoding loops need: prefixes, lengths and the fprop inputs."""
  ids = input_batch.ids
  b, max_prefix_len = ids.shape
  if 'prefix_lengths' in input_batch:
    prefix_lengths = input_batch.prefix_lengths.astype(jnp.int32)
  elif model_type == LanguageModelType.PREFIX:
    require(input_batch, ['inputs_indicator'], 'PREFIX LanguageModel.decode')
    prefix_lengths = jnp.sum(input_batch.inputs_indicator.astype(jnp.int32), 1)
  else:
    prefix_lengths = jnp.sum(1 - input_batch.paddings.astype(jnp.int32), 1)
  causal = None
  if model_type == LanguageModelType.PREFIX:
    causal = (jnp.arange(max_prefix_len)[None, :] >= prefix_lengths[:, None]
              ).astype(jnp.int32)
  d = NestedMap(prefix_lengths=prefix_lengths, extra_input_kwargs={},
                max_prefix_len=max_prefix_len)
  if p.use_extra_input_kwargs:
    d.extra_input_kwargs = dict(input_batch.get('extra_input_kwargs', {}))
  if p.fprop_for_prefix:
    steps = p.max_decode_steps
    steps = max(steps) if isinstance(steps, Sequence) else steps
    d.seqlen = max_prefix_len + steps
    d.start_time_step = max_prefix_len - 1
    d.state_padding_size = steps
    d.fprop_input_ids, d.fprop_input_paddings = (
        sample_decode.right_align_prefix_ids(ids, prefix_lengths,
                                             fprop_dtype))
    d.fprop_segment_pos = sample_decode.right_align_segment_position(
        prefix_lengths, max_prefix_len)
    d.fprop_segment_ids = (1 - d.fprop_input_paddings).astype(jnp.int32)
    d.input_ids = jnp.pad(d.fprop_input_ids, [(0, 0), (0, steps)])
    d.input_paddings = jnp.pad(d.fprop_input_paddings, [(0, 0), (0, steps)],
                               constant_values=1.0)
    d.causal_attention_mask = None if causal is None else (
        decoder_utils.right_align_tensors(causal, prefix_lengths))
  else:
    d.seqlen = p.seqlen
    d.start_time_step = 0
    d.state_padding_size = p.seqlen - 1
    d.input_ids, d.input_paddings = ids, input_batch.paddings
    d.fprop_input_ids = jnp.zeros((b, 1), ids.dtype)
    d.fprop_input_paddings = jnp.ones((b, 1), fprop_dtype)
    d.fprop_segment_ids = d.fprop_segment_pos = None
    d.causal_attention_mask = None
  return d


def next_token_sampler(p: SampleDecoderHParams, input_batch: NestedMap
                       ) -> Any:
  """The configured sampler, with k, p, ... copied in if asked."""
  sampler_p = p.next_token_sampler_tpl.clone()
  if p.override_next_token_sampler_params:
    sampler_p.top_k = p.k
    sampler_p.top_p = p.p
    sampler_p.global_normalize = p.global_normalize
    sampler_p.top_k_recall_target = p.top_k_recall_target
    sampler_p.use_top_k_for_logprobs = p.use_top_k_for_logprobs
  cls = fdl.get_callable(sampler_p)
  return base_layer.instantiate(
      sampler_p, **cls.get_extra_kwargs(input_batch, p.num_samples))


def lm_extend_step(mdl: base_layer.BaseLayer, ids: JTensor,
                   segment_pos: JTensor) -> JTensor:
  """The LM's logits [B, V] after ids [B]."""
  return mdl.extend_step(ids, segment_pos=segment_pos).logits


def transform_state(mdl: base_layer.BaseLayer, fn: Any) -> None:
  mdl.transform_decode_state(fn)


def lazy_broadcast_prefix(mdl: base_layer.BaseLayer, num_suffix_samples: int,
                          suffix_length: int) -> None:
  mdl.lazy_broadcast_prefix(num_suffix_samples, suffix_length)


def _instance_or_none(tpl: Any) -> Any:
  """A sample constraint given as a config, instantiated (None stays)."""
  if tpl is None or not isinstance(tpl, pax_fiddle.Config):
    return tpl
  return base_layer.instantiate(tpl)


def _fprop(mdl: base_layer.BaseLayer, d: NestedMap, drop_last: bool = False
           ) -> None:
  """Runs the LM on the (right-aligned) prefixes, filling its caches."""
  ids, paddings = d.fprop_input_ids, d.fprop_input_paddings
  seg_ids, seg_pos, causal = (d.fprop_segment_ids, d.fprop_segment_pos,
                              d.causal_attention_mask)
  if drop_last:
    # As Pax's vanilla sampling: the last prefix id is the first input.
    if ids.shape[1] == 1:
      ids, paddings = jnp.zeros_like(ids), jnp.ones_like(paddings)
    else:
      cut = lambda x: None if x is None else x[:, :-1]
      ids, paddings, seg_ids, seg_pos, causal = map(
          cut, (ids, paddings, seg_ids, seg_pos, causal))
  mdl(ids, paddings, segment_ids=seg_ids, segment_pos=seg_pos,
      start_time_step=d.start_time_step, causal_attention_mask=causal,
      **d.extra_input_kwargs)


def _flat_beam_search(lm: base_layer.BaseLayer, p: FlatBeamSearchHParams,
                      d: NestedMap, fprop_dtype: Any) -> NestedMap:
  """Flat beam search: each of the K beam slots gets its own cache row.

  As in Pax 1.4, the search starts from the last prefix id, scores the
  LM's logits, and each slot's cache holds the ids chosen for that slot (the
  beams' masks do not reach the attention).
  """
  k = p.beam_size
  _fprop(lm, d)
  lm.transform_decode_state(decoder_utils.pad_state_fn(d.state_padding_size))
  lm.transform_decode_state(decoder_utils.batch_broadcast_state_fn(k))

  def extend_step_fn(mdl, ids, segment_pos):
    # As Pax, the search scores the LM's logits (not log-softmaxed).
    return mdl.extend_step(ids.reshape(-1), segment_pos=segment_pos).logits

  with decoder_utils.maybe_decode_mesh_transpose(
      lm, p.decode_loop_mesh_axes_transpose):
    result = flat_beam_search.flat_beam_search(
        lm, extend_step_fn, d.input_ids, d.input_paddings, d.seqlen,
        beam_size=k, fprop_dtype=fprop_dtype,
        max_decode_steps=p.max_decode_steps, eos_id=p.eos_id,
        length_norm_alpha=p.length_norm_alpha)
    if p.process_result_fn is not None:
      result = p.process_result_fn(lm, result)
  return result


def _sample(lm: base_layer.BaseLayer, p: SampleDecoderHParams, d: NestedMap,
            input_batch: NestedMap, common: dict[str, Any],
            result_callback: Any, suffix_score: bool) -> NestedMap:
  """Sampling (plain, lazily broadcast or vanilla)."""
  get = input_batch.get
  sampler = next_token_sampler(p, input_batch)
  if p.vanilla_sample_decode:
    return sample_decode.vanilla_sample_decode(
        lm, lambda mdl, ids, paddings: _fprop(mdl, d, drop_last=True),
        lm_extend_step, transform_state, sampler, d.fprop_input_ids,
        d.fprop_input_paddings, temperature=get('temperature', p.temperature),
        gumbel_prng_key=get('gumbel_prng_key'),
        max_decode_steps=p.max_decode_steps, eos_id=get('eos_id', p.eos_id),
        decode_loop_mesh_axes_transpose=p.decode_loop_mesh_axes_transpose)
  return sample_decode.sample_decode(
      lm, lm_extend_step, transform_state,
      lazy_broadcast_prefix if p.lazy_prefix_broadcast else None,
      sampler, d.input_ids, d.input_paddings, d.seqlen,
      num_samples=p.num_samples, fprop_fn=lambda mdl, i, pd: _fprop(mdl, d),
      fprop_for_prefix=p.fprop_for_prefix,
      temperature=get('temperature', p.temperature),
      gumbel_prng_key=get('gumbel_prng_key'),
      per_example_top_p=get('per_example_top_p'),
      per_example_top_k=get('per_example_top_k'),
      per_example_max_decode_steps=get('per_example_max_decode_steps'),
      eos_id=get('eos_id', p.eos_id), sort_samples=p.sort_samples,
      early_exit=p.early_exit,
      cf_guidance_scale=get('cf_guidance_scale', p.cf_guidance_scale),
      top_k_recall_target=p.top_k_recall_target,
      use_top_k_for_logprobs=p.use_top_k_for_logprobs,
      return_entropy_score='return_entropy_score' in input_batch,
      optimize_eos=p.optimize_eos,
      sample_constraint=_instance_or_none(p.sample_constraint),
      enforce_sample_constraints=get('enforce_sample_constraints'),
      num_per_token_logprobs=get('num_per_token_logprobs'),
      result_callback=result_callback,
      return_result_for_suffix_score=suffix_score, **common)


def _check_lpb_mutable(lm: base_layer.BaseLayer, p: DecoderHParams,
                       where: str) -> None:
  """Lazy broadcasts (beam search, several samples) write prefix caches."""
  broadcasts = isinstance(p, BeamSearchHParams) or (
      isinstance(p, SampleDecoderHParams) and p.num_samples > 1
      and not p.vanilla_sample_decode)
  if (p.lazy_prefix_broadcast and broadcasts and not lm.is_mutable_collection(
      base_layer.PREFIX_DECODE_CACHE)):
    raise ValueError(
        f'{where}: decoder_tpl.lazy_prefix_broadcast needs the '
        f'{base_layer.PREFIX_DECODE_CACHE!r} collection mutable: call decode '
        'with mutable=[DECODE_CACHE, PREFIX_DECODE_CACHE].')


def decode_lm(lm: base_layer.BaseLayer, p: DecoderHParams, d: NestedMap,
              input_batch: NestedMap, *, fprop_dtype: Any, where: str,
              result_callback: Any = None, suffix_score: bool = False
              ) -> NestedMap:
  """Runs the decoding algorithm of `p` on the TransformerLm `lm`.

  Args:
    lm: The (bound) TransformerLm.
    p: The decoder params (checked by check_decoder_params).
    d: prepare_decode_data's output.
    input_batch: The batch (per-example overrides such as `temperature`).
    fprop_dtype: The dtype of flat beam search's scores.
    where: Names the model in errors.
    result_callback: Streams sampled (or greedy) tokens (see sample_decode).
    suffix_score: Sampling returns its raw loop state.

  Returns:
    The algorithm's results.
  """
  if isinstance(p, FlatBeamSearchHParams):
    return _flat_beam_search(lm, p, d, fprop_dtype)
  _check_lpb_mutable(lm, p, where)
  common = {
      'max_prefix_len': d.max_prefix_len,
      'max_decode_steps': p.max_decode_steps,
      'prefix_lengths': d.prefix_lengths,
      'min_decode_steps': p.min_decode_steps,
      'decode_loop_mesh_axes_transpose': p.decode_loop_mesh_axes_transpose,
      'process_result_fn': p.process_result_fn,
  }
  if isinstance(p, BeamSearchHParams):
    return beam_search.beam_search(
        lm, lm_extend_step, lambda mdl, i, pd: _fprop(mdl, d),
        transform_state, d.fprop_input_ids, d.fprop_input_paddings, p,
        decode_loop_mesh_axes_transpose=p.decode_loop_mesh_axes_transpose,
        process_result_fn=p.process_result_fn,
        lazy_broadcast_prefix_fn=(
            lazy_broadcast_prefix if p.lazy_prefix_broadcast else None))
  if isinstance(p, SampleDecoderHParams):
    return _sample(lm, p, d, input_batch, common, result_callback,
                   suffix_score)
  fprop_fn = lambda mdl, ids, paddings: _fprop(mdl, d)
  if result_callback is not None:
    # greedy_decode has no streaming: sample the top-1 token instead.
    return sample_decode.sample_decode(
        lm, lm_extend_step, transform_state, None,
        sample_decode.DefaultNextTokenSampler(top_k=1), d.input_ids,
        d.input_paddings, d.seqlen, fprop_fn=fprop_fn,
        fprop_for_prefix=p.fprop_for_prefix, temperature=0.0,
        eos_id=p.eos_id, result_callback=result_callback, **common)
  return sample_decode.greedy_decode(
      lm, lm_extend_step, d.input_ids, d.input_paddings, d.seqlen,
      fprop_fn=fprop_fn, fprop_for_prefix=p.fprop_for_prefix,
      transform_state_fn=transform_state, eos_id=p.eos_id, **common)
