"""Tests of sample_decode / greedy_decode with a hand-made bigram model."""

import functools
import itertools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import sample_decode
from praxis import test_utils

DECODE_CACHE = base_layer.DECODE_CACHE
PAD, BOS, EOS, A, B_, C = 0, 1, 2, 3, 4, 5
V = 6


def bigram_table():
  """log p(next | previous): BOS -> A -> B -> C -> EOS (each the argmax)."""
  probs = np.full((V, V), 0.02) + 0.001 * np.arange(V)  # no ties
  for prev, nxt in ((PAD, BOS), (BOS, A), (A, B_), (B_, C), (C, EOS),
                    (EOS, EOS)):
    probs[prev, nxt] = 1.0
  probs /= probs.sum(-1, keepdims=True)
  return np.log(probs).astype(np.float32)


TABLE = bigram_table()


class BigramLm(base_layer.BaseLayer):
  """logits = table[previous id]; the cache records the ids fed so far."""

  table: tuple = ()

  def __call__(self, ids, paddings):
    del paddings
    self.update_decode_state('seen', ids.astype(jnp.int32))
    self.update_decode_state('time_step', jnp.array(ids.shape[1] - 1,
                                                    jnp.int32))

  def extend_step(self, ids, segment_pos):
    del segment_pos
    t = self.get_decode_state('time_step')
    seen = self.get_decode_state('seen')
    self.update_decode_state(
        'seen', jax.lax.dynamic_update_slice(seen, ids[:, None], (0, t)))
    self.update_decode_state('time_step', t + 1)
    return jnp.asarray(self.table, jnp.float32)[ids]

  def transform_decode_state(self, fn):
    self.update_decode_state('seen', fn(self.get_decode_state('seen'), 0, 1))


MODEL = base_layer.instantiate(pax_fiddle.Config(
    BigramLm, name='toy', table=tuple(map(tuple, TABLE.tolist()))))


def extend_fn(model, ids, segment_pos):
  return model.extend_step(ids, segment_pos)


def transform_fn(model, fn):
  model.transform_decode_state(fn)


def first_token_fprop(model, ids, paddings):
  model(ids[:, :1], paddings[:, :1])


def decode(fn, seed=0):
  """Runs fn(model) -> result (compiled); returns (result, decoder cache)."""
  out, cache = _compiled(fn)(jax.random.PRNGKey(seed))
  return test_utils.to_np(out), test_utils.to_np(cache[DECODE_CACHE])


@functools.cache
def _compiled(fn):
  return jax.jit(lambda key: MODEL.apply(
      {}, method=fn, mutable=[DECODE_CACHE], rngs={base_layer.RANDOM: key}))


def greedy(prefix_ids, prefix_lengths, seq_len=7, **kwargs):
  prefix_ids = jnp.asarray(prefix_ids)
  paddings = (jnp.arange(prefix_ids.shape[1])[None]
              >= jnp.asarray(prefix_lengths)[:, None]).astype(jnp.float32)
  return decode(lambda m: sample_decode.greedy_decode(
      m, extend_fn, prefix_ids, paddings, seq_len,
      fprop_fn=first_token_fprop, transform_state_fn=transform_fn,
      prefix_lengths=jnp.asarray(prefix_lengths), **kwargs))


