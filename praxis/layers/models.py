"""Pax models: language models, sequence-to-sequence, BERT, classifiers.

Public names: compute_xent_loss_helper, mask_lm_inputs, template_has_type,
add_hist, LanguageModel, SequenceModel, BertModel; re-exported from
classification_models: ClassificationModel, ClassificationMLPModel,
top_k_accuracy.

`LanguageModel` trains a TransformerLm on batches with keys `ids`, `labels`,
`paddings`, `weights` (all [B, T]; plus `segment_ids`, `segment_pos` for
packed inputs, `inputs_indicator` for a PREFIX LM, optional
`eval_sample_weights` [B]) and decodes with the algorithm its `decoder_tpl`
names (greedy, sampling, beam search):

  model_p = pax_fiddle.Config(models.LanguageModel, name='lm',
                              lm_tpl=lm_p)   # a TransformerLm config
  model_p.decoder_tpl = decoder_hparams.GreedyDecoderHParams(
      seqlen=16, eos_id=2)
  model = base_layer.instantiate(model_p)
  variables = model.init(jax.random.PRNGKey(0), batch)
  metrics, per_example = model.apply(variables, batch)  # metrics.total_loss
  _, results, _ = model.apply(variables, batch, method=model.decode,
                              mutable=[base_layer.DECODE_CACHE])
  results.output_ids  # [B, 1, 16]
"""

from __future__ import annotations

from typing import Any

import fiddle as fdl
import jax
from jax import numpy as jnp
import numpy as np

from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import beam_search
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis import sample_decode
from praxis.layers import _lm_decode
from praxis.layers import classification_models
from praxis.layers import embedding_softmax
from praxis.layers import transformer_models

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
DecodeOut = base_model.DecodeOut
ProcessDecodeOut = base_model.ProcessDecodeOut
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field
LanguageModelType = transformer_models.LanguageModelType
DecoderHParams = decoder_hparams.DecoderHParams
GreedyDecoderHParams = decoder_hparams.GreedyDecoderHParams
SampleDecoderHParams = decoder_hparams.SampleDecoderHParams
BeamSearchHParams = decoder_hparams.BeamSearchHParams
FlatBeamSearchHParams = decoder_hparams.FlatBeamSearchHParams

ClassificationModel = classification_models.ClassificationModel
ClassificationMLPModel = classification_models.ClassificationMLPModel
top_k_accuracy = classification_models.top_k_accuracy


def template_has_type(template: Any, cls: type[Any]) -> bool:
  """Whether a config, or an instance, is of class `cls`."""
  if isinstance(template, fdl.Buildable):
    return issubclass(fdl.get_callable(template), cls)
  return isinstance(template, cls)


def add_hist(layer: base_layer.BaseLayer, name: str, expression: JTensor,
             verbosity: int = 2) -> None:
  """Adds a histogram summary."""
  layer.add_summary(name, expression,
                    summary_type=base_layer.SummaryType.HISTOGRAM,
                    verbosity=verbosity)


_require = _lm_decode.require


def _token_weights(input_batch: NestedMap, apply_eval_sample_weights: bool
                   ) -> JTensor:
  """`weights` [B, T], times `eval_sample_weights` [B] if asked."""
  weights = input_batch.weights
  if apply_eval_sample_weights:
    _require(input_batch, ['eval_sample_weights'],
             'apply_eval_sample_weights')
    weights = weights * input_batch.eval_sample_weights[:, None].astype(
        weights.dtype)
  return weights


