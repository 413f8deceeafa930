"""Tests of the VQ-GAN losses against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers.video import losses


def _softplus(x):
  return np.log1p(np.exp(x))


class LossesTest(test_utils.TestCase):

  def test_r1_penalty_of_a_linear_function(self):
    a = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    x = np.ones_like(a)
    logits, penalty = losses.r1_gradient_penalty(
        x, lambda v: jnp.sum(v * a, axis=(1, 2))[:, None],
        grad_penalty_cost=2.0)
    self.assertAllClose(logits[:, 0], a.sum((1, 2)))
    want = 2.0 * np.mean(np.sum(a.reshape(2, -1)**2, -1))
    self.assertAllClose(penalty, want, rtol=1e-5)

  def test_vqgan_loss_matches_numpy(self):
    rng = np.random.default_rng(2)
    video = rng.normal(size=(2, 1, 2, 2, 3)).astype(np.float32)
    predictions = py_utils.NestedMap(
        reconstructed=rng.normal(size=video.shape).astype(np.float32),
        logits_real=np.array([[0.5], [1.5]], np.float32),
        logits_fake=np.array([[-0.5], [0.25]], np.float32),
        quantizer_loss=np.float32(0.3),
        r1_gradient_penalty=np.float32(0.2),
    )
    batch = py_utils.NestedMap(video=video)
    layer = base_layer.instantiate(
        pax_fiddle.Config(losses.VQGANLoss, name='loss', polyak_decay=0.5))
    variables = layer.init(jax.random.PRNGKey(0), predictions, batch)
    out, updated = layer.apply(variables, predictions, batch,
                               mutable=[base_layer.NON_TRAINABLE])
    ema_real, ema_fake = 0.5 * 1.0, 0.5 * (-0.125)
    stats = updated[base_layer.NON_TRAINABLE]
    self.assertAllClose(stats['ema_real_pred'], ema_real)
    self.assertAllClose(stats['ema_fake_pred'], ema_fake)
    real, fake = predictions.logits_real, predictions.logits_fake
    lecam = (np.mean(np.maximum(real - ema_fake, 0)**2)
             + np.mean(np.maximum(ema_real - fake, 0)**2))
    d_adv = np.mean(_softplus(-real)) + np.mean(_softplus(fake))
    recon = 5.0 * np.mean((video - predictions.reconstructed)**2)
    g_adv = 0.1 * np.mean(_softplus(-fake))
    self.assertAllClose(out.d_loss, d_adv + 0.2 + 0.001 * lecam, rtol=1e-5)
    self.assertAllClose(out.g_loss, recon + g_adv + 0.3, rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
