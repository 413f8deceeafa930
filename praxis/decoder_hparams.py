"""Decoding settings: which algorithm `LanguageModel.decode` runs and how.

Public names: DecoderHParams, GreedyDecoderHParams, BeamSearchHParams,
FlatBeamSearchHParams, SampleDecoderHParams.

These are plain dataclasses; the class chooses the algorithm:

  model_p.decoder_tpl = decoder_hparams.SampleDecoderHParams(
      seqlen=32, max_decode_steps=16, fprop_for_prefix=True, k=40,
      temperature=0.7, num_samples=4, eos_id=2)
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import dataclasses
from typing import Any

from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis import token_samplers

JTensor = pytypes.JTensor


@dataclasses.dataclass
class DecoderHParams:
  """Settings shared by every decoding algorithm.

  Attributes:
    seqlen: Length of the decoded sequences, prefix included (overridden by
      prefix length + max_decode_steps with `fprop_for_prefix`).
    min_prefix_len: Minimum number of prefix tokens (for input pipelines).
    eos_id: End-of-sequence id, or a list of them.
    min_decode_steps: EOS cannot be chosen before this many steps.
    max_decode_steps: Steps decoded after the prefix (None: up to seqlen); a
      list is decoded to its largest entry.
    fprop_for_prefix: Run the prefix through one forward pass (right-aligned)
      instead of one extend_step per token.
    lazy_prefix_broadcast: Share one prefix's KV cache among the samples
      (attention layers with LPB; `prefix_decoder_cache` mutable).
    decode_loop_mesh_axes_transpose: Renames of mesh axes inside the loop.
    process_result_fn: `fn(model, result) -> result` run after decoding.
    emb_lookup_style: Lookup style of the embedding while decoding.
    use_extra_input_kwargs: Pass `input_batch.extra_input_kwargs` to the LM.
    num_cache_slots: Continuous batching slots (see
      `models.LanguageModelContinuousBatching`).
    precompute_kv_cache_prefix_ids: Kept for configs.
  """

  seqlen: int = 0
  min_prefix_len: int = 5
  eos_id: int | Sequence[int] = 2
  min_decode_steps: int = 0
  max_decode_steps: int | Sequence[int] | None = None
  fprop_for_prefix: bool = False
  lazy_prefix_broadcast: bool = False
  decode_loop_mesh_axes_transpose: dict[str, str] | None = None
  process_result_fn: decoder_utils.ProcessResultFn | None = None
  emb_lookup_style: str = 'matmul'
  use_extra_input_kwargs: bool = False
  num_cache_slots: int = 0
  precompute_kv_cache_prefix_ids: Sequence[int] | None = None

  def clone(self) -> Any:
    """A deep copy."""
    return copy.deepcopy(self)


@dataclasses.dataclass
class GreedyDecoderHParams(DecoderHParams):
  """Greedy decoding (the argmax at every step)."""


@dataclasses.dataclass
class BeamSearchHParams(DecoderHParams):
  """Beam search (needs `fprop_for_prefix` and `max_decode_steps`).

  Attributes:
    beam_size: Hypotheses kept per example.
    tokens_per_beam: Tokens considered per hypothesis (None: beam_size).
    length_norm_alpha: Scores are divided by ((length + 5) / 5) ** alpha.
    early_exit: EOS extensions stay in the live beam (marked done) and the
      search stops once every live hypothesis is done.
    use_matmul_beam_shuffle: Reorder caches with one-hot matmuls.
    output_id_offset: Added to the chosen ids (beam search over a slice of
      the vocabulary).
  """

  beam_size: int = 1
  tokens_per_beam: int | None = None
  length_norm_alpha: float = 0.8
  early_exit: bool = False
  use_matmul_beam_shuffle: bool = False
  output_id_offset: int = 0


@dataclasses.dataclass
class FlatBeamSearchHParams(BeamSearchHParams):
  """Flat beam search (`praxis.flat_beam_search`)."""


@dataclasses.dataclass
class SampleDecoderHParams(DecoderHParams):
  """Sampling (top-k, top-p, temperature), several samples per example.

  Attributes:
    num_samples: Samples per example.
    temperature: Sampling temperature (input_batch.temperature overrides).
    k: Top-k (0: all tokens; 1: greedy).
    top_k_recall_target: Below 1, approximate top-k.
    use_top_k_for_logprobs: Log-probabilities from the top-k logits.
    p: If set, top-p (nucleus) mass.
    next_token_sampler_tpl: The sampler; gets k, p, ... when
      `override_next_token_sampler_params`.
    sample_constraint: A BaseSampleTerminationConstraint (or its config)
      ending samples early where `enforce_sample_constraints` is given.
    global_normalize: Top-p over the whole vocabulary's probabilities.
    cf_guidance_scale: Classifier-free guidance scale (the batch pairs
      conditioned and unconditioned rows; see sample_decode).
    controlled_decoding: Not supported (must be None).
    sort_samples: Sort each example's samples by total log-probability.
    override_next_token_sampler_params: Copy k, p, ... into the sampler.
    optimize_eos: End each sample where ending with EOS is likeliest.
    vanilla_sample_decode: Use `sample_decode.vanilla_sample_decode`.
    early_exit: Stop when every sequence is done.
  """

  num_samples: int = 1
  temperature: float = 1.0
  k: int = 40
  top_k_recall_target: float = 1.0
  use_top_k_for_logprobs: bool = False
  p: float | JTensor | None = None
  next_token_sampler_tpl: pax_fiddle.Config[
      token_samplers.BaseNextTokenSampler
  ] = pax_fiddle.template_field(  # noqa: RUF009 (a dataclasses.field)
      token_samplers.DefaultNextTokenSampler)
  sample_constraint: Any = None
  global_normalize: bool = False
  cf_guidance_scale: list[float] | float | None = None
  controlled_decoding: decoder_utils.ControlledDecodingHParams | None = None
  sort_samples: bool | None = True
  override_next_token_sampler_params: bool = True
  optimize_eos: bool = False
  vanilla_sample_decode: bool = False
  early_exit: bool = True
