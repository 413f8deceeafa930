"""Tests of praxis.optimizer_prefix_vectorization against numpy per layer."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_layer
from praxis import optimizer_prefix_vectorization as opt_vec
from praxis import optimizers
from praxis import py_utils
from praxis import test_utils

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams


def _normalize_by_norm():
  """update = g / ||g|| per variable, counted; reports the norms it saw."""

  def init(params):
    return jax.tree.map(lambda _: jnp.zeros([], jnp.int32), params)

  def update(updates, state, params=None):
    del params

    def one(g):
      norm = jnp.linalg.norm(g)
      base_layer.add_global_summary('norm', norm)
      return g / norm

    return jax.tree.map(one, updates), jax.tree.map(lambda c: c + 1, state)

  return optax.GradientTransformation(init, update)


class PrefixVectorizationTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.hps = NestedMap(
        w=WeightHParams(shape=[3], repeat_prefix=[2],
                        repeat_prefix_split_dims_mapping=[-1]),
        v=WeightHParams(shape=[3]),
        u=WeightHParams(shape=[], repeat_prefix=[2, 2],
                        repeat_prefix_split_dims_mapping=[('data', 'mdl'),
                                                          None]))
    self.grads = NestedMap(
        w=self.np_rng.normal(size=(2, 3)).astype(np.float32),
        v=self.np_rng.normal(size=(3,)).astype(np.float32),
        u=self.np_rng.normal(size=(2, 2)).astype(np.float32))

  def test_group_names_encode_prefix_shape_and_sharding(self):
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        _normalize_by_norm(), self.hps)
    state = tx.init(self.grads)
    self.assertEqual(
        set(state), {opt_vec.NO_PREFIX_KEY, 'p#2#i-1', 'p#2.2#tsdata,smdl.'})
    self.assertFalse(opt_vec.has_no_prefix(state))
    # Optimizer dims that are not all -1 add a third field.
    hps = NestedMap(w=WeightHParams(
        shape=[3], repeat_prefix=[4], repeat_prefix_split_dims_mapping=[-1],
        repeat_optimizer_dims_mapping=['data']))
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        _normalize_by_norm(), hps)
    self.assertIn('p#4#i-1#sdata', tx.init(NestedMap(w=np.ones((4, 3)))))

  def test_each_layer_is_updated_alone(self):
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        _normalize_by_norm(), self.hps)
    with base_layer.JaxContext.new_context():
      updates, state = tx.update(self.grads, tx.init(self.grads),
                                 self.grads)
      summaries = base_layer.all_global_summaries()
    g = self.grads
    self.assertAllClose(updates.w,
                        g.w / np.linalg.norm(g.w, axis=1, keepdims=True))
    self.assertAllClose(updates.v, g.v / np.linalg.norm(g.v))
    self.assertAllClose(updates.u, np.sign(g.u))  # Scalars per layer.
    self.assertAllClose(state['p#2#i-1'].w, np.ones(2, np.int32))
    # Summaries come back with the group's prefix shape in their names.
    self.assertAllClose(summaries['norm.[2]_scalar'],
                        np.linalg.norm(g.w, axis=1))
    self.assertAllClose(summaries['norm.[]_scalar'], np.linalg.norm(g.v))
    self.assertEqual(summaries['norm.[2, 2]_scalar'].shape, (2, 2))

  def test_without_stacked_variables_the_state_is_unchanged(self):
    hps = NestedMap(v=WeightHParams(shape=[3]))
    grads = NestedMap(v=self.grads.v)
    plain = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        _normalize_by_norm(), hps)
    self.assertEqual(jax.tree.structure(plain.init(grads)),
                     jax.tree.structure(NestedMap(v=0)))
    forced = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        _normalize_by_norm(), hps, force_prefix_structure=True)
    self.assertTrue(opt_vec.has_no_prefix(forced.init(grads)))

  def test_partition_specs_carry_the_prefix(self):
    tx = opt_vec.get_transformations_with_vectorized_repeat_prefix(
        optimizers.sharded_chain(optax.scale_by_adam()), self.hps)
    specs = tx.init_partition_spec(self.hps)
    mu = specs['p#2.2#tsdata,smdl.'].inner_state[0].mu.u
    self.assertEqual(mu.repeat_prefix, [2, 2])
    self.assertEqual(mu.repeat_prefix_split_dims_mapping,
                     [('data', 'mdl'), None])
    count = specs['p#2#i-1'].inner_state[0].count
    self.assertEqual((count.shape, count.repeat_prefix), ([], [2]))
    # In the state's own structure, shapes match leaf by leaf.
    state = tx.init(self.grads)
    like_state = optimizers.partition_spec_like_state(tx, self.hps)
    self.assertEqual(
        jax.tree.structure(state),
        jax.tree.structure(like_state,
                           is_leaf=lambda x: isinstance(x, WeightHParams)))
    for spec, leaf in zip(
        jax.tree.leaves(like_state), jax.tree.leaves(state)):
      self.assertEqual(tuple(spec.full_shape), leaf.shape)


if __name__ == '__main__':
  absltest.main()