def compute_xent_loss_helper(
    predictions: NestedMap,
    input_batch: NestedMap,
    return_predictions: bool,
    apply_eval_sample_weights: bool = False,
    report_strict_acc: bool = False,
) -> tuple[WeightedScalars, dict[str, Any]]:
  """The metrics of a softmax output against `labels` / `weights`.

  Args:
    predictions: The LM's loss output (per_example_argmax, total_loss,
      avg_xent, aux_loss, total_weight, per_sequence_xent).
    input_batch: Has `labels` and `weights` [B, T] (and
      `eval_sample_weights` [B] for the options below).
    return_predictions: Return `predictions` as the per-example output.
    apply_eval_sample_weights: Multiply `weights` by `eval_sample_weights`.
    report_strict_acc: Add `acc_strict`, the fraction of (non-padding)
      examples whose every weighted token is predicted right.

  Returns:
    (metrics of (value, weight) pairs: total_loss, avg_xent, aux_loss,
    log_pplx, fraction_of_correct_next_step_preds, num_predictions[,
    acc_strict]; per-example output: labels and scores (minus the sequence
    cross entropy), or `predictions`).
  """
  labels = input_batch.labels
  weights = _token_weights(input_batch, apply_eval_sample_weights)
  predicted = predictions.per_example_argmax.astype(labels.dtype)
  num_preds = predictions.total_weight
  correct = (labels == predicted) * weights
  mean_acc = jnp.sum(correct) / jnp.maximum(num_preds, 1)
  weight = jnp.asarray(num_preds, predictions.avg_xent.dtype)
  xent_weight = predictions.get('avg_xent_weight', weight)
  one = jnp.array(1.0, predictions.avg_xent.dtype)
  metrics = NestedMap(
      total_loss=(predictions.total_loss, weight),
      avg_xent=(predictions.avg_xent, xent_weight),
      aux_loss=(predictions.aux_loss, one),
      log_pplx=(predictions.avg_xent, xent_weight),
      fraction_of_correct_next_step_preds=(mean_acc, weight),
      num_predictions=(num_preds, jnp.array(1.0, num_preds.dtype)),
  )
  if report_strict_acc:
    sample_weights = input_batch.get(
        'eval_sample_weights', jnp.ones(labels.shape[:1], jnp.float32))
    all_right = jnp.sum(correct, -1) == jnp.sum(weights, -1, jnp.float32)
    all_right = all_right & (sample_weights > 0)
    num_examples = jnp.sum(sample_weights > 0).astype(jnp.float32)
    metrics.acc_strict = (jnp.sum(all_right) / jnp.maximum(num_examples, 1),
                          num_examples.astype(weight.dtype))
  if return_predictions:
    return metrics, predictions
  per_example = NestedMap(labels=labels,
                          scores=-predictions.per_sequence_xent)
  if apply_eval_sample_weights:
    per_example.eval_sample_weights = input_batch.eval_sample_weights
  return metrics, per_example


def _first_sample(x: np.ndarray, ndim: int) -> np.ndarray:
  """x[:, 0] if x has a samples dim (its rank is `ndim` + 1)."""
  x = np.asarray(x)
  return x[:, 0] if x.ndim == ndim + 1 else x


def _decoded_substrings(input_obj: base_input.BaseInput, ids: np.ndarray,
                        rows: list[int], spans: list[tuple[int, int]]
                        ) -> list[str]:
  """`ids[row][start:end]` detokenized for each row, in one call.

  The rows' spans are left-aligned (zero-padded) in one [len(rows), max
  length] array, with their lengths, so `ids_to_strings` (which reads
  `ids[i, :lengths[i]]` of each row) runs once per batch instead of once per
  example.
  """
  if not rows:
    return []
  pieces = [ids[i][start:end] for i, (start, end) in zip(rows, spans)]
  lengths = np.array([len(piece) for piece in pieces], np.int32)
  spans_ids = np.zeros((len(rows), int(lengths.max())), ids.dtype)
  for k, piece in enumerate(pieces):
    spans_ids[k, :len(piece)] = piece
  return list(input_obj.ids_to_strings(spans_ids, lengths))


