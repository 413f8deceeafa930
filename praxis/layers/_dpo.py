"""Direct preference optimisation models (re-exported by praxis.layers.models).

LanguageModelDPO trains a TransformerLm `mdl` against a frozen copy
`ref_mdl` on pairs of completions (y_w preferred over y_l); SequenceModelDPO
does the same for an encoder-decoder. The loss is DPO's (Rafailov et al.
2023, eq. 7): -mean(log_sigmoid(beta * ((pi_w - ref_w) - (pi_l - ref_l))))
with pi/ref the per-sequence log-likelihoods (minus per_sequence_xent).

Batches are flat dicts as from a feature converter, e.g. for the LM
'y_w/inputs', 'y_w/paddings', 'y_w/labels/ids', 'y_w/labels/weights',
'y_w/segment_ids', 'y_w/segment_pos', 'y_w/inputs_indicator' and the same
for 'y_l/'.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import transformer_models

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
LanguageModelType = transformer_models.LanguageModelType


@dataclasses.dataclass(kw_only=True, slots=True)
class Labels:
  """Target ids and their weights, both [B, T]."""
  class_ids: JTensor
  class_weights: JTensor


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExampleHalf:
  """One rated completion for LanguageModelDPO (no packing)."""
  inputs: JTensor
  labels: Labels
  paddings: JTensor
  segment_ids: JTensor
  segment_pos: JTensor
  inputs_indicator: JTensor | None = None
  causal_attention_mask: JTensor | None = None

  def as_xformer_lm_input(self) -> NestedMap:
    """The TransformerLm keyword inputs (all fields but inputs_indicator)."""
    out = NestedMap.FromNestedDataclass(self)
    del out['inputs_indicator']
    return out


def _half(example: Mapping[str, Any], prefix: str) -> DPOExampleHalf:
  return DPOExampleHalf(
      inputs=example[f'{prefix}/inputs'],
      inputs_indicator=example[f'{prefix}/inputs_indicator'],
      labels=Labels(class_ids=example[f'{prefix}/labels/ids'],
                    class_weights=example[f'{prefix}/labels/weights']),
      paddings=example[f'{prefix}/paddings'],
      segment_ids=example[f'{prefix}/segment_ids'],
      segment_pos=example[f'{prefix}/segment_pos'])


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExample:
  """A LanguageModelDPO batch: y_w (preferred) and y_l."""
  y_w: DPOExampleHalf
  y_l: DPOExampleHalf

  @classmethod
  def from_feature_converter(cls, example: Mapping[str, Any]) -> DPOExample:
    return cls(y_w=_half(example, 'y_w'), y_l=_half(example, 'y_l'))


@dataclasses.dataclass(kw_only=True, slots=True, frozen=True)
class DPOExampleHalfSeq2Seq:
  """One rated target sequence for SequenceModelDPO."""
  inputs: JTensor
  input_paddings: JTensor
  targets: JTensor
  target_paddings: JTensor
  labels: Labels

  def as_xformer_encdec_input(self) -> NestedMap:
    return NestedMap.FromNestedDataclass(self)


def _half_seq2seq(example: Mapping[str, Any], key: str
                  ) -> DPOExampleHalfSeq2Seq:
  return DPOExampleHalfSeq2Seq(
      inputs=example['inputs'], input_paddings=example['input_paddings'],
      targets=example[key], target_paddings=example[f'{key}/paddings'],
      labels=Labels(class_ids=example[f'{key}/labels/ids'],
                    class_weights=example[f'{key}/labels/weights']))


@dataclasses.dataclass(kw_only=True, slots=True)
class DPOExampleSeq2Seq:
  """A SequenceModelDPO batch: one source, targets_w (preferred), targets_l."""
  y_w: DPOExampleHalfSeq2Seq
  y_l: DPOExampleHalfSeq2Seq

  @classmethod
  def from_feature_converter(cls, example: Mapping[str, Any]
                             ) -> DPOExampleSeq2Seq:
    return cls(y_w=_half_seq2seq(example, 'targets_w'),
               y_l=_half_seq2seq(example, 'targets_l'))


def _seq_log_p(out: NestedMap, name: str) -> JTensor:
  """Minus per_sequence_xent [B] (must be float32)."""
  for key in ('per_example_xent', 'per_sequence_xent'):
    if out[key].dtype != jnp.float32:
      raise ValueError(f'DPO: {name}.{key} must be float32, got '
                       f'{out[key].dtype}')
  if out.per_sequence_xent.ndim != 1:
    raise ValueError(f'DPO: {name}.per_sequence_xent must be [batch], got '
                     f'shape {out.per_sequence_xent.shape}')
  return -out.per_sequence_xent


def compute_dpo_loss_helper(model: base_model.BaseModel,
                            predictions: NestedMap
                            ) -> tuple[NestedMap, dict[str, Any]]:
  """DPO loss of y_w_ref, y_l_ref, y_w_pi, y_l_pi softmax outputs.

  Args:
    model: Has `beta`; the summaries (dpo/...) are added to it.
    predictions: The four softmax outputs (per_sequence_xent [B] float32).

  Returns:
    (NestedMap(total_loss=(loss, batch size)), {}).
  """
  from praxis.layers import models  # pylint: disable=g-import-not-at-top
  logp = {}
  for name in ('y_w_ref', 'y_l_ref', 'y_w_pi', 'y_l_pi'):
    value = _seq_log_p(predictions[name], name)
    if name.endswith('_ref'):
      value = jax.lax.stop_gradient(value)
    logp[name] = value
    model.add_summary(f'dpo/{name}_log_p', jnp.mean(value))
    models.add_hist(model, f'dpo/{name}_log_p', value)
  r_w = model.beta * (logp['y_w_pi'] - logp['y_w_ref'])
  r_l = model.beta * (logp['y_l_pi'] - logp['y_l_ref'])
  delta = r_w - r_l
  loss = -jnp.mean(jax.nn.log_sigmoid(delta))
  for name, value in (('r_hat_y_w', r_w), ('r_hat_y_l', r_l),
                      ('delta_r_hat', delta)):
    model.add_summary(f'dpo/{name}', jnp.mean(value))
    model.add_summary(f'dpo/{name}_std', jnp.std(value))
    models.add_hist(model, f'dpo/{name}', value)
  model.add_summary('dpo/dpo_loss', loss)
  model.add_summary('_dpo_topline/p_correct_ranking',
                    jnp.mean(jax.nn.sigmoid(delta)))
  batch_size = predictions.y_l_ref.per_example_xent.shape[0]
  return NestedMap(total_loss=(loss, jnp.array(batch_size, loss.dtype))), {}


class LanguageModelDPO(base_model.BaseModel):
  """A policy TransformerLm `mdl` trained by DPO against `ref_mdl`.

  Attributes:
    ref_mdl: The reference model (no gradient flows into its outputs).
    mdl: The model being optimised.
    beta: Weight of the implicit KL regularisation.
    token_counter: Counts the input tokens.
    apply_eval_sample_weights: Multiply both halves' label weights by the
      batch's `eval_sample_weights` [B].
    model_type: CAUSAL, PREFIX (mask from `inputs_indicator`) or
      BIDIRECTIONAL.
  """
  ref_mdl: transformer_models.TransformerLm = pax_fiddle.instance_field(
      transformer_models.TransformerLm)
  mdl: transformer_models.TransformerLm = pax_fiddle.instance_field(
      transformer_models.TransformerLm)
  beta: float = 0.1
  token_counter: embedding_softmax.TokenCounter = pax_fiddle.instance_field(
      embedding_softmax.TokenCounter)
  apply_eval_sample_weights: bool = False
  model_type: LanguageModelType = LanguageModelType.CAUSAL

  def _prepare_predict_data(self, half: DPOExampleHalf,
                            input_batch: Mapping[str, Any]) -> DPOExampleHalf:
    if self.apply_eval_sample_weights:
      if 'eval_sample_weights' not in input_batch:
        raise ValueError('LanguageModelDPO: apply_eval_sample_weights needs '
                         '`eval_sample_weights` [B] in the input batch.')
      half.labels.class_weights = (
          half.labels.class_weights *
          input_batch['eval_sample_weights'][:, jnp.newaxis])
    self.token_counter(half.inputs, half.paddings)
    model_type = LanguageModelType(self.model_type)
    if model_type == LanguageModelType.BIDIRECTIONAL:
      half.causal_attention_mask = jnp.zeros_like(half.inputs)
    elif model_type == LanguageModelType.PREFIX:
      half.causal_attention_mask = 1 - half.inputs_indicator
    else:
      half.causal_attention_mask = None
    return half

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """Softmax outputs y_l_ref, y_l_pi, y_w_ref, y_w_pi (one example a row)."""
    batch = DPOExample.from_feature_converter(input_batch)
    y_l = self._prepare_predict_data(batch.y_l, input_batch)
    y_w = self._prepare_predict_data(batch.y_w, input_batch)
    return NestedMap(
        y_l_ref=self.ref_mdl(**y_l.as_xformer_lm_input()),
        y_l_pi=self.mdl(**y_l.as_xformer_lm_input()),
        y_w_ref=self.ref_mdl(**y_w.as_xformer_lm_input()),
        y_w_pi=self.mdl(**y_w.as_xformer_lm_input()))

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[NestedMap, dict[str, Any]]:
    del input_batch
    return compute_dpo_loss_helper(self, predictions)


class SequenceModelDPO(base_model.BaseModel):
  """An encoder-decoder `model` trained by DPO against a copy `ref_model`.

  Attributes:
    model_tpl: The TransformerEncoderDecoder (both children are built from
      it).
    beta: Weight of the implicit KL regularisation.
    label_smoothing_prob: If set, the softmax's label_smoothing_prob.
  """
  model_tpl: pax_fiddle.Config = base_layer.template_field(
      transformer_models.TransformerEncoderDecoder)
  beta: float = 0.1
  label_smoothing_prob: float | None = None

  def setup(self) -> None:
    model_p = self.model_tpl.clone()
    if self.label_smoothing_prob is not None:
      model_p.softmax_tpl.label_smoothing_prob = self.label_smoothing_prob
    self.create_child('model', model_p)
    self.create_child('ref_model', model_p.clone())

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """DPO softmax outputs; a `src`/`tgt` batch (eval) runs `model` only."""
    if 'src' in input_batch:
      tgt = input_batch.tgt
      return self.model(
          inputs=input_batch.src.ids, input_paddings=input_batch.src.paddings,
          targets=tgt.ids, target_paddings=tgt.paddings,
          labels=NestedMap(class_ids=tgt.labels, class_weights=tgt.weights))
    batch = DPOExampleSeq2Seq.from_feature_converter(input_batch)
    return NestedMap(
        y_l_ref=self.ref_model(**batch.y_l.as_xformer_encdec_input()),
        y_l_pi=self.model(**batch.y_l.as_xformer_encdec_input()),
        y_w_ref=self.ref_model(**batch.y_w.as_xformer_encdec_input()),
        y_w_pi=self.model(**batch.y_w.as_xformer_encdec_input()))

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[NestedMap, dict[str, Any]]:
    if 'src' in input_batch:
      from praxis.layers import models  # pylint: disable=g-import-not-at-top
      return models.compute_xent_loss_helper(predictions, input_batch.tgt,
                                             False)
    return compute_dpo_loss_helper(self, predictions)


# Public under praxis.layers.models (as Pax), so configs and pickles name
# that module.
for _cls in (Labels, DPOExampleHalf, DPOExample, DPOExampleHalfSeq2Seq,
             DPOExampleSeq2Seq, LanguageModelDPO, SequenceModelDPO):
  _cls.__module__ = 'praxis.layers.models'
compute_dpo_loss_helper.__module__ = 'praxis.layers.models'
del _cls
