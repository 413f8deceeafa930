"""Tests of praxis.layers.stochastics: eval identity and mask statistics."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import stochastics

instantiate = base_layer.instantiate


def run(layer, *inputs, seed=0, do_eval=False):
  """Applies a variable-free layer with the `random` stream seeded."""
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    return layer.apply(
        {}, *inputs, rngs={base_layer.RANDOM: jax.random.PRNGKey(seed)}
    )


def dropout_layer(**kwargs):
  return instantiate(
      pax_fiddle.Config(stochastics.Dropout, name='drop', **kwargs)
  )


class DropoutTest(test_utils.TestCase):

  def test_identity_in_eval(self):
    x = self.np_rng.standard_normal((4, 8)).astype(np.float32)
    y = run(dropout_layer(keep_prob=0.5), x, do_eval=True)
    self.assertArraysEqual(y, x)

  def test_keep_prob_one_is_identity_in_training(self):
    x = self.np_rng.standard_normal((4, 8)).astype(np.float32)
    self.assertArraysEqual(dropout_layer(keep_prob=1.0).apply({}, x), x)

  def test_train_keeps_about_keep_prob_and_rescales(self):
    keep_prob = 0.7
    x = jnp.ones((100, 100))
    y = np.asarray(run(dropout_layer(keep_prob=keep_prob), x))
    kept = y != 0
    # 10,000 Bernoulli(0.7) draws: standard deviation of the mean ~0.0046.
    self.assertAlmostEqual(kept.mean(), keep_prob, delta=0.03)
    self.assertAllClose(y[kept], np.full(kept.sum(), 1.0 / keep_prob))

  def test_dropout_at_eval(self):
    y = run(
        dropout_layer(keep_prob=0.5, dropout_at_eval=True),
        jnp.ones((50, 40)),
        do_eval=True,
    )
    self.assertAlmostEqual(float(np.mean(np.asarray(y) == 0)), 0.5, delta=0.05)

  def test_same_key_same_mask_other_key_other_mask(self):
    layer = dropout_layer(keep_prob=0.5)
    x = jnp.ones((8, 16))
    a, b = run(layer, x, seed=1), run(layer, x, seed=1)
    c = run(layer, x, seed=2)
    self.assertArraysEqual(a, b)
    self.assertNotAllClose(a, c)

  def test_broadcast_dims_share_the_mask(self):
    x = jnp.ones((64, 5))
    y = np.asarray(
        run(dropout_layer(keep_prob=0.5, noise_shape_broadcast_dims=[-1]), x)
    )
    # Every row is all dropped or all kept.
    self.assertArraysEqual(y, np.repeat(y[:, :1], 5, axis=1))
    self.assertTrue(0 < (y[:, 0] == 0).sum() < 64)

  def test_explicit_noise_shape(self):
    x = jnp.ones((3, 64))
    y = np.asarray(run(dropout_layer(keep_prob=0.5, noise_shape=[1, 64]), x))
    self.assertArraysEqual(y, np.repeat(y[:1], 3, axis=0))

  def test_transpose_qk_transposes_square_masks(self):
    plain = dropout_layer(keep_prob=0.5)
    qk = dropout_layer(keep_prob=0.5, transpose_qk=True)
    # A layer of the same name draws the same key, so the same numbers.
    square = jnp.ones((1, 2, 4, 4))
    y, y_plain = np.asarray(run(qk, square)), np.asarray(run(plain, square))
    self.assertArraysEqual(y, np.swapaxes(y_plain, 2, 3))
    self.assertTrue(0 < (y == 0).sum() < y.size)
    self.assertNotAllClose(y, y_plain)
    # Non-square (and non-rank-4) masks are used as drawn.
    other = jnp.ones((1, 2, 3, 5))
    self.assertArraysEqual(run(qk, other), run(plain, other))

  def test_mask_is_floor_of_keep_prob_plus_uniform_in_the_input_dtype(self):
    key = jax.random.PRNGKey(3)
    x = jnp.ones((8, 128), jnp.bfloat16)
    y = stochastics.dropout(x, key, 0.8)
    self.assertEqual(y.dtype, jnp.bfloat16)
    u = np.asarray(jax.random.uniform(key, (8, 128), jnp.bfloat16), np.float32)
    # The sum rounds in bfloat16 (8 bits of precision) before the floor.
    summed = np.asarray(jnp.asarray(0.8 + u, jnp.bfloat16), np.float32)
    mask = np.floor(summed)
    self.assertArraysEqual(np.asarray(y, np.float32),
                           np.asarray(jnp.asarray(mask / 0.8, jnp.bfloat16),
                                      np.float32))
    self.assertAlmostEqual(mask.mean(), 0.8, delta=0.05)

  def test_bad_configs_fail(self):
    with self.assertRaisesRegex(ValueError, r'Dropout \(drop\): keep_prob'):
      run(dropout_layer(keep_prob=0.0), jnp.ones((2,)))
    with self.assertRaisesRegex(ValueError, 'noise_shape_broadcast_dims'):
      run(
          dropout_layer(keep_prob=0.5, noise_shape_broadcast_dims=[2]),
          jnp.ones((2, 2)),
      )


class StochasticResidualTest(test_utils.TestCase):

  def _layer(self, **kwargs):
    return instantiate(
        pax_fiddle.Config(stochastics.StochasticResidual, name='sr', **kwargs)
    )

  def test_eval_adds_weighted_residual(self):
    x = self.np_rng.standard_normal((4, 3)).astype(np.float32)
    r = self.np_rng.standard_normal((4, 3)).astype(np.float32)
    layer = self._layer(residual_weight=0.5, survival_prob=0.3)
    self.assertAllClose(run(layer, x, r, do_eval=True), x + 0.5 * r)

  def test_train_drops_whole_examples(self):
    survival = 0.6
    x = jnp.zeros((2000, 3))
    r = jnp.ones((2000, 3))
    y = np.asarray(run(self._layer(survival_prob=survival), x, r))
    kept = y[:, 0] != 0
    self.assertArraysEqual(y, np.repeat(y[:, :1], 3, axis=1))
    self.assertAlmostEqual(kept.mean(), survival, delta=0.05)
    self.assertAllClose(y[kept], np.full((kept.sum(), 3), 1.0 / survival))

  def test_bad_survival_prob_fails(self):
    with self.assertRaisesRegex(ValueError, 'survival_prob'):
      run(self._layer(survival_prob=1.5), jnp.ones((2,)), jnp.ones((2,)))


if __name__ == '__main__':
  absltest.main()
