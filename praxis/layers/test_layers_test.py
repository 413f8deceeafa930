"""The test helpers of test_layers compute what their docstrings say."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import test_layers

NestedMap = py_utils.NestedMap


def _build(cls, **fields):
  return base_layer.instantiate(pax_fiddle.Config(cls, name='x', **fields))


class TestLayersTest(absltest.TestCase):

  def test_test_layer_against_numpy(self):
    layer = _build(test_layers.TestLayer)
    x = np.random.default_rng(0).normal(size=(3, 2)).astype(np.float32)
    v = layer.init(jax.random.PRNGKey(0), x)
    p = jax.tree.map(np.asarray, v['params'])
    self.assertEqual(p['final_proj'].shape, (4, 5))
    h = x @ p['linear_0']['w'] + p['bias_0']['b']
    h = h @ p['linear_1']['w'] + p['bias_1']['b']
    np.testing.assert_allclose(layer.apply(v, x), h @ p['final_proj'] + 1.0,
                               rtol=1e-5, atol=1e-6)

  def test_projection_and_unused_var(self):
    x = np.ones([2, 3], np.float32)
    proj = _build(test_layers.ProjectionLayer, input_dims=3, output_dims=4)
    v = proj.init(jax.random.PRNGKey(0), x)
    self.assertEqual(proj.apply(v, x).shape, (2, 4))
    unused = _build(test_layers.VarUnusedLayer, input_dims=3, output_dims=4)
    v = unused.init(jax.random.PRNGKey(0), x)
    self.assertCountEqual(v['params'], ['var01', 'var02'])
    np.testing.assert_allclose(unused.apply(v, x),
                               np.sum(x @ np.asarray(v['params']['var01'])),
                               rtol=1e-5)

  def test_linear_regression_loss(self):
    model = _build(test_layers.TestLinearRegressionModel, input_dims=2,
                   output_dims=1)
    batch = NestedMap(inputs=jnp.array([[1.0, 2.0]]),
                      targets=jnp.array([[10.0]]))
    v = model.init(jax.random.PRNGKey(0), batch)
    w = np.asarray(v['params']['linear']['w'])
    metrics, per_example = model.apply(v, batch)
    pred = np.array([[1.0, 2.0]]) @ w
    np.testing.assert_allclose(per_example.predictions, pred, rtol=1e-6)
    np.testing.assert_allclose(metrics.loss[0], (pred[0, 0] - 10.0)**2,
                               rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
