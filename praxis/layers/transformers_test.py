"""Tests of praxis.layers.transformers against numpy Transformer math."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import activations
from praxis.layers import grouped_query_attention
from praxis.layers import transformers

DECODE_CACHE = base_layer.DECODE_CACHE
NEG = -0.7 * np.finfo(np.float32).max
B, T, D, HIDDEN, HEADS = 2, 4, 8, 16, 2
instantiate = base_layer.instantiate


# ----------------------------------------------------------------------------
# Numpy references.
# ----------------------------------------------------------------------------


def np_ln(x, p):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * (1 + p['scale']) + p['bias']


def np_softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_attention(p, xq, xkv, allowed):
  """Multi-head attention with PerDimScale; allowed [B, T, S]."""
  q = np.einsum('btd,dnh->btnh', xq, p['query']['w']) + p['query']['b']
  k = np.einsum('bsd,dnh->bsnh', xkv, p['key']['w']) + p['key']['b']
  v = np.einsum('bsd,dnh->bsnh', xkv, p['value']['w']) + p['value']['b']
  scale = np.log1p(np.exp(p['per_dim_scale']['per_dim_scale']))
  q = q * scale / np.log(2.0) / np.sqrt(q.shape[-1])
  logits = np.einsum('btnh,bsnh->bnts', q, k)
  probs = np_softmax(np.where(allowed[:, None], logits, -1e30))
  encoded = np.einsum('bnts,bsnh->btnh', probs, v)
  return np.einsum('btnh,dnh->btd', encoded, p['post']['w']) + p['post']['b']


def np_ffn(p, x, paddings, act=lambda h: np.maximum(h, 0), policy='pre'):
  keep = 1.0 - paddings[..., None]
  h = np_ln(x, p['layer_norm']) if policy == 'pre' else x
  w1 = p['ffn_layer1']
  hidden = act(h @ w1['linear']['w'] + w1['bias']['b']) * keep
  w2 = p['ffn_layer2']
  out = (hidden @ w2['linear']['w'] + w2['bias']['b']) * keep
  if policy == 'post':
    out = np_ln(out, p['layer_norm'])
  return x + out


def np_transformer(p, x, paddings, allowed):
  h = np_ln(x, p['layer_norm'])
  y = x + np_attention(p['self_attention'], h, h, allowed)
  return np_ffn(p['ff_layer'], y, paddings)


def random_variables(test, layer, *args):
  """Variables of `layer` (shapes from tracing its init), random normal."""
  shapes = jax.eval_shape(layer.init, jax.random.PRNGKey(0), *args)
  return jax.tree.map(
      lambda v: jnp.asarray(
          0.3 * test.np_rng.standard_normal(v.shape), jnp.float32
      ),
      shapes,
  )


def run(layer, variables, *args, **kwargs):
  """`layer.apply(variables, *args, **kwargs)`, compiled as one program."""
  return jax.jit(functools.partial(layer.apply, **kwargs))(variables, *args)


def stack_config(**kwargs):
  defaults = {'name': 'stack', 'num_layers': 2, 'model_dims': D,
              'hidden_dims': HIDDEN, 'num_heads': HEADS,
              'mask_self_attention': True}
  defaults.update(kwargs)
  return pax_fiddle.Config(transformers.StackedTransformer, **defaults)


def repeated_config(**kwargs):
  return pax_fiddle.Config(
      transformers.StackedTransformerRepeated, name='repeated', x_times=2,
      block=stack_config(num_layers=1), **kwargs,
  )


# ----------------------------------------------------------------------------
# Masks.
# ----------------------------------------------------------------------------


class MasksTest(test_utils.TestCase):

  def test_fprop_masks(self):
    x = jnp.zeros((B, T, D))
    paddings = np.array([[0, 0, 0, 1], [0, 0, 1, 1]], np.float32)
    seg = np.array([[1, 1, 2, 2], [1, 1, 1, 1]])
    seg_mask = np.where(seg[:, None, :, None] == seg[:, None, None, :], 0, NEG)
    cross_pad = np.array([[0, 1, 1], [0, 0, 0]], np.float32)
    mask, cross = transformers.compute_attention_masks_for_fprop(
        x, paddings, True, seg_mask, jnp.zeros((B, 3, D)), cross_pad
    )
    t, s = np.arange(T)[:, None], np.arange(T)[None, :]
    # As in Pax, merging the padding mask with a [T, T] mask also masks the
    # padded queries' rows.
    allowed = (s <= t) & (paddings[:, None, :] == 0) & (
        seg[:, :, None] == seg[:, None, :]
    ) & (paddings[:, :, None] == 0)
    self.assertArraysEqual(np.asarray(mask[:, 0]) == 0, allowed)
    self.assertArraysEqual(
        np.asarray(cross)[:, 0, 0] == 0, cross_pad == 0
    )

  def test_fold_padding_uses_segment_mask_only(self):
    seg_mask = np.zeros((B, 1, T, T), np.float32)
    mask, cross = transformers.compute_attention_masks_for_fprop(
        jnp.zeros((B, T, D)), None, False, seg_mask,
        fold_padding_with_segment_mask=True,
    )
    self.assertAllClose(mask, seg_mask)
    self.assertIsNone(cross)

  def test_extend_step_masks(self):
    mask, cross = transformers.compute_attention_masks_for_extend_step(
        2, 5, cross_paddings=np.array([[0.0, 1.0]])
    )
    self.assertAllClose(mask, np.array([[[0, 0, 0, NEG, NEG]]], np.float32))
    self.assertAllClose(cross, np.array([[[[0.0, NEG]]]], np.float32))

  def test_missing_paddings_fail(self):
    with self.assertRaisesRegex(ValueError, 'paddings'):
      transformers.compute_attention_masks_for_fprop(jnp.zeros((1, 2, 3)))


# ----------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------


class FeedForwardTest(test_utils.TestCase):

  @parameterized.named_parameters(
      ('pre', 'pre', False), ('post', 'post', False), ('gated', 'pre', True)
  )
  def test_matches_numpy(self, policy, gated):
    p = pax_fiddle.Config(
        transformers.TransformerFeedForward, name='ffn', input_dims=D,
        hidden_dims=HIDDEN, norm_policy=policy, use_gated_activation=gated,
        activation_tpl=pax_fiddle.Config(activations.GELU, approximate=True),
    )
    layer = instantiate(p)
    x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    paddings = np.array([[0, 0, 0, 1], [0, 0, 0, 0]], np.float32)
    variables = random_variables(self, layer, x)
    out = run(layer, variables, x, paddings)
    params = variables['params']
    gelu = lambda h: np.asarray(jax.nn.gelu(h, approximate=True))
    if gated:
      g = params['ffn_layer1_gate']
      gate = lambda h: gelu(
          np.einsum('btd,dh->bth', h, g['linear']['w']) + g['bias']['b']
      )
      h = np_ln(x, params['layer_norm'])
      w1 = params['ffn_layer1']
      hidden = gate(h) * (h @ w1['linear']['w'] + w1['bias']['b'])
      w2 = params['ffn_layer2']
      keep = 1 - paddings[..., None]
      ref = x + ((hidden * keep) @ w2['linear']['w'] + w2['bias']['b']) * keep
    else:
      ref = np_ffn(params, x, paddings, gelu, policy)
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)

  def test_bad_norm_policy_fails(self):
    layer = instantiate(pax_fiddle.Config(
        transformers.TransformerFeedForward, name='ffn', input_dims=D,
        hidden_dims=HIDDEN, norm_policy='sideways'))
    with self.assertRaisesRegex(ValueError, r'\(ffn\): norm_policy'):
      layer.init(jax.random.PRNGKey(0), jnp.ones((1, 2, D)))


class MoeTest(test_utils.TestCase):

  def test_top2_mixture_and_load_balance_loss(self):
    layer = instantiate(pax_fiddle.Config(
        transformers.TransformerFeedForwardMoe, name='moe', input_dims=D,
        hidden_dims=HIDDEN, num_experts=3, num_groups=1))
    x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    variables = random_variables(self, layer, x)
    out, updated = run(layer, variables, x, mutable=[base_layer.AUX_LOSS])
    p = variables['params']
    h = np_ln(x, p['layer_norm'])
    probs = np_softmax(h @ p['gate'])
    ref = np.zeros_like(x)
    first = np.zeros(3)
    for b in range(B):
      for t in range(T):
        top = np.argsort(-probs[b, t])[:2]
        first[top[0]] += 1
        for e in top:
          hidden = np.maximum(h[b, t] @ p['wi_0'][e], 0)
          weight = probs[b, t, e] / probs[b, t, top].sum()
          ref[b, t] += weight * (hidden @ p['wo_0'][e])
    self.assertAllClose(out, x + ref, atol=2e-5, rtol=1e-4)
    aux = updated[base_layer.AUX_LOSS]['aux_moe_load_balance_loss'].value
    expected = 3 * np.sum(first / (B * T) * probs.reshape(-1, 3).mean(0))
    self.assertAllClose(aux, expected, atol=1e-6)


class TransformerTest(test_utils.TestCase):

  def test_layer_matches_numpy(self):
    layer = instantiate(pax_fiddle.Config(
        transformers.Transformer, name='tr', input_dims=D, hidden_dims=HIDDEN,
        num_heads=HEADS))
    x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    paddings = np.array([[0, 0, 0, 1], [0, 0, 0, 0]], np.float32)
    mask, _ = transformers.compute_attention_masks_for_fprop(
        x, paddings, causal_attention=True
    )
    variables = random_variables(self, layer, x, paddings, mask)
    out, probs = run(layer, variables, x, paddings, mask)
    t = np.arange(T)
    allowed = (t[None, None, :] <= t[None, :, None]) & (
        paddings[:, None, :] == 0
    ) & (paddings[:, :, None] == 0)  # padded query rows masked, as in Pax
    ref = np_transformer(variables['params'], x, paddings, allowed)
    self.assertAllClose(out, ref, atol=2e-5, rtol=1e-4)
    self.assertEqual(probs.self_atten.shape, (B, HEADS, T, T))


# ----------------------------------------------------------------------------
# Stacks.
# ----------------------------------------------------------------------------


def decode_all(test, layer, variables, inputs, fprop_args=(), **step_kwargs):
  """Checks that decoding every step reproduces the forward pass.

  (The attention tests check that decoding overwrites stale caches; here the
  caches come from the forward pass itself, which saves a compilation.)

  Args:
    test: The test case.
    layer: A stack.
    variables: Its variables.
    inputs: [B, T, D].
    fprop_args: Inputs of the forward pass after inputs and paddings.
    **step_kwargs: Keyword inputs of extend_step.

  Returns:
    The decoder cache after the last step.
  """
  paddings = jnp.zeros(inputs.shape[:2])
  expected, cache = run(
      layer, variables, inputs, paddings, *fprop_args, mutable=[DECODE_CACHE]
  )

  @jax.jit
  def step(cache, x_t, t):
    return layer.apply(
        {**variables, **cache}, x_t, time_step=t, method=layer.extend_step,
        mutable=[DECODE_CACHE], **step_kwargs)

  for t in range(inputs.shape[1]):
    out, cache = step(cache, inputs[:, t], t)
    test.assertAllClose(out, expected[:, t], atol=5e-5, rtol=1e-4)
  return cache


class StackedTransformerTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    self.paddings = np.zeros((B, T), np.float32)

  def test_stack_is_its_layers_in_order(self):
    layer = instantiate(stack_config())
    variables = random_variables(self, layer, self.x, self.paddings)
    out = run(layer, variables, self.x, self.paddings)
    allowed = np.tril(np.ones((T, T), bool))[None]
    ref = self.x
    for i in range(2):
      p = variables['params'][f'x_layers_{i}']
      ref = np_transformer(p, ref, self.paddings, allowed)
    self.assertAllClose(out, ref, atol=5e-5, rtol=1e-4)

  def test_extend_step_matches_fprop(self):
    layer = instantiate(stack_config())  # Two layers.
    variables = random_variables(self, layer, self.x, self.paddings)
    decode_all(self, layer, variables, self.x)

  def test_cross_attention_extend_step_matches_fprop(self):
    layer = instantiate(stack_config(num_layers=1, use_cross_attention=True))
    enc = self.np_rng.standard_normal((B, 3, D)).astype(np.float32)
    enc_pad = np.array([[0, 0, 1], [0, 0, 0]], np.float32)
    args = (self.x, self.paddings, None, enc, enc_pad)
    variables = random_variables(self, layer, *args)
    decode_all(
        self, layer, variables, self.x, (None, enc, enc_pad),
        cross_paddings=enc_pad,
    )

  def test_remat_keeps_gradients(self):
    plain = instantiate(stack_config(num_layers=1))
    remat = instantiate(stack_config(num_layers=1, remat=True))
    variables = random_variables(self, plain, self.x, self.paddings)
    grads = [
        jax.jit(jax.grad(
            lambda v, l=l: jnp.sum(l.apply(v, self.x, self.paddings))
        ))(variables)
        for l in (plain, remat)
    ]
    self.assertAllClose(grads[0], grads[1], atol=1e-6)

  @parameterized.named_parameters(
      ('layers', {'num_layers': 0}, 'num_layers must be positive'),
      ('templates', {'transformer_layer_params_tpl': [
          pax_fiddle.Config(transformers.Transformer)] * 3},
       'not a multiple'),
  )
  def test_bad_config_fails(self, kwargs, message):
    layer = instantiate(stack_config(**kwargs))
    with self.assertRaisesRegex(ValueError, rf'\(stack\): .*{message}'):
      layer.init(jax.random.PRNGKey(0), self.x, self.paddings)


class StackedTransformerRepeatedTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    self.paddings = np.array([[0, 0, 0, 1], [0, 0, 0, 0]], np.float32)

  def test_matches_stack_with_the_same_weights(self):
    stacked = instantiate(stack_config())
    repeated = instantiate(repeated_config())
    variables = random_variables(self, stacked, self.x, self.paddings)
    layers = [variables['params'][f'x_layers_{i}'] for i in range(2)]
    stacked_weights = jax.tree.map(lambda a, b: jnp.stack([a, b]), *layers)
    rep_vars = {'params': {'repeat': {'sub': {'x_layers_0': stacked_weights}}}}
    # The repeated stack declares exactly these variables.
    rep_shapes = jax.eval_shape(
        repeated.init, jax.random.PRNGKey(0), self.x, self.paddings
    )
    self.assertEqual(
        jax.tree.structure(rep_shapes), jax.tree.structure(rep_vars)
    )

    def loss(layer, v):
      out = layer.apply(v, self.x, self.paddings)
      return jnp.sum(jnp.sin(out)), out

    def outputs_and_grads(layer, v):
      fn = jax.value_and_grad(functools.partial(loss, layer), has_aux=True)
      (_, out), grads = jax.jit(fn)(v)
      return out, grads['params']

    out_s, grad_s = outputs_and_grads(stacked, variables)
    out_r, grad_r = outputs_and_grads(repeated, rep_vars)
    self.assertAllClose(out_r, out_s, atol=1e-5)
    stacked_grads = jax.tree.map(
        lambda a, b: jnp.stack([a, b]),
        grad_s['x_layers_0'], grad_s['x_layers_1'],
    )
    self.assertAllClose(
        grad_r['repeat']['sub']['x_layers_0'], stacked_grads, atol=1e-5
    )

  def test_metadata_reports_repeat_prefix(self):
    p = repeated_config(repeat_optimizer_dims_mapping=[None])
    meta = instantiate(p).abstract_init_with_metadata(self.x, self.paddings)
    w = meta['params']['repeat']['sub']['x_layers_0']['self_attention']
    w = w['query']['w']
    self.assertEqual(w.shape, [D, HEADS, D // HEADS])
    self.assertEqual(w.repeat_prefix, [2])
    self.assertEqual(w.full_shape, [2, D, HEADS, D // HEADS])

  @parameterized.named_parameters(
      ('unrolled', True, {}),
      # A block of primer_hybrid layers with grouped-query attention.
      ('scan_primer_hybrid_gqa', False, {
          'transformer_layer_params_tpl': pax_fiddle.Config(
              transformers.Transformer, norm_policy='primer_hybrid',
              tr_atten_tpl=pax_fiddle.Config(
                  grouped_query_attention.GroupedQueryAttention,
                  num_kv_heads=1, rope_min_max_timescales=(1, 10_000))),
          'dim_per_head': D // HEADS}),
  )
  def test_extend_step_matches_fprop(self, unroll, block_kwargs):
    layer = instantiate(
        repeated_config(unroll_in_decode=unroll).set(
            block=stack_config(num_layers=1, **block_kwargs)
        )
    )
    variables = random_variables(self, layer, self.x, self.paddings)
    cache = decode_all(self, layer, variables, self.x)
    cache = cache[DECODE_CACHE]['repeat']['sub']
    if unroll:
      self.assertEqual(set(cache), {'layer0', 'layer1'})
    else:
      state = cache['x_layers_0']['self_attention']['key_state']
      self.assertEqual(state.shape, (2, B, T, 1, D // HEADS))


if __name__ == '__main__':
  absltest.main()
