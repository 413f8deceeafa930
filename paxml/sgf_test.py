"""Stochastic gradient functions, DP-SGD included, against numpy."""

import pickle

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import sgf
from paxml.ghostnorm import linears as ghostnorm_linears
from praxis import base_layer
from praxis import pax_fiddle

_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(6, 3)).astype(np.float32)
Y = _RNG.normal(size=(6,)).astype(np.float32)
W = {'w': np.array([0.5, -1.0, 2.0], np.float32), 'b': np.float32(0.3)}


def _loss_fn(mdl_vars, nograd_and_inputs, key):
  del key
  _, (x, y) = nograd_and_inputs
  pred = x @ mdl_vars['w'] + mdl_vars['b']
  loss = jnp.mean(jnp.square(pred - y))
  return loss, sgf.GradAuxInfo(aux_info={'loss': loss}, loss_weight=1.0)


def _per_example_grads(x=X, y=Y):
  err = x @ W['w'] + W['b'] - y
  return 2 * err[:, None] * x, 2 * err  # dw [B, 3], db [B]


def _clip(gw, gb, bound):
  norm = np.sqrt(np.sum(gw**2, axis=-1) + gb**2)
  factor = np.minimum(1.0, bound / norm)
  return gw * factor[:, None], gb * factor, norm > bound


def _run(sg, x=X, y=Y, key=0):
  return sg.grad_fn(_loss_fn, jax.tree.map(jnp.asarray, W),
                    ({}, (jnp.asarray(x), jnp.asarray(y))),
                    jax.random.PRNGKey(key))


class DpSgdTest(absltest.TestCase):

  def test_clipped_mean_and_stats(self):
    gw, gb = _per_example_grads()
    bound = float(np.median(np.sqrt(np.sum(gw**2, 1) + gb**2)))
    cw, cb, clipped = _clip(gw, gb, bound)
    for inner in (None, 2, 3):
      sg = sgf.DpSgdStochasticGradient(l2_norm_clip=bound,
                                       inner_batch_size=inner)
      (loss, aux), grads = _run(sg)
      np.testing.assert_allclose(grads['w'], cw.mean(0), rtol=1e-5)
      np.testing.assert_allclose(grads['b'], cb.mean(0), rtol=1e-5)
      np.testing.assert_allclose(
          aux.dp_aux_info['frac_clipped'], clipped.mean(), rtol=1e-6)
      err = X @ W['w'] + W['b'] - Y
      np.testing.assert_allclose(loss, np.mean(err**2), rtol=1e-5)
      self.assertIsInstance(aux, sgf.DPGradAuxInfo)

  def test_microbatches_clip_pair_means(self):
    gw, gb = _per_example_grads()
    gw2, gb2 = gw.reshape(3, 2, 3).mean(1), gb.reshape(3, 2).mean(1)
    cw, cb, _ = _clip(gw2, gb2, 0.5)
    sg = sgf.MicrobatchDpSgdStochasticGradient(l2_norm_clip=0.5,
                                               microbatch_size=2)
    _, grads = _run(sg)
    np.testing.assert_allclose(grads['w'], cw.mean(0), rtol=1e-5)
    np.testing.assert_allclose(grads['b'], cb.mean(0), rtol=1e-5)

  def test_augmentation_multiplicity_of_a_deterministic_model(self):
    plain = _run(sgf.DpSgdStochasticGradient(l2_norm_clip=0.5))[1]
    aug = _run(sgf.AugMulDpSgdStochasticGradient(l2_norm_clip=0.5,
                                                 microbatch_size=3))[1]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5),
                 plain, aug)

  def test_per_layer_uniform_bounds(self):
    gw, gb = _per_example_grads()
    bound = 1.0 / np.sqrt(2)  # two variables share the bound 1 uniformly
    fw = np.minimum(1.0, bound / np.linalg.norm(gw, axis=1))
    fb = np.minimum(1.0, bound / np.abs(gb))
    sg = sgf.PerLayerDpSgdStochasticGradient(l2_norm_clip=1.0)
    (_, aux), grads = _run(sg)
    np.testing.assert_allclose(grads['w'], (gw * fw[:, None]).mean(0),
                               rtol=1e-5)
    np.testing.assert_allclose(grads['b'], (gb * fb).mean(0), rtol=1e-5)
    np.testing.assert_allclose(aux.dp_aux_info['frac_clipped']['w'],
                               np.mean(fw < 1), rtol=1e-6)

  def test_noise_scale(self):
    x = np.zeros((4, 3), np.float32)  # zero gradients: the output is noise
    big = {'w': np.zeros(4000, np.float32), 'b': np.float32(0)}

    def loss(v, nograd_and_inputs, key):
      del key
      _, (xs, _) = nograd_and_inputs
      val = jnp.mean(jnp.sum(xs, 1)) * jnp.sum(v['w'])
      return val, sgf.GradAuxInfo(aux_info={}, loss_weight=1.0)

    sg = sgf.DpSgdStochasticGradient(l2_norm_clip=2.0, noise_multiplier=0.5)
    _, grads = sg.grad_fn(loss, jax.tree.map(jnp.asarray, big),
                          ({}, (jnp.asarray(x), jnp.zeros(4))),
                          jax.random.PRNGKey(3))
    # stddev = noise_multiplier * l2_norm_clip / batch = 0.25.
    self.assertAlmostEqual(float(np.std(grads['w'])), 0.25, delta=0.01)

  def test_bad_config(self):
    with self.assertRaisesRegex(ValueError, 'l2_norm_clip=0.0'):
      _run(sgf.DpSgdStochasticGradient())
    with self.assertRaisesRegex(ValueError, 'microbatch_size=4'):
      _run(sgf.MicrobatchDpSgdStochasticGradient(l2_norm_clip=1.0,
                                                 microbatch_size=4))
    with self.assertRaisesRegex(ValueError, 'inner_batch_size=4'):
      _run(sgf.DpSgdStochasticGradient(l2_norm_clip=1.0, inner_batch_size=4))


