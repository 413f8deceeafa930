"""ViT layers against numpy: patching, entry, exit, the whole model."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import vits


def _init_apply(cfg, *inputs):
  layer = base_layer.instantiate(cfg)
  variables = layer.init(jax.random.PRNGKey(0), *inputs)
  return layer.apply(variables, *inputs), variables


class PatchTest(absltest.TestCase):

  def test_patch_order_and_round_trip(self):
    img = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    patches = np.asarray(vits.image_to_patch(jnp.asarray(img), 2))
    self.assertEqual(patches.shape, (2, 6, 12))
    # Patch (row 1, col 2) is the 6th; rows of the patch, channels inner.
    np.testing.assert_array_equal(patches[0, 5], img[0, 2:4, 4:6].ravel())
    np.testing.assert_array_equal(
        vits.patch_to_image(jnp.asarray(patches), img.shape, 2), img)
    with self.assertRaisesRegex(ValueError, 'multiples of patch_size'):
      vits.image_to_patch(jnp.asarray(img), 4)

  def test_interpolation_keeps_a_constant_and_the_same_shape(self):
    emb = jnp.ones((1, 4, 3))
    np.testing.assert_allclose(
        vits.interpolate_embedding_2d(emb, (2, 2), (3, 3)), np.ones((1, 9, 3)))
    emb = jnp.arange(12.0).reshape(1, 4, 3)
    np.testing.assert_allclose(vits.interpolate_embedding_2d(emb, (2, 2),
                                                             (2, 2)), emb)


class EntryExitTest(absltest.TestCase):

  def test_entry_is_projection_plus_position_with_cls_tokens(self):
    img = jnp.asarray(np.random.default_rng(0).normal(size=(2, 4, 4, 1)),
                      jnp.float32)
    cfg = pax_fiddle.Config(
        vits.VitEntryLayers, name='entry', pos_emb_shapes=(2, 2),
        patch_size=2, input_dims=4, output_dims=3, prepend_cls_tokens=1,
        append_cls_tokens=2)
    cfg.pos_emb_tpl.max_seq_length = 4
    cfg.pos_emb_tpl.embedding_dims = 3
    out, v = _init_apply(cfg, img)
    params = v['params']
    w = np.asarray(params['patch_projection']['linear']['w'])
    b = np.asarray(params['patch_projection']['bias']['b'])
    pos = np.asarray(params['pos_emb']['emb_var'])
    patches = np.asarray(vits.image_to_patch(img, 2))
    want = patches @ w + b + pos[None]
    self.assertEqual(out.shape, (2, 1 + 4 + 2, 3))
    np.testing.assert_allclose(out[:, 1:5], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[:, 0], 0.0)  # CLS tokens start at 0.

  def test_exit_normalizes_pools_and_projects(self):
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 5, 4)),
                    jnp.float32)
    cfg = pax_fiddle.Config(vits.VitExitLayers, name='exit', hidden_dim=4,
                            output_dim=3, output_fc_tanh=False)
    cfg.pooling_tpl.set(pooling_type='MAX', pooling_dims=[1])
    out, v = _init_apply(cfg, x)
    xs = np.asarray(x)
    ln = (xs - xs.mean(-1, keepdims=True)) / np.sqrt(
        xs.var(-1, keepdims=True) + 1e-6)
    pooled = ln.max(axis=1)
    proj = v['params']['output_projection']
    want = pooled @ np.asarray(proj['linear']['w']) + np.asarray(
        proj['bias']['b'])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


class VisionTransformerTest(absltest.TestCase):

  def test_small_vit(self):
    cfg = vits.build_vision_transformer_hparams_for_test(
        pos_emb_shapes=(2, 2), patch_size=2, image_channels=1, model_dims=8,
        mlp_dims=16, num_xformer_layers=1, num_heads=2)
    cfg.exit_layers_tpl.pooling_tpl.set(pooling_type='AVG', pooling_dims=[1])
    img = jnp.ones((3, 4, 4, 1))
    out, v = _init_apply(cfg, img)
    self.assertEqual(out.shape, (3, 8))
    self.assertEqual(set(v['params']),
                     {'entry_stack', 'transformers_stack', 'exit_stack'})
    # A 6 x 6 image (3 x 3 patches) reuses the 2 x 2 embedding, resized.
    layer = base_layer.instantiate(cfg)
    self.assertEqual(layer.apply(v, jnp.ones((1, 6, 6, 1))).shape, (1, 8))


if __name__ == '__main__':
  absltest.main()
