"""Tests of the lookup-free and scalar quantizers against numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.video import quantizer


def _apply(config, x, do_eval=False):
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    layer = base_layer.instantiate(config)
    return layer, layer.apply({}, x)


def _np_entropy_loss(x, temperature):
  """Sample entropy minus batch entropy over all 2**D sign codes."""
  d = x.shape[-1]
  codes = np.array([[1.0 if (i >> k) & 1 else -1.0 for k in range(d)]
                    for i in range(2**d)])
  # Affinity of a code: minus its squared distance, up to a constant.
  aff = -np.array([[np.sum((v - c)**2) for c in codes]
                   for v in x.reshape(-1, d)]) / temperature
  aff -= aff.max(-1, keepdims=True)
  p = np.exp(aff) / np.exp(aff).sum(-1, keepdims=True)
  sample = -np.mean(np.sum(p * np.log(p + 1e-30), -1))
  avg = p.mean(0)
  return sample + np.sum(avg * np.log(avg + 1e-5))


class LookupFreeQuantizerTest(test_utils.TestCase):

  def _config(self, **kwargs):
    kwargs.setdefault('embedding_dim', 3)
    return pax_fiddle.Config(
        quantizer.LookupFreeQuantizer, name='lfq', **kwargs)

  def test_ids_losses_and_decoding(self):
    x = np.array([[[0.5, -0.2, 1.5], [-1.0, 0.3, -0.1]]], np.float32)
    layer, (q, info) = _apply(
        self._config(entropy_temperature=0.5, commitment_cost=0.25), x)
    signs = np.where(x >= 0, 1.0, -1.0)
    self.assertAllClose(q, signs)
    # Bit k of the id is channel k's sign: 1 + 4 = 5 and 2.
    np.testing.assert_array_equal(np.asarray(info.encoding_indices), [[5, 2]])
    self.assertAllClose(layer.decode_ids(info.encoding_indices), signs)
    self.assertAllClose(info.e_latent_loss,
                        0.25 * np.mean((signs - x)**2), rtol=1e-5)
    self.assertAllClose(info.entropy_loss,
                        0.1 * _np_entropy_loss(x, 0.5), rtol=1e-4)
    self.assertAllClose(info.quantizer_loss,
                        info.e_latent_loss + info.entropy_loss)

  def test_token_groups(self):
    config = self._config(embedding_dim=4, num_token_groups=2)
    x = np.array([[1.0, -1.0, -1.0, 1.0]], np.float32)
    layer, (_, info) = _apply(config, x, do_eval=True)
    np.testing.assert_array_equal(np.asarray(info.encoding_indices), [[1, 2]])
    self.assertAllClose(layer.decode_ids(info.encoding_indices), x)
    self.assertNotIn('quantizer_loss', info)

  def test_straight_through_gradient(self):
    config = self._config()
    x = np.array([[0.5, -0.2, 1.5]], np.float32)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=False)):
      layer = base_layer.instantiate(config)
      grad = jax.grad(lambda x: jnp.sum(layer.apply({}, x)[0] * 3.0))(x)
    self.assertAllClose(grad, np.full_like(x, 3.0))


class ScalarQuantizerTest(test_utils.TestCase):

  def test_levels_and_ids_by_hand(self):
    config = pax_fiddle.Config(
        quantizer.ScalarQuantizer, name='sq', dim_widths=(3, 4),
        bound_method='tanh')
    x = np.array([[10.0, 10.0], [-10.0, -0.3]], np.float32)
    layer, (q, info) = _apply(config, x)
    # width 3: tanh * 1.5 * 0.999 rounds to {-1, 0, 1}; width 4:
    # tanh * 2 * 0.999 - 0.5 rounds to {-2, .., 1}, then is centered by +0.5
    # (tanh(-0.3) * 1.998 - 0.5 = -1.08 -> -1 -> -0.5).
    self.assertAllClose(q, [[1.0, 1.5], [-1.0, -0.5]])
    # ids: level0 * 4 + level1, levels counted from the lowest value.
    np.testing.assert_array_equal(np.asarray(info.encoding_indices), [11, 1])
    self.assertAllClose(layer.decode_ids(info.encoding_indices), q)

  def test_wrong_channels_named(self):
    config = pax_fiddle.Config(quantizer.ScalarQuantizer, name='sq')
    with self.assertRaisesRegex(ValueError, '`dim_widths` has 8 entries'):
      _apply(config, np.zeros((1, 3), np.float32))


if __name__ == '__main__':
  absltest.main()
