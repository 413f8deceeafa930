"""Tests of praxis.layers.attentions against numpy attention written here."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import normalizations

instantiate = base_layer.instantiate
DECODE_CACHE = base_layer.DECODE_CACHE
NEG = -0.7 * np.finfo(np.float32).max


# ----------------------------------------------------------------------------
# Numpy references.
# ----------------------------------------------------------------------------


def np_softplus(x):
  return np.log1p(np.exp(x))


def np_softmax(x):
  x = x - x.max(-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(-1, keepdims=True)


def np_rope(x, pos, max_timescale=10_000):
  """Rotates halves of the last dim of x [B, T, N, H] by positions [B, T]."""
  h = x.shape[-1]
  timescale = max_timescale ** (2 * np.arange(h // 2) / h)
  angle = pos[:, :, None, None] / timescale
  a, b = x[..., : h // 2], x[..., h // 2 :]
  sin, cos = np.sin(angle), np.cos(angle)
  return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def np_attention(params, xq, xkv, allowed, *, per_dim_scale=True, cap=0.0,
                 rope_pos=None):
  """Multi-head attention; `allowed` [B, T, S] is True where keys are seen."""
  q = np.einsum('btd,dnh->btnh', xq, params['query']['w'])
  q = q + params['query']['b']
  k = np.einsum('bsd,dkh->bskh', xkv, params['key']['w']) + params['key']['b']
  v = np.einsum('bsd,dkh->bskh', xkv, params['value']['w'])
  v = v + params['value']['b']
  if rope_pos is not None:
    q, k = np_rope(q, rope_pos), np_rope(k, rope_pos)
  n, h = q.shape[2], q.shape[3]
  k = np.repeat(k, n // k.shape[2], axis=2)
  v = np.repeat(v, n // v.shape[2], axis=2)
  if per_dim_scale:
    scale = np_softplus(params['per_dim_scale']['per_dim_scale'])
    q = q * scale / np_softplus(0.0) / np.sqrt(h)
  else:
    q = q / np.sqrt(h)
  logits = np.einsum('btnh,bsnh->bnts', q, k)
  if cap:
    logits = cap * np.tanh(logits / cap)
  logits = np.where(allowed[:, None], logits, -1e30)
  probs = np_softmax(logits)
  encoded = np.einsum('bnts,bsnh->btnh', probs, v)
  out = np.einsum('btnh,dnh->btd', encoded, params['post']['w'])
  return out + params['post']['b'], probs


def atten_config(**kwargs):
  defaults = {'name': 'atten', 'input_dim': 8, 'hidden_dim': 8, 'num_heads': 4}
  defaults.update(kwargs)
  return pax_fiddle.Config(attentions.DotProductAttention, **defaults)


def randomize(rng, shapes):
  return jax.tree.map(
      lambda v: jnp.asarray(0.5 * rng.standard_normal(v.shape), jnp.float32),
      shapes,
  )


def init_random(test, layer, *inputs):
  """Variables of `layer` (shapes from tracing its init), random normal."""
  shapes = jax.eval_shape(layer.init, jax.random.PRNGKey(1), *inputs)
  return randomize(test.np_rng, shapes)


# ----------------------------------------------------------------------------
# Masks.
# ----------------------------------------------------------------------------


class MasksTest(test_utils.TestCase):

  def test_causal_mask(self):
    mask = attentions.causal_mask(jnp.zeros((2, 4, 3)))
    expected = np.triu(np.full((4, 4), NEG, np.float32), k=1)
    self.assertAllClose(mask, expected[None, None])

  def test_segment_mask(self):
    seg = np.array([[1, 1, 2, 2], [1, 2, 3, 3]])
    mask = np.asarray(attentions.segment_mask(seg))
    expected = np.where(seg[:, :, None] == seg[:, None, :], 0.0, NEG)
    self.assertAllClose(mask, expected[:, None])

  def test_segment_mask_with_source(self):
    seg, src = np.array([[1, 2]]), np.array([[2, 2, 1]])
    mask = np.asarray(attentions.segment_mask(seg, src))
    self.assertEqual(mask.shape, (1, 1, 2, 3))
    self.assertArraysEqual(
        mask[0, 0] == 0, np.array([[False, False, True], [True, True, False]])
    )

  def test_causal_segment_mask(self):
    seg = np.array([[1, 1, 2, 2]])
    mask = np.asarray(attentions.causal_segment_mask(seg))
    t, s = np.arange(4)[:, None], np.arange(4)[None, :]
    allowed = (s <= t) & (seg[0][:, None] == seg[0][None, :])
    self.assertAllClose(mask[0, 0], np.where(allowed, 0.0, NEG))

  def test_causal_segment_mask_with_prefix(self):
    # Keys of the first two (input) positions are visible to everyone.
    seg = np.array([[1, 1, 1, 1]])
    causal = np.array([[0, 0, 1, 1]])
    mask = np.asarray(attentions.causal_segment_mask(seg, jnp.float32, causal))
    t, s = np.arange(4)[:, None], np.arange(4)[None, :]
    allowed = (s <= t) | (causal[0][None, :] == 0)
    self.assertAllClose(mask[0, 0], np.where(allowed, 0.0, NEG))

  def test_convert_paddings_to_mask(self):
    pad = np.array([[0.0, 0.0, 1.0]])
    mask = attentions.convert_paddings_to_mask(pad)
    self.assertAllClose(mask, np.array([[[[0.0, 0.0, NEG]]]]))

  def test_limited_context_mask(self):
    mask = np.asarray(attentions.limited_context_mask(2, 1, 5))
    t, s = np.arange(5)[:, None], np.arange(5)[None, :]
    allowed = (s > t - 2) & (s <= t + 1)
    self.assertAllClose(mask, np.where(allowed, 0.0, NEG))  # [T, T], as Pax.
    # More columns than rows: [T, C].
    wide = np.asarray(attentions.limited_context_mask(2, 1, 3,
                                                      column_time_size=6))
    t, s = np.arange(3)[:, None], np.arange(6)[None, :]
    self.assertAllClose(wide, np.where((s > t - 2) & (s <= t + 1), 0.0, NEG))

  def test_merge_masks_expands_key_mask(self):
    pad = attentions.convert_paddings_to_mask(np.array([[0.0, 1.0]]))
    causal = attentions.causal_mask(jnp.zeros((1, 2, 1)))
    merged = np.asarray(attentions.merge_masks(pad, causal))
    # Padded position 1 neither sees nor is seen.
    self.assertArraysEqual(
        merged[0, 0] == 0, np.array([[True, False], [False, False]])
    )

  def test_non_float_input_fails(self):
    with self.assertRaisesRegex(ValueError, 'float'):
      attentions.causal_mask(jnp.zeros((1, 2), jnp.int32))


# ----------------------------------------------------------------------------
# Math functions.
# ----------------------------------------------------------------------------


class MathTest(test_utils.TestCase):

  def test_extra_logit_adds_to_denominator(self):
    logits = self.np_rng.standard_normal((2, 5)).astype(np.float32)
    probs = attentions.softmax_with_extra_logit(logits, 0.5)
    e = np.exp(logits)
    expected = e / (e.sum(-1, keepdims=True) + np.exp(0.5))
    self.assertAllClose(probs, expected, atol=1e-6)

  def test_zero_fully_masked(self):
    q = jnp.ones((1, 2, 1, 2))
    kv = jnp.ones((1, 3, 1, 2))
    mask = np.zeros((1, 1, 2, 3), np.float32)
    mask[0, 0, 1] = NEG  # Query 1 sees nothing.
    encoded, _ = attentions.dot_product_attention(
        q, kv, kv, mask, zero_fully_masked=True
    )
    self.assertAllClose(encoded[0, :, 0], np.array([[1.0, 1.0], [0.0, 0.0]]))

  def test_bfloat16_probs_are_softmax_in_float32(self):
    q = self.np_rng.standard_normal((1, 3, 2, 4)).astype(np.float32)
    k = self.np_rng.standard_normal((1, 3, 2, 4)).astype(np.float32)
    mask = np.zeros((1, 1, 1, 3), np.float32)
    bf16 = lambda x: jnp.asarray(x, jnp.bfloat16)
    _, probs = attentions.dot_product_attention(
        bf16(q), bf16(k), bf16(k), mask
    )
    self.assertEqual(probs.dtype, jnp.bfloat16)
    q32 = np.asarray(bf16(q), np.float32)
    k32 = np.asarray(bf16(k), np.float32)
    logits = np.einsum('btnh,bsnh->bnts', q32, k32)
    ref = np_softmax(np.asarray(bf16(logits), np.float32))
    self.assertAllClose(np.asarray(probs, np.float32), ref, atol=1e-2)

  def test_mismatched_heads_fail(self):
    with self.assertRaisesRegex(ValueError, 'K dividing N'):
      attentions.dot_product_attention(
          jnp.ones((1, 2, 3, 4)), jnp.ones((1, 2, 2, 4)),
          jnp.ones((1, 2, 2, 4)), jnp.zeros((1, 1, 1, 2)),
      )


# ----------------------------------------------------------------------------
# DotProductAttention.
# ----------------------------------------------------------------------------


class DotProductAttentionTest(test_utils.TestCase):

  def _inputs(self, b=2, t=4, d=8):
    x = self.np_rng.standard_normal((b, t, d)).astype(np.float32)
    paddings = np.zeros((b, t), np.float32)
    paddings[-1, -2:] = 1.0
    return x, paddings

  @parameterized.named_parameters(
      ('mha', 4, 0.0),
      ('gqa', 2, 0.0),
      ('mqa_capped', 1, 2.0),
  )
  def test_fprop_matches_numpy(self, num_kv_heads, cap):
    layer = instantiate(
        atten_config(num_kv_heads=num_kv_heads, atten_logit_cap=cap)
    )
    x, paddings = self._inputs()
    mask = jnp.minimum(
        attentions.convert_paddings_to_mask(paddings),
        attentions.causal_mask(x),
    )
    variables = init_random(self, layer, x, x, x, mask)
    out, probs = layer.apply(variables, x, x, x, mask)
    t = np.arange(4)
    allowed = (t[None, None, :] <= t[None, :, None]) & (
        paddings[:, None, :] == 0
    )
    ref_out, ref_probs = np_attention(
        variables['params'], x, x, allowed, cap=cap
    )
    self.assertAllClose(out, ref_out, atol=2e-5, rtol=1e-4)
    self.assertAllClose(probs, ref_probs, atol=2e-6)

  def test_query_scale_without_per_dim_scale(self):
    layer = instantiate(atten_config(internal_enable_per_dim_scale=False))
    x, _ = self._inputs()
    seg = np.array([[1, 1, 2, 2], [1, 2, 2, 2]])
    mask = attentions.segment_mask(seg)
    variables = init_random(self, layer, x, x, x, mask)
    self.assertNotIn('per_dim_scale', variables['params'])
    out, _ = layer.apply(variables, x, x, x, mask)
    allowed = seg[:, :, None] == seg[:, None, :]
    ref, _ = np_attention(
        variables['params'], x, x, allowed, per_dim_scale=False
    )
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)

  def test_cross_attention_with_other_lengths(self):
    layer = instantiate(atten_config(num_kv_heads=2))
    xq, _ = self._inputs()
    xkv, _ = self._inputs(t=3)
    pad = np.array([[0, 0, 1], [0, 1, 1]], np.float32)
    mask = attentions.convert_paddings_to_mask(pad)
    variables = init_random(self, layer, xq, xkv, xkv, mask)
    out, probs = layer.apply(variables, xq, xkv, xkv, mask)
    allowed = np.broadcast_to(pad[:, None, :] == 0, (2, 4, 3))
    ref_out, _ = np_attention(variables['params'], xq, xkv, allowed)
    self.assertEqual(probs.shape, (2, 4, 4, 3))
    self.assertAllClose(out, ref_out, atol=2e-5, rtol=1e-4)

  def test_combined_qkv_matches_separate_projections(self):
    layer = instantiate(atten_config(combine_qkv=True))
    x, _ = self._inputs()
    mask = attentions.causal_mask(x)
    # Self-attention only: the three inputs must be one array, not three
    # tracers of it.
    shapes = jax.eval_shape(
        lambda x: layer.init(jax.random.PRNGKey(1), x, x, x, mask), x
    )
    variables = randomize(self.np_rng, shapes)
    out, _ = layer.apply(variables, x, x, x, mask)
    p = dict(variables['params'])
    qkv = p.pop('combined_qkv')
    for i, name in enumerate(('query', 'key', 'value')):
      p[name] = {'w': qkv['w'][i], 'b': qkv['b'][i]}
    allowed = np.tril(np.ones((4, 4), bool))[None]
    ref, _ = np_attention(p, x, x, allowed)
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)

  def test_rotary_position_embedding(self):
    layer = instantiate(atten_config(use_rotary_position_emb=True))
    x, _ = self._inputs()
    pos = np.array([[0, 1, 2, 3], [3, 4, 5, 6]], np.int32)
    mask = attentions.causal_mask(x)
    variables = init_random(self, layer, x, x, x, mask, pos, pos)
    out, _ = layer.apply(variables, x, x, x, mask, pos, pos)
    allowed = np.tril(np.ones((4, 4), bool))[None]
    ref, _ = np_attention(variables['params'], x, x, allowed, rope_pos=pos)
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)

  def test_output_projection_nhd_shape(self):
    layer = instantiate(atten_config(output_proj_use_nhd_shape=True))
    x, _ = self._inputs()
    mask = attentions.causal_mask(x)
    variables = init_random(self, layer, x, x, x, mask)
    self.assertEqual(variables['params']['post']['w'].shape, (4, 2, 8))
    out, _ = layer.apply(variables, x, x, x, mask)
    p = dict(variables['params'])
    p['post'] = {'w': np.transpose(p['post']['w'], (2, 0, 1)),
                 'b': p['post']['b']}
    ref, _ = np_attention(p, x, x, np.tril(np.ones((4, 4), bool))[None])
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)

  def test_fewer_kv_heads_are_not_sharded_over_heads(self):
    p = atten_config(
        num_kv_heads=1, ici_mesh_shape=[2, 4], mesh_axis_names=['data', 'mdl']
    )
    p.weight_split_dims_mapping.proj = ['data', 'mdl', None]
    x = jnp.ones((2, 4, 8))
    meta = instantiate(p).abstract_init_with_metadata(
        x, x, x, jnp.zeros((1, 1, 4, 4))
    )['params']
    sharding = lambda name: tuple(meta[name]['w'].tensor_split_dims_mapping)
    self.assertEqual(sharding('query'), ('data', 'mdl', None))
    self.assertEqual(sharding('key'), ('data', None, None))
    self.assertEqual(sharding('value'), ('data', None, None))

  @parameterized.named_parameters(
      ('kv_heads', {'num_kv_heads': 3}, 'num_kv_heads 3 must divide'),
      ('hidden', {'hidden_dim': 6, 'num_heads': 4}, 'not a multiple'),
      ('input_dim', {'input_dim': 0}, 'input_dim must be set'),
      ('combine', {'combine_qkv': True, 'num_kv_heads': 2}, 'combine_qkv'),
  )
  def test_bad_config_fails_naming_layer(self, kwargs, message):
    layer = instantiate(atten_config(**kwargs))
    x = jnp.ones((1, 2, 8))
    with self.assertRaisesRegex(ValueError, rf'DotProductAttention.*{message}'):
      layer.init(jax.random.PRNGKey(0), x, x, x, jnp.zeros((1, 1, 2, 2)))

  def test_bad_mask_shape_fails(self):
    layer = instantiate(atten_config())
    x = jnp.ones((1, 3, 8))
    with self.assertRaisesRegex(ValueError, r'atten_mask \(1, 3, 3\)'):
      layer.init(jax.random.PRNGKey(0), x, x, x, jnp.zeros((1, 3, 3)))


# ----------------------------------------------------------------------------
# Incremental decoding.
# ----------------------------------------------------------------------------


def step_mask(t, seq_len):
  return jnp.where(jnp.arange(seq_len) > t, NEG, 0.0)[None, None, :]


class ExtendStepTest(test_utils.TestCase):

  @parameterized.named_parameters(
      ('gqa', {'num_kv_heads': 2}),
      (
          'mqa_rotary_consolidated',
          {
              'use_rotary_position_emb': True,
              'consolidate_rope_key_state': True,
              'num_kv_heads': 1,
          },
      ),
      ('primer_dconv', {'dconv_qkv': True, 'num_kv_heads': 2}),
      (
          'relative_bias_qk_norm',
          {
              'relative_bias_tpl': pax_fiddle.Config(attentions.RelativeBias),
              'ln_tpl': pax_fiddle.Config(normalizations.RmsNorm),
          },
      ),
  )
  def test_extend_step_matches_fprop(self, kwargs):
    layer = instantiate(atten_config(**kwargs))
    b, t = 2, 4
    x = self.np_rng.standard_normal((b, t, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    variables = init_random(self, layer, x, x, x, mask)
    expected, _ = layer.apply(variables, x, x, x, mask)
    # Fill the cache from other inputs: every step must overwrite its slot.
    garbage = self.np_rng.standard_normal((b, t, 8)).astype(np.float32)
    _, cache = layer.apply(
        variables, garbage, garbage, garbage, mask, mutable=[DECODE_CACHE]
    )

    def step(cache, x_t, time_step):
      return layer.apply(
          {**variables, **cache},
          x_t,
          atten_mask=step_mask(time_step, t),
          time_step=time_step,
          segment_pos=None,
          method=layer.extend_step,
          mutable=[DECODE_CACHE],
      )

    for i in range(t):
      out, cache = step(cache, x[:, i], i)
      self.assertAllClose(out, expected[:, i], atol=2e-5, rtol=1e-4)

  def test_init_states_then_decode_with_segment_pos(self):
    layer = instantiate(atten_config(use_rotary_position_emb=True))
    b, t = 2, 4
    x = self.np_rng.standard_normal((b, t, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    variables = init_random(self, layer, x, x, x, mask)
    pos = np.arange(t)[None] + np.array([[3], [0]])  # Not the time steps.
    expected, _ = layer.apply(variables, x, x, x, mask, pos, pos)
    _, cache = layer.apply(
        variables, b, t, method=layer.init_states, mutable=[DECODE_CACHE]
    )
    self.assertEqual(
        cache[DECODE_CACHE]['key_state'].shape, (b, t, 4, 2)
    )
    for i in range(t):
      out, cache = layer.apply(
          {**variables, **cache}, x[:, i], atten_mask=step_mask(i, t),
          time_step=i, segment_pos=pos[:, i], method=layer.extend_step,
          mutable=[DECODE_CACHE])
      self.assertAllClose(out, expected[:, i], atol=2e-5, rtol=1e-4)

  def test_cross_attention_extend_step_repeats_cached_batch(self):
    layer = instantiate(atten_config(num_kv_heads=2))
    enc = self.np_rng.standard_normal((1, 3, 8)).astype(np.float32)
    xq = self.np_rng.standard_normal((2, 4, 8)).astype(np.float32)
    mask = jnp.zeros((1, 1, 1, 3))
    enc2 = np.repeat(enc, 2, axis=0)
    variables = init_random(self, layer, xq, enc2, enc2, mask)
    expected, _ = layer.apply(variables, xq, enc2, enc2, mask)
    # The cache holds the encoder's keys and values for one example; the
    # decoder batch holds two samples of it.
    _, cache = layer.apply(
        variables, enc, enc, enc, mask, mutable=[DECODE_CACHE]
    )
    for i in range(2):
      out = layer.apply(
          {**variables, **cache}, xq[:, i], atten_mask=jnp.zeros((1, 1, 3)),
          time_step=i, segment_pos=None, is_cross_attention=True,
          method=layer.extend_step)
      self.assertAllClose(out, expected[:, i], atol=2e-5, rtol=1e-4)

  def test_transform_decode_state(self):
    layer = instantiate(atten_config())
    x = self.np_rng.standard_normal((2, 4, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    variables = init_random(self, layer, x, x, x, mask)
    _, cache = layer.apply(variables, x, x, x, mask, mutable=[DECODE_CACHE])
    seen = []

    def flip_time(state, batch_dim, time_dim):
      seen.append((batch_dim, time_dim))
      return jnp.flip(state, axis=time_dim)

    _, new_cache = layer.apply(
        {**variables, **cache}, flip_time,
        method=layer.transform_decode_state, mutable=[DECODE_CACHE])
    self.assertEqual(seen, [(0, 1), (0, 1)])
    for name in ('key_state', 'value_state'):
      self.assertAllClose(
          new_cache[DECODE_CACHE][name],
          np.flip(cache[DECODE_CACHE][name], axis=1),
      )


if __name__ == '__main__':
  absltest.main()
