"""Tests of praxis.layers.einsum against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import einsum

instantiate = base_layer.instantiate


def einsum_layer(**kwargs):
  return instantiate(pax_fiddle.Config(einsum.Einsum, name='e', **kwargs))


class EinsumFanAxesTest(test_utils.TestCase):

  def test_fan_axes(self):
    self.assertEqual(einsum.einsum_fan_axes('...d,df->...f'), ([0], [1]))
    self.assertEqual(einsum.einsum_fan_axes('btd,dnh->btnh'), ([0], [1, 2]))
    self.assertEqual(einsum.einsum_fan_axes('btnh,dnh->btd'), ([1, 2], [0]))


class EinsumTest(test_utils.TestCase):

  def test_multi_head_projection_with_bias(self):
    layer = einsum_layer(eqn='...d,dnh->...nh', w_shape=(4, 2, 3),
                         use_bias=True)
    x = self.np_rng.standard_normal((2, 5, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertArraysEqual(variables['params']['b'], np.zeros((2, 3)))
    variables = jax.tree.map(
        lambda v: self.np_rng.standard_normal(v.shape).astype(np.float32),
        variables,
    )
    w, b = variables['params']['w'], variables['params']['b']
    expected = np.zeros((2, 5, 2, 3), np.float32)
    for n in range(2):
      for h in range(3):
        expected[:, :, n, h] = x @ w[:, n, h] + b[n, h]
    self.assertAllClose(layer.apply(variables, x), expected, atol=1e-5)

  def test_without_bias_has_only_w(self):
    layer = einsum_layer(eqn='btnh,dnh->btd', w_shape=(4, 2, 3))
    x = self.np_rng.standard_normal((1, 2, 2, 3)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertEqual(list(variables['params']), ['w'])
    w = np.asarray(variables['params']['w'])
    expected = x.reshape(1, 2, 6) @ w.reshape(4, 6).T
    self.assertAllClose(y, expected, atol=1e-5)

  def test_metadata_fan_axes_and_bias_sharding(self):
    cfg = pax_fiddle.Config(
        einsum.Einsum,
        name='e',
        eqn='...d,dnh->...nh',
        w_shape=(4, 2, 8),
        use_bias=True,
        ici_mesh_shape=[2, 4],
        mesh_axis_names=('data', 'mdl'),
    )
    cfg.weight_split_dims_mapping.wt = ['data', None, 'mdl']
    meta = instantiate(cfg).abstract_init_with_metadata(jnp.ones((1, 4)))
    w, b = meta['params']['w'], meta['params']['b']
    self.assertEqual(list(w.fan_in_axes), [0])
    self.assertEqual(list(w.fan_out_axes), [1, 2])
    self.assertEqual(list(b.shape), [2, 8])
    self.assertEqual(list(b.tensor_split_dims_mapping), [None, 'mdl'])

  def test_bad_configs_fail(self):
    x = jnp.ones((1, 4))
    with self.assertRaisesRegex(ValueError, r'Einsum \(e\): eqn'):
      einsum_layer(eqn='', w_shape=(4, 2)).init(jax.random.PRNGKey(0), x)
    with self.assertRaisesRegex(ValueError, 'w_shape'):
      einsum_layer(eqn='bd,df->bf', w_shape=(4,)).init(
          jax.random.PRNGKey(0), x)
    with self.assertRaisesRegex(ValueError, 'last dims'):
      einsum_layer(eqn='bd,df->fb', w_shape=(4, 2), use_bias=True).init(
          jax.random.PRNGKey(0), x)


if __name__ == '__main__':
  absltest.main()
