"""Tests of multi_query_attention against numpy and the real Pax 1.4."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import decoder_hparams
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import multi_query_attention as mqa

DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX = base_layer.PREFIX_DECODE_CACHE
REF = os.path.join(os.path.dirname(__file__), 'testdata',
                   'multi_query_attention_ref.npz')


def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_mqa(v, x, mask, n, k):
  """Numpy MQA/GQA: query head i reads key/value head i // (n // k)."""
  q = np.einsum('btd,dnh->btnh', x, v['query']['w']) + v['query']['b']
  if k == 1:
    kp = (x @ v['key']['w'] + v['key']['b'])[:, :, None]
    vp = (x @ v['value']['w'] + v['value']['b'])[:, :, None]
  else:
    kp = np.einsum('btd,dnh->btnh', x, v['key']['w']) + v['key']['b']
    vp = np.einsum('btd,dnh->btnh', x, v['value']['w']) + v['value']['b']
  h = q.shape[-1]
  kp, vp = np.repeat(kp, n // k, 2), np.repeat(vp, n // k, 2)
  logits = np.einsum('btnh,bsnh->bnts', q * h**-0.5, kp) + mask
  probs = np_softmax(logits)
  ctx = np.einsum('bnts,bsnh->btnh', probs, vp)
  out = np.einsum('btnh,dnh->btd', ctx, v['post']['w']) + v['post']['b']
  return out, probs


def layer_and_vars(x, **kw):
  p = pax_fiddle.Config(mqa.MultiQueryDotProductAttention, name='mqa',
                        input_dim=8, hidden_dim=8, num_heads=4, **kw)
  layer = base_layer.instantiate(p)
  variables = layer.init(jax.random.PRNGKey(1), x, x, x,
                         attentions.causal_mask(x))
  return layer, variables


def decode_all(layer, variables, x, mask, **step_kw):
  zeros = jnp.zeros_like(x)
  _, cache = layer.apply(variables, zeros, zeros, zeros, mask,
                         mutable=[DECODE_CACHE])
  state = py_utils.merge_dict(cache, variables)
  outs = []
  for t in range(x.shape[1]):
    out, cache = layer.apply(
        state, method=layer.extend_step, query_vec=x[:, t],
        atten_mask=mask[:, :, t], time_step=t, segment_pos=None,
        mutable=[DECODE_CACHE], **step_kw)
    state = py_utils.merge_dict(cache, variables)
    outs.append(out)
  return jnp.stack(outs, 1)


class MultiQueryAttentionTest(test_utils.TestCase):

  @parameterized.parameters(1, 2)
  def test_forward_matches_numpy(self, k):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)
    layer, variables = layer_and_vars(x, num_kv_heads=k)
    mask = attentions.causal_mask(x)
    out, probs = layer.apply(variables, x, x, x, mask)
    v = jax.tree_util.tree_map(np.asarray, variables['params'])
    want_out, want_probs = np_mqa(v, x, np.asarray(mask), 4, k)
    self.assertAllClose(out, want_out, atol=1e-5)
    if k > 1:  # As Pax: the [B, N, T, S] values reshaped to [B, T, N, S].
      want_probs = want_probs.reshape(2, 5, 4, 5)
    self.assertAllClose(probs, want_probs, atol=1e-5)
    shapes = {'key': (8, 2), 'value': (8, 2)} if k == 1 else {
        'key': (8, 2, 2), 'value': (8, 2, 2)}
    for name, shape in shapes.items():
      self.assertEqual(v[name]['w'].shape, shape)
    self.assertEqual(v['query']['w'].shape, (8, 4, 2))

  def test_cache_layout(self):
    x = np.ones((2, 3, 8), np.float32)
    layer, variables = layer_and_vars(x, use_rotary_position_emb=True)
    _, cache = layer.apply(variables, x, x, x, attentions.causal_mask(x),
                           mutable=[DECODE_CACHE])
    shapes = {k: v.shape for k, v in cache[DECODE_CACHE].items()}
    self.assertEqual(shapes, {'key_state': (2, 3, 2), 'value_state': (2, 3, 2),
                              'key_post_rotary_pos_emb': (2, 3, 2)})

  @parameterized.parameters(
      dict(num_kv_heads=1, use_rotary_position_emb=True),
      dict(num_kv_heads=2, use_rotary_position_emb=True,
           consolidate_rope_key_state=True),
  )
  def test_extend_step_matches_forward(self, **kw):
    x = np.random.default_rng(1).normal(size=(2, 4, 8)).astype(np.float32)
    layer, variables = layer_and_vars(x, **kw)
    mask = attentions.causal_mask(x)
    want, _ = layer.apply(variables, x, x, x, mask)
    self.assertAllClose(decode_all(layer, variables, x, mask), want,
                        atol=1e-5)

  def test_chunked_equals_full(self):
    x = np.random.default_rng(2).normal(size=(2, 4, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    layer, variables = layer_and_vars(x)
    chunked, _ = layer_and_vars(x, chunked_attn_num_seq_split=2)
    want, _ = layer.apply(variables, x, x, x, mask)
    got, probs = chunked.apply(variables, x, x, x, mask)
    self.assertIsNone(probs)
    self.assertAllClose(got, want, atol=1e-5)

  def test_lazy_prefix_broadcast(self):
    p = pax_fiddle.Config(mqa.MultiQueryDotProductAttentionLPB, name='mqa',
                          input_dim=8, hidden_dim=8, num_heads=4)
    layer = base_layer.instantiate(p)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    variables = layer.init(jax.random.PRNGKey(1), x, x, x, mask)
    want, _ = layer.apply(variables, x, x, x, mask)
    prefix = x[:, :3]
    _, cache = layer.apply(variables, prefix, prefix, prefix,
                           attentions.causal_mask(prefix),
                           mutable=[DECODE_CACHE])
    state = py_utils.merge_dict(cache, variables)
    _, cache = layer.apply(state, 3, 2, method=layer.lazy_broadcast_prefix,
                           mutable=[DECODE_CACHE, PREFIX])
    state = py_utils.merge_dict(cache, variables)
    self.assertEqual(state[PREFIX]['key_state_0'].shape, (2, 3, 2))
    self.assertEqual(state[DECODE_CACHE]['key_state'].shape, (6, 2, 2))
    for t in (3, 4):
      out, cache = layer.apply(
          state, method=layer.extend_step,
          query_vec=jnp.repeat(x[:, t], 3, 0), atten_mask=mask[:, :, t],
          time_step=t, segment_pos=None, mutable=[DECODE_CACHE])
      state = dict(state, **cache)
      self.assertAllClose(out, jnp.repeat(want[:, t], 3, 0), atol=1e-5)

  def test_right_align_with_prefix(self):
    p = pax_fiddle.Config(mqa.MultiQueryDotProductAttentionLPB, name='mqa',
                          input_dim=8, hidden_dim=8, num_heads=4)
    layer = base_layer.instantiate(p)
    x = np.random.default_rng(4).normal(size=(2, 3, 8)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(1), x, x, x,
                           attentions.causal_mask(x))
    _, cache = layer.apply(variables, x, x, x, attentions.causal_mask(x),
                           mutable=[DECODE_CACHE])
    state = py_utils.merge_dict(cache, variables)
    _, cache = layer.apply(state, 2, 2, method=layer.lazy_broadcast_prefix,
                           mutable=[DECODE_CACHE, PREFIX])
    state = py_utils.merge_dict(cache, variables)
    prefix_keys = np.asarray(state[PREFIX]['key_state_0'])  # [2, 3, ...]
    chunk_keys = np.asarray(state[DECODE_CACHE]['key_state'])  # [4, 2, ...]
    # The last 2 prefix steps of each row, once per sample, then the chunk;
    # right_align_fn sees [batch, time, ...] (dims 0 and 1).
    seen = []
    def align(v, batch_dim, time_dim):
      seen.append((batch_dim, time_dim))
      return v[:, ::-1]
    _, cache = layer.apply(state, 2, align,
                           method=layer.right_align_decode_state_with_prefix,
                           mutable=[DECODE_CACHE, PREFIX])
    want = np.concatenate([np.repeat(prefix_keys[:, 1:], 2, 0), chunk_keys],
                          axis=1)[:, ::-1]
    self.assertAllClose(cache[DECODE_CACHE]['key_state'], want)
    self.assertEqual(seen[0], (0, 1))
    self.assertEqual(cache[PREFIX]['key_state_0'].shape[:2], (2, 0))

  def test_bad_config(self):
    x = np.ones((1, 2, 8), np.float32)
    with self.assertRaisesRegex(ValueError, 'num_kv_heads 3 must divide'):
      layer_and_vars(x, num_kv_heads=3)
    layer, _ = layer_and_vars(x)
    with self.assertRaisesRegex(NotImplementedError, 'LPB'):
      layer.apply({}, 1, 1, method=layer.lazy_broadcast_prefix)


class LanguageModelDecodeTest(test_utils.TestCase):
  """Greedy decoding of an LM with MQA follows its forward pass."""

  @parameterized.parameters(False, True)
  def test_greedy_decode_follows_forward_argmax(self, fprop_for_prefix):
    vocab, t = 16, 6
    lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=16,
                           vocab_size=vocab)
    lm.stacked_transformer_tpl.set(num_layers=1, num_heads=4, hidden_dims=32)
    lm.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl = (
        pax_fiddle.Config(mqa.MultiQueryDotProductAttention,
                          use_rotary_position_emb=True))
    decoder = decoder_hparams.GreedyDecoderHParams(seqlen=t, eos_id=-1)
    if fprop_for_prefix:
      decoder = decoder_hparams.GreedyDecoderHParams(
          eos_id=-1, fprop_for_prefix=True, max_decode_steps=t - 2)
    model = base_layer.instantiate(pax_fiddle.Config(
        models.LanguageModel, name='lm', lm_tpl=lm, decoder_tpl=decoder))
    ids = jnp.array([[1, 5, 7, 0], [1, 3, 0, 0]])
    batch = py_utils.NestedMap(
        ids=ids, labels=jnp.roll(ids, -1, 1), weights=jnp.ones((2, 4)),
        paddings=jnp.array([[0., 0, 0, 1], [0, 0, 1, 1]]))
    rng = np.random.default_rng(0)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)
    variables = jax.tree.map(
        lambda v: jnp.asarray(0.3 * rng.standard_normal(v.shape), v.dtype),
        shapes)
    (_, result, _), _ = model.apply(variables, batch, method=model.decode,
                                    mutable=[DECODE_CACHE])
    decoded = np.asarray(result.output_ids[:, 0])
    lengths = (3, 2)
    for row, n in enumerate(lengths):
      self.assertArraysEqual(decoded[row, :n], np.asarray(ids[row, :n]))
    full = py_utils.NestedMap(
        ids=jnp.asarray(decoded), labels=jnp.asarray(decoded),
        weights=jnp.ones(decoded.shape), paddings=jnp.zeros(decoded.shape))
    logits = model.apply(variables, full.ids, full.paddings,
                         method=lambda m, i, p: m.lm(i, p).logits)
    argmax = np.asarray(logits).argmax(-1)
    ends = np.asarray(result.decode_lengths[:, 0])
    for row, (n, end) in enumerate(zip(lengths, ends)):
      self.assertGreater(end, n)
      self.assertArraysEqual(argmax[row, n - 1:end - 1], decoded[row, n:end])


class RealPaxFixtureTest(test_utils.TestCase):
  """Outputs of Pax 1.4 (testdata/make_ref_multi_query_attention.py)."""

  def test_matches_pax(self):
    ref = np.load(REF)
    x = ref['x']
    mask = attentions.causal_mask(jnp.asarray(x))
    for name, cfg in json.loads(str(ref['configs'])).items():
      with self.subTest(name):
        p = pax_fiddle.Config(mqa.MultiQueryDotProductAttention, name='mqa',
                              **cfg)
        layer = base_layer.instantiate(p)
        prefix = f'{name}:var:'
        flat = {k[len(prefix):]: ref[k] for k in ref.files
                if k.startswith(prefix)}
        params = {'params': traverse_util.unflatten_dict(flat, sep='/')}
        encoded, probs = layer.apply(params, x, x, x, mask)
        self.assertAllClose(encoded, ref[f'{name}:encoded'], atol=2e-5)
        self.assertAllClose(probs, ref[f'{name}:probs'], atol=2e-5)
        self.assertAllClose(decode_all(layer, params, x, mask),
                            ref[f'{name}:decoded'], atol=2e-5)


if __name__ == '__main__':
  absltest.main()