class GreedyDecodeTest(test_utils.TestCase):

  def test_follows_the_argmax_chain_and_stops_at_eos(self):
    out, cache = greedy([[BOS, 0], [BOS, 0]], [1, 1], eos_id=EOS)
    expected = [BOS, A, B_, C, EOS, PAD, PAD]
    self.assertArraysEqual(out.output_ids[:, 0], np.array([expected] * 2))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([5, 5]))
    lp = [1.0] + [TABLE[p, n] for p, n in itertools.pairwise(expected[:5])]
    self.assertAllClose(out.logprobs[0, 0], np.array(lp + [1.0, 1.0]),
                        atol=1e-5)
    # The cache held every fed id: the carry and padding worked.
    self.assertArraysEqual(cache['seen'][:, :4], np.array([expected[:4]] * 2))
    self.assertArraysEqual(out.prefix_ids[:, 0], np.array([[BOS, 0]] * 2))

  def test_prefix_tokens_are_forced_per_example(self):
    # Row 1's prefix continues with C although the model prefers A.
    out, _ = greedy([[BOS, 0, 0], [BOS, C, EOS]], [1, 3], eos_id=EOS)
    self.assertArraysEqual(out.output_ids[0, 0],
                           np.array([BOS, A, B_, C, EOS, 0, 0]))
    # The EOS inside row 1's prefix does not end it.
    self.assertArraysEqual(out.output_ids[1, 0],
                           np.array([BOS, C, EOS, EOS, 0, 0, 0]))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([5, 4]))
    self.assertArraysEqual(out.prefix_lengths[:, 0], np.array([1, 3]))
    self.assertArraysEqual(out.original_lengths[:, 0], np.array([1, 3]))

  def test_without_eos_decodes_to_seq_len(self):
    out, _ = greedy([[BOS]], [1], seq_len=6)
    self.assertArraysEqual(out.output_ids[0, 0],
                           np.array([BOS, A, B_, C, EOS, EOS]))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([6]))

  def test_max_and_min_decode_steps(self):
    out, _ = greedy([[BOS]], [1], max_decode_steps=2, eos_id=EOS)
    self.assertArraysEqual(out.output_ids[0, 0],
                           np.array([BOS, A, B_, 0, 0, 0, 0]))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([3]))
    # With EOS barred for 5 steps the runner-up follows C.
    out, _ = greedy([[BOS]], [1], min_decode_steps=5, eos_id=EOS)
    runner_up = int(np.argsort(-TABLE[C], kind='stable')[1])
    self.assertEqual(out.output_ids[0, 0, 4], runner_up)

  def test_fprop_for_prefix_matches_step_by_step_prefix(self):
    ids = jnp.array([[0, BOS, A], [BOS, C, EOS]])  # right-aligned
    lengths = jnp.array([2, 3])
    paddings = (ids == 0).astype(jnp.float32)
    padded_ids = jnp.pad(ids, [(0, 0), (0, 4)])
    padded_pads = jnp.pad(paddings, [(0, 0), (0, 4)], constant_values=1.0)
    out, _ = decode(lambda m: sample_decode.greedy_decode(
        m, extend_fn, padded_ids, padded_pads, 7, fprop_for_prefix=True,
        fprop_fn=lambda m, i, p: m(ids, paddings),
        transform_state_fn=transform_fn, max_prefix_len=3,
        max_decode_steps=4, prefix_lengths=lengths, eos_id=EOS))
    ref, _ = greedy([[BOS, A, 0], [BOS, C, EOS]], [2, 3], eos_id=EOS)
    self.assertArraysEqual(out.output_ids[0, 0], ref.output_ids[0, 0])
    self.assertArraysEqual(out.output_ids[1, 0], ref.output_ids[1, 0])
    self.assertArraysEqual(out.decode_lengths, ref.decode_lengths)
    # As in Pax, prefix_ids keep the width of the ids passed in.
    self.assertArraysEqual(out.prefix_ids[:, 0],
                           np.array([[BOS, A, 0, 0, 0, 0, 0],
                                     [BOS, C, EOS, 0, 0, 0, 0]]))


def sample(num_samples, seed=0, temperature=1.0, top_k=0,
           max_decode_steps=None, sort_samples=True):
  return decode(_sample_fn(num_samples, temperature, top_k, max_decode_steps,
                           sort_samples), seed)[0]


@functools.cache
def _sample_fn(num_samples, temperature, top_k, max_decode_steps,
               sort_samples):
  """The decoding function (one per setting, so its compilation is reused)."""
  sampler = sample_decode.DefaultNextTokenSampler(top_k=top_k)
  return lambda m: sample_decode.sample_decode(
      m, extend_fn, transform_fn, None, sampler, jnp.full((1, 1), BOS),
      jnp.zeros((1, 1)), 6, num_samples=num_samples,
      fprop_fn=first_token_fprop, temperature=temperature,
      max_decode_steps=max_decode_steps, prefix_lengths=jnp.ones((1,),
                                                                 jnp.int32),
      eos_id=EOS, sort_samples=sort_samples)


