"""Flax modules as Pax layers: outputs, variable trees, declarations."""

from absl.testing import absltest
import flax.linen as nn
from flax.linen import partitioning as flax_partitioning
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import flax_utils
from praxis import pax_fiddle
from praxis.layers import flax_adapter

WeightHParamsCollection = base_layer.WeightHParamsCollection


class _DenseBn(nn.Module):

  @nn.compact
  def __call__(self, x, train: bool = False):
    x = nn.Dense(3)(x)
    return nn.BatchNorm(use_running_average=not train, momentum=0.5)(x)

  def first_column(self, x):
    return self(x)[:, 0]


class _Annotated(nn.Module):

  @nn.compact
  def __call__(self, x):
    w = flax_partitioning.param_with_axes(
        'w', nn.initializers.ones, (2, 4), axes=('input', 'output'))
    return x @ w


class AdapterTest(absltest.TestCase):

  def test_dense_batch_norm_forward_and_collections(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        flax_adapter.DirectFlaxModuleAdapter, name='m', cld=_DenseBn()))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 2)),
                    jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    self.assertEqual(set(variables['params']['cld']), {'Dense_0',
                                                       'BatchNorm_0'})
    self.assertIn('batch_stats', variables)
    kernel = np.asarray(variables['params']['cld']['Dense_0']['kernel'])
    bias = np.asarray(variables['params']['cld']['Dense_0']['bias'])
    # Running averages at init (mean 0, var 1), BatchNorm scale 1, bias 0.
    want = (np.asarray(x) @ kernel + bias) / np.sqrt(1 + 1e-5)
    np.testing.assert_allclose(layer.apply(variables, x), want, rtol=1e-5)
    # Training updates the batch statistics: 0.5 * 0 + 0.5 * batch mean.
    _, updated = layer.apply(variables, x, train=True,
                             mutable=['batch_stats'])
    np.testing.assert_allclose(
        updated['batch_stats']['cld']['BatchNorm_0']['mean'],
        0.5 * (np.asarray(x) @ kernel + bias).mean(0), rtol=1e-5)
    np.testing.assert_allclose(
        layer.apply(variables, 'first_column', x, method=layer.call_method),
        want[:, 0], rtol=1e-5)

  def test_declarations_come_from_flax_collections_and_axes(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        flax_adapter.DirectFlaxModuleAdapter, name='m', cld=_Annotated(),
        logical_axes_rules=[('input', 'mdl'), ('output', 'data')],
        ici_mesh_shape=[1, 1], mesh_axis_names=['data', 'mdl']))
    hparams = layer.abstract_init_with_metadata(jnp.ones((3, 2)))
    w = hparams['params']['cld']['w']
    self.assertEqual(list(w.shape), [2, 4])
    self.assertEqual(list(w.tensor_split_dims_mapping), ['mdl', 'data'])

  def test_factory_adapter_and_missing_factory(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        flax_adapter.FlaxModuleAdapter, name='m',
        module_factory_method=lambda: nn.Dense(2)))
    variables = layer.init(jax.random.PRNGKey(1), jnp.ones((1, 3)))
    self.assertEqual(variables['params']['cld']['kernel'].shape, (3, 2))
    bad = base_layer.instantiate(pax_fiddle.Config(
        flax_adapter.FlaxModuleAdapter, name='m'))
    with self.assertRaisesRegex(ValueError, 'module_factory_method'):
      bad.init(jax.random.PRNGKey(1), jnp.ones((1, 3)))


class ConvertToBoxedParamsTest(absltest.TestCase):

  def test_collections_and_existing_boxes(self):
    already = base_layer.BoxedParam(
        jnp.zeros(2), meta=base_layer.WeightHParams(shape=[2]))
    boxed = flax_utils.convert_to_boxed_params(
        {'params': {'a': jnp.zeros((2, 3)), 'b': already},
         'batch_stats': {'mean': jnp.zeros(3)},
         'cache': {'k': jnp.zeros(1)}},
        var_collection_map={'cache': [WeightHParamsCollection.NON_TRAINABLE]})
    self.assertEqual(boxed['params']['a'].meta.shape, [2, 3])
    self.assertEqual(boxed['params']['a'].meta.collections, [])
    self.assertIs(boxed['params']['b'], already)
    self.assertEqual(boxed['batch_stats']['mean'].meta.collections,
                     [WeightHParamsCollection.NON_TRAINABLE,
                      WeightHParamsCollection.REQUIRES_MEAN_SYNC])
    self.assertEqual(boxed['cache']['k'].meta.collections,
                     [WeightHParamsCollection.NON_TRAINABLE])

  def test_summaries_unpack_and_repack(self):
    tree = {'s': jnp.arange(3.0)}
    pieces = flax_utils.maybe_unpack_summary(tree, True, 3)
    self.assertLen(pieces['s'], 3)
    np.testing.assert_array_equal(
        flax_utils.maybe_repack_summary(pieces, True, 3)['s'][:, 0],
        [0.0, 1.0, 2.0])
    self.assertIs(flax_utils.maybe_unpack_summary(tree, False, 3), tree)


if __name__ == '__main__':
  absltest.main()