class GhostClippingTest(absltest.TestCase):

  def test_equals_materialised_dp_sgd(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        ghostnorm_linears.LinearGhostNorm, name='lin', input_dims=3,
        output_dims=2))
    x = jnp.asarray(X)
    y = jnp.asarray(_RNG.normal(size=(6, 2)), jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)

    def loss_fn(mdl_vars, nograd_and_inputs, key):
      del key
      _, (xs, ys) = nograd_and_inputs
      loss = jnp.mean(jnp.sum(jnp.square(layer.apply(mdl_vars, xs) - ys), 1))
      return loss, sgf.GradAuxInfo(aux_info={}, loss_weight=1.0)

    def grads_of(sg):
      return sg.grad_fn(loss_fn, variables, ({}, (x, y)),
                        jax.random.PRNGKey(1))

    (_, ghost_aux), ghost = grads_of(
        sgf.GhostClippingDpSgdStochasticGradient(l2_norm_clip=0.3))
    (_, dp_aux), dp = grads_of(sgf.DpSgdStochasticGradient(l2_norm_clip=0.3))
    np.testing.assert_allclose(ghost['params']['w'], dp['params']['w'],
                               rtol=1e-5, atol=1e-7)
    self.assertAlmostEqual(float(ghost_aux.dp_aux_info['frac_clipped']),
                           float(dp_aux.dp_aux_info['frac_clipped']))


class NamesTest(absltest.TestCase):

  def test_classes_are_shown_and_pickled_under_paxml_sgf(self):
    sg = sgf.DpSgdStochasticGradient(l2_norm_clip=1.0)
    self.assertEqual(type(sg).__module__, 'paxml.sgf')
    self.assertEqual(pickle.loads(pickle.dumps(sg)).l2_norm_clip, 1.0)


class PercoreTest(absltest.TestCase):

  def test_clips_the_mean_gradient(self):
    gw, gb = _per_example_grads()
    mw, mb = gw.mean(0), gb.mean(0)
    norm = np.sqrt(np.sum(mw**2) + mb**2)
    (_, aux), grads = _run(sgf.PercoreClippedDpSgdGradient(
        l2_norm_clip=norm / 2))
    np.testing.assert_allclose(grads['w'], mw / 2, rtol=1e-5)
    np.testing.assert_allclose(aux.dp_aux_info['per_core_grad_norm'], norm,
                               rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