class LanguageModel(base_model.BaseModel):
  """A language model task: loss, metrics and decoding of a TransformerLm.

  Attributes:
    lm_tpl: The LM (child `lm`); its model_type is set from this layer.
    return_predictions: Return the LM's outputs as the per-example output.
    decoder_tpl: The decoding algorithm and its settings.
    model_type: CAUSAL, PREFIX (needs `inputs_indicator`) or BIDIRECTIONAL.
    count_tokens: Count the trained tokens (child `token_counter`).
    apply_eval_sample_weights: Multiply the token weights by the batch's
      `eval_sample_weights` [B].
    report_strict_acc: Also report `acc_strict`.
  """

  lm_tpl: LayerTpl = template_field(transformer_models.TransformerLm)
  return_predictions: bool = False
  decoder_tpl: DecoderHParams = base_layer.instance_field(GreedyDecoderHParams)
  model_type: LanguageModelType = LanguageModelType.CAUSAL
  count_tokens: bool = False
  apply_eval_sample_weights: bool = False
  report_strict_acc: bool = False

  @property
  def _where(self) -> str:
    return f'LanguageModel ({self.name})'

  def setup(self) -> None:
    if self.count_tokens:
      self.create_child('token_counter',
                        pax_fiddle.Config(embedding_softmax.TokenCounter))
    self.create_child('lm', self.lm_tpl.clone().set(
        model_type=LanguageModelType(self.model_type)))

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """The LM's loss output for the batch (see TransformerLm)."""
    _require(input_batch, ['ids', 'labels', 'paddings', 'weights'],
             self._where)
    if self.count_tokens:
      self.token_counter(input_batch.ids, input_batch.paddings)
    kwargs = {}
    if self.lm_tpl.packed_input:
      _require(input_batch, ['segment_ids', 'segment_pos'],
               f'{self._where} (packed_input)')
      kwargs = {
          'segment_ids': input_batch.segment_ids,
          'segment_pos': input_batch.segment_pos,
          'segment_mask': input_batch.get('segment_mask'),
      }
    model_type = LanguageModelType(self.model_type)
    causal = None
    if model_type == LanguageModelType.PREFIX:
      _require(input_batch, ['inputs_indicator'], f'{self._where} (PREFIX)')
      causal = 1 - input_batch.inputs_indicator
    labels = NestedMap(
        class_ids=input_batch.labels,
        class_weights=_token_weights(input_batch,
                                     self.apply_eval_sample_weights))
    return self.lm(input_batch.ids, input_batch.paddings, labels=labels,
                   causal_attention_mask=causal, **kwargs)

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[WeightedScalars, dict[str, Any]]:
    """See compute_xent_loss_helper."""
    return compute_xent_loss_helper(
        predictions, input_batch, self.return_predictions,
        self.apply_eval_sample_weights, self.report_strict_acc)

  def _prepare_guidance_decode_data(self, decode_data: NestedMap
                                    ) -> NestedMap:
    """Classifier-free guidance hook: subclasses rearrange the decode data.

    Called when a SampleDecoderHParams sets cf_guidance_scale; LanguageModel
    itself has no unconditioned inputs to pair with, so (as Pax) it raises.
    """
    del decode_data
    raise NotImplementedError('LanguageModel does not support guidance.')

  def decode(self, input_batch: NestedMap,
             result_callback: decoder_utils.StreamingResultCallback | None = (
                 None),
             return_result_for_suffix_score: bool = False) -> DecodeOut:
    """Decodes with `decoder_tpl` (see decode_with_params)."""
    return self.decode_with_params(self.decoder_tpl, input_batch,
                                   result_callback,
                                   return_result_for_suffix_score)

  def decode_with_params(
      self,
      decoder_params: DecoderHParams,
      input_batch: NestedMap,
      result_callback: decoder_utils.StreamingResultCallback | None = None,
      return_result_for_suffix_score: bool = False,
  ) -> DecodeOut:
    """Continues each prefix of the batch.

    Run it with the `decoder_cache` collection mutable (and a `random` RNG
    for sampling).

    Args:
      decoder_params: GreedyDecoderHParams, SampleDecoderHParams (also
        vanilla_sample_decode), BeamSearchHParams or FlatBeamSearchHParams;
        lazy_prefix_broadcast needs attention layers that support it (e.g.
        attentions.DotProductAttentionWithLPB) and the prefix_decoder_cache
        collection mutable (see _lm_decode).
      input_batch: `ids` [B, P], `paddings` [B, P]; optional
        `prefix_lengths` [B] (default: the unpadded lengths, or the sums of
        `inputs_indicator` for a PREFIX LM), `temperature` [B],
        `per_example_max_decode_steps`, `per_example_top_p`,
        `per_example_top_k`, `eos_id`, `gumbel_prng_key`.
      result_callback: Streams the sampled (or greedy) tokens (see
        sample_decode.sample_decode).
      return_result_for_suffix_score: Sampling returns its raw loop state.

    Returns:
      (metrics {num_decoded}, results, {}): results has output_ids
      [B, n, seqlen] (n samples or beams; prefix then decoded ids),
      decode_lengths, prefix_lengths, original_lengths [B, n], logprobs
      [B, n, seqlen], prefix_ids (and scores for beam search), plus the
      input batch's own entries.
    """
    _lm_decode.check_decoder_params(decoder_params, self._where)
    _require(input_batch, ['ids', 'paddings'], self._where)
    model_type = LanguageModelType(self.model_type)
    if model_type == LanguageModelType.BIDIRECTIONAL:
      raise NotImplementedError(f'{self._where}: a BIDIRECTIONAL LM cannot '
                                'decode.')
    data = _lm_decode.prepare_decode_data(input_batch, decoder_params,
                                          model_type, self.fprop_dtype)
    if (template_has_type(decoder_params, SampleDecoderHParams) and
        getattr(decoder_params, 'cf_guidance_scale', None) is not None):
      data = self._prepare_guidance_decode_data(data)
    result = _lm_decode.decode_lm(
        self.lm, decoder_params, data, input_batch,
        fprop_dtype=self.fprop_dtype, where=self._where,
        result_callback=result_callback,
        suffix_score=return_result_for_suffix_score)
    result.update(input_batch)
    if 'eval_sample_weights' in result:
      num_decoded = jnp.sum(result.eval_sample_weights).astype(jnp.float32)
    else:
      num_decoded = jnp.array(input_batch.ids.shape[0], jnp.float32)
    metrics = NestedMap(num_decoded=(num_decoded, jnp.array(1.0, jnp.float32)))
    return metrics, result, NestedMap()

  def process_decode_out(self, input_obj: base_input.BaseInput,
                         decode_out: NestedMap) -> ProcessDecodeOut:
    """Detokenizes the first sample of each example (on the host).

    Args:
      input_obj: The input, for `ids_to_strings(ids, lengths)`.
      decode_out: decode()'s results, as numpy arrays.

    Returns:
      (metrics {decoded_length}, [(prefix string, {prefix, decoded, original,
      ids, decoded_ids, decoded_substr, logprobs, prefix_length,
      decode_length[, sampled]})], {}); padded examples (zero
      eval_sample_weights) are skipped.
    """
    output_ids = np.asarray(decode_out.output_ids)
    if output_ids.ndim not in (2, 3):
      raise ValueError(f'{self._where}: output_ids must be [B, T] or '
                       f'[B, n, T], got {output_ids.shape}.')
    sampled = None
    if output_ids.ndim == 3 and output_ids.shape[1] > 1:
      b, n, t = output_ids.shape
      strs = input_obj.ids_to_strings(
          output_ids.reshape(b * n, t),
          np.asarray(decode_out.decode_lengths).reshape(b * n))
      sampled = np.asarray(strs, dtype=object).reshape(b, n)
    ids = _first_sample(output_ids, 2)
    decode_lengths = _first_sample(decode_out.decode_lengths, 1)
    prefix_lengths = _first_sample(decode_out.prefix_lengths, 1)
    original_lengths = _first_sample(
        decode_out.get('original_lengths', prefix_lengths), 1)
    prefix_ids = _first_sample(decode_out.prefix_ids, 2)
    logprobs = _first_sample(decode_out.logprobs, 2)
    decoded = input_obj.ids_to_strings(ids, decode_lengths)
    original = input_obj.ids_to_strings(np.asarray(decode_out.ids),
                                        original_lengths)
    prefixes = input_obj.ids_to_strings(prefix_ids, prefix_lengths)
    weights = decode_out.get('eval_sample_weights')
    kept = [i for i in range(len(decoded))
            if weights is None or weights[i]]
    spans = [(int(prefix_lengths[i]), int(decode_lengths[i])) for i in kept]
    substrs = _decoded_substrings(input_obj, ids, kept, spans)
    outputs = []
    for i, (start, end), substr in zip(kept, spans, substrs):
      entry = {
          'prefix': prefixes[i],
          'decoded': decoded[i],
          'original': original[i],
          'ids': ids[i],
          'decoded_ids': ids[i][start:end],
          'decoded_substr': substr,
          'logprobs': logprobs[i],
          'prefix_length': start,
          'decode_length': end,
      }
      if sampled is not None:
        entry['sampled'] = list(sampled[i])
      outputs.append((prefixes[i], entry))
    metrics = NestedMap(decoded_length=(
        np.mean(decode_lengths).astype(np.float32), np.array(1.0, np.float32)))
    return metrics, outputs, NestedMap()


