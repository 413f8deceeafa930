"""sample_decode's optional outputs and modes, against numpy on a bigram LM."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import decoder_utils
from praxis import sample_decode
from praxis import sample_decode_test as sdt
from praxis import test_utils

BOS, EOS, A, B_, C = sdt.BOS, sdt.EOS, sdt.A, sdt.B_, sdt.C
TABLE = sdt.TABLE
GREEDY = sample_decode.DefaultNextTokenSampler(top_k=1)


def np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def run(prefix, seq_len, sampler=GREEDY, seed=0, **kwargs):
  """sample_decode from [B, 1] first tokens fed step by step."""
  ids = jnp.asarray(prefix, jnp.int32)
  return sdt.decode(lambda m: sample_decode.sample_decode(
      m, sdt.extend_fn, sdt.transform_fn, None, sampler, ids,
      jnp.zeros(ids.shape), seq_len, fprop_fn=sdt.first_token_fprop,
      prefix_lengths=jnp.ones((ids.shape[0],), jnp.int32), **kwargs),
                    seed)[0]


class ExtrasTest(test_utils.TestCase):

  def test_classifier_free_guidance(self):
    # Rows: [cond (after BOS), uncond (after C)]; the first id is the argmax
    # of uncond + s * (cond - uncond), and both rows take it.
    for scale in (0.0, 1.0, 1.7):
      out = run([[BOS], [C]], 4, cf_guidance_scale=scale)
      guided = TABLE[C] + scale * (TABLE[BOS] - TABLE[C])
      self.assertEqual(out.output_ids.shape, (1, 1, 4))
      self.assertEqual(int(out.output_ids[0, 0, 1]), int(np.argmax(guided)))

  def test_entropy_and_top_candidates(self):
    out = run([[BOS]], 5, return_entropy_score=True,
              num_per_token_logprobs=jnp.array([2]))
    ids = out.output_ids[0, 0]
    lp = np_log_softmax(TABLE[ids[:4]])  # the distributions at steps 0..3
    entropy = -(np.exp(lp) * lp).sum(-1)
    self.assertAllClose(out.entropy[0, 0], np.concatenate([[0.0], entropy]),
                        atol=1e-5)
    order = np.argsort(-lp, axis=-1, kind='stable')[:, :2]
    cand_ids = out.top_candidate_ids[0, 0]
    cand_lp = out.top_candidate_logprobs[0, 0]
    self.assertEqual(cand_ids.shape,
                     (5, sample_decode.MAX_NUM_PER_TOKEN_LOGPROBS))
    self.assertArraysEqual(cand_ids[:4, :2], order)
    self.assertAllClose(cand_lp[:4, :2], np.take_along_axis(lp, order, -1),
                        atol=1e-5)
    self.assertArraysEqual(cand_ids[:, 2:], np.zeros((5, 3), np.int32))
    self.assertAllClose(cand_lp[:, 2:], np.ones((5, 3), np.float32))

  def test_optimize_eos_ends_where_ending_is_likeliest(self):
    seq_len = 7
    out = run([[BOS]], seq_len, eos_id=EOS, optimize_eos=True,
              early_exit=False)
    # Greedy with EOS barred, recording at t + 1 the EOS log-probability.
    ids, token_lp, eos_lp = [BOS], [], []
    for _ in range(seq_len - 1):
      lp = np_log_softmax(TABLE[ids[-1]])
      eos_lp.append(lp[EOS])
      lp[EOS] = -np.inf
      ids.append(int(np.argmax(lp)))
      token_lp.append(lp[ids[-1]])
    # Ending at position t >= 1: the tokens before it, then EOS.
    scores = [sum(token_lp[:t - 1]) + eos_lp[t - 1]
              for t in range(1, seq_len)]
    best = 1 + int(np.argmax(scores))
    expected = ids[:best] + [EOS] + [0] * (seq_len - best - 1)
    self.assertArraysEqual(out.output_ids[0, 0], np.array(expected))
    self.assertArraysEqual(out.decode_lengths[0, 0], best + 1)

  def test_per_example_keys_and_the_dummy_key(self):
    sampler = sample_decode.DefaultNextTokenSampler(top_k=0)
    keys = jax.random.split(jax.random.PRNGKey(5), 6)
    dummy = jnp.full((6, 2), decoder_utils.DUMMY_PRNG_KEY, jnp.uint32)
    firsts = {}
    for name, key in (('keys', keys), ('dummy', dummy)):
      for seed in (0, 1):
        out = run([[BOS]] * 6, 3, sampler, seed=seed, temperature=20.0,
                  gumbel_prng_key=key)
        firsts[name, seed] = out.output_ids[:, 0, 1]
    # Real keys fix the samples whatever the model's stream; all-dummy keys
    # stand for "none", so the model's stream decides.
    self.assertArraysEqual(firsts['keys', 0], firsts['keys', 1])
    self.assertFalse(np.array_equal(firsts['dummy', 0], firsts['dummy', 1]))

  def test_vanilla_sample_decode_greedy_matches_the_chain(self):
    ids = jnp.array([[0, BOS], [BOS, A]])  # right-aligned
    paddings = (ids == 0).astype(jnp.float32)
    out, _ = sdt.decode(lambda m: sample_decode.vanilla_sample_decode(
        m, lambda m, i, p: m(i, p), sdt.extend_fn, sdt.transform_fn, GREEDY,
        ids, paddings, temperature=0.0, max_decode_steps=3, eos_id=EOS))
    self.assertArraysEqual(out.output_ids, np.array(
        [[BOS, A, B_, C, 0], [BOS, A, B_, C, EOS]]))
    self.assertArraysEqual(out.decode_lengths, np.array([4, 5]))
    self.assertArraysEqual(out.prefix_ids, np.array([[BOS, 0], [BOS, A]]))

  def test_result_callback_streams_each_interval(self):
    got, events = [], []

    def callback_fn(out):
      jax.debug.callback(lambda ids, n, done: got.append(
          (np.asarray(ids), np.asarray(n), np.asarray(done))),
                         out.output_ids, out.decode_lengths, out.done)

    cb = decoder_utils.StreamingResultCallback(
        callback_fn, interval_steps=2,
        init_fn=lambda shape: events.append(('init', shape)),
        done_fn=lambda: events.append('done'))
    out = run([[BOS]], 7, eos_id=EOS, result_callback=cb)
    jax.effects_barrier()
    # Greedy BOS A B C EOS: steps 0..3; slices of positions 1-2 and 3-4.
    self.assertArraysEqual(out.output_ids[0, 0],
                           np.array([BOS, A, B_, C, EOS, 0, 0]))
    self.assertEqual(events, [('init', (1, 1)), 'done'])
    self.assertLen(got, 2)
    self.assertArraysEqual(got[0][0], np.array([[[A, B_]]]))
    self.assertArraysEqual(got[1][0], np.array([[[C, EOS]]]))
    self.assertArraysEqual(got[1][1], np.array([[2]]))
    self.assertArraysEqual(got[1][2], np.array([[True]]))


if __name__ == '__main__':
  absltest.main()
