"""Aggregation of the `(value, weight)` metrics that models report.

Public names: BaseMetrics, MeanMetrics, MaxMetrics, HistogramMetrics,
CompositeMetrics, LossAggregator, MultiLossAggregator.

Every step runs under one `jax.jit` over the global mesh, so the metrics a
step returns are already global: `aggregate` has nothing to reduce across
devices and returns the metrics it selects. Across batches (an eval loop),
`store` keeps each batch's metrics and `finalize` reduces them:

  metrics = base_hyperparams.instantiate(
      pax_fiddle.Config(base_metrics.MeanMetrics))
  for batch in batches:
    metrics.store(eval_step(batch).weighted_scalars)
  means = metrics.finalize()  # {'loss': (weighted mean, total weight), ...}

The loss aggregators pick the value a learner differentiates.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import jax
import numpy as np
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
instantiate = base_hyperparams.instantiate


def _select(batch_metrics: Any, keys: Sequence[str] | None) -> dict[str, Any]:
  return {k: v for k, v in batch_metrics.items() if not keys or k in keys}


def _stacked(pairs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
  values = np.stack([np.asarray(v, np.float64) for v, _ in pairs])
  weights = np.stack([np.asarray(w, np.float64) for _, w in pairs])
  return values, weights


class BaseMetrics(base_hyperparams.FiddleBaseParameterizable):
  """Keeps per-batch metrics (`store`) and reduces them (`finalize`).

  Subclasses define `_reduce(values, weights)`: values and weights of one
  key, stacked over batches, to one `(value, weight)` pair.
  """

  def __post_init__(self):
    self._metrics = collections.defaultdict(list)

  def _keys(self) -> Sequence[str] | None:
    return None

  def aggregate(self, batch_metrics: Any, reshard: bool = False) -> Any:
    """The selected metrics of one (already global) batch.

    Args:
      batch_metrics: `{key: (value, weight)}`.
      reshard: Accepted for Pax compatibility; nothing to reshard.

    Returns:
      The metrics this object aggregates, unchanged.
    """
    del reshard
    return type(batch_metrics)(_select(batch_metrics, self._keys()))

  def store(self, batch_metrics: Any, reshard: bool = False) -> None:
    """Keeps the selected metrics of one batch for `finalize`."""
    for k, v in self.aggregate(batch_metrics, reshard).items():
      self._metrics[k].append(v)

  def finalize(self) -> dict[str, tuple[Any, Any]]:
    """Reduces the stored batches, forgets them, returns `{key: (v, w)}`."""
    metrics = {k: self._reduce(*_stacked(pairs))
               for k, pairs in self._metrics.items()}
    self._metrics = collections.defaultdict(list)
    return metrics

  def _reduce(self, values: np.ndarray, weights: np.ndarray) -> Any:
    raise NotImplementedError(f'{type(self).__name__} must define _reduce.')

  def summarize(self, step_i: int, prefix: str) -> dict[str, Any]:
    """`finalize()`, also logged; the runner writes the summaries."""
    del step_i, prefix
    return self.finalize()


class MeanMetrics(BaseMetrics):
  """Weighted means: sum(v * w) / sum(w), with weight sum(w).

  Attributes:
    metric_keys: The keys to aggregate (None: all).
  """

  metric_keys: Sequence[str] | None = None

  def _keys(self) -> Sequence[str] | None:
    return self.metric_keys

  def _reduce(self, values, weights):
    total = np.sum(weights)
    w = weights.reshape(weights.shape + (1,) * (values.ndim - weights.ndim))
    return np.sum(values * w, axis=0) / total, total


class MaxMetrics(BaseMetrics):
  """Maxima over batches, with the summed weight.

  Attributes:
    metric_keys: The keys to aggregate (None: all).
  """

  metric_keys: Sequence[str] | None = None

  def _keys(self) -> Sequence[str] | None:
    return self.metric_keys

  def _reduce(self, values, weights):
    return np.max(values, axis=0), np.sum(weights, axis=0)


class HistogramMetrics(BaseMetrics):
  """Perplexity, entropy and coverage of a summed histogram.

  The value under `histogram_key` is a `[groups, classes]` (or `[classes]`)
  count histogram; `finalize` sums it over batches and reports
  `<key>_pplx` (mean over groups of exp(entropy)), `<key>_entropy` (log of
  that) and `<key>_coverage` (mean fraction of classes seen).

  Attributes:
    histogram_key: The key holding the histogram.
  """

  histogram_key: str | None = None

  def _keys(self) -> Sequence[str] | None:
    return [self.histogram_key]

  def finalize(self) -> dict[str, tuple[Any, Any]]:
    metrics = {}
    for k, pairs in self._metrics.items():
      values, weights = _stacked(pairs)
      hist = np.atleast_2d(np.sum(values, axis=0))
      weight = np.sum(weights)
      probs = hist / np.maximum(np.sum(hist) / hist.shape[0], 1.0)
      plogp = np.sum(probs * np.log(np.maximum(probs, 1e-30)), axis=-1)
      pplx = np.mean(np.exp(-plogp))
      coverage = np.mean(np.sum(hist > 0, axis=-1)) / hist.shape[-1]
      metrics[f'{k}_pplx'] = (pplx, weight)
      metrics[f'{k}_entropy'] = (np.log(pplx), weight)
      metrics[f'{k}_coverage'] = (coverage, weight)
    self._metrics = collections.defaultdict(list)
    return metrics


class CompositeMetrics(BaseMetrics):
  """Several metrics objects side by side; their results are merged.

  Attributes:
    metrics_p: Configs of the metrics objects.
  """

  metrics_p: Sequence[pax_fiddle.Config[BaseMetrics]] | None = None

  def __post_init__(self):
    super().__post_init__()
    self.metrics_calcs = [instantiate(m) for m in self.metrics_p or ()]

  def aggregate(self, batch_metrics: Any, reshard: bool = False) -> Any:
    merged = {}
    for m in self.metrics_calcs:
      merged.update(m.aggregate(batch_metrics, reshard))
    return merged

  def store(self, batch_metrics: Any, reshard: bool = False) -> None:
    for m in self.metrics_calcs:
      m.store(batch_metrics, reshard)

  def finalize(self) -> dict[str, tuple[Any, Any]]:
    merged = {}
    for m in self.metrics_calcs:
      merged.update(m.finalize())
    return merged


def _loss_and_weight(
    batch_metrics: Any, key: str, owner: str
) -> tuple[JTensor, JTensor]:
  if key not in batch_metrics:
    raise KeyError(
        f'{owner}: the model reported no metric {key!r} (it reported '
        f'{sorted(batch_metrics)}); set the learner\'s loss_name to one of '
        'them.'
    )
  value = batch_metrics[key]
  if not isinstance(value, (tuple, list)) or len(value) != 2:
    raise TypeError(
        f'{owner}: metric {key!r} must be a (value, weight) pair, got '
        f'{type(value).__name__}.'
    )
  loss, weight = value
  return loss, jax.lax.stop_gradient(weight)


class LossAggregator(base_hyperparams.FiddleBaseParameterizable):
  """Picks the loss a learner differentiates from the model's metrics.

  Attributes:
    loss_key: The key of the `(loss, weight)` pair to train on.
  """

  loss_key: str | None = None

  def aggregate(self, batch_metrics: Any) -> tuple[Any, Any, Any]:
    """(weighted_loss, mean_loss, loss_weight) of one global batch.

    Values are global, so the loss to differentiate and the mean loss are
    both the reported loss; the weight is returned without its gradient.

    Args:
      batch_metrics: `{key: (value, weight)}` from `compute_loss`.

    Returns:
      The loss to differentiate, the loss to report, its weight.
    """
    loss, weight = _loss_and_weight(
        batch_metrics, self.loss_key, type(self).__name__)
    return loss, loss, weight


class MultiLossAggregator(LossAggregator):
  """Trains on the sum of several losses.

  Attributes:
    loss_keys: The keys of the `(loss, weight)` pairs to add.
  """

  loss_keys: Sequence[str] | None = None

  def aggregate(self, batch_metrics: Any) -> tuple[Any, Any, Any]:
    """(sum of losses, sum of losses, None): no single weight applies."""
    total = 0.0
    for key in self.loss_keys or ():
      loss, _ = _loss_and_weight(batch_metrics, key, type(self).__name__)
      total = total + loss
    return total, total, None