class SequenceModel(base_model.BaseModel):
  """A sequence-to-sequence task: a TransformerEncoderDecoder.

  Input keys: `src.ids`, `src.paddings` and `tgt.ids`, `tgt.labels`,
  `tgt.weights`, `tgt.paddings` (all [B, S] / [B, T]); plus `segment_ids`
  and `segment_pos` on both sides for packed inputs.

  Attributes:
    model_tpl: The encoder-decoder (child `model`).
    return_predictions: Return the model's outputs per example.
    decoder_tpl: Greedy or sample decoding settings.
    label_smoothing_prob: If set, the softmax's label smoothing.
  """

  model_tpl: LayerTpl = template_field(
      transformer_models.TransformerEncoderDecoder)
  return_predictions: bool = False
  decoder_tpl: DecoderHParams = base_layer.instance_field(GreedyDecoderHParams)
  label_smoothing_prob: float | None = None

  def setup(self) -> None:
    model_p = self.model_tpl.clone()
    if self.label_smoothing_prob is not None:
      model_p.softmax_tpl.label_smoothing_prob = self.label_smoothing_prob
    self.create_child('model', model_p)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """The encoder-decoder's loss output."""
    kwargs = {}
    if self.model_tpl.packed_input:
      kwargs = {
          'input_segment_ids': input_batch.src.segment_ids,
          'input_segment_pos': input_batch.src.segment_pos,
          'target_segment_ids': input_batch.tgt.segment_ids,
          'target_segment_pos': input_batch.tgt.segment_pos,
      }
    labels = NestedMap(class_ids=input_batch.tgt.labels,
                       class_weights=input_batch.tgt.weights)
    return self.model(input_batch.src.ids, input_batch.src.paddings,
                      input_batch.tgt.ids, input_batch.tgt.paddings,
                      labels=labels, **kwargs)

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[WeightedScalars, dict[str, Any]]:
    """See compute_xent_loss_helper (on `tgt`)."""
    return compute_xent_loss_helper(predictions, input_batch.tgt,
                                    self.return_predictions)

  def _prepare_guidance_decode_data(self, input_batch: NestedMap
                                    ) -> NestedMap:
    """Classifier-free guidance hook (cf_guidance_scale set); as Pax, none."""
    del input_batch
    raise NotImplementedError('SequenceModel does not support guidance.')

  def encode(self, input_batch: NestedMap) -> NestedMap:
    """NestedMap(embeddings=the encoder output) of `ids`, `paddings`."""
    return NestedMap(embeddings=self.model.encode(input_batch.ids,
                                                  input_batch.paddings))

  def decode(self, input_batch: NestedMap) -> DecodeOut:
    """Decodes with `decoder_tpl` (see decode_with_params)."""
    return self.decode_with_params(input_batch, self.decoder_tpl)

  def decode_with_params(self, input_batch: NestedMap,
                         decoder_params: DecoderHParams) -> DecodeOut:
    """Decodes targets from `tgt.ids[:, 0]` (or `prefix_lengths` ids).

    Returns:
      (metrics {num_decoded}, results as LanguageModel's plus the batch's
      entries, {}).
    """
    p = decoder_params
    where = f'SequenceModel ({self.name})'
    _lm_decode.check_decoder_params(p, where, language_model=False)
    if getattr(p, 'cf_guidance_scale', None) is not None:
      input_batch = self._prepare_guidance_decode_data(input_batch)
    if p.fprop_for_prefix:
      raise NotImplementedError(f'{where}: decoding with fprop_for_prefix '
                                'is not supported.')
    src, tgt = input_batch.src, input_batch.tgt

    def extend_step_fn(mdl, ids, segment_pos):
      del segment_pos
      return mdl.model.extend_step(ids).logits

    def transform_fn(mdl, fn):
      mdl.model.transform_decode_state(fn)

    def fprop_fn(mdl, ids, paddings):
      del ids, paddings
      mdl.model(src.ids, src.paddings, tgt.ids[:, :1], tgt.paddings[:, :1])

    common = {
        'fprop_fn': fprop_fn,
        'max_decode_steps': p.max_decode_steps,
        'prefix_lengths': input_batch.get('prefix_lengths'),
        'eos_id': p.eos_id,
        'min_decode_steps': p.min_decode_steps,
        'process_result_fn': p.process_result_fn,
    }
    if isinstance(p, BeamSearchHParams):
      # As Pax: the decoder states start from one padded target step.
      result = beam_search.beam_search(
          self, extend_step_fn,
          lambda mdl, ids, paddings: mdl.model(src.ids, src.paddings, ids,
                                               paddings),
          transform_fn, tgt.ids[:, :1], jnp.ones_like(tgt.paddings[:, :1]),
          p)
    elif isinstance(p, SampleDecoderHParams):
      result = sample_decode.sample_decode(
          self, extend_step_fn, transform_fn, None,
          _lm_decode.next_token_sampler(p, input_batch), tgt.ids, tgt.paddings,
          p.seqlen, num_samples=p.num_samples, temperature=p.temperature,
          sort_samples=p.sort_samples, **common)
    else:
      result = sample_decode.greedy_decode(
          self, extend_step_fn, tgt.ids, tgt.paddings, p.seqlen,
          transform_state_fn=transform_fn, **common)
    result.update(input_batch)
    metrics = NestedMap(num_decoded=(jnp.array(tgt.ids.shape[0], jnp.float32),
                                     jnp.array(1.0, jnp.float32)))
    return metrics, result, NestedMap()

  def process_decode_out(self, input_obj: base_input.BaseInput,
                         decode_out: NestedMap) -> ProcessDecodeOut:
    """Detokenizes sources (key 'src'), targets and outputs (key 'tgt')."""
    ids = _first_sample(decode_out.output_ids, 2)
    lengths = _first_sample(decode_out.decode_lengths, 1)
    logprobs = _first_sample(decode_out.logprobs, 2)
    decoded = input_obj.ids_to_strings(ids, lengths, key='tgt')
    src, tgt = decode_out.src, decode_out.tgt
    lengths_of = lambda side: np.sum(1 - np.asarray(side.paddings), 1).astype(
        np.int32)
    sources = input_obj.ids_to_strings(np.asarray(src.ids), lengths_of(src),
                                       key='src')
    targets = input_obj.ids_to_strings(np.asarray(tgt.ids), lengths_of(tgt),
                                       key='tgt')
    outputs = []
    for i, text in enumerate(decoded):
      entry = {
          'source': sources[i],
          'decoded': text,
          'target': targets[i],
          'ids': ids[i],
          'logprobs': logprobs[i],
          'decode_length': lengths[i],
          'prefix': sources[i],
          'decoded_substr': text,
      }
      outputs.append((sources[i], entry))
    metrics = NestedMap(decode_length=(np.mean(lengths).astype(np.float32),
                                       np.array(1.0, np.float32)))
    return metrics, outputs, NestedMap()


