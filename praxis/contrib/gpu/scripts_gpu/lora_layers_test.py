"""Tests of the LoRA layers against numpy."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.contrib.gpu.scripts_gpu import lora_layers
from praxis.layers import attentions
from praxis.layers import linears

RNG = np.random.default_rng(0)


def with_adapters(variables, a_shape, b_shape):
  params = dict(variables['params'])
  params['lora_a'] = RNG.normal(size=a_shape).astype(np.float32)
  params['lora_b'] = RNG.normal(size=b_shape).astype(np.float32)
  return {'params': params}


class LoraLayersTest(test_utils.TestCase):

  def test_linear(self):
    x = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    layer = base_layer.instantiate(pax_fiddle.Config(
        lora_layers.LoraLinear, name='l', input_dims=4, output_dims=5,
        rank=2))
    variables = layer.init(jax.random.PRNGKey(0), x)
    p = variables['params']
    self.assertEqual(p['lora_a'].shape, (4, 2))
    self.assertEqual(p['lora_b'].shape, (5, 2))
    np.testing.assert_array_equal(p['lora_b'], 0)
    # A fresh adapter changes nothing: equal to the plain Linear.
    plain = base_layer.instantiate(pax_fiddle.Config(
        linears.Linear, name='l', input_dims=4, output_dims=5))
    self.assertAllClose(layer.apply(variables, x),
                        plain.apply({'params': {'w': p['w']}}, x))
    v = with_adapters(variables, (4, 2), (5, 2))
    q = v['params']
    want = x @ (np.asarray(q['w']) + q['lora_a'] @ q['lora_b'].T)
    self.assertAllClose(layer.apply(v, x), want, atol=1e-5)

  def test_attention_projection(self):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    layer = base_layer.instantiate(pax_fiddle.Config(
        lora_layers.LoraAttentionProjection, name='p', input_dim=4,
        num_heads=2, dim_per_head=3, rank=2))
    v = with_adapters(layer.init(jax.random.PRNGKey(0), x), (4, 2), (6, 2))
    q = v['params']
    w = np.asarray(q['w']) + (q['lora_a'] @ q['lora_b'].T).reshape(4, 2, 3)
    want = np.einsum('bd,dnh->bnh', x, w) + np.asarray(q['b'])
    self.assertAllClose(layer.apply(v, x), want, atol=1e-5)

  def test_combined_qkv(self):
    x = RNG.normal(size=(2, 4)).astype(np.float32)
    layer = base_layer.instantiate(pax_fiddle.Config(
        lora_layers.LoraCombinedQKVProjection, name='p', input_dim=4,
        num_heads=2, dim_per_head=3, rank=2, use_bias=False))
    v = with_adapters(layer.init(jax.random.PRNGKey(0), x), (3, 4, 2),
                      (3, 6, 2))
    q = v['params']
    delta = np.einsum('kdr,knr->kdn', q['lora_a'], q['lora_b'])
    w = np.asarray(q['w']) + delta.reshape(3, 4, 2, 3)
    for i, out in enumerate(layer.apply(v, x)):
      self.assertAllClose(out, np.einsum('bd,dnh->bnh', x, w[i]), atol=1e-5)

  def test_in_attention_layer(self):
    atten = pax_fiddle.Config(
        attentions.DotProductAttention, name='a', input_dim=4, hidden_dim=4,
        num_heads=2)
    atten.proj_tpl = pax_fiddle.Config(lora_layers.LoraAttentionProjection,
                                       rank=3)
    layer = base_layer.instantiate(atten)
    x = np.ones((1, 2, 4), np.float32)
    v = layer.init(jax.random.PRNGKey(0), x, x, x, np.zeros((1, 1, 1, 2)))
    self.assertEqual(v['params']['query']['lora_b'].shape, (4, 3))
    self.assertEqual(v['params']['post']['lora_a'].shape, (4, 3))

  def test_bad_rank(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        lora_layers.LoraLinear, name='l', input_dims=4, output_dims=5))
    with self.assertRaisesRegex(ValueError, 'rank must be a positive int'):
      layer.init(jax.random.PRNGKey(0), np.ones((1, 4), np.float32))


if __name__ == '__main__':
  absltest.main()
