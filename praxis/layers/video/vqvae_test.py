"""Tests of the VQ-VAE model (tiny sizes)."""

import functools

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.video import vqvae

# Few distinct weight shapes: initializing each new shape compiles.
_TINY = dict(filters=4, channel_multipliers=(1, 1), num_res_blocks=1,
             temporal_downsample=(True,), embedding_dim=4)


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
    x = np.random.default_rng(0).normal(size=(1, 3, 4, 4, 3))
    x = x.astype(np.float32)
    variables = model.init(jax.random.PRNGKey(0), x)
    self.assertEqual(
        variables['params']['encoder']['conv_downsample_layers_0']['w'].shape,
        (4, 4, 4, 4, 4))
    out, info = jax.jit(model.apply)(variables, x)
    self.assertEqual(out.shape, x.shape)
    self.assertEqual(info.quantizer_loss.shape, ())
    # 3 frames -> 1 + (3 - 1) / 2 latent frames, 4x4 -> 2x2, 4 channels.
    self.assertEqual(info.raw.shape, (1, 2, 2, 2, 4))
    bits = (np.asarray(info.raw) >= 0).astype(np.int64)
    want_ids = bits @ np.array([1, 2, 4, 8])
    np.testing.assert_array_equal(np.asarray(info.encoding_indices), want_ids)
    decode = jax.jit(
        functools.partial(model.apply, method=model.decode_from_indices))
    decoded = decode(variables, info.encoding_indices)
    self.assertAllClose(decoded, out, atol=1e-5)

  def test_bad_frame_count_is_named(self):
    model = self._model()
    x = np.zeros((1, 4, 4, 4, 3), np.float32)
    with self.assertRaisesRegex(ValueError, '1 \\+ k \\* 2 frames'):
      model.init(jax.random.PRNGKey(0), x)


if __name__ == '__main__':
  absltest.main()
