"""Flat beam search against brute force on a hand-built bigram scorer."""

import itertools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import flat_beam_search
from praxis import pax_fiddle
from praxis import test_utils

PAD, EOS, A, B_ = 0, 1, 2, 3
V = 4


def bigram_logprobs(seed):
  """log p(next | previous); PAD is (almost) never next."""
  rng = np.random.default_rng(seed)
  logits = rng.standard_normal((V, V)) * 1.5
  logits[:, PAD] = -30.0
  return np.asarray(jax.nn.log_softmax(logits, -1), np.float32)


class _NoLayer(base_layer.BaseLayer):
  """A layer without variables: the scorer is a plain table."""

  def __call__(self):
    return None


def run(table, start_ids, seq_len, beam_size, alpha):
  def extend(model, ids, segment_pos):
    del model, segment_pos
    return jnp.asarray(table)[ids]

  layer = base_layer.instantiate(pax_fiddle.Config(_NoLayer, name='none'))
  prefix = jnp.asarray(start_ids, jnp.int32)[:, None]
  out = layer.apply({}, method=lambda m: flat_beam_search.flat_beam_search(
      m, extend, prefix, jnp.zeros(prefix.shape), seq_len, beam_size,
      jnp.float32, eos_id=EOS, length_norm_alpha=alpha))
  return test_utils.to_np(out)


def brute_force(table, start, seq_len, alpha):
  """Every start, x1..xn (no EOS or PAD), EOS with n + 2 <= seq_len."""
  found = []
  for n in range(seq_len - 1):
    for xs in itertools.product([A, B_], repeat=n):
      seq = [start, *xs, EOS]
      lp = sum(table[a, b] for a, b in zip(seq, seq[1:]))
      norm = ((len(seq) - 1 + 5.0) / 5.0) ** alpha
      found.append((lp / norm, seq))
  return sorted(found, key=lambda f: -f[0])


class FlatBeamSearchTest(test_utils.TestCase):

  def test_matches_brute_force_when_the_beam_holds_everything(self):
    # With 2 usable tokens and 2 steps at most, 4 hypotheses are never cut.
    seq_len, k, alpha = 4, 4, 0.8
    for seed in (0, 1):
      table = bigram_logprobs(seed)
      out = run(table, [A, B_], seq_len, k, alpha)
      for b, start in enumerate([A, B_]):
        expected = brute_force(table, start, seq_len, alpha)[:k]
        for j, (score, seq) in enumerate(expected):
          self.assertAllClose(out.scores[b, j], np.float32(score), atol=1e-4)
          self.assertEqual(int(out.decode_lengths[b, j]), len(seq))
          row = np.zeros(seq_len, np.int32)
          row[:len(seq)] = seq
          self.assertArraysEqual(out.output_ids[b, j], row)

  def test_hand_checked_beam_of_one(self):
    # From A: EOS is likely at once (0.5), else A then EOS (0.4 * 0.9).
    probs = np.full((V, V), 1e-6)
    probs[A] = [1e-6, 0.5, 0.4, 0.1]
    probs[B_] = [1e-6, 0.2, 0.4, 0.4]
    table = np.log(probs).astype(np.float32)
    out = run(table, [A], 3, 1, 0.0)
    # Step 0 finishes A EOS (0.5); the live A A finishes at step 1 with
    # 0.4 * 0.5 = 0.2, which loses.
    self.assertArraysEqual(out.output_ids[0], np.array([[A, EOS, 0]]))
    self.assertAllClose(out.scores[0], np.log([0.5]).astype(np.float32),
                        atol=1e-5)
    self.assertArraysEqual(out.decode_lengths[0], np.array([2]))

  def test_masks_follow_the_reordered_beam(self):
    mask = jnp.eye(2, 6)[None]  # hypothesis j holds slot j of step 0
    new = flat_beam_search.update_beam_mask(mask, jnp.array([[1, 1]]), 1)
    # Both new hypotheses continue old hypothesis 1 (slot 1 of step 0) and
    # take slots 0 and 1 of step 1 (positions 2 and 3).
    self.assertArraysEqual(new[0], np.array([[0, 1, 1, 0, 0, 0],
                                             [0, 1, 0, 1, 0, 0]], np.float32))
    ids = jnp.array([[[5, 7, 0], [6, 8, 0]]])  # [B, K, T]
    self.assertArraysEqual(
        flat_beam_search.get_final_output_ids(new, ids)[0],
        np.array([[6, 7, 0], [6, 8, 0]]))

  def test_eos_id_is_required(self):
    with self.assertRaisesRegex(ValueError, 'eos_id'):
      flat_beam_search.flat_beam_search(None, None, jnp.zeros((1, 1)), None,
                                        4, 2, jnp.float32)


if __name__ == '__main__':
  absltest.main()
