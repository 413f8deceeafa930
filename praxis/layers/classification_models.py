"""Classification models; `praxis.layers.models` re-exports them.

Public names: top_k_accuracy, ClassificationModel, ClassificationMLPModel.

`ClassificationModel` runs a network (ResNet-50 by default) on
`input_batch[input_field]` and a softmax against the class distributions in
`input_batch[label_field]`; its loss is `avg_xent`. `ClassificationMLPModel`
embeds integer `ids` with the softmax's own table, runs an MLP and predicts
`labels`; its loss is `total_loss`.

Example:

  model_p = pax_fiddle.Config(
      classification_models.ClassificationModel, name='classifier',
      network_tpl=resnets.ResNet.HParamsResNet18(),
      softmax_tpl=pax_fiddle.Config(
          embedding_softmax.FullSoftmax, input_dims=512, num_classes=10))
  model = base_layer.instantiate(model_p)
  batch = NestedMap(image=images, label_probs=one_hot_labels)
  variables = model.init(jax.random.PRNGKey(0), batch)
  (metrics, per_example), _ = model.apply(
      variables, batch, mutable=[base_layer.NON_TRAINABLE])
  loss, weight = metrics['avg_xent']
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import resnets

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field

# (k, accuracy metric, error metric); top-5 only with more than 5 classes.
_TOP_K_METRICS = ((1, 'accuracy', 'error'), (5, 'acc5', 'error5'))


def top_k_accuracy(
    top_k: int,
    logits: JTensor,
    label_ids: JTensor | None = None,
    label_probs: JTensor | None = None,
    weights: JTensor | None = None,
) -> JTensor:
  """Weighted fraction of examples whose label is among the top-k logits.

  A label counts as found when its logit is at least the k-th largest logit
  (so ties count). The sum of weights is clamped to at least 1.

  Args:
    top_k: k.
    logits: [..., C].
    label_ids: [...] integer labels, or
    label_probs: [..., C] class distributions (their argmax is the label).
    weights: [...] example weights (default all 1).

  Returns:
    A scalar: sum(found * weights) / max(1, sum(weights)).
  """
  if label_ids is None and label_probs is None:
    raise ValueError('top_k_accuracy: give label_ids or label_probs.')
  if not 0 < top_k <= logits.shape[-1]:
    raise ValueError(
        f'top_k_accuracy: top_k={top_k} must be in [1, {logits.shape[-1]}] '
        'classes.'
    )
  if label_ids is None:
    label_ids = jnp.argmax(label_probs, axis=-1)
  if weights is None:
    weights = jnp.ones(logits.shape[:-1], logits.dtype)
  kth_largest = jnp.min(jax.lax.top_k(logits, top_k)[0], axis=-1)
  label_logit = jnp.take_along_axis(
      logits, label_ids[..., None].astype(jnp.int32), axis=-1
  )[..., 0]
  found = (label_logit >= kth_largest).astype(weights.dtype)
  return jnp.sum(found * weights) / jnp.maximum(1.0, jnp.sum(weights))


def _example_weights(input_batch: NestedMap, batch_size: int) -> JTensor:
  """`input_batch.weight` ([B]) if given, else ones."""
  if 'weight' not in input_batch:
    return jnp.ones([batch_size], jnp.float32)
  weights = input_batch['weight']
  if weights.shape != (batch_size,):
    raise ValueError(
        f'ClassificationModel: input_batch.weight must have shape '
        f'({batch_size},), got {weights.shape}.'
    )
  return weights


def _field(input_batch: NestedMap, key: str, field: str) -> JTensor:
  if key not in input_batch:
    raise KeyError(
        f'ClassificationModel: the batch has no {key!r} (`{field}`); its keys '
        f'are {sorted(input_batch.keys())}.'
    )
  return input_batch[key]


class ClassificationModel(base_model.BaseModel):
  """Image (or video) classification: a network, then a softmax.

  Input keys: `input_field` (the images), `label_field` ([B, C] class
  distributions, e.g. one-hot) and optionally `weight` ([B] example weights).
  Metrics (value, weight): `avg_xent` (the loss), `num_predictions`,
  `accuracy`, `error` and, with more than 5 classes, `acc5`, `error5`.

  Attributes:
    network_tpl: The network; maps the inputs to [B, D] features (ResNet-50
      by default).
    softmax_tpl: The softmax over the features (its input_dims is D).
    input_field: Key of the inputs in the batch.
    label_field: Key of the class distributions in the batch.
  """

  network_tpl: LayerTpl = template_field(resnets.ResNet)
  softmax_tpl: LayerTpl = template_field(embedding_softmax.FullSoftmax)
  input_field: str = 'image'
  label_field: str = 'label_probs'

  def setup(self) -> None:
    self.create_child('network', self.network_tpl)
    self.create_child('softmax', self.softmax_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """Returns NestedMap(features, softmax_output, example_weights)."""
    inputs = _field(input_batch, self.input_field, 'input_field')
    label_probs = _field(input_batch, self.label_field, 'label_field')
    features = self.network(inputs)
    example_weights = _example_weights(input_batch, inputs.shape[0])
    softmax_output = self.softmax(
        features,
        class_weights=example_weights[:, None],
        class_probabilities=label_probs,
    )
    return NestedMap(
        features=features,
        softmax_output=softmax_output,
        example_weights=example_weights,
    )

  def compute_loss(
      self, predictions: NestedMap, input_batch: NestedMap
  ) -> tuple[WeightedScalars, dict[str, Any]]:
    """Metrics as (value, weight) and per-example `labels` and `scores`."""
    label_probs = input_batch[self.label_field]
    out = predictions.softmax_output
    total_weight = out.total_weight
    metrics = NestedMap(
        avg_xent=(out.avg_xent, total_weight),
        num_predictions=(total_weight, jnp.array(1.0, total_weight.dtype)),
    )
    for k, acc_name, error_name in _TOP_K_METRICS:
      if k > 1 and out.logits.shape[-1] <= k:
        continue
      acc = top_k_accuracy(
          k, out.logits, label_probs=label_probs,
          weights=predictions.example_weights,
      )
      metrics[acc_name] = (acc, total_weight)
      metrics[error_name] = (1.0 - acc, total_weight)
      self.add_summary(f'acc{k}', acc)
    per_example_out = NestedMap(labels=label_probs, scores=out.logits)
    return metrics, per_example_out

  def predict(self, input_batch: NestedMap) -> NestedMap:
    """Returns NestedMap(logits, logp) of the inputs (no labels needed)."""
    inputs = _field(input_batch, self.input_field, 'input_field')
    logits = self.softmax.get_logits(self.network(inputs))
    return NestedMap(logits=logits, logp=self.softmax.logits_to_logp(logits))

  def decode(
      self, input_batch: NestedMap
  ) -> tuple[WeightedScalars, NestedMap, NestedMap]:
    """The loss metrics, per-example predictions and a top-1 accuracy.

    Returns:
      (metrics as in `compute_loss`; NestedMap of `predicted_labels`,
      `labels` and `weights` [B]; NestedMap(accuracy=(value, weight))), the
      last standing in for praxis' `clu.metrics.Accuracy`.
    """
    predictions = self.compute_predictions(input_batch)
    metrics, _ = self.compute_loss(predictions, input_batch)
    logits = predictions.softmax_output.logits
    results = NestedMap(
        predicted_labels=jnp.argmax(logits, axis=-1),
        labels=jnp.argmax(input_batch[self.label_field], axis=-1),
        weights=predictions.example_weights,
    )
    return metrics, results, NestedMap(accuracy=metrics.accuracy)

  def process_decode_out(
      self, input_obj: Any, decode_out: NestedMap
  ) -> tuple[WeightedScalars, list[tuple[str, Any]], NestedMap]:
    """Host-side top-1 accuracy and one (index, prediction) per example.

    Args:
      input_obj: The input (unused).
      decode_out: The `results` of `decode`, as numpy arrays.

    Returns:
      (NestedMap(accuracy=(value, weight)), [(str(i), {'prediction': int,
      'label': int})] for examples of non-zero weight, NestedMap()).
    """
    del input_obj
    predicted = np.asarray(decode_out['predicted_labels'])
    labels = np.asarray(decode_out['labels'])
    weights = np.asarray(decode_out['weights'], np.float32)
    total = float(np.sum(weights))
    correct = float(np.sum((predicted == labels) * weights))
    scalars = NestedMap(accuracy=(correct / max(total, 1.0), total))
    pairs = [
        (str(i), {'prediction': int(p), 'label': int(l)})
        for i, (p, l, w) in enumerate(zip(predicted, labels, weights))
        if w > 0
    ]
    return scalars, pairs, NestedMap()


class ClassificationMLPModel(base_model.BaseModel):
  """An MLP over embedded ids, predicting a label per id.

  Input keys: `ids`, `labels` and `weights`, all [B, T]. The ids are embedded
  with the softmax's table (`softmax.emb_lookup`), so `mlp_tpl` maps
  softmax.input_dims to softmax.input_dims. Metrics (value, weight):
  `total_loss` and `avg_xent` (the cross entropy of `labels`),
  `fraction_of_correct_preds` and `num_predictions`.

  Attributes:
    mlp_tpl: The MLP (child `mlp_layers_0`, the name praxis checkpoints use).
    softmax_tpl: The softmax, which also embeds the ids.
  """

  mlp_tpl: LayerTpl = template_field(linears.MLPBlock)
  softmax_tpl: LayerTpl = template_field(
      embedding_softmax.SharedEmbeddingSoftmax
  )

  def setup(self) -> None:
    self.create_child('mlp_layers_0', self.mlp_tpl)
    self.create_child('softmax', self.softmax_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    """The softmax output of the MLP over the embedded ids."""
    features = self.mlp_layers_0(self.softmax.emb_lookup(input_batch.ids))
    return self.softmax(
        features,
        class_weights=input_batch.weights[..., None],
        class_ids=input_batch.labels[..., None],
    )

  def compute_loss(
      self, predictions: NestedMap, input_batch: NestedMap
  ) -> tuple[WeightedScalars, dict[str, Any]]:
    """Cross entropy and accuracy of `labels`, weighted by `weights`."""
    labels = jnp.asarray(input_batch.labels)
    weights = jnp.asarray(input_batch.weights)
    num_preds = jnp.sum(weights).astype(jnp.float32)
    predicted = predictions.per_example_argmax.astype(labels.dtype)
    mean_acc = jnp.sum((labels == predicted) * weights) / jnp.maximum(
        num_preds, 1.0
    )
    xent_weight = predictions.total_weight
    metrics = NestedMap(
        total_loss=(predictions.avg_xent, xent_weight),
        avg_xent=(predictions.avg_xent, xent_weight),
        fraction_of_correct_preds=(mean_acc, num_preds),
        num_predictions=(num_preds, jnp.array(1.0, jnp.float32)),
    )
    return metrics, NestedMap(predicted_labels=predicted)
