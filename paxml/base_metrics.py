"""Aggregation of the `(value, weight)` metrics that models report.

Public names: BaseMetrics, MeanMetrics, MaxMetrics, HistogramMetrics,
CompositeMetrics, LossAggregator, MultiLossAggregator,
WeightedScalarCluMetric.

Every step runs under one `jax.jit` over the global mesh, so the metrics a
step returns are already global: `aggregate` has nothing to reduce across
devices and returns the metrics it selects. Under `jax.pmap` with Pax's axis
name (`base_layer.PMAP_PARALLEL_AXIS_NAME`), as code written for Pax may
run it, `aggregate` reduces across the replicas as Pax does (weighted mean,
max, sum), and the loss aggregators renormalize each replica's loss weight
by the total. Across batches (an eval loop), `store` keeps each batch's
metrics and `finalize` reduces them:

  metrics = base_hyperparams.instantiate(
      pax_fiddle.Config(base_metrics.MeanMetrics))
  for batch in batches:
    metrics.store(eval_step(batch).weighted_scalars)
  means = metrics.finalize()  # {'loss': (weighted mean, total weight), ...}

The loss aggregators pick the value a learner differentiates; the loss may
be a `(value, weight)` pair or a `WeightedScalarCluMetric` (the interface of
a `clu.metrics.Metric` -- create, merge, compute -- without depending on clu).
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
instantiate = base_hyperparams.instantiate


_AXIS = base_layer.PMAP_PARALLEL_AXIS_NAME


def _under_pmap() -> bool:
  """Whether Pax's pmap axis name is bound here (a `jax.pmap` over it)."""
  try:
    jax.lax.axis_size(_AXIS)
  except NameError:
    return False
  return True


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
    selected = _select(batch_metrics, self._keys())
    if _under_pmap():
      selected = {k: self._across_replicas(*v) for k, v in selected.items()}
    return type(batch_metrics)(selected)

  def _across_replicas(self, value: JTensor, weight: JTensor) -> Any:
    """One `(value, weight)` reduced over the pmap replicas."""
    return jax.lax.psum(value, _AXIS), jax.lax.psum(weight, _AXIS)

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

  def _across_replicas(self, value, weight):
    total = jax.lax.psum(weight, _AXIS)
    return jax.lax.psum(value * weight, _AXIS) / total, total

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

  def _across_replicas(self, value, weight):
    return jax.lax.pmax(value, _AXIS), jax.lax.psum(weight, _AXIS)

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


@flax.struct.dataclass
class WeightedScalarCluMetric:
  """A weighted mean of scalars that merges across batches and replicas.

  Pax's `clu.metrics.Metric` subclass, with clu's interface and no clu:

    m = WeightedScalarCluMetric.create(value=losses, weight=weights)
    m = m.merge(WeightedScalarCluMetric.create(value=more, weight=w2))
    m.compute()  # sum(value * weight) / sum(weight) over both

  Attributes:
    weighted_value: sum(value * weight) so far.
    weight: sum(weight) so far.
  """

  weighted_value: JTensor
  weight: JTensor

  @classmethod
  def create(cls, value: JTensor, weight: JTensor) -> WeightedScalarCluMetric:
    return cls(weighted_value=jnp.sum(jnp.multiply(value, weight)),
               weight=jnp.sum(weight))

  @classmethod
  def from_model_output(cls, value: JTensor, weight: JTensor,
                        **_: Any) -> WeightedScalarCluMetric:
    return cls.create(value, weight)

  @classmethod
  def empty(cls) -> WeightedScalarCluMetric:
    return cls(weighted_value=jnp.float32(0.0), weight=jnp.float32(0.0))

  def merge(self, other: WeightedScalarCluMetric) -> WeightedScalarCluMetric:
    return type(self)(weighted_value=self.weighted_value + other.weighted_value,
                      weight=self.weight + other.weight)

  def reduce(self) -> WeightedScalarCluMetric:
    """Merges metrics stacked on a leading axis (clu's `reduce`)."""
    return type(self)(weighted_value=jnp.sum(self.weighted_value, axis=0),
                      weight=jnp.sum(self.weight, axis=0))

  def compute(self) -> JTensor:
    return self.weighted_value / self.weight


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
  if isinstance(value, WeightedScalarCluMetric):
    return value.compute(), jax.lax.stop_gradient(value.weight)
  if not isinstance(value, (tuple, list)) or len(value) != 2:
    raise TypeError(
        f'{owner}: metric {key!r} must be a (value, weight) pair or a '
        f'WeightedScalarCluMetric, got {type(value).__name__}.'
    )
  loss, weight = value
  return loss, jax.lax.stop_gradient(weight)


def _replica_share(loss: JTensor, weight: JTensor) -> tuple[Any, Any, Any]:
  """(weighted loss, mean loss, weight): renormalized over pmap replicas.

  Under pmap each replica's weight becomes its share of the total, so the
  gradients of the weighted losses sum to the gradient of the mean; the
  mean loss is that sum. Elsewhere values are global and pass through.
  """
  if not _under_pmap():
    return loss, loss, weight
  share = weight / (jax.lax.psum(weight, _AXIS) + 1e-8)
  weighted = loss * share
  return weighted, jax.lax.psum(weighted, _AXIS), share


class LossAggregator(base_hyperparams.FiddleBaseParameterizable):
  """Picks the loss a learner differentiates from the model's metrics.

  Attributes:
    loss_key: The key of the `(loss, weight)` pair to train on.
  """

  loss_key: str | None = None

  def aggregate(self, batch_metrics: Any) -> tuple[Any, Any, Any]:
    """(weighted_loss, mean_loss, loss_weight) of one batch.

    Values are global (one `jax.jit`), so the loss to differentiate and the
    mean loss are both the reported loss and the weight is the reported
    weight; under pmap they are renormalized (see the module doc). The
    weight carries no gradient.

    Args:
      batch_metrics: `{key: (value, weight)}` from `compute_loss`.

    Returns:
      The loss to differentiate, the loss to report, its weight.
    """
    return _replica_share(
        *_loss_and_weight(batch_metrics, self.loss_key, type(self).__name__))


class MultiLossAggregator(LossAggregator):
  """Trains on the sum of several losses.

  Attributes:
    loss_keys: The keys of the `(loss, weight)` pairs to add.
  """

  loss_keys: Sequence[str] | None = None

  def aggregate(self, batch_metrics: Any) -> tuple[Any, Any, Any]:
    """(sum of losses, sum of losses, None): no single weight applies."""
    weighted_total, mean_total = 0.0, 0.0
    for key in self.loss_keys or ():
      weighted, mean, _ = _replica_share(
          *_loss_and_weight(batch_metrics, key, type(self).__name__))
      weighted_total, mean_total = weighted_total + weighted, mean_total + mean
    return weighted_total, mean_total, None
