"""Tests of GroupedQueryAttention against numpy attention with repeated KV."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import grouped_query_attention as gqa

DECODE_CACHE = base_layer.DECODE_CACHE
B, T, D, N, H = 2, 4, 8, 4, 2


def np_rope(x, pos, max_timescale=10_000):
  h = x.shape[-1]
  timescale = max_timescale ** (2 * np.arange(h // 2) / h)
  angle = pos[:, :, None, None] / timescale
  a, b = x[..., : h // 2], x[..., h // 2 :]
  sin, cos = np.sin(angle), np.cos(angle)
  return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_gqa(params, x, masked, pos=None, temp=1.0, cap=0.0):
  """Reference: project, repeat each KV head N/K times, attend."""

  def proj(name, eqn):
    return np.einsum(eqn, x, params[name]['w']) + params[name]['b']

  q = proj('query', 'btd,dnh->btnh')
  if params['key']['w'].ndim == 2:
    k = proj('key', 'btd,dh->bth')[:, :, None]
    v = proj('value', 'btd,dh->bth')[:, :, None]
  else:
    k, v = proj('key', 'btd,dkh->btkh'), proj('value', 'btd,dkh->btkh')
  if pos is not None:
    q, k = np_rope(q, pos), np_rope(k, pos)
  groups = N // k.shape[2]
  k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
  logits = np.einsum('btnh,bsnh->bnts', q / np.sqrt(H) / temp, k)
  if cap:
    logits = cap * np.tanh(logits / cap)
  probs = np_softmax(np.where(masked[:, None], -1e30, logits))
  encoded = np.einsum('bnts,bsnh->btnh', probs, v)
  out = np.einsum('btnh,dnh->btd', encoded, params['post']['w'])
  return out + params['post']['b'], probs


def config(**kwargs):
  defaults = {'name': 'gqa', 'input_dim': D, 'num_heads': N,
              'num_kv_heads': 2, 'dim_per_head': H}
  defaults.update(kwargs)
  return pax_fiddle.Config(gqa.GroupedQueryAttention, **defaults)


class GroupedQueryAttentionTest(test_utils.TestCase):

  def _setup(self, **kwargs):
    layer = base_layer.instantiate(config(**kwargs))
    x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    mask = gqa.causal_mask(T)
    variables = jax.eval_shape(layer.init, jax.random.PRNGKey(0), x, x, x, mask)
    variables = jax.tree.map(
        lambda v: jnp.asarray(0.5 * self.np_rng.standard_normal(v.shape),
                              jnp.float32),
        variables,
    )
    return layer, variables, x

  @parameterized.named_parameters(
      ('two_kv_heads', 2, None, 1.0, 0.0),
      ('one_kv_head_rope', 1, (1, 10_000), 1.0, 0.0),
      ('temperature_cap', 2, None, 2.0, 1.5),
  )
  def test_matches_numpy(self, num_kv_heads, rope, temp, cap):
    layer, variables, x = self._setup(
        num_kv_heads=num_kv_heads, rope_min_max_timescales=rope,
        atten_temp=temp, atten_logit_cap=cap,
    )
    if num_kv_heads == 1:
      self.assertEqual(variables['params']['key']['w'].shape, (D, H))
    pos = np.array([[0, 1, 2, 3], [5, 6, 7, 8]])
    mask = gqa.attention_mask(np.array([[1, 1, 1, 1], [1, 1, 2, 2]]))
    out, probs = layer.apply(variables, x, x, x, mask, pos, pos)
    ref_out, ref_probs = np_gqa(
        variables['params'], x, np.asarray(mask[:, 0]),
        pos if rope else None, temp, cap,
    )
    self.assertAllClose(out, ref_out, atol=2e-5, rtol=1e-4)
    self.assertAllClose(probs, ref_probs, atol=2e-6)

  def test_boolean_and_additive_masks_agree(self):
    layer, variables, x = self._setup()
    paddings = np.array([[0, 0, 0, 1], [0, 0, 1, 1]], np.float32)
    additive = jnp.minimum(
        jnp.where(gqa.causal_mask(T), -1e9, 0.0),
        jnp.asarray(gqa.padding_mask(paddings)) * -1e9,
    )
    boolean = gqa.causal_mask(T) | (gqa.padding_mask(paddings) > 0)
    out_add, _ = layer.apply(variables, x, x, x, additive)
    out_bool, _ = layer.apply(variables, x, x, x, boolean)
    self.assertAllClose(out_add, out_bool)
    ref, _ = np_gqa(variables['params'], x, np.asarray(boolean[:, 0]))
    self.assertAllClose(out_bool, ref, atol=2e-5, rtol=1e-4)

  @parameterized.named_parameters(('two_kv_heads', 2), ('one_kv_head', 1))
  def test_extend_step_matches_fprop(self, num_kv_heads):
    layer, variables, x = self._setup(
        num_kv_heads=num_kv_heads, rope_min_max_timescales=(1, 10_000)
    )
    mask = gqa.causal_mask(T)
    expected, _ = layer.apply(variables, x, x, x, mask)
    _, cache = layer.apply(
        variables, B, T, method=layer.init_states, mutable=[DECODE_CACHE]
    )
    for t in range(T):
      step_mask = (jnp.arange(T) > t)[None, None, :]
      out, cache = layer.apply(
          {**variables, **cache}, x[:, t], atten_mask=step_mask,
          time_step=t, segment_pos=None, method=layer.extend_step,
          mutable=[DECODE_CACHE])
      self.assertAllClose(out, expected[:, t], atol=2e-5, rtol=1e-4)

  def test_bad_kv_heads_fail(self):
    layer = base_layer.instantiate(config(num_kv_heads=3))
    x = jnp.ones((1, 2, D))
    with self.assertRaisesRegex(ValueError, 'GroupedQueryAttention.*divide'):
      layer.init(jax.random.PRNGKey(0), x, x, x, gqa.causal_mask(2))


class ApplyDropoutTest(test_utils.TestCase):

  def test_kept_entries_are_scaled_and_the_mask_broadcasts(self):
    x = jnp.arange(1.0, 1.0 + 4 * 50 * 3).reshape(4, 50, 3)
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(
        gqa.apply_dropout(x, key, 0.0), x)
    y = np.asarray(gqa.apply_dropout(x, key, 0.25, (2,)))
    kept = y != 0
    np.testing.assert_allclose(y[kept], np.asarray(x)[kept] / 0.75,
                               rtol=1e-6)
    # One mask entry for the three entries along axis 2.
    self.assertTrue((kept == kept[:, :, :1]).all())
    self.assertBetween(kept.mean(), 0.6, 0.9)


if __name__ == '__main__':
  absltest.main()
