"""Tests of paxml.base_metrics against numpy references."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import base_metrics
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils


def _make(cls, **kwargs):
  return base_hyperparams.instantiate(pax_fiddle.Config(cls, **kwargs))


def _over_replicas(fn, *args):
  """fn on each leading-axis slice, with Pax's pmap axis name bound."""
  return jax.vmap(fn, axis_name=base_layer.PMAP_PARALLEL_AXIS_NAME)(*args)


class MetricsTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.values = self.np_rng.normal(size=(4, 2))  # 4 batches, 2 metrics.
    self.weights = self.np_rng.uniform(1.0, 3.0, size=(4, 2))
    self.batches = [
        {'loss': (v[0], w[0]), 'acc': (v[1], w[1])}
        for v, w in zip(self.values, self.weights)]

  def test_mean_metrics_weighted_mean_over_batches(self):
    metrics = _make(base_metrics.MeanMetrics)
    for b in self.batches:
      metrics.store(b)
    out = metrics.finalize()
    for i, key in enumerate(['loss', 'acc']):
      v, w = self.values[:, i], self.weights[:, i]
      self.assertAllClose(out[key], ((v * w).sum() / w.sum(), w.sum()))
    self.assertEqual(metrics.finalize(), {})  # finalize forgets the batches.

  def test_metric_keys_select(self):
    metrics = _make(base_metrics.MeanMetrics, metric_keys=['acc'])
    self.assertEqual(set(metrics.aggregate(self.batches[0])), {'acc'})
    for b in self.batches:
      metrics.store(b)
    self.assertEqual(set(metrics.finalize()), {'acc'})

  def test_max_metrics(self):
    metrics = _make(base_metrics.MaxMetrics)
    for b in self.batches:
      metrics.store(b)
    out = metrics.finalize()
    self.assertAllClose(out['loss'], (self.values[:, 0].max(),
                                      self.weights[:, 0].sum()))

  def test_histogram_metrics(self):
    metrics = _make(base_metrics.HistogramMetrics, histogram_key='h')
    h1 = np.array([[1.0, 0.0, 3.0], [2.0, 2.0, 0.0]])
    h2 = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    metrics.store({'h': (h1, 1.0), 'other': (1.0, 1.0)})
    metrics.store({'h': (h2, 2.0)})
    out = metrics.finalize()
    hist = h1 + h2  # [[2, 0, 4], [2, 4, 0]]; 12 counts over 2 groups.
    probs = hist / 6.0
    entropy = [-(p[p > 0] * np.log(p[p > 0])).sum() for p in probs]
    pplx = np.mean(np.exp(entropy))
    self.assertAllClose(out['h_pplx'], (pplx, 3.0))
    self.assertAllClose(out['h_entropy'], (np.log(pplx), 3.0))
    self.assertAllClose(out['h_coverage'], (2.0 / 3.0, 3.0))
    self.assertNotIn('other_pplx', out)

  def test_composite_metrics(self):
    metrics = _make(base_metrics.CompositeMetrics, metrics_p=[
        pax_fiddle.Config(base_metrics.MeanMetrics, metric_keys=['loss']),
        pax_fiddle.Config(base_metrics.MaxMetrics, metric_keys=['acc'])])
    for b in self.batches:
      metrics.store(b)
    out = metrics.finalize()
    v, w = self.values, self.weights
    self.assertAllClose(out['loss'][0], (v[:, 0] * w[:, 0]).sum() /
                        w[:, 0].sum())
    self.assertAllClose(out['acc'][0], v[:, 1].max())


class LossAggregatorTest(test_utils.TestCase):

  def test_single_loss(self):
    agg = _make(base_metrics.LossAggregator, loss_key='loss')
    weighted, mean, weight = agg.aggregate({'loss': (2.5, 4.0),
                                            'acc': (0.1, 1.0)})
    self.assertAllClose((weighted, mean, weight), (2.5, 2.5, 4.0))

  def test_multi_loss_sums_losses(self):
    agg = _make(base_metrics.MultiLossAggregator, loss_keys=['a', 'b'])
    weighted, mean, weight = agg.aggregate({'a': (1.5, 2.0), 'b': (2.0, 8.0)})
    self.assertAllClose((weighted, mean), (3.5, 3.5))
    self.assertIsNone(weight)

  def test_missing_or_malformed_loss_fails(self):
    agg = _make(base_metrics.LossAggregator, loss_key='xent')
    with self.assertRaisesRegex(KeyError, "'xent'.*loss_name"):
      agg.aggregate({'loss': (1.0, 1.0)})
    with self.assertRaisesRegex(TypeError, r'\(value, weight\)'):
      agg.aggregate({'xent': 1.0})


class ReplicaAggregationTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.v = self.np_rng.normal(size=(3,)).astype(np.float32)
    self.w = self.np_rng.uniform(1.0, 2.0, size=(3,)).astype(np.float32)

  def test_metrics_reduce_across_replicas(self):
    v, w = self.v, self.w
    mean = _over_replicas(
        lambda v, w: _make(base_metrics.MeanMetrics).aggregate(
            {'m': (v, w)})['m'], v, w)
    self.assertAllClose(mean[0], np.full(3, (v * w).sum() / w.sum()))
    self.assertAllClose(mean[1], np.full(3, w.sum()))
    top = _over_replicas(
        lambda v, w: _make(base_metrics.MaxMetrics).aggregate(
            {'m': (v, w)})['m'], v, w)
    self.assertAllClose(top[0], np.full(3, v.max()))

  def test_loss_weights_become_shares_of_the_total(self):
    agg = _make(base_metrics.LossAggregator, loss_key='loss')
    weighted, mean, weight = _over_replicas(
        lambda v, w: agg.aggregate({'loss': (v, w)}), self.v, self.w)
    share = self.w / (self.w.sum() + 1e-8)
    self.assertAllClose(weight, share)
    self.assertAllClose(weighted, self.v * share)
    self.assertAllClose(mean, np.full(3, (self.v * share).sum()))
    # Under one jit the values are global: they pass through.
    self.assertAllClose(agg.aggregate({'loss': (self.v[0], self.w[0])}),
                        (self.v[0], self.v[0], self.w[0]))


class WeightedScalarCluMetricTest(test_utils.TestCase):

  def test_create_merge_reduce_compute(self):
    v1, w1 = np.array([1.0, 4.0]), np.array([0.5, 2.0])
    v2, w2 = np.array([-3.0]), np.array([1.5])
    cls = base_metrics.WeightedScalarCluMetric
    merged = cls.create(value=v1, weight=w1).merge(cls.from_model_output(
        value=v2, weight=w2))
    v, w = np.concatenate([v1, v2]), np.concatenate([w1, w2])
    self.assertAllClose(merged.compute(), (v * w).sum() / w.sum())
    self.assertAllClose(cls.empty().merge(merged).compute(), merged.compute())
    stacked = jax.tree.map(lambda *x: jnp.stack(x),
                           cls.create(v1, w1), cls.create(v2, w2))
    self.assertAllClose(stacked.reduce().compute(), merged.compute())

  def test_loss_aggregator_reads_it(self):
    agg = _make(base_metrics.LossAggregator, loss_key='loss')
    metric = base_metrics.WeightedScalarCluMetric.create(
        value=np.array([2.0, 4.0]), weight=np.array([1.0, 3.0]))
    loss, mean, weight = agg.aggregate({'loss': metric})
    self.assertAllClose((loss, mean, weight), (3.5, 3.5, 4.0))


if __name__ == '__main__':
  absltest.main()
