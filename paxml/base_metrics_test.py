"""Tests of paxml.base_metrics against numpy references."""

from absl.testing import absltest
import numpy as np
from paxml import base_metrics
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils


def _make(cls, **kwargs):
  return base_hyperparams.instantiate(pax_fiddle.Config(cls, **kwargs))


class MetricsTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.values = self.rng.normal(size=(4, 2))  # 4 batches, 2 metrics.
    self.weights = self.rng.uniform(1.0, 3.0, size=(4, 2))
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


if __name__ == '__main__':
  absltest.main()