def mask_lm_inputs(
    prng_key: pytypes.PRNGKey,
    ids: JTensor,
    paddings: JTensor,
    vocab_size: int,
    mask_token_id: int,
    mask_prob: float = 0.15,
    mask_token_prob: float = 0.8,
    random_token_prob: float = 0.1,
) -> tuple[JTensor, JTensor]:
  """BERT masking: picks tokens to predict and corrupts them.

  Each unpadded token is picked with probability `mask_prob`; a picked token
  becomes `mask_token_id` with probability `mask_token_prob`, a random id
  with probability `random_token_prob`, and stays otherwise.

  Args:
    prng_key: The random key.
    ids: [B, T] ids.
    paddings: [B, T], 1 at padding.
    vocab_size: Range of the random ids.
    mask_token_id: The mask id.
    mask_prob: Fraction of tokens picked.
    mask_token_prob: Fraction of picked tokens masked.
    random_token_prob: Fraction of picked tokens replaced at random.

  Returns:
    (corrupted ids [B, T], picked [B, T] as 0/1 floats).
  """
  k_pick, k_how, k_ids = jax.random.split(prng_key, 3)
  picked = (jax.random.uniform(k_pick, ids.shape) < mask_prob) & (
      paddings == 0)
  how = jax.random.uniform(k_how, ids.shape)
  to_mask = picked & (how < mask_token_prob)
  to_random = picked & ~to_mask & (how < mask_token_prob + random_token_prob)
  random_ids = jax.random.randint(k_ids, ids.shape, 0, vocab_size, ids.dtype)
  out = jnp.where(to_mask, jnp.asarray(mask_token_id, ids.dtype),
                  jnp.where(to_random, random_ids, ids))
  return out, picked.astype(jnp.float32)


