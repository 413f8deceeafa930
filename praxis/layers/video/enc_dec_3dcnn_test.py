"""Tests of the 3-D CNN blocks against numpy and by their properties."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.video import enc_dec_3dcnn


def _init_apply(config, x):
  layer = base_layer.instantiate(config)
  variables = layer.init(jax.random.PRNGKey(0), x)
  return layer, variables, layer.apply(variables, x)


class FunctionsTest(test_utils.TestCase):

  def test_depth_to_space_matches_numpy(self):
    b, t, h, w, f, ts = 1, 2, 2, 3, 2, 2
    x = np.arange(b * t * h * w * ts * 4 * f, dtype=np.float32)
    x = x.reshape(b, t, h, w, ts * 4 * f)
    y = np.asarray(enc_dec_3dcnn.depth_to_space(jnp.asarray(x), ts, f))
    self.assertEqual(y.shape, (b, t * ts, 2 * h, 2 * w, f))
    for ti in range(t):
      for hi in range(h):
        for wi in range(w):
          block = x[0, ti, hi, wi].reshape(ts, 2, 2, f)
          for a in range(ts):
            for p in range(2):
              for q in range(2):
                np.testing.assert_array_equal(
                    y[0, ti * ts + a, 2 * hi + p, 2 * wi + q], block[a, p, q])

  def test_scan_function_concatenates_slices(self):
    fn = enc_dec_3dcnn.scan_function(lambda a, b: jnp.concatenate(
        [a * 2, a + b], axis=1), in_axis=1)
    a = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    b = np.ones_like(a)
    want = np.stack(
        [np.concatenate([a[:, i:i + 1] * 2, a[:, i:i + 1] + 1], 1)
         for i in range(3)], 1).reshape(2, 6, 2)
    self.assertAllClose(fn(a, b), want)
    with self.assertRaisesRegex(ValueError, 'in_axis 3'):
      enc_dec_3dcnn.scan_function(lambda a: a, in_axis=3)(a)


class LayersTest(test_utils.TestCase):

  def test_causal_conv_ignores_future_frames(self):
    config = pax_fiddle.Config(
        enc_dec_3dcnn.CausalConv, name='conv', filter_shape=(3, 3, 3, 2, 4))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 5, 4, 4, 2)).astype(np.float32)
    layer, variables, y = _init_apply(config, x)
    self.assertEqual(y.shape, (1, 5, 4, 4, 4))
    x2 = x.copy()
    x2[:, 3:] = rng.normal(size=x2[:, 3:].shape)
    y2 = layer.apply(variables, x2)
    self.assertAllClose(y2[:, :3], y[:, :3])
    self.assertGreater(np.abs(np.asarray(y2[:, 3:] - y[:, 3:])).max(), 1e-3)

  def test_blur_pool_matches_numpy(self):
    config = pax_fiddle.Config(
        enc_dec_3dcnn.BlurPool3D, name='blur', filter_size=2,
        strides=(1, 1, 1), padding='VALID')
    x = np.random.default_rng(1).normal(size=(1, 3, 3, 3, 2))
    x = x.astype(np.float32)
    _, _, y = _init_apply(config, x)
    # A 2x2x2 box filter of weight 1/8, per channel.
    want = np.zeros((1, 2, 2, 2, 2), np.float32)
    for t in range(2):
      for h in range(2):
        for w in range(2):
          want[0, t, h, w] = x[0, t:t + 2, h:h + 2, w:w + 2].mean((0, 1, 2))
    self.assertAllClose(y, want, atol=1e-6)

  def test_group_norm_spatial_normalizes_each_frame(self):
    config = pax_fiddle.Config(
        enc_dec_3dcnn.GroupNormSpatial, name='norm', dim=4, num_groups=2)
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 4, 4))
    x = x.astype(np.float32)
    _, _, y = _init_apply(config, x)
    g = x.reshape(2, 3, 4, 4, 2, 2)
    mean = g.mean(axis=(2, 3, 5), keepdims=True)
    var = g.var(axis=(2, 3, 5), keepdims=True)
    want = ((g - mean) / np.sqrt(var + 1e-6)).reshape(x.shape)
    self.assertAllClose(y, want, atol=1e-4)

  def test_res_block_shortcut_and_bad_input(self):
    config = pax_fiddle.Config(
        enc_dec_3dcnn.ResBlock, name='res', input_dim=4, output_dim=8)
    config.norm_layer_tpl.num_groups = 2
    x = np.ones((1, 3, 2, 2, 4), np.float32)
    layer, variables, y = _init_apply(config, x)
    self.assertEqual(y.shape, (1, 3, 2, 2, 8))
    self.assertEqual(variables['params']['conv_shortcut']['w'].shape,
                     (1, 1, 1, 4, 8))
    with self.assertRaisesRegex(ValueError, 'does not match `input_dim` 4'):
      layer.apply(variables, np.ones((1, 3, 2, 2, 5), np.float32))

  def test_discriminator_block_halves_odd_sizes_up(self):
    config = pax_fiddle.Config(
        enc_dec_3dcnn.DiscriminatorResBlock, name='d', input_dim=2,
        output_dim=3)
    x = np.ones((1, 3, 5, 4, 2), np.float32)
    _, _, y = _init_apply(config, x)
    self.assertEqual(y.shape, (1, 2, 3, 2, 3))


if __name__ == '__main__':
  absltest.main()
