"""Tests of metric_utils: float conversion and clu-style metric handling."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
from paxml import base_metrics
from paxml import metric_utils
from praxis import py_utils

_Metric = base_metrics.WeightedScalarCluMetric


class _Scalar:  # Stands for clu.values.Scalar (read by its name).

  def __init__(self, value):
    self.value = value


_Scalar.__name__ = 'Scalar'


class MetricUtilsTest(absltest.TestCase):

  def test_as_float_of_each_kind(self):
    pairs = [(np.array(1.0), np.array(1.0)), (np.array(4.0), np.array(3.0))]
    self.assertEqual(metric_utils.as_float(pairs), 13 / 4)
    self.assertEqual(metric_utils.as_float(pairs[1]), 4.0)
    self.assertEqual(metric_utils.as_float(2), 2.0)
    self.assertEqual(metric_utils.as_float(_Scalar(0.5)), 0.5)
    with self.assertRaises(TypeError):
      metric_utils.as_float('x')

  def test_as_float_dict_and_update(self):
    out = {'a': (np.array(2.0), np.array(1.0)), 'b': 'text', 'c': 3}
    floats = metric_utils.as_float_dict(out)
    self.assertEqual(floats, {'a': 2.0, 'c': 3.0})
    with self.assertRaisesRegex(ValueError, 'cannot be converted'):
      metric_utils.as_float_dict(out, raise_on_non_float_convertible=True)
    self.assertEqual(metric_utils.update_float_dict({'x': 1.0}, floats, 'p'),
                     {'x': 1.0, 'p/a': 2.0, 'p/c': 3.0})

  def test_merge_and_compute_clu_metrics(self):
    first = {'m': _Metric.create(value=jnp.array([1.0]), weight=jnp.array(
        [1.0]))}
    second = {'m': _Metric.create(value=jnp.array([4.0]), weight=jnp.array(
        [3.0]))}
    merged = metric_utils.merge_clu_metrics(None, first)
    merged = metric_utils.merge_clu_metrics(merged, second)
    values = metric_utils.compute_metric_values(merged)
    np.testing.assert_allclose(values['m'], 13 / 4, rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "keys don't match"):
      metric_utils.merge_clu_metrics(merged, {'other': second['m']})

  def test_extract_weighted_scalars_or_metrics(self):
    scalars = {'a': (np.array(1.0), np.array(2.0))}
    self.assertEqual(
        metric_utils.extract_weighted_scalars_and_clu_metrics(scalars),
        (scalars, {}))
    metrics = py_utils.NestedMap(m=_Metric.empty())
    self.assertEqual(
        metric_utils.extract_weighted_scalars_and_clu_metrics(metrics)[1],
        metrics)
    with self.assertRaisesRegex(TypeError, 'must be WeightedScalars'):
      metric_utils.extract_weighted_scalars_and_clu_metrics({'a': 'x'})


if __name__ == '__main__':
  absltest.main()