class BertModel(base_model.BaseModel):
  """Masked language modeling with a BIDIRECTIONAL, packed TransformerLm.

  Input keys: `labels` (the original ids), `paddings`, `segment_ids`,
  `segment_pos`, all [B, T]; optionally `masked_ids` and `masked_pos` (the
  corrupted ids and 0/1 positions to predict), else they are drawn with
  `mask_lm_inputs` from the `random` stream.

  Attributes:
    lm_tpl: The LM (child `lm`).
    label_smoothing_prob: If set, the softmax's label smoothing.
    mask_token_id: The mask id.
    force_mask_generation: Draw masks even if the batch has them.
  """

  lm_tpl: LayerTpl = template_field(transformer_models.TransformerLm)
  label_smoothing_prob: float | None = None
  mask_token_id: int = 0
  force_mask_generation: bool = False

  def setup(self) -> None:
    where = f'BertModel ({self.name})'
    if LanguageModelType(self.lm_tpl.model_type) != (
        LanguageModelType.BIDIRECTIONAL):
      raise ValueError(f'{where}: lm_tpl.model_type must be BIDIRECTIONAL.')
    if not self.lm_tpl.packed_input:
      raise ValueError(f'{where}: lm_tpl.packed_input must be True.')
    lm_p = self.lm_tpl.clone()
    if self.label_smoothing_prob is not None:
      lm_p.softmax_tpl.label_smoothing_prob = self.label_smoothing_prob
    self.create_child('lm', lm_p)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """The LM's loss on the picked positions of the corrupted ids."""
    labels = input_batch.labels
    if not self.force_mask_generation and 'masked_ids' in input_batch:
      masked_ids, masked_pos = input_batch.masked_ids, input_batch.masked_pos
    else:
      masked_ids, masked_pos = mask_lm_inputs(
          self.next_prng_key(), labels, input_batch.paddings,
          self.lm_tpl.vocab_size, self.mask_token_id)
    out = self.lm(masked_ids, input_batch.paddings,
                  labels=NestedMap(class_ids=labels,
                                   class_weights=masked_pos),
                  segment_ids=input_batch.segment_ids,
                  segment_pos=input_batch.segment_pos)
    out.augmented_labels = masked_ids
    out.augmented_pos = masked_pos
    return out

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[WeightedScalars, dict[str, Any]]:
    """The masked-LM metrics (value, weight).

    Returns:
      (total_loss, avg_xent, aux_loss, log_pplx, fraction_of_correct_preds,
      num_predictions, num_tokens, num_seqs; per_sequence_xent,
      predicted_labels, augmented_labels).
    """
    labels = input_batch.labels
    weights = predictions.augmented_pos.astype(jnp.float32)
    predicted = predictions.per_example_argmax.astype(labels.dtype)
    num_preds = predictions.total_weight.astype(jnp.float32)
    acc = jnp.sum((labels == predicted) * weights) / jnp.maximum(num_preds, 1)
    weight = num_preds.astype(predictions.avg_xent.dtype)
    one = jnp.array(1.0, jnp.float32)
    num_tokens = jnp.sum(1.0 - input_batch.paddings.astype(jnp.float32))
    num_seqs = jnp.sum(jnp.max(input_batch.segment_ids.astype(jnp.float32),
                               axis=1))
    metrics = NestedMap(
        total_loss=(predictions.total_loss, weight),
        avg_xent=(predictions.avg_xent, weight),
        aux_loss=(predictions.aux_loss, weight),
        log_pplx=(predictions.avg_xent, weight),
        fraction_of_correct_preds=(acc, num_preds),
        num_predictions=(num_preds, one),
        num_tokens=(num_tokens, one),
        num_seqs=(num_seqs, one),
    )
    per_example = NestedMap(per_sequence_xent=predictions.per_sequence_xent,
                            predicted_labels=predicted,
                            augmented_labels=predictions.augmented_labels)
    return metrics, per_example


# Direct preference optimisation models (see _dpo).
from praxis.layers import _dpo  # pylint: disable=g-import-not-at-top,g-bad-import-order

Labels = _dpo.Labels
DPOExampleHalf = _dpo.DPOExampleHalf
DPOExample = _dpo.DPOExample
DPOExampleHalfSeq2Seq = _dpo.DPOExampleHalfSeq2Seq
DPOExampleSeq2Seq = _dpo.DPOExampleSeq2Seq
compute_dpo_loss_helper = _dpo.compute_dpo_loss_helper
LanguageModelDPO = _dpo.LanguageModelDPO
SequenceModelDPO = _dpo.SequenceModelDPO


# Step-wise decoding over cache slots, built on LanguageModel above.
from praxis.layers import _lm_continuous_batching  # pylint: disable=g-import-not-at-top,wrong-import-position

LanguageModelContinuousBatching = (
    _lm_continuous_batching.LanguageModelContinuousBatching)
LanguageModelContinuousBatching.__module__ = __name__


# Names Pax 1.4's module also has (aliases of other modules' names).
Metrics = base_model.Metrics
Predictions = base_model.Predictions
