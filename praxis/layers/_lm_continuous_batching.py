"""`LanguageModelContinuousBatching`: step-wise sampling over cache slots.

Public (re-exported by praxis.layers.models): LanguageModelContinuousBatching.

A server keeps `decoder_tpl.num_cache_slots` sequences in one decoder cache
and decodes them a step at a time, inserting new requests into free slots:

  state = model.apply(vars, batch, params, method=model.sample_prefill,
                      mutable=[DECODE_CACHE])     # prompts -> first tokens
  state = model.apply(vars, params, prefix_state, prefix_cache, state,
                      prefix_slot, slot, method=model.sample_insert, ...)
  state = model.apply(vars, state, params, method=model.sample_generate, ...)

The slots' caches are right-aligned: every prompt ends at max_prefix_len =
seqlen - max(max_decode_steps). The cache layout is Pax's: the self-attention
caches of `lm.transformer.x_layers_<i>.self_attention` (a StackedTransformer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import py_utils
from praxis import pytypes
from praxis import sample_decode
from praxis.layers import _lm_decode
from praxis.layers import models

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
DecoderHParams = decoder_hparams.DecoderHParams
DECODE_CACHE = base_layer.DECODE_CACHE

# Decode-state entries sample_insert copies from the prefilled slot.
_INSERTED = ('has_eos', 'prefix_lengths', 'segment_pos', 'decode_lengths',
             'output_ids', 'logprobs', 'temperature',
             'per_example_max_decode_steps', 'per_example_top_p',
             'per_example_top_k')


def _last_decode_step(p: DecoderHParams) -> int:
  steps = p.max_decode_steps
  if steps is None:
    raise ValueError('LanguageModelContinuousBatching: set '
                     'decoder_tpl.max_decode_steps.')
  return steps if isinstance(steps, int) else max(steps)


def _lm_extend_step(mdl: base_layer.BaseLayer, ids: JTensor,
                    segment_pos: JTensor) -> JTensor:
  return mdl.extend_step(ids, segment_pos=segment_pos).logits


class LanguageModelContinuousBatching(models.LanguageModel):
  """A LanguageModel that samples step by step over cache slots (Pax's).

  Same fields as LanguageModel; decoding runs through `sample_prefill`,
  `sample_insert` and `sample_generate` (see the module doc).
  """

  def _self_attentions(self) -> list[base_layer.BaseLayer]:
    stack = self.lm.transformer
    layers = getattr(stack, 'x_layers', None)
    if layers is None:
      raise NotImplementedError(
          f'{self._where}: continuous batching needs a StackedTransformer '
          f'(x_layers), got {type(stack).__name__}.')
    return [layer.self_attention for layer in layers]

  def sample_init_decode_state(self, decode_data: NestedMap,
                               decoder_params: DecoderHParams) -> NestedMap:
    """The step-wise state after the prefill (caches padded)."""
    p = decoder_params
    last = _last_decode_step(p)
    return sample_decode.sample_init_decode_state(
        model=self.lm, prefix_ids=decode_data.input_ids,
        max_prefix_len=p.seqlen - last, max_decode_steps=last,
        top_k=getattr(p, 'k', 1), top_p=getattr(p, 'p', None),
        prefix_lengths=decode_data.prefix_lengths, eos_id=p.eos_id,
        transform_state_fn=_lm_decode.transform_state)

  def sample_prefill(self, input_batch: NestedMap,
                     decoder_params: DecoderHParams) -> NestedMap:
    """Runs the prompts and samples their first tokens.

    Args:
      input_batch: `ids`, `paddings` [B, P] (P = seqlen - max decode steps);
        optional `temperature`, `per_example_max_decode_steps`,
        `per_example_top_p`, `per_example_top_k` [B].
      decoder_params: Needs fprop_for_prefix, seqlen and max_decode_steps.

    Returns:
      The decode state of the B prompts (their caches in DECODE_CACHE).
    """
    p = decoder_params
    _lm_decode.check_decoder_params(p, self._where)
    if not p.fprop_for_prefix:
      raise ValueError(f'{self._where}: continuous batching needs '
                       'decoder_tpl.fprop_for_prefix=True.')
    d = _lm_decode.prepare_decode_data(input_batch, p, self.model_type,
                                       self.fprop_dtype)
    out = self.lm(d.fprop_input_ids, d.fprop_input_paddings,
                  segment_ids=d.fprop_segment_ids,
                  segment_pos=d.fprop_segment_pos,
                  start_time_step=d.start_time_step,
                  causal_attention_mask=d.causal_attention_mask,
                  **d.extra_input_kwargs)
    last_logits = out.logits[:, -1]
    state = self.sample_init_decode_state(d, p)
    b, last = input_batch.ids.shape[0], _last_decode_step(p)
    # The first token comes from the prompt's logits, so the first
    # sample_generate step feeds it at position P (not P - 1 again).
    self.lm.update_decode_state('time_step',
                                jnp.asarray(p.seqlen - last, jnp.int32))
    get = input_batch.get
    state.temperature = get('temperature', jnp.full(
        (b,), getattr(p, 'temperature', 0.0), jnp.float32))
    state.per_example_max_decode_steps = get(
        'per_example_max_decode_steps', jnp.full((b,), last, jnp.int32))
    state.per_example_top_p = get('per_example_top_p',
                                  jnp.ones((b,), jnp.float32))
    state.per_example_top_k = get('per_example_top_k',
                                  jnp.ones((b,), jnp.int32))
    return sample_decode.sample_decoding_step(
        model=self.lm, decode_state=state,
        extend_step_fn=lambda mdl, ids, pos: last_logits,
        top_k=getattr(p, 'k', 1), top_p=getattr(p, 'p', None),
        max_prefix_len=p.seqlen - last, max_decode_steps=last,
        decode_loop_mesh_axes_transpose=p.decode_loop_mesh_axes_transpose,
        eos_id=p.eos_id)

  def sample_insert(self, decoder_params: DecoderHParams,
                    prefix_decode_state: NestedMap,
                    prefix_decode_cache: Mapping[str, Any],
                    decode_state: NestedMap, prefix_slot: int | JTensor,
                    slot: int | JTensor) -> NestedMap:
    """Moves prefilled row `prefix_slot` into cache slot `slot`.

    Args:
      decoder_params: As for sample_prefill.
      prefix_decode_state: sample_prefill's state.
      prefix_decode_cache: sample_prefill's mutated collections
        ({'decoder_cache': {'lm': ...}}).
      decode_state: The slots' state.
      prefix_slot: The prefilled row.
      slot: The slot it goes to.

    Returns:
      The updated decode state (the slot's caches are updated in place).
    """
    s = decode_state
    s.per_sample_steps = s.per_sample_steps.at[slot].set(
        prefix_decode_state.per_sample_steps[prefix_slot])
    s.done = s.done.at[slot].set(False)
    for name in _INSERTED:
      update = jnp.asarray(prefix_decode_state[name])[prefix_slot]
      update = jnp.atleast_1d(update).astype(s[name].dtype)
      s[name] = jax.lax.dynamic_update_slice_in_dim(s[name], update, slot, 0)
    max_prefix_len = decoder_params.seqlen - _last_decode_step(
        decoder_params)
    aligned = decoder_params.seqlen - (s.step - max_prefix_len)
    caches = prefix_decode_cache[DECODE_CACHE]['lm']['transformer']
    for i, atten in enumerate(self._self_attentions()):
      prefix = caches[f'x_layers_{i}']['self_attention']
      for name in atten.variables[DECODE_CACHE]:
        row = jnp.asarray(prefix[name])[prefix_slot][None]
        row = decoder_utils.right_align_tensors(
            row, jnp.reshape(aligned, [1]))
        state = atten.get_decode_state(name)
        atten.update_decode_state(name, jax.lax.dynamic_update_slice_in_dim(
            state, row.astype(state.dtype), slot, 0))
    return s

  def left_align_decode_state(self, max_prefix_len: int,
                              max_decode_steps: int, decode_state: NestedMap,
                              batch_size: int) -> NestedMap:
    """Shifts the slots' caches left once every slot's row is full."""
    s = decode_state
    s.per_sample_steps = jnp.where(s.done, max_prefix_len,
                                   s.per_sample_steps)
    shift = jnp.max(s.per_sample_steps)
    shifts = jnp.ones_like(s.prefix_lengths) * shift
    row_length = max_prefix_len + max_decode_steps
    for atten in self._self_attentions():
      for name in atten.variables[DECODE_CACHE]:
        atten.update_decode_state(name, decoder_utils.left_align_kv_cache(
            atten.get_decode_state(name), shifts, row_length - 1,
            batch_size=batch_size))
    s.step = jnp.where(s.step < row_length - 1, s.step, shift)
    self.lm.update_decode_state('time_step',
                                jnp.reshape(s.step, [-1])[0].astype(
                                    jnp.int32))
    return s

  def sample_generate(self, decode_state: NestedMap,
                      decoder_params: DecoderHParams,
                      align_decode_state: bool = False) -> NestedMap:
    """One sampling step of every slot (after left-aligning if asked)."""
    p = decoder_params
    last = _last_decode_step(p)
    max_prefix_len = p.seqlen - last
    if align_decode_state:
      decode_state = self.left_align_decode_state(
          max_prefix_len, last, decode_state, p.num_cache_slots)
    return sample_decode.sample_decoding_step(
        model=self.lm, decode_state=decode_state,
        extend_step_fn=_lm_extend_step, top_k=getattr(p, 'k', 1),
        top_p=getattr(p, 'p', None), max_prefix_len=max_prefix_len,
        max_decode_steps=last,
        decode_loop_mesh_axes_transpose=p.decode_loop_mesh_axes_transpose,
        eos_id=p.eos_id)
