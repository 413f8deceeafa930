"""BregmanPCA against numpy: losses, the pass-through, the online updates."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import bregman

NON_TRAINABLE = base_layer.NON_TRAINABLE


def _layer(**fields):
  base = dict(name='pca', num_components=2, input_dims=[4], start_step=0,
              end_step=100, coefficients_steps=30, coefficients_lr=0.5,
              components_lr=0.05)
  return base_layer.instantiate(pax_fiddle.Config(
      bregman.BregmanPCA, **dict(base, **fields)))


class LossTest(absltest.TestCase):

  def test_losses_match_numpy(self):
    rng = np.random.default_rng(0)
    c = rng.normal(size=(3, 2)).astype(np.float32)
    w = rng.normal(size=(2, 4)).astype(np.float32)
    m = rng.normal(size=(1, 4)).astype(np.float32)
    y = rng.random(size=(3, 4)).astype(np.float32)
    z = c @ w + m
    np.testing.assert_allclose(
        bregman._squared_loss(c, w, m, y),
        np.mean(np.sum(0.5 * (z - y) ** 2, 1)), rtol=1e-5)
    y_prob = y / y.sum(1, keepdims=True)
    logz = np.log(np.exp(z).sum(1))
    kl = logz + np.sum(y_prob * (np.log(y_prob) - z), 1)
    np.testing.assert_allclose(bregman._softmax_loss(c, w, m, y_prob),
                               kl.mean(), rtol=1e-5)


class LayerTest(absltest.TestCase):

  def test_learns_a_subspace_and_passes_inputs_through(self):
    rng = np.random.default_rng(1)
    basis = rng.normal(size=(2, 4)).astype(np.float32)
    x = jnp.asarray(rng.normal(size=(32, 2)) @ basis + 0.5, jnp.float32)
    layer = _layer()
    variables = layer.init(jax.random.PRNGKey(0), x)

    @jax.jit
    def step(v):
      (out, coeffs), new = layer.apply(v, x, mutable=[NON_TRAINABLE])
      return out, coeffs, {**v, **new}

    def recon_error(v, coeffs):
      rec = layer.apply(v, coeffs, method=layer.reconstruct)
      return float(jnp.mean(jnp.square(rec - x)))

    out, coeffs, variables = step(variables)
    np.testing.assert_array_equal(out, x)
    first = recon_error(variables, coeffs)
    for _ in range(60):
      _, coeffs, variables = step(variables)
    # Two components can represent this rank-2 data: the error falls.
    self.assertLess(recon_error(variables, coeffs), 0.25 * first)
    self.assertEqual(float(variables[NON_TRAINABLE]['step']), 61.0)
    # The momentum is kept across steps.
    self.assertGreater(float(jnp.abs(
        variables[NON_TRAINABLE]['components_momentum']).sum()), 0.0)

  def test_eval_changes_nothing(self):
    x = jnp.ones((2, 4))
    layer = _layer()
    variables = layer.init(jax.random.PRNGKey(0), x)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=True)):
      _, new = layer.apply(variables, x, mutable=[NON_TRAINABLE])
    jax.tree.map(np.testing.assert_array_equal, new[NON_TRAINABLE],
                 variables[NON_TRAINABLE])

  def test_bad_config_is_named(self):
    with self.assertRaisesRegex(ValueError, 'end_step=0'):
      _layer(end_step=0).init(jax.random.PRNGKey(0), jnp.ones((2, 4)))


if __name__ == '__main__':
  absltest.main()
