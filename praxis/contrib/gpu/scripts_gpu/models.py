"""NVIDIA's `CustomMetricsLM`: a LanguageModel with LAMBADA / BoolQ accuracy.

Public names (as in Pax): `compute_xent_loss_helper`,
`compute_eval_metrics_helper`, `CustomMetricsLM`.

`eval_task='lambada'` adds `acc_strict`: the fraction of (non-padding)
examples whose every weighted label is predicted (argmax) right; on
LAMBADA rows, whose weights cover the last word and EOS, that is the
last-word exact match that NVIDIA's Pax reports. `eval_task='boolq'` adds
`boolq_acc`: the fraction of examples whose answer position gives the right
choice of `boolq_yn_tokens` (yes, no) a higher logit than the other one.
Pax sums that comparison over every weighted label, which is the same for
one-token answers (its BoolQ rows); here only each example's first weighted
label counts, so that answers of several tokens (a byte tokenizer) compare
their first tokens.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from praxis import base_model
from praxis import py_utils
from praxis import pytypes
from praxis.layers import models

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightedScalars = base_model.WeightedScalars

EVAL_TASKS = (None, 'lambada', 'boolq')


def compute_xent_loss_helper(
    predictions: NestedMap,
    input_batch: NestedMap,
    return_predictions: bool,
    apply_eval_sample_weights: bool = False,
) -> tuple[WeightedScalars, dict[str, Any]]:
  """The LM metrics (loss, log_pplx, next-token accuracy); see
  `praxis.layers.models.compute_xent_loss_helper`."""
  return models.compute_xent_loss_helper(
      predictions, input_batch, return_predictions,
      apply_eval_sample_weights)


def _sample_weights(input_batch: NestedMap) -> JTensor:
  """`eval_sample_weights` [B] (ones when the batch has none)."""
  if 'eval_sample_weights' in input_batch:
    return input_batch.eval_sample_weights.astype(jnp.float32)
  return jnp.ones(input_batch.labels.shape[:1], jnp.float32)


def _strict_accuracy(predictions: NestedMap, input_batch: NestedMap,
                     weights: JTensor) -> tuple[JTensor, JTensor]:
  """(fraction of examples with every weighted label right, examples)."""
  labels = input_batch.labels
  predicted = predictions.per_example_argmax.astype(labels.dtype)
  sample_weights = _sample_weights(input_batch)
  num_weighted = jnp.sum(weights, axis=-1, dtype=jnp.float32)
  num_right = jnp.sum((labels == predicted) * weights, axis=-1,
                      dtype=jnp.float32)
  all_right = (num_right == num_weighted) & (sample_weights > 0)
  num_examples = jnp.sum(sample_weights)
  accuracy = jnp.sum(all_right) / jnp.maximum(num_examples, 1.0)
  return accuracy, num_examples


def _boolq_accuracy(predictions: NestedMap, input_batch: NestedMap,
                    weights: JTensor, yes_no: JTensor
                    ) -> tuple[JTensor, JTensor]:
  """(fraction of examples whose right answer has the higher logit,
  examples)."""
  labels = input_batch.labels
  logits = predictions.logits.astype(jnp.float32)
  yes_no = jnp.asarray(yes_no).reshape(-1).astype(labels.dtype)
  other = jnp.clip(jnp.sum(yes_no) - labels, 0, logits.shape[-1] - 1)
  right = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
  wrong = jnp.take_along_axis(logits, other[..., None], axis=-1)[..., 0]
  weighted = weights > 0
  first = weighted & (jnp.cumsum(weighted, axis=-1) == 1)
  sample_weights = _sample_weights(input_batch)
  correct = jnp.sum((right > wrong) & first, axis=-1) * (sample_weights > 0)
  num_examples = jnp.sum(sample_weights)
  return jnp.sum(correct) / jnp.maximum(num_examples, 1.0), num_examples


def compute_eval_metrics_helper(
    metrics: WeightedScalars,
    predictions: NestedMap,
    input_batch: NestedMap,
    apply_eval_sample_weights: bool = False,
    eval_task: str | None = None,
    boolq_yn_tokens: Any = None,
    report_strict_acc: bool = False,
) -> WeightedScalars:
  """`metrics` with `acc_strict` (LAMBADA) or `boolq_acc` (BoolQ) added.

  Args:
    metrics: The metrics so far (value, weight) pairs.
    predictions: The LM's outputs (`per_example_argmax`, `logits` [B, T, V],
      `avg_xent`).
    input_batch: `labels`, `weights` [B, T] and, if present,
      `eval_sample_weights` [B] (0 for padding examples).
    apply_eval_sample_weights: Multiply `weights` by `eval_sample_weights`.
    eval_task: None, 'lambada' or 'boolq'.
    boolq_yn_tokens: The ids of 'yes' and 'no' (for 'boolq').
    report_strict_acc: Pax's older switch: same as eval_task='lambada'.

  Returns:
    `metrics`, extended.

  Raises:
    ValueError: An unknown eval_task, or 'boolq' without two token ids.
  """
  if eval_task not in EVAL_TASKS:
    raise ValueError(f'eval_task must be one of {EVAL_TASKS}, got '
                     f'{eval_task!r}.')
  weights = input_batch.weights
  if apply_eval_sample_weights:
    weights = weights * _sample_weights(input_batch)[:, None].astype(
        weights.dtype)
  dtype = predictions.avg_xent.dtype
  if eval_task == 'lambada' or report_strict_acc:
    accuracy, num = _strict_accuracy(predictions, input_batch, weights)
    metrics.acc_strict = (accuracy, num.astype(dtype))
  elif eval_task == 'boolq':
    if boolq_yn_tokens is None or jnp.size(jnp.asarray(boolq_yn_tokens)) != 2:
      raise ValueError("eval_task='boolq' needs boolq_yn_tokens, the ids of "
                       f"'yes' and 'no'; got {boolq_yn_tokens!r}.")
    accuracy, num = _boolq_accuracy(predictions, input_batch, weights,
                                    boolq_yn_tokens)
    metrics.boolq_acc = (accuracy, num.astype(dtype))
  return metrics


class CustomMetricsLM(models.LanguageModel):
  """A LanguageModel that also reports LAMBADA or BoolQ accuracy.

  Attributes:
    eval_task: None, 'lambada' (`acc_strict`) or 'boolq' (`boolq_acc`).
    boolq_yn_tokens: The ids of 'yes' and 'no' (for 'boolq').
  """

  eval_task: str | None = None
  boolq_yn_tokens: Any = None

  def setup(self) -> None:
    if self.eval_task not in EVAL_TASKS:
      raise ValueError(f'CustomMetricsLM ({self.name}): eval_task must be '
                       f'one of {EVAL_TASKS}, got {self.eval_task!r}.')
    if self.eval_task == 'boolq' and (
        self.boolq_yn_tokens is None
        or jnp.size(jnp.asarray(self.boolq_yn_tokens)) != 2):
      raise ValueError(f'CustomMetricsLM ({self.name}): eval_task=boolq '
                       "needs boolq_yn_tokens, the ids of 'yes' and 'no'; "
                       f'got {self.boolq_yn_tokens!r}.')
    super().setup()

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap
                   ) -> tuple[WeightedScalars, dict[str, Any]]:
    metrics, per_example = compute_xent_loss_helper(
        predictions, input_batch, self.return_predictions,
        self.apply_eval_sample_weights)
    metrics = compute_eval_metrics_helper(
        metrics, predictions, input_batch, self.apply_eval_sample_weights,
        self.eval_task, self.boolq_yn_tokens, self.report_strict_acc)
    return metrics, per_example
