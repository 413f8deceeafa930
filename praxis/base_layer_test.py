"""Tests of BaseLayer: variables, children, collections, dtypes, metadata."""

import pickle

from absl.testing import absltest
from absl.testing import parameterized
from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import activations

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
instantiate = base_layer.instantiate


class Lin(base_layer.BaseLayer):
  """x @ w."""

  input_dims: int = 2
  output_dims: int = 3

  def setup(self):
    self.create_variable(
        'w',
        WeightHParams(
            shape=[self.input_dims, self.output_dims],
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )

  def __call__(self, x):
    return jnp.matmul(x, self.theta.w)


class Stats(base_layer.BaseLayer):
  """Counts calls in a non-trainable variable; adds summaries and losses."""

  dims: int = 2

  def setup(self):
    self.create_variable(
        'count',
        WeightHParams(shape=[], init=WeightInit.Constant(0.0)),
        trainable=False,
    )

  def __call__(self, x):
    self.add_summary('x_mean', jnp.mean(x))
    self.add_summary('x_mean', 2 * jnp.mean(x))  # Same name: overwrites.
    self.add_summary('img', jnp.zeros((4, 4, 3)), base_layer.SummaryType.IMAGE)
    self.add_summary('noisy', 1.0, verbosity=base_layer.SummaryVerbosity.DEBUG)
    self.add_aux_loss('l2', jnp.sum(x**2))
    self.add_aux_loss('l2', jnp.sum(x**2), weight=jnp.array(3.0))
    self.update_var('count', self.get_var('count') + 1.0)
    return x


class Parent(base_layer.BaseLayer):
  """Creates a Lin child from a template, and a list of Lin children."""

  lin_tpl: pax_fiddle.Config[Lin] = base_layer.template_field(Lin)
  num_extra: int = 2

  def setup(self):
    p = self.lin_tpl.clone().set(input_dims=2, output_dims=2)
    self.create_child('lin', p)
    self.create_children('extra', [p.clone() for _ in range(self.num_extra)])

  def __call__(self, x):
    x = self.lin(x)
    for layer in self.extra:
      x = layer(x)
    return x


class SharedPair(base_layer.BaseLayer):
  """Two children with the same shared_weight_layer_id."""

  def setup(self):
    p = pax_fiddle.Config(Lin, input_dims=2, output_dims=2,
                          shared_weight_layer_id='tied')
    self.create_child('first', p)
    self.create_child('second', p)

  def __call__(self, x):
    return self.second(self.first(x))


def _init(layer, *args, **kwargs):
  return layer.init(jax.random.PRNGKey(0), *args, **kwargs)


class VariablesTest(test_utils.TestCase):

  def test_forward_matches_numpy(self):
    layer = instantiate(pax_fiddle.Config(Lin, name='lin'))
    x = self.np_rng.normal(size=(4, 2)).astype(np.float32)
    variables = _init(layer, x)
    self.assertEqual(set(variables), {'params'})
    w = np.asarray(variables['params']['w'])
    self.assertEqual(w.shape, (2, 3))
    self.assertAllClose(layer.apply(variables, x), x @ w, atol=1e-5)

  def test_non_trainable_update_and_init_value(self):
    layer = instantiate(pax_fiddle.Config(Stats, name='s'))
    x = jnp.ones((2, 2))
    variables = _init(layer, x)
    # Updates made during init are dropped: init returns the initial value.
    self.assertEqual(float(variables['non_trainable']['count']), 0.0)
    _, updated = layer.apply(variables, x, mutable=True)
    self.assertEqual(float(updated['non_trainable']['count']), 1.0)
    # Not mutable: the update is skipped silently.
    layer.apply(variables, x)

  def test_summaries_and_aux_losses(self):
    layer = instantiate(pax_fiddle.Config(Stats, name='s'))
    x = jnp.array([[1.0, 3.0]])
    variables = _init(layer, x)
    _, updated = layer.apply(variables, x, mutable=True)
    summaries = updated['summaries']
    self.assertEqual(
        set(summaries), {'x_mean_scalar', 'img_image', 'noisy_scalar'})
    # As Pax 1.4: the repeated name overwrites (mean 2.0, then 2 * 2.0).
    self.assertAllClose(summaries['x_mean_scalar'], 4.0)
    self.assertEqual(summaries['img_image'].shape, (1, 4, 4, 3))
    aux = updated['aux_loss']['l2']
    self.assertAllClose(aux.value, 20.0)  # 10 + 10.
    self.assertAllClose(aux.weight, 4.0)  # 1 + 3.

  def test_summary_verbosity_from_context(self):
    layer = instantiate(pax_fiddle.Config(Stats, name='s'))
    x = jnp.ones((1, 2))
    variables = _init(layer, x)
    context = base_layer.JaxContext.HParams(
        summary_verbosity=base_layer.SummaryVerbosity.INFO)
    with base_layer.JaxContext.new_context(hparams=context):
      _, updated = layer.apply(variables, x, mutable=True)
    self.assertNotIn('noisy_scalar', updated['summaries'])
    self.assertIn('x_mean_scalar', updated['summaries'])

  def test_init_mutable_default_excludes_summaries(self):
    layer = instantiate(pax_fiddle.Config(Stats, name='s'))
    variables = _init(layer, jnp.ones((1, 2)))
    self.assertNotIn('summaries', variables)
    self.assertNotIn('aux_loss', variables)

  def test_fprop_dtype_casts_theta_not_weights(self):
    layer = instantiate(pax_fiddle.Config(
        Lin, name='lin', fprop_dtype=jnp.bfloat16))
    x = jnp.ones((1, 2), jnp.bfloat16)
    variables = _init(layer, x)
    self.assertEqual(variables['params']['w'].dtype, jnp.float32)
    self.assertEqual(layer.apply(variables, x).dtype, jnp.bfloat16)

  def test_theta_unknown_variable(self):

    class Bad(base_layer.BaseLayer):

      def __call__(self, x):
        return x * self.theta.missing

    layer = instantiate(pax_fiddle.Config(Bad, name='bad'))
    with self.assertRaisesRegex(AttributeError, "Bad.*'missing'"):
      _init(layer, jnp.ones(2))

  def test_nn_compact_variables_and_children(self):

    class Compact(base_layer.BaseLayer):

      @nn.compact
      def __call__(self, x):
        self.create_variable('b', WeightHParams(
            shape=[3], init=WeightInit.Constant(1.5)))
        child = self.create_child('lin', pax_fiddle.Config(Lin))
        return child(x) + self.theta.b

    layer = instantiate(pax_fiddle.Config(Compact, name='c'))
    x = np.ones((1, 2), np.float32)
    variables = _init(layer, x)
    w = np.asarray(variables['params']['lin']['w'])
    self.assertAllClose(layer.apply(variables, x), x @ w + 1.5, atol=1e-5)


class ChildrenTest(test_utils.TestCase):

  def test_children_and_list_of_children(self):
    layer = instantiate(pax_fiddle.Config(Parent, name='p'))
    x = self.np_rng.normal(size=(3, 2)).astype(np.float32)
    variables = _init(layer, x)
    params = variables['params']
    self.assertEqual(set(params), {'lin', 'extra_0', 'extra_1'})
    expected = x
    for name in ('lin', 'extra_0', 'extra_1'):
      expected = expected @ np.asarray(params[name]['w'])
    self.assertAllClose(layer.apply(variables, x), expected, atol=1e-5)

  def test_children_inherit_base_hparams(self):
    cfg = pax_fiddle.Config(
        Parent, name='p', dtype=jnp.bfloat16,
        params_init=WeightInit.Constant(0.25),
        ici_mesh_shape=[1, 2, 4], mesh_axis_names=('replica', 'data', 'mdl'))
    cfg.lin_tpl.weight_split_dims_mapping.wt = ['data', 'mdl']
    layer = instantiate(cfg)
    x = jnp.ones((1, 2), jnp.bfloat16)
    meta = layer.abstract_init_with_metadata(x)['params']['lin']['w']
    self.assertEqual(meta.dtype, jnp.bfloat16)
    self.assertEqual(meta.init, WeightInit.Constant(0.25))
    self.assertEqual(meta.mesh_shape, [1, 2, 4])
    self.assertEqual(tuple(meta.tensor_split_dims_mapping), ('data', 'mdl'))
    variables = _init(layer, x)
    self.assertEqual(variables['params']['lin']['w'].dtype, jnp.bfloat16)
    self.assertAllClose(
        np.asarray(variables['params']['lin']['w'], np.float32), 0.25)

  def test_explicit_child_setting_is_kept(self):
    cfg = pax_fiddle.Config(Parent, name='p', dtype=jnp.bfloat16,
                            params_init=WeightInit.Constant(0.25))
    cfg.lin_tpl.params_init = WeightInit.Constant(2.0)
    cfg.lin_tpl.dtype = jnp.float16
    variables = _init(instantiate(cfg), jnp.ones((1, 2), jnp.float16))
    for name in ('lin', 'extra_0'):
      w = variables['params'][name]['w']
      self.assertEqual(w.dtype, jnp.float16)
      self.assertAllClose(np.asarray(w, np.float32), 2.0)

  def test_child_created_twice_names_layer_and_child(self):

    class Twice(base_layer.BaseLayer):

      def setup(self):
        self.create_child('a', pax_fiddle.Config(Lin))
        self.create_child('a', pax_fiddle.Config(Lin))

      def __call__(self, x):
        return self.a(x)

    with self.assertRaisesRegex(ValueError, "Twice: child 'a' was already"):
      _init(instantiate(pax_fiddle.Config(Twice, name='t')), jnp.ones((1, 2)))

  def test_child_named_like_a_field(self):

    class Clash(base_layer.BaseLayer):
      dims: int = 2

      def setup(self):
        self.create_child('dims', pax_fiddle.Config(Lin))

      def __call__(self, x):
        return x

    with self.assertRaisesRegex(ValueError, "Clash.*'dims'.*field"):
      _init(instantiate(pax_fiddle.Config(Clash, name='c')), jnp.ones((1, 2)))

  def test_variable_outside_setup_names_layer_and_variable(self):

    class Outside(base_layer.BaseLayer):

      def __call__(self, x):
        self.create_variable('w', WeightHParams(shape=[2]))
        return x

    with self.assertRaisesRegex(ValueError, r"Outside: create_variable\('w'\)"):
      _init(instantiate(pax_fiddle.Config(Outside, name='o')), jnp.ones(2))

  def test_shared_weight_layer_id_shares_variables(self):
    layer = instantiate(pax_fiddle.Config(SharedPair, name='s'))
    x = self.np_rng.normal(size=(1, 2)).astype(np.float32)
    variables = _init(layer, x)
    # As in Pax, a shared layer lives at the top, under its id.
    self.assertEqual(set(variables['params']), {'tied'})
    w = np.asarray(variables['params']['tied']['w'])
    self.assertAllClose(layer.apply(variables, x), x @ w @ w, atol=1e-5)

  def test_sharing_inside_a_shared_layer(self):
    # Pairs sharing 'outer', each made of Lins sharing 'inner': one weight.
    inner = pax_fiddle.Config(Lin, input_dims=2, output_dims=2,
                              shared_weight_layer_id='inner')
    pair = pax_fiddle.Config(Parent, lin_tpl=inner, num_extra=1,
                             shared_weight_layer_id='outer')

    class TwoPairs(base_layer.BaseLayer):

      def setup(self):
        self.create_children('pairs', [pair, pair])

      def __call__(self, x):
        return self.pairs[1](self.pairs[0](x))

    layer = instantiate(pax_fiddle.Config(TwoPairs, name='top'))
    x = self.np_rng.normal(size=(1, 2)).astype(np.float32)
    variables = _init(layer, x)
    self.assertEqual(jax.tree.map(np.shape, variables),
                     {'params': {'inner': {'w': (2, 2)}}})
    w = np.asarray(variables['params']['inner']['w'])
    self.assertAllClose(layer.apply(variables, x), x @ w @ w @ w @ w,
                        atol=1e-5)

  def test_instance_field_is_built_and_adopted(self):

    class Holder(base_layer.BaseLayer):
      inner: Lin = base_layer.instance_field(Lin)

      def __call__(self, x):
        return self.inner(x)

    cfg = pax_fiddle.Config(Holder, name='h')
    cfg.inner.output_dims = 5
    layer = instantiate(cfg)
    self.assertIsInstance(layer.inner, Lin)
    variables = _init(layer, jnp.ones((1, 2)))
    self.assertEqual(variables['params']['inner']['w'].shape, (2, 5))


class ConfigErrorsTest(test_utils.TestCase):

  def test_unknown_field_suggests_the_closest(self):
    cfg = pax_fiddle.Config(Lin)
    with self.assertRaisesRegex(AttributeError, "Lin has no field 'input_dimz'"
                                ".*'input_dims'"):
      cfg.input_dimz = 3
    with self.assertRaisesRegex(TypeError, "Lin has no field.*'outputdims'"):
      pax_fiddle.Config(Lin, outputdims=3)

  def test_required_field_left_unset(self):

    class Needs(base_layer.BaseLayer):
      dims: int

      def __call__(self, x):
        return x

    with self.assertRaisesRegex(ValueError, "Needs: required field 'dims'"):
      instantiate(pax_fiddle.Config(Needs, name='n'))
    self.assertEqual(instantiate(pax_fiddle.Config(Needs, dims=3)).dims, 3)

  def test_hparams_is_a_config_of_the_layer(self):
    layer = instantiate(pax_fiddle.Config(Lin, name='l', output_dims=7))
    self.assertIsInstance(layer.hparams, pax_fiddle.Config)
    self.assertEqual(layer.hparams.output_dims, 7)
    self.assertIs(layer.hparams.cls, Lin)
    clone = layer.hparams.clone()
    clone.output_dims = 3
    self.assertEqual((layer.output_dims, layer.hparams.output_dims), (7, 7))
    self.assertEqual(instantiate(clone).output_dims, 3)

  def test_positional_dtype_and_a_config_by_mistake(self):
    self.assertEqual(Lin(jnp.bfloat16).dtype, jnp.bfloat16)
    with self.assertRaisesRegex(TypeError, r'layer_p\.Instantiate\(\)'):
      Lin(pax_fiddle.Config(Lin))

  def test_plain_nested_hparams_class_refused(self):
    with self.assertRaisesRegex(ValueError, 'no longer use nested HParams'):

      class Plain(base_layer.BaseLayer):  # pylint: disable=unused-variable

        class HParams:
          x: int = 0

  def test_neither_call_nor_fprop(self):

    class Empty(base_layer.BaseLayer):
      pass

    with self.assertRaisesRegex(NotImplementedError, 'Empty defines neither'):
      _init(instantiate(pax_fiddle.Config(Empty, name='e')), jnp.ones(2))


class LegacyHParamsTest(test_utils.TestCase):

  def test_nested_hparams_fields_become_layer_fields(self):

    class Old(base_layer.BaseLayer):

      class HParams(base_layer.BaseLayer.HParams):
        dims: int = 4
        act_tpl: base_layer.BaseLayer.HParams = (
            base_hyperparams.sub_config_field(activations.Tanh.HParams))

      def setup(self):
        self.create_child('act', self.hparams.act_tpl)

      def fprop(self, x):
        return self.act(x) * self.hparams.dims

    p = Old.HParams(name='old', dims=3)
    self.assertIsInstance(p, pax_fiddle.Config)
    self.assertIsInstance(p, Old.HParams)
    self.assertIsInstance(p, base_layer.BaseLayer.HParams)
    self.assertNotIsInstance(p, activations.ReLU.HParams)
    self.assertIs(p.act_tpl.cls, activations.Tanh)
    layer = p.Instantiate()
    x = np.array([0.5, -1.0], np.float32)
    self.assertAllClose(
        layer.apply(_init(layer, x), x), 3 * np.tanh(x), atol=1e-6)
    with self.assertRaisesRegex(AttributeError, "Old has no field 'dimz'"):
      Old.HParams.config(dims=1).dimz = 2
    self.assertIsInstance(Old.HParams.partial(dims=2), pax_fiddle.Partial)


class InitializersTest(test_utils.TestCase):
  """Statistics of a large draw of each initialiser against its formula."""

  SHAPE = (256, 512)  # fan_in 256, fan_out 512.

  def _draw(self, init, shape=SHAPE):
    hp = WeightHParams(shape=list(shape), init=init, dtype=jnp.float32)
    return np.asarray(base_layer.init_var(hp, jax.random.PRNGKey(7), 'v'))

  @parameterized.parameters(
      ('Gaussian', 0.5, 0.5),
      ('GaussianSqrtDim', 2.0, 2.0 / np.sqrt(256)),
      ('GaussianSqrtFanIn', 2.0, 2.0 / np.sqrt(256)),
      ('GaussianSqrtFanOut', 2.0, 2.0 / np.sqrt(512)),
      ('GaussianSqrtFanAvg', 2.0, 2.0 * np.sqrt(2.0 / (256 + 512))),
  )
  def test_gaussian_std(self, ctor, scale, expected_std):
    v = self._draw(getattr(WeightInit, ctor)(scale))
    self.assertAlmostEqual(v.mean(), 0.0, delta=0.01 * expected_std * 10)
    self.assertAlmostEqual(v.std() / expected_std, 1.0, delta=0.01)

  @parameterized.parameters(
      ('Uniform', 0.3, 0.3),
      ('UniformSqrtDim', 2.0, 2.0 / np.sqrt(256)),
      ('Xavier', 1.0, np.sqrt(6.0 / (256 + 512))),
      ('UniformUnitScaling', 1.0, np.sqrt(3.0 / 256)),
  )
  def test_uniform_limits(self, ctor, scale, limit):
    v = self._draw(getattr(WeightInit, ctor)(scale))
    self.assertLessEqual(np.abs(v).max(), limit * (1 + 1e-6))
    self.assertGreater(np.abs(v).max(), 0.99 * limit)
    # The std of U(-a, a) is a / sqrt(3).
    self.assertAlmostEqual(v.std() / (limit / np.sqrt(3)), 1.0, delta=0.01)

  @parameterized.parameters(
      ('TruncatedGaussian', 1.0, 1.0),
      ('TruncatedGaussianSqrtFanIn', 2.0, 2.0 / np.sqrt(256)),
      ('TruncatedGaussianSqrtFanOut', 2.0, 2.0 / np.sqrt(512)),
      ('TruncatedGaussianSqrtDim', 2.0, 2.0 / np.sqrt(256)),
  )
  def test_truncated_gaussian(self, ctor, scale, sigma):
    v = self._draw(getattr(WeightInit, ctor)(scale))
    self.assertLessEqual(np.abs(v).max(), 2 * sigma * (1 + 1e-6))
    # A standard normal truncated to [-2, 2] has std 0.8796.
    self.assertAlmostEqual(v.std() / (0.8796 * sigma), 1.0, delta=0.01)

  def test_constant(self):
    np.testing.assert_array_equal(self._draw(WeightInit.Constant(0.7)),
                                  np.full(self.SHAPE, 0.7, np.float32))

  def test_xavier_with_fixup(self):
    init = WeightInit.XavierWithFixupParams(scale=1.0, depth=4.0,
                                            layers_per_residual_block=2.0)
    self.assertEqual(init.method, 'xavier')
    self.assertAlmostEqual(init.scale, 4.0**(-1.0 / 4.0))

  def test_delta_orthogonal(self):
    v = self._draw(WeightInit.ScaledDeltaOrthogonal(1.0), shape=(3, 3, 8, 8))
    v = v.copy()
    centre = v[1, 1]
    np.testing.assert_allclose(centre.T @ centre, np.eye(8), atol=1e-5)
    v[1, 1] = 0
    np.testing.assert_array_equal(v, 0)

  def test_fan_axes(self):
    self.assertEqual(base_layer.get_fan_in_fan_out([3, 3, 4, 8]), (36, 72))
    self.assertEqual(
        base_layer.get_fan_in_fan_out([4, 2, 8], fan_in_axes=[0],
                                      fan_out_axes=[1, 2]), (4, 16))


class ShardingMetadataTest(test_utils.TestCase):

  def test_partition_specs_from_annotations(self):
    cfg = pax_fiddle.Config(
        Lin, name='lin', input_dims=4, output_dims=8, ici_mesh_shape=[1, 2, 4],
        mesh_axis_names=('replica', 'data', 'mdl'))
    cfg.weight_split_dims_mapping.wt = [1, 2]
    layer = instantiate(cfg)
    meta = layer.abstract_init_with_metadata(
        jax.ShapeDtypeStruct((2, 4), jnp.float32))
    w = meta['params']['w']
    self.assertEqual(w.shape, [4, 8])
    self.assertEqual(w.mesh_shape, [1, 2, 4])
    specs = base_layer.var_partition_specs(
        meta['params'], [1, 2, 4], ('replica', 'data', 'mdl'))
    self.assertEqual(specs['w'], jax.sharding.PartitionSpec('data', 'mdl'))

  def test_to_partition_spec_forms(self):
    names = ('replica', 'data', 'mdl')
    self.assertEqual(
        base_layer.to_partition_spec([-1, None, 2, ('replica', 1), 'data'],
                                     names),
        jax.sharding.PartitionSpec(None, None, 'mdl', ('replica', 'data'),
                                   'data'))

  def test_weight_hparams_full_shape(self):
    hp = WeightHParams(shape=[4, 8], mesh_shape=[2, 4],
                       tensor_split_dims_mapping=[0, 1], repeat_prefix=[3])
    self.assertEqual(hp.full_shape, [3, 4, 8])
    self.assertEqual(hp.full_split_dims_mapping, (-1, 0, 1))
    self.assertEqual(WeightHParams(shape=[2, 3], mesh_shape=[2]
                                   ).tensor_split_dims_mapping, (-1, -1))
    with self.assertRaisesRegex(ValueError, 'one per dimension'):
      WeightHParams(shape=[2, 3], tensor_split_dims_mapping=[0])

  def test_maybe_shard_under_mesh(self):
    mesh = jax.sharding.Mesh(
        np.array(jax.devices()[:8]).reshape(2, 4), ('data', 'mdl'))
    x = jnp.arange(32.0).reshape(8, 4)

    @jax.jit
    def f(x):
      return base_layer.maybe_shard(x * 2, ['data', 'mdl'], ('data', 'mdl'))

    with jax.set_mesh(mesh):
      y = f(x)
    np.testing.assert_array_equal(np.asarray(y), np.arange(32.0).reshape(8, 4)
                                  * 2)
    self.assertEqual(y.sharding.spec, jax.sharding.PartitionSpec('data', 'mdl'))
    self.assertIs(base_layer.maybe_shard(x, None, ('data',)), x)


class KeepsF32(base_layer.BaseLayer):
  """A variable that bfloat16 fprop must not convert."""

  def setup(self):
    self.create_variable('scale', WeightHParams(
        shape=[2], init=WeightInit.Constant(1.0 + 2.0**-10),
        collections=[base_layer.WeightHParamsCollection
                     .DISALLOW_BFLOAT16_CONVERSION]))
    self.create_variable('w', WeightHParams(
        shape=[2], init=WeightInit.Constant(1.0 + 2.0**-10)))

  def __call__(self, x):
    return self.theta.scale, self.theta.w


class ParentOfInstances(base_layer.BaseLayer):
  """A child template and a child instance."""

  lin_tpl: pax_fiddle.Config[Lin] = base_layer.template_field(Lin)
  inner: Lin | None = base_layer.instance_field(lambda: Lin(output_dims=4))
  scale: float = 2.0

  def setup(self):
    self.create_child('lin', self.lin_tpl.clone().set(output_dims=5))

  def __call__(self, x):
    return self.lin(x), self.inner(x)


class ReadingTest(test_utils.TestCase):

  def test_numpy_variables_are_read_as_jax_arrays(self):
    layer = instantiate(pax_fiddle.Config(Stats, name='s'))
    x = np.ones((1, 2), np.float32)
    variables = jax.tree.map(np.asarray, _init(layer, x))
    self.assertIsInstance(variables['non_trainable']['count'], np.ndarray)
    _, updated = layer.apply(variables, x, mutable=True)
    self.assertEqual(float(updated['non_trainable']['count']), 1.0)
    lin = instantiate(pax_fiddle.Config(Lin, name='lin'))
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    self.assertAllClose(lin.apply({'params': {'w': w}}, x), x @ w)

  def test_bfloat16_fprop_keeps_disallowed_variables(self):
    layer = instantiate(pax_fiddle.Config(
        KeepsF32, name='k', fprop_dtype=jnp.bfloat16))
    variables = _init(layer, jnp.ones(2))
    scale, w = layer.apply(variables, jnp.ones(2))
    self.assertEqual((scale.dtype, w.dtype), (jnp.float32, jnp.bfloat16))
    # 1 + 2**-10 is not a bfloat16 number: only the kept variable has it.
    self.assertEqual(float(scale[0]), 1.0 + 2.0**-10)
    self.assertEqual(float(w[0]), 1.0)

  def test_create_variable_returns_the_value_in_compact(self):

    class Bias(base_layer.BaseLayer):

      @nn.compact
      def __call__(self, x):
        b = self.create_variable('b', WeightHParams(
            shape=[2], init=WeightInit.Constant(0.5)))
        x, b = self._cast_to_fprop_dtype((x, b))
        return x + b

    layer = instantiate(pax_fiddle.Config(Bias, fprop_dtype=jnp.bfloat16))
    x = jnp.ones(2)
    out = layer.apply(_init(layer, x), x)
    self.assertEqual(out.dtype, jnp.bfloat16)
    self.assertAllClose(out.astype(np.float32), np.full(2, 1.5, np.float32))


class MdlConfigTest(test_utils.TestCase):

  def test_every_layer_records_its_config(self):
    p = pax_fiddle.Config(ParentOfInstances, name='top', dtype=jnp.bfloat16)
    configs = instantiate(p).abstract_init_with_mdl_config(jnp.ones((1, 2)))
    self.assertEqual(set(configs), {'_hparams', 'lin', 'inner'})
    top = configs['_hparams']
    self.assertIs(top.cls, ParentOfInstances)
    self.assertEqual((top.scale, top.dtype), (2.0, jnp.bfloat16))
    # Children and templates are recorded where they are built, not here.
    self.assertIsNone(top.lin_tpl)
    self.assertIsNone(top.inner)
    self.assertEqual(configs['lin']['_hparams'].output_dims, 5)
    self.assertEqual(configs['inner']['_hparams'].output_dims, 4)
    # Children inherit the dtype they did not set.
    self.assertEqual(configs['inner']['_hparams'].dtype, jnp.bfloat16)
    text = base_hyperparams.nested_struct_to_text(configs)
    self.assertIn('lin._hparams.output_dims : 5', text)

  def test_sublayer_detection(self):
    is_sub = base_layer.is_sublayer_template_or_instance
    self.assertTrue(is_sub(pax_fiddle.Config(Lin)))
    self.assertTrue(is_sub([pax_fiddle.Config(Lin), None]))
    self.assertTrue(is_sub({'a': Lin()}))
    self.assertFalse(is_sub([None, None]))
    self.assertFalse(is_sub([pax_fiddle.Config(Lin), 3]))
    self.assertFalse(is_sub(pax_fiddle.Config(WeightInit, 'xavier', 1.0)))


class QuantizedLin(base_layer.BaseLayer):
  """x @ (w * scale - zp), with an int8 w."""

  def setup(self):
    self.create_quantized_variable(
        'w', WeightHParams(shape=[2, 3], tensor_split_dims_mapping=[None, 'm']),
        use_symmetric=False,
        scale_hparams=WeightHParams(shape=[3], tensor_split_dims_mapping=['m']))
    self.create_sparse_variable('v', WeightHParams(shape=[3]))

  def __call__(self, x):
    w, scale, zp = self.get_quantized_weight('w', use_symmetric=False)
    v, mask = self.get_sparse_weight('v')
    return x @ (w * scale - zp) + jnp.where(mask, 0.0, v)


class QuantParent(base_layer.BaseLayer):
  """A called child, a never-called child, a child in a field, a variable."""

  inner: Lin | None = base_layer.instance_field(Lin)

  def setup(self):
    self.create_child('q', pax_fiddle.Config(QuantizedLin))
    self.create_child('unused', pax_fiddle.Config(Lin))
    self.create_variable('count', WeightHParams(shape=[]), trainable=False)

  def __call__(self, x):
    return self.q(x) + self.inner(x)


class QuantizationTest(test_utils.TestCase):

  def test_quantized_and_sparse_variables(self):
    layer = instantiate(pax_fiddle.Config(QuantizedLin, name='q'))
    x = np.array([[1.0, 2.0]], np.float32)
    variables = _init(layer, x)
    self.assertEqual(
        jax.tree.map(lambda a: (a.shape, a.dtype.name), variables),
        {'params': {'w': ((2, 3), 'int8'),
                    'w_quantized_scale': ((3,), 'float32'),
                    'w_quantized_zp': ((3,), 'float32'),
                    'v': ((3,), 'float32')},
         'non_trainable': {'v_sparsity_mask': ((3,), 'bool')}})
    self.assertEqual(int(np.abs(variables['params']['w']).sum()), 0)
    w = np.array([[1, -2, 3], [4, 5, -6]], np.int8)
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    zp = np.array([0.1, 0.0, -1.0], np.float32)
    v = np.array([7.0, 8.0, 9.0], np.float32)
    mask = np.array([True, False, True])
    got = layer.apply(
        {'params': {'w': w, 'w_quantized_scale': scale,
                    'w_quantized_zp': zp, 'v': v},
         'non_trainable': {'v_sparsity_mask': mask}}, x)
    expected = x @ (w * scale - zp) + np.where(mask, 0.0, v)
    self.assertAllClose(got, expected, atol=1e-5)
    with self.assertRaisesRegex(ValueError, 'scale_shape or scale_hparams'):

      class Both(base_layer.BaseLayer):

        def setup(self):
          self.create_quantized_variable(
              'w', WeightHParams(shape=[2]), scale_shape=[2],
              scale_hparams=WeightHParams(shape=[2]))

        def __call__(self, x):
          return x

      _init(instantiate(pax_fiddle.Config(Both, name='b')), x)

  def test_default_quantize_weight_nests_children(self):
    layer = instantiate(pax_fiddle.Config(
        QuantParent, name='p', mesh_axis_names=['d', 'm']))
    x = np.ones((1, 2), np.float32)
    variables = _init(layer, x)
    weights = layer.apply(variables, method=layer.quantize_weight)
    # The never-called child has no variables and is left out.
    self.assertEqual(
        jax.tree.map(np.shape, weights),
        {'params': {'q': {'w': (2, 3), 'w_quantized_scale': (3,),
                          'w_quantized_zp': (3,), 'v': (3,)},
                    'inner': {'w': (2, 3)}},
         'non_trainable': {'count': (), 'q': {'v_sparsity_mask': (3,)}}})
    self.assertArraysEqual(weights['params']['inner']['w'],
                           variables['params']['inner']['w'])
    specs = layer.apply(variables, method=layer.quantized_partition_specs)
    p = jax.sharding.PartitionSpec
    self.assertEqual(specs['params']['q']['w'].meta, p(None, 'm'))
    self.assertEqual(specs['params']['q']['w_quantized_zp'].meta, p('m'))
    self.assertEqual(specs['params']['inner']['w'].meta, p(None, None))
    self.assertEqual(specs['non_trainable']['count'].meta, p())


class ShardingHelpersTest(test_utils.TestCase):

  def test_shard_count_on_dim(self):
    layer = Lin(ici_mesh_shape=[2, 3], dcn_mesh_shape=[5, 1],
                mesh_axis_names=['data', 'mdl'])
    self.assertEqual(layer.get_shard_count_on_dim(None), 1)
    self.assertEqual(layer.get_shard_count_on_dim('data'), 10)
    self.assertEqual(layer.get_shard_count_on_dim(('data', 'mdl')), 30)
    with self.assertRaisesRegex(ValueError, "'x' is not one of"):
      layer.get_shard_count_on_dim('x')
    self.assertEqual(Lin().get_shard_count_on_dim('data'), 1)

  def test_mesh_axes_transpose_from_the_context(self):
    p = jax.sharding.PartitionSpec
    spec = p('a', ('a', 'b'), None)
    self.assertEqual(base_layer.maybe_transpose_mesh_axes(spec), spec)
    context = base_layer.JaxContext.HParams(mesh_axes_transpose={'a': 'z'})
    with base_layer.JaxContext.new_context(hparams=context):
      self.assertEqual(base_layer.maybe_transpose_mesh_axes(spec),
                       p('z', ('z', 'b'), None))
    self.assertEqual(base_layer.transpose_one_axis('a', {'a': 'q'}), 'q')
    self.assertIsNone(base_layer.transpose_one_axis(None, {'a': 'q'}))

  def test_var_init_scale(self):
    shape = [4, 6]
    self.assertEqual(base_layer.var_init_scale(
        WeightHParams(shape, init=WeightInit.Gaussian(0.3))), 0.3)
    self.assertAlmostEqual(base_layer.var_init_scale(
        WeightHParams(shape, init=WeightInit.GaussianSqrtFanIn(2.0))), 1.0)
    self.assertAlmostEqual(base_layer.var_init_scale(
        WeightHParams(shape, init=WeightInit.Xavier(1.0))), np.sqrt(0.6))
    with self.assertRaisesRegex(NotImplementedError, r"\(w\).*'uniform'"):
      base_layer.var_init_scale(
          WeightHParams(shape, init=WeightInit.Uniform(1.0)), 'w')

  def test_reflect_configs_only_under_mdl_config(self):
    seen = []

    class Probe(base_layer.BaseLayer):

      def __call__(self, x):
        seen.append(self.reflect_configs)
        return x

    layer = instantiate(pax_fiddle.Config(Probe, name='p'))
    _init(layer, jnp.ones(2))
    layer.abstract_init_with_mdl_config(jnp.ones(2))
    self.assertEqual(seen, [False, True])


class ContextSummariesTest(test_utils.TestCase):

  def test_summary_dict_numbers_repeated_names(self):
    with base_layer.JaxContext.new_context() as context:
      context.summary_dict.add_summary(
          'm', jnp.ones(3), base_layer.SummaryType.SCALAR)
      context.summary_dict.add_summary(
          'm', jnp.ones((2, 2)), base_layer.SummaryType.AUDIO)
      context.summary_dict.add_summary(
          'm', jnp.ones(()), base_layer.SummaryType.SCALAR)
      base_layer.add_global_summary('g', jnp.ones((), jnp.bfloat16))
      got = base_layer.all_global_summaries()
    self.assertEqual(set(got), {'m_scalar', 'm_audio', 'm1_scalar',
                                'g_scalar'})
    self.assertEqual(got['m_audio'].shape, (1, 2, 2))
    self.assertEqual(got['g_scalar'].dtype, jnp.float32)

  def test_pax_aliases(self):
    self.assertIs(base_layer.JTensorOrPartitionSpec,
                  base_layer.pytypes.JTensorOrPartitionSpec)
    self.assertIs(base_layer.Theta, type(Lin().theta))
    init = WeightInit.Gaussian(2.0)
    self.assertEqual(pickle.loads(pickle.dumps(init)), init)
    self.assertEqual(
        base_hyperparams.nested_struct_to_text(
            pax_fiddle.Config(WeightInit, 'constant', 1.0)).splitlines()[0],
        'cls : type/praxis.base_layer/WeightInit')
    box = base_layer.BoxedPartitionSpec(meta=jax.sharding.PartitionSpec('x'))
    self.assertEqual(jax.tree.leaves(box), [])


if __name__ == '__main__':
  absltest.main()