class SampleDecodeTest(test_utils.TestCase):

  def test_fixed_key_is_reproducible(self):
    a = sample(8, seed=1, temperature=3.0)
    b = sample(8, seed=1, temperature=3.0)
    c = sample(8, seed=2, temperature=3.0)
    self.assertArraysEqual(a.output_ids, b.output_ids)
    self.assertFalse(np.array_equal(a.output_ids, c.output_ids))
    self.assertEqual(a.output_ids.shape, (1, 8, 6))

  def test_samples_are_sorted_by_total_logprob(self):
    out = sample(8, seed=1, temperature=3.0)
    scores = np.where(out.logprobs >= 1.0, 0.0, out.logprobs).sum(-1)[0]
    self.assertArraysEqual(scores, np.sort(scores)[::-1])

  def test_top_k_one_equals_greedy(self):
    out = sample(3, seed=4, temperature=2.0, top_k=1)
    ref, _ = greedy([[BOS]], [1], seq_len=6, eos_id=EOS)
    self.assertArraysEqual(out.output_ids, np.repeat(ref.output_ids, 3, 1))

  def test_first_token_frequencies_follow_temperature(self):
    n, t = 3000, 2.0
    out = sample(n, seed=3, temperature=t, max_decode_steps=1,
                 sort_samples=False)
    freq = np.bincount(out.output_ids[0, :, 1], minlength=V) / n
    logits = TABLE[BOS] / t
    expected = np.exp(logits - logits.max())
    self.assertAllClose(freq, expected / expected.sum(), atol=0.04)

  def test_errors(self):
    ids = jnp.full((1, 1), BOS)
    sampler = sample_decode.DefaultNextTokenSampler(top_k=1)
    with self.assertRaisesRegex(ValueError, 'seq_len must be > 0'):
      decode(lambda m: sample_decode.sample_decode(
          m, extend_fn, transform_fn, None, sampler, ids, ids * 0.0, 0))
    with self.assertRaisesRegex(ValueError, r'temperature should have shape'):
      decode(lambda m: sample_decode.sample_decode(
          m, extend_fn, transform_fn, None, sampler, ids, ids * 0.0, 4,
          num_samples=2, temperature=jnp.ones((1, 3)),
          fprop_fn=first_token_fprop))
    with self.assertRaisesRegex(ValueError, 'cf_guidance_scale has 3'):
      decode(lambda m: sample_decode.sample_decode(
          m, extend_fn, transform_fn, None, sampler, ids, ids * 0.0, 4,
          cf_guidance_scale=[1.0, 2.0, 3.0]))
    with self.assertRaisesRegex(NotImplementedError, 'controlled_decoding'):
      decode(lambda m: sample_decode.sample_decode(
          m, extend_fn, transform_fn, None, sampler, ids, ids * 0.0, 4,
          controlled_decoding=decoder_utils.ControlledDecodingHParams()))


class HelpersTest(test_utils.TestCase):

  def test_right_align_prefix_and_positions(self):
    ids = jnp.array([[5, 6, 0, 0], [7, 8, 9, 1]])
    lengths = jnp.array([2, 4])
    aligned, pads = sample_decode.right_align_prefix_ids(ids, lengths,
                                                         jnp.float32)
    self.assertArraysEqual(aligned, np.array([[0, 0, 5, 6], [7, 8, 9, 1]]))
    self.assertArraysEqual(pads, np.array([[1, 1, 0, 0], [0, 0, 0, 0.]]))
    self.assertArraysEqual(
        sample_decode.right_align_segment_position(lengths, 4),
        np.array([[0, 0, 0, 1], [0, 1, 2, 3]]))

  def test_left_align_undoes_right_align(self):
    x = jnp.array([[0, 0, 5, 6, 3, 4], [7, 8, 9, 1, 2, 0]])
    out = decoder_utils.left_align_tensor(x, jnp.array([2, 4]), 4)
    self.assertArraysEqual(out, np.array([[5, 6, 3, 4, 0, 0],
                                          [7, 8, 9, 1, 2, 0]]))

  def test_state_transforms(self):
    x = jnp.arange(6).reshape(2, 3)
    self.assertArraysEqual(decoder_utils.pad_state_fn(2)(x, 0, 1),
                           np.array([[0, 1, 2, 0, 0], [3, 4, 5, 0, 0]]))
    self.assertArraysEqual(decoder_utils.slice_state_fn(0, -1)(x, 0, 1),
                           np.array([[0, 1], [3, 4]]))
    self.assertArraysEqual(decoder_utils.batch_broadcast_state_fn(2)(x, 0, 1),
                           np.array([[0, 1, 2], [0, 1, 2], [3, 4, 5],
                                     [3, 4, 5]]))

  def test_split_sort_and_eos_helpers(self):
    x = jnp.arange(12).reshape(6, 2)
    self.assertEqual(sample_decode.split_batch_dim(x, 0, 3).shape, (2, 3, 2))
    logprobs = jnp.array([[[-1.0, 1.0], [-0.5, -0.1], [-3.0, 1.0]]])
    result = sample_decode.sort_samples_by_scores(
        test_utils.NestedMap(logprobs=logprobs, ids=jnp.array([[0, 1, 2]])))
    self.assertArraysEqual(result.ids, np.array([[1, 0, 2]]))
    self.assertArraysEqual(
        decoder_utils.has_any_eos(jnp.array([1, 2, 3]), [2, 3]),
        np.array([False, True, True]))
    ends = decoder_utils.end_with_sequences(
        jnp.array([[0, 2], [3, 4]]), jnp.array([[5, 2, 0], [3, 4, 0]]), 1)
    self.assertArraysEqual(ends, np.array([True, True]))


if __name__ == '__main__':
  absltest.main()
