"""Tests of DotProductAttentionWithLPB (lazy prefix broadcast) against numpy
attention over the expanded batch and the layer's own forward pass."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import attentions

DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX = base_layer.PREFIX_DECODE_CACHE
D, N = 8, 2


def np_causal_attention(v, x):
  """Numpy causal self-attention (PerDimScale at init: 1 / sqrt(H))."""
  q = np.einsum('btd,dnh->btnh', x, v['query']['w']) + v['query']['b']
  k = np.einsum('btd,dnh->btnh', x, v['key']['w']) + v['key']['b']
  val = np.einsum('btd,dnh->btnh', x, v['value']['w']) + v['value']['b']
  t, h = x.shape[1], q.shape[-1]
  logits = np.einsum('btnh,bsnh->bnts', q * h**-0.5, k)
  logits = np.where(np.tril(np.ones((t, t), bool)), logits, -1e9)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  ctx = np.einsum('bnts,bsnh->btnh', probs, val)
  return np.einsum('btnh,dnh->btd', ctx, v['post']['w']) + v['post']['b']


def step_mask(t, length, steps=None):
  """Causal additive mask of step t (or steps t..t+steps-1) over `length`."""
  rows = np.arange(t, t + (steps or 1))[:, None]
  big_neg = float(py_utils.get_large_negative_number(jnp.float32))
  mask = np.where(np.arange(length)[None] <= rows, 0.0, big_neg)
  mask = mask.astype(np.float32)[None, None]
  return jnp.asarray(mask if steps else mask[:, :, 0])


class DotProductAttentionWithLPBTest(test_utils.TestCase):

  def _layer(self, **kw):
    p = pax_fiddle.Config(attentions.DotProductAttentionWithLPB, name='lpb',
                          input_dim=D, hidden_dim=D, num_heads=N, **kw)
    return base_layer.instantiate(p)

  def _sequences(self, b=2, lengths=(3, 2, 2), samples=(2, 3)):
    """Inputs of b * n1 * n2 full sequences sharing their prefixes."""
    rng = np.random.default_rng(0)
    chunks = [rng.normal(size=(b, lengths[0], D))]
    rows = b
    for n, length in zip(samples, lengths[1:]):
      rows *= n
      chunks.append(rng.normal(size=(rows, length, D)))
    full = [np.repeat(c, rows // c.shape[0], 0) for c in chunks]
    return [c.astype(np.float32) for c in chunks], np.concatenate(
        full, 1).astype(np.float32)

  def _decode(self, layer, variables, chunks, samples, total, steps=None):
    """Prefix fprop, then per chunk: broadcast and extend_step."""
    prefix = jnp.asarray(chunks[0])
    _, cache = layer.apply(variables, prefix, prefix, prefix,
                           attentions.causal_mask(prefix),
                           mutable=[DECODE_CACHE])
    state = py_utils.merge_dict(cache, variables)
    t, outs = chunks[0].shape[1], []
    for n, chunk in zip(samples, chunks[1:]):
      _, cache = layer.apply(state, n, chunk.shape[1],
                             method=layer.lazy_broadcast_prefix,
                             mutable=[DECODE_CACHE, PREFIX])
      state = dict(state, **cache)
      per_call = steps or 1
      for i in range(0, chunk.shape[1], per_call):
        query = chunk[:, i:i + steps] if steps else chunk[:, i]
        out, cache = layer.apply(
            state, method=layer.extend_step, query_vec=jnp.asarray(query),
            atten_mask=step_mask(t + i, total, steps), time_step=t + i,
            segment_pos=None, mutable=[DECODE_CACHE])
        state = dict(state, **cache)
        outs.append(out)
      t += chunk.shape[1]
    return outs, state

  def test_extend_step_equals_attention_on_expanded_batch(self):
    samples = (2, 3)
    chunks, full = self._sequences(samples=samples)
    layer = self._layer()
    variables = layer.init(jax.random.PRNGKey(1), full, full, full,
                           attentions.causal_mask(full))
    want = np_causal_attention(
        jax.tree_util.tree_map(np.asarray, variables['params']), full)
    outs, state = self._decode(layer, variables, chunks, samples, 7)
    # Chunk 1 (4 rows: 2 prefixes x 2 samples) is the first of every 3
    # rows of the expanded batch; chunk 2 has all 12 rows.
    self.assertAllClose(outs[0], want[::3, 3], atol=1e-5)
    self.assertAllClose(outs[1], want[::3, 4], atol=1e-5)
    self.assertAllClose(outs[2], want[:, 5], atol=1e-5)
    self.assertAllClose(outs[3], want[:, 6], atol=1e-5)
    self.assertEqual(state[PREFIX]['key_state_0_pfx'].shape, (2, 3, N, 4))
    self.assertEqual(state[PREFIX]['key_state_1_pfx'].shape,
                     (2, 2, 2, N, 4))
    self.assertEqual(state[DECODE_CACHE]['key_state'].shape,
                     (2, 2, 3, 2, N, 4))
    seq_len = layer.apply(state, method=layer.decoding_state_sequence_length)
    self.assertEqual(seq_len, 7)

  def test_multi_step_rotary_equals_forward_pass(self):
    samples = (2, 3)
    chunks, full = self._sequences(samples=samples)
    layer = self._layer(use_rotary_position_emb=True)
    mask = attentions.causal_mask(full)
    variables = layer.init(jax.random.PRNGKey(2), full, full, full, mask)
    want, _ = layer.apply(variables, full, full, full, mask)
    outs, _ = self._decode(layer, variables, chunks, samples, 7, steps=2)
    self.assertEqual(outs[1].shape, (12, 2, D))
    self.assertAllClose(outs[0], want[::3, 3:5], atol=1e-5)
    self.assertAllClose(outs[1], want[:, 5:7], atol=1e-5)

  def test_transform_and_right_align(self):
    chunks, full = self._sequences(lengths=(3, 2), samples=(2,))
    layer = self._layer()
    variables = layer.init(jax.random.PRNGKey(1), full, full, full,
                           attentions.causal_mask(full))
    _, state = self._decode(layer, variables, chunks, (2,), 5)
    key_full = np.concatenate(
        [np.repeat(state[PREFIX]['key_state_0_pfx'][:, None], 2, 1),
         state[DECODE_CACHE]['key_state']], 2)
    # Padding the current chunk pads its time dim (dim 2 here).
    _, cache = layer.apply(state, decoder_utils.pad_state_fn(3),
                           method=layer.transform_decode_state,
                           mutable=[DECODE_CACHE])
    self.assertEqual(cache[DECODE_CACHE]['key_state'].shape, (2, 2, 5, N, 4))
    # Right-aligning a window of 2 prefix steps: the last 2 prefix steps
    # join the chunk and the prefix chunk becomes empty.
    identity = lambda x, b, t: x
    _, cache = layer.apply(state, 2, identity,
                           method=layer.right_align_decode_state_with_prefix,
                           mutable=[DECODE_CACHE, PREFIX])
    self.assertAllClose(cache[DECODE_CACHE]['key_state'], key_full[:, :, 1:])
    self.assertEqual(cache[PREFIX]['key_state_0_pfx'].shape, (2, 0, N, 4))

  def test_errors(self):
    chunks, full = self._sequences(lengths=(3, 2), samples=(2,))
    layer = self._layer()
    variables = layer.init(jax.random.PRNGKey(1), full, full, full,
                           attentions.causal_mask(full))
    _, state = self._decode(layer, variables, chunks, (2,), 5)
    with self.assertRaisesRegex(ValueError, 'query batch 2 must be 4'):
      layer.apply(state, method=layer.extend_step,
                  query_vec=jnp.zeros((2, D)), atten_mask=step_mask(4, 5),
                  time_step=4, segment_pos=None, mutable=[DECODE_CACHE])
    with self.assertRaisesRegex(ValueError, 'mutable'):
      layer.apply(state, 2, 2, method=layer.lazy_broadcast_prefix,
                  mutable=[DECODE_CACHE])
    plain = base_layer.instantiate(pax_fiddle.Config(
        attentions.DotProductAttention, name='a', input_dim=D, hidden_dim=D,
        num_heads=N))
    with self.assertRaisesRegex(NotImplementedError, 'WithLPB'):
      plain.apply({}, 1, 1, method=plain.lazy_broadcast_prefix)


if __name__ == '__main__':
  absltest.main()
