"""Sharding equations: hand-derived shardings, and constraints on a mesh."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis.layers import sharding


class DeriveTest(absltest.TestCase):

  def test_by_hand(self):
    self.assertEqual(sharding.derive(('x', 'y'), 'ab->cbda'),
                     (None, 'y', None, 'x'))
    self.assertEqual(sharding.derive((('x', 'z'), None), 'ab->ba'),
                     (None, ('x', 'z')))
    self.assertIsNone(sharding.derive(None, 'ab->ba'))
    self.assertIsNone(sharding.get_dim_sharding(None, 1))
    self.assertEqual(sharding.get_dim_sharding(('x', 'y'), 1), 'y')

  def test_bad_equations(self):
    with self.assertRaisesRegex(ValueError, 'original->derived'):
      sharding.derive(('x',), 'a')
    with self.assertRaisesRegex(ValueError, 'names 2 dims'):
      sharding.derive(('x',), 'ab->a')


class MeshTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if jax.device_count() < 4:
      self.skipTest('needs 4 devices')
    devices = np.asarray(jax.devices()[:4]).reshape(2, 2)
    self.mesh = jax.sharding.Mesh(devices, ('data', 'model'))

  def _spec_of(self, fn, x):
    with jax.set_mesh(self.mesh):
      out = jax.jit(fn)(x)
    return out.sharding.spec

  def test_without_mesh_is_identity(self):
    x = jnp.ones([4, 4])
    self.assertIs(sharding.shard(x, ('data', 'model'), 'ab->ab'), x)
    self.assertEqual(sharding.num_shards_on_dim('data'), 1)

  def test_shard_with_equations(self):
    x = jnp.ones([4, 6, 8])
    spec = self._spec_of(
        lambda v: sharding.shard(v, ('data', 'model'), 'ab->b?a'), x)
    self.assertEqual(spec[0], 'model')
    self.assertEqual(spec[2], 'data')
    # The optional group [ab] is dropped for a 1-D tensor.
    spec = self._spec_of(
        lambda v: sharding.shard(v, ('data', None, 'model'), 'abc->[ab]c'),
        jnp.ones([8]))
    self.assertEqual(tuple(spec), ('model',))
    with self.assertRaisesRegex(ValueError, 'rank 2'):  # 1 or 3 dims fit.
      with jax.set_mesh(self.mesh):
        sharding.shard(jnp.ones([2, 2]), ('data', None, 'model'),
                       'abc->[ab]c')

  def test_shard_one_dim_and_num_shards(self):
    spec = self._spec_of(
        lambda v: sharding.shard_one_dim(v, 'model', 1), jnp.ones([4, 8]))
    self.assertEqual(spec[1], 'model')
    with jax.set_mesh(self.mesh):
      self.assertEqual(sharding.num_shards_on_dim(None), 1)
      self.assertEqual(sharding.num_shards_on_dim('model'), 2)
      self.assertEqual(sharding.num_shards_on_dim(('data', 'model')), 4)
      ctx = base_layer.JaxContext.HParams(
          mesh_axes_transpose={'mdl': 'model'})
      with base_layer.JaxContext.new_context(hparams=ctx):
        self.assertEqual(sharding.num_shards_on_dim('mdl'), 2)


if __name__ == '__main__':
  absltest.main()
