"""Tests of the VQ-VAE model (tiny sizes)."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.video import vqvae

_TINY = dict(filters=4, channel_multipliers=(1, 2), num_res_blocks=1,
             temporal_downsample=(True,), embedding_dim=3)


class VQVaeModelTest(test_utils.TestCase):

  def _model(self):
    config = pax_fiddle.Config(vqvae.VQVaeModel, name='vqvae', **_TINY)
    for tpl in (config.encoder_tpl, config.decoder_tpl):
      tpl.norm_tpl.num_groups = 2
      tpl.res_block_tpl.norm_layer_tpl.num_groups = 2
    config.decoder_tpl.cond_norm_tpl.group_norm_tpl.num_groups = 2
    return base_layer.instantiate(config)

  def test_round_trip_shapes_and_ids(self):
    model = self._model()
    x = np.random.default_rng(0).normal(size=(1, 5, 8, 8, 3))
    x = x.astype(np.float32)
    variables = model.init(jax.random.PRNGKey(0), x)
    self.assertEqual(
        variables['params']['encoder']['conv_downsample_layers_0']['w'].shape,
        (4, 4, 4, 4, 4))
    out, info = model.apply(variables, x)
    self.assertEqual(out.shape, x.shape)
    # 5 frames -> 1 + (5 - 1) / 2 latent frames, 8x8 -> 4x4, 3 channels.
    latents = model.apply(variables, x, method=model.encode_to_latents)
    self.assertEqual(latents.shape, (1, 3, 4, 4, 3))
    bits = (np.asarray(latents) >= 0).astype(np.int64)
    want_ids = bits[..., 0] + 2 * bits[..., 1] + 4 * bits[..., 2]
    ids = model.apply(variables, x, method=model.encode_to_indices)
    np.testing.assert_array_equal(np.asarray(ids), want_ids)
    decoded = model.apply(variables, ids, method=model.decode_from_indices)
    self.assertEqual(decoded.shape, x.shape)
    self.assertEqual(info.quantizer_loss.shape, ())

  def test_bad_frame_count_is_named(self):
    model = self._model()
    x = np.zeros((1, 4, 8, 8, 3), np.float32)
    with self.assertRaisesRegex(ValueError, '1 \\+ k \\* 2 frames'):
      model.init(jax.random.PRNGKey(0), x)


if __name__ == '__main__':
  absltest.main()
