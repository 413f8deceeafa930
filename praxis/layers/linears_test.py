"""Tests of praxis.layers.linears against numpy math written here."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import activations
from praxis.layers import linears

PartitionSpec = jax.sharding.PartitionSpec
instantiate = base_layer.instantiate


def np_relu(x):
  return np.maximum(x, 0.0)


def random_like(rng, variables):
  """`variables` with every array replaced by standard normal values."""
  return jax.tree.map(
      lambda v: rng.standard_normal(v.shape).astype(np.float32), variables
  )


class ProjectLastDimTest(test_utils.TestCase):

  def test_matches_matmul_over_last_dim(self):
    x = self.np_rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = self.np_rng.standard_normal((4, 5)).astype(np.float32)
    expected = np.stack([x[i] @ w for i in range(2)])
    self.assertAllClose(linears.project_last_dim(x, w), expected, atol=1e-5)

  def test_mismatched_dims_raise(self):
    with self.assertRaisesRegex(ValueError, 'last dim'):
      linears.project_last_dim(jnp.ones((2, 3)), jnp.ones((4, 5)))


class LinearTest(test_utils.TestCase):

  def test_output_is_x_times_w(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.Linear, name='lin', input_dims=4, output_dims=3
        )
    )
    x = self.np_rng.standard_normal((2, 5, 4)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    w = np.asarray(variables['params']['w'])
    self.assertEqual(w.shape, (4, 3))
    self.assertEqual(list(variables['params']), ['w'])
    self.assertAllClose(y, np.einsum('btd,df->btf', x, w), atol=1e-5)

  def test_weight_init(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.Linear,
            name='lin',
            input_dims=2,
            output_dims=3,
            weight_init=base_layer.WeightInit.Constant(0.5),
        )
    )
    _, variables = test_utils.init_and_apply(layer, jnp.ones((1, 2)))
    self.assertArraysEqual(variables['params']['w'], np.full((2, 3), 0.5))

  def test_legacy_hparams_instantiate(self):
    layer = linears.Linear.HParams(
        name='l', input_dims=2, output_dims=3
    ).Instantiate()
    self.assertIsInstance(layer, linears.Linear)
    x = np.array([[1.0, 2.0]], np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertAllClose(y, x @ np.asarray(variables['params']['w']))

  def test_non_positive_dims_fail_with_field_name(self):
    layer = instantiate(
        pax_fiddle.Config(linears.Linear, name='lin', output_dims=3)
    )
    with self.assertRaisesRegex(ValueError, r'Linear \(lin\): input_dims'):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 2)))

  def test_wrong_input_depth_fails(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.Linear, name='lin', input_dims=2, output_dims=3
        )
    )
    with self.assertRaisesRegex(ValueError, 'last dim'):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 5)))


class ShardedLinearTest(test_utils.TestCase):

  def _config(self):
    cfg = pax_fiddle.Config(
        linears.Linear,
        name='lin',
        input_dims=4,
        output_dims=8,
        ici_mesh_shape=[1, 2, 4],
        mesh_axis_names=('replica', 'data', 'mdl'),
    )
    cfg.weight_split_dims_mapping.wt = ['data', 'mdl']
    cfg.activation_split_dims_mapping.out = ['data', 'mdl']
    return cfg

  def test_weight_metadata_and_partition_spec(self):
    layer = instantiate(self._config())
    meta = layer.abstract_init_with_metadata(jnp.ones((2, 4)))
    w_meta = meta['params']['w']
    self.assertEqual(list(w_meta.tensor_split_dims_mapping), ['data', 'mdl'])
    self.assertEqual(list(w_meta.mesh_shape), [1, 2, 4])
    specs = base_layer.var_partition_specs(
        meta, [1, 2, 4], ('replica', 'data', 'mdl')
    )
    self.assertEqual(specs['params']['w'], PartitionSpec('data', 'mdl'))

  def test_jitted_sharded_forward_matches_numpy(self):
    layer = instantiate(self._config())
    x = self.np_rng.standard_normal((2, 4)).astype(np.float32)
    w = self.np_rng.standard_normal((4, 8)).astype(np.float32)
    devices = np.array(jax.devices()[:8]).reshape(1, 2, 4)
    mesh = jax.sharding.Mesh(devices, ('replica', 'data', 'mdl'))
    w_sharding = jax.sharding.NamedSharding(mesh, PartitionSpec('data', 'mdl'))
    variables = {'params': {'w': jax.device_put(w, w_sharding)}}
    with jax.set_mesh(mesh):
      y = jax.jit(layer.apply)(variables, x)
    self.assertAllClose(y, x @ w, atol=1e-5)
    self.assertEqual(y.sharding.spec, PartitionSpec('data', 'mdl'))


  def test_decoding_step_outputs_use_extend_step_out(self):
    # A [B, T, D] mapping applied to a [B, D] step: its batch and last
    # entries, unless extend_step_out (Pax's field) says otherwise; the
    # FeedForward passes it to its linear.
    devices = np.array(jax.devices()[:8]).reshape(1, 2, 4)
    mesh = jax.sharding.Mesh(devices, ('replica', 'data', 'mdl'))
    x = self.np_rng.standard_normal((4, 4)).astype(np.float32)
    for step_out, want in ((None, PartitionSpec('data', 'mdl')),
                           (['mdl', None], PartitionSpec('mdl'))):
      cfg = pax_fiddle.Config(
          linears.FeedForward, name='ff', input_dims=4, output_dims=8,
          ici_mesh_shape=[1, 2, 4], mesh_axis_names=('replica', 'data', 'mdl'))
      cfg.activation_split_dims_mapping.out = ['data', None, 'mdl']
      cfg.activation_split_dims_mapping.extend_step_out = step_out
      layer = instantiate(cfg)
      variables = layer.init(jax.random.PRNGKey(0), x)
      with jax.set_mesh(mesh):
        y = jax.jit(layer.apply)(variables, x)
      self.assertEqual(y.sharding.spec, want, msg=str(step_out))
    ap = cfg.activation_split_dims_mapping
    self.assertEqual(linears.step_sharding(ap, 3), ['data', None, 'mdl'])


class BiasTest(test_utils.TestCase):

  def test_adds_b_initialised_to_bias_init(self):
    layer = instantiate(
        pax_fiddle.Config(linears.Bias, name='b', dims=3, bias_init=0.25)
    )
    x = self.np_rng.standard_normal((2, 3)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertArraysEqual(variables['params']['b'], np.full((3,), 0.25))
    self.assertAllClose(y, x + 0.25)


class FeedForwardTest(test_utils.TestCase):

  def test_relu_of_affine_map(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.FeedForward, name='ffn', input_dims=4, output_dims=3
        )
    )
    x = self.np_rng.standard_normal((5, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(
        jax.tree.map(np.shape, variables),
        {'params': {'linear': {'w': (4, 3)}, 'bias': {'b': (3,)}}},
    )
    variables = random_like(self.np_rng, variables)  # A non-zero bias.
    p = variables['params']
    y = layer.apply(variables, x)
    self.assertAllClose(
        y, np_relu(x @ p['linear']['w'] + p['bias']['b']), atol=1e-5
    )

  def test_no_bias_and_other_activation(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.FeedForward,
            name='ffn',
            input_dims=4,
            output_dims=3,
            has_bias=False,
            activation_tpl=pax_fiddle.Config(activations.Tanh),
        )
    )
    x = self.np_rng.standard_normal((5, 4)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertNotIn('bias', variables['params'])
    w = np.asarray(variables['params']['linear']['w'])
    self.assertAllClose(y, np.tanh(x @ w), atol=1e-5)

  def test_checkpoint_str_names_the_pre_activation(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.FeedForward,
            name='ffn',
            input_dims=2,
            output_dims=2,
            checkpoint_str='ffn_pre_act',
        )
    )
    x = jnp.ones((1, 2))
    variables = layer.init(jax.random.PRNGKey(0), x)
    jaxpr = jax.make_jaxpr(layer.apply)(variables, x)
    self.assertIn('ffn_pre_act', str(jaxpr))


class MLPBlockTest(test_utils.TestCase):

  def _config(self, **kwargs):
    return pax_fiddle.Config(
        linears.MLPBlock,
        name='mlp',
        hidden_dims=5,
        ff_tpl=pax_fiddle.Config(
            linears.FeedForward, input_dims=4, output_dims=2
        ),
        **kwargs,
    )

  def test_three_layers_match_numpy(self):
    layer = instantiate(self._config())
    x = self.np_rng.standard_normal((3, 4)).astype(np.float32)
    variables = random_like(
        self.np_rng, layer.init(jax.random.PRNGKey(0), x)
    )
    p = variables['params']
    shapes = [p[f'mlp_layers_{i}']['linear']['w'].shape for i in range(3)]
    self.assertEqual(shapes, [(4, 5), (5, 5), (5, 2)])
    expected = x
    for i in range(3):
      sub = p[f'mlp_layers_{i}']
      expected = np_relu(expected @ sub['linear']['w'] + sub['bias']['b'])
    self.assertAllClose(layer.apply(variables, x), expected, atol=1e-5)

  def test_activate_final_false_leaves_last_layer_linear(self):
    layer = instantiate(self._config(num_layers=2, activate_final=False))
    x = self.np_rng.standard_normal((3, 4)).astype(np.float32)
    variables = random_like(
        self.np_rng, layer.init(jax.random.PRNGKey(0), x)
    )
    p0, p1 = variables['params']['mlp_layers_0'], variables['params'][
        'mlp_layers_1']
    hidden = np_relu(x @ p0['linear']['w'] + p0['bias']['b'])
    expected = hidden @ p1['linear']['w'] + p1['bias']['b']
    self.assertAllClose(layer.apply(variables, x), expected, atol=1e-5)

  def test_one_layer_maps_input_to_output(self):
    layer = instantiate(self._config(num_layers=1))
    variables = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
    self.assertEqual(
        variables['params']['mlp_layers_0']['linear']['w'].shape, (4, 2)
    )

  def test_zero_layers_fail(self):
    layer = instantiate(self._config(num_layers=0))
    with self.assertRaisesRegex(ValueError, r'MLPBlock \(mlp\): num_layers'):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))


class StackingOverTimeTest(test_utils.TestCase):

  def _layer(self, **kwargs):
    return instantiate(
        pax_fiddle.Config(linears.StackingOverTime, name='stack', **kwargs)
    )

  def test_documented_example_with_paddings(self):
    layer = self._layer(left_context=1, right_context=1, stride=3)
    x = np.array([4, 1, 9, 3, 5, 2, 8], np.float32).reshape(1, 7, 1)
    paddings = np.array([0, 0, 0, 0, 0, 1, 1], np.float32).reshape(1, 7, 1)
    (out, out_paddings), _ = test_utils.init_and_apply(layer, x, paddings)
    self.assertArraysEqual(
        out, np.array([[[0, 4, 1], [9, 3, 5], [2, 8, 0]]], np.float32))
    # Windows of paddings (ends padded with 1): [1,0,0] [0,0,0] [1,1,1].
    self.assertArraysEqual(out_paddings,
                           np.array([[[0], [0], [1]]], np.float32))
    max_layer = self._layer(
        left_context=1, right_context=1, stride=3,
        padding_reduce_option='reduce_max')
    (_, max_paddings), _ = test_utils.init_and_apply(max_layer, x, paddings)
    self.assertArraysEqual(max_paddings,
                           np.array([[[1], [0], [1]]], np.float32))

  def test_pad_with_edge_frames(self):
    layer = self._layer(
        left_context=2, right_context=1, stride=2,
        pad_with_left_frame=True, pad_with_right_frame=True)
    x = np.array([1, 2, 3, 4, 5], np.float32).reshape(1, 5, 1)
    (out, out_paddings), _ = test_utils.init_and_apply(layer, x)
    self.assertArraysEqual(
        out, np.array([[[1, 1, 1, 2], [1, 2, 3, 4], [3, 4, 5, 5]]], np.float32))
    self.assertArraysEqual(out_paddings, np.zeros((1, 3, 1), np.float32))

  def test_unstack_recovers_the_input(self):
    layer = self._layer(left_context=2, right_context=1, stride=3)
    x = self.np_rng.standard_normal((2, 9, 3)).astype(np.float32)
    (stacked, _), variables = test_utils.init_and_apply(layer, x)
    unstacked = layer.apply(variables, stacked, method=layer.unstack)
    # (steps - 1) * stride + right_context + 1 = 2 * 3 + 2 = 8 frames.
    self.assertArraysEqual(unstacked, x[:, :8])

  def test_bad_config_fails(self):
    with self.assertRaisesRegex(ValueError, 'stride'):
      test_utils.init_and_apply(
          self._layer(left_context=1), jnp.ones((1, 2, 1)))


if __name__ == '__main__':
  absltest.main()
