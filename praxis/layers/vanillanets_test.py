"""VanillaNet layers against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import vanillanets


def _np_lrelu(slope, x):
  return np.sqrt(2 / (1 + slope**2)) * np.where(x > 0, x, slope * x)


class VanillaNetTest(absltest.TestCase):

  def test_tailored_lrelu(self):
    x = np.linspace(-2, 2, 9).astype(np.float32)
    np.testing.assert_allclose(vanillanets.tailored_lrelu(0.4, x),
                               _np_lrelu(0.4, x), rtol=1e-6)

  def test_block_of_1x1_convolutions_is_three_matmuls(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        vanillanets.VanillaBlock, name='b', input_dim=3, output_dim=8,
        kernel_size=1))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 3, 3)),
                    jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    want = np.asarray(x)
    for i in range(3):
      conv = variables['params'][f'body_{i}']
      want = _np_lrelu(0.4, want @ np.asarray(conv['w'])[0, 0]
                       + np.asarray(conv['b']))
    np.testing.assert_allclose(layer.apply(variables, x), want, rtol=1e-4,
                               atol=1e-5)

  def test_net_shapes_and_bad_config(self):
    cfg = vanillanets.VanillaNet.HParamsVanillaNet5().set(name='net')
    cfg.output_spatial_pooling_params.pooling_dims = [1, 2]
    layer = base_layer.instantiate(cfg)
    x = jnp.ones((2, 16, 16, 3))
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(layer.apply(variables, x).shape, (2, 16))
    bad = base_layer.instantiate(cfg.clone().set(blocks=[1, 1]))
    with self.assertRaisesRegex(ValueError, 'blocks 2'):
      bad.init(jax.random.PRNGKey(0), x)


if __name__ == '__main__':
  absltest.main()
