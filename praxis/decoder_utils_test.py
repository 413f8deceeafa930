"""Tests of the decoding helpers against loops written out in numpy."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from praxis import decoder_utils
from praxis import py_utils
from praxis import test_utils


def np_ends_with(stop, ids, step):
  """Whether ids[:step + 1] ends with stop (0s in stop match anything)."""
  for i, s in enumerate(reversed(stop)):
    pos = step - i
    if s == 0:
      continue
    if pos < 0 or ids[pos] != s:
      return False
  return True


class AlignmentTest(test_utils.TestCase):

  def test_left_align_kv_cache_shifts_each_row(self):
    b, t, n, h = 3, 6, 2, 2
    x = self.np_rng.standard_normal((b, t, n, h)).astype(np.float32)
    lengths = np.array([1, 3, 2])
    max_prefix_len = 3
    got = np.asarray(decoder_utils.left_align_kv_cache(
        jnp.asarray(x), jnp.asarray(lengths), max_prefix_len, pad_value=-1.0,
        batch_size=b))
    for i in range(b):
      shift = max_prefix_len - lengths[i]
      expected = np.full((t, n, h), -1.0, np.float32)
      expected[:t - shift] = x[i, shift:]
      self.assertAllClose(got[i], expected)

  def test_left_align_kv_cache_rank3_and_bad_rank(self):
    x = jnp.arange(2 * 4 * 1, dtype=jnp.float32).reshape(2, 4, 1)
    got = decoder_utils.left_align_kv_cache(x, jnp.array([2, 1]), 2,
                                            batch_size=2)
    self.assertAllClose(got[:, :, 0],
                        np.array([[0, 1, 2, 3], [5, 6, 7, 0]], np.float32))
    with self.assertRaisesRegex(ValueError, r'\[B, T, N, H\]'):
      decoder_utils.left_align_kv_cache(jnp.zeros((2, 4)), jnp.ones(2), 1)

  def test_concat_suffix_and_left_align(self):
    # Two samples of one example, two suffixes each; prefixes end at 2.
    decoded = np.array([[0, 7, 1, 2, 0], [8, 9, 3, 0, 0]])
    prefix_lengths = np.array([1, 2])
    ends = np.array([4, 3])
    suffixes = np.array([[5, 6], [4, 4], [5, 6], [4, 4]])
    got = np.asarray(decoder_utils.concat_suffix_and_left_align(
        jnp.asarray(decoded), jnp.asarray(suffixes), jnp.asarray(ends),
        jnp.asarray(prefix_lengths), 2, num_samples=2, num_suffix=2,
        pad_value=0))
    expected = np.zeros((1, 2, 2, 7), np.int32)
    for s in range(2):
      for f in range(2):
        row = list(decoded[s, 2 - prefix_lengths[s]:ends[s]])
        row += list(suffixes[2 * s + f])
        expected[0, f, s, :len(row)] = row
    self.assertArraysEqual(got, expected)


class StopSequenceTest(test_utils.TestCase):

  def test_end_with_any_sequence_any_position_matches_numpy(self):
    ids = self.np_rng.integers(1, 4, size=(3, 8))
    stops = np.array([[[0, 2, 3], [1, 1, 2]]] * 3)
    positions = np.array([[0, 2, 5, 7]] * 3)
    got = np.asarray(decoder_utils.end_with_any_sequence_any_position(
        jnp.asarray(stops), jnp.asarray(ids), jnp.asarray(positions)))
    for b in range(3):
      for p in range(4):
        for s in range(2):
          self.assertEqual(got[b, p, s],
                           np_ends_with(stops[b, s], ids[b], positions[b, p]))

  def test_find_first_new_stop_seq_match(self):
    ids = np.array([[1, 2, 3, 2, 3], [3, 2, 3, 1, 1], [1, 1, 1, 1, 1]])
    stops = np.array([[[0, 2, 3]]] * 3)
    got = decoder_utils.find_first_new_stop_seq_match(
        jnp.array([1, 3, 0]), 3, jnp.asarray(stops), jnp.asarray(ids))
    # Row 0: [2, 3] ends at 2 (offset 1). Row 1: positions 3, 4, 5 hold no
    # match (the one ending at 2 is before the new tokens). Row 2: none.
    self.assertArraysEqual(got, np.array([1, 3, 3]))

  def test_all_padding_stop_sequence_always_matches(self):
    got = decoder_utils.end_with_sequences(
        jnp.array([[0, 0], [0, 9]]), jnp.array([[4, 5], [4, 5]]), 1)
    self.assertArraysEqual(got, np.array([True, False]))


class OptimizeEosTest(test_utils.TestCase):

  def test_best_end_position_matches_numpy(self):
    logprobs = np.array([[1.0, -0.5, -0.2, -0.9, -0.1]], np.float32)
    eos_logprobs = np.array([[1.0, -3.0, -0.4, -2.0, -0.05]], np.float32)
    result = py_utils.NestedMap(
        logprobs=jnp.asarray(logprobs), eos_logprobs=jnp.asarray(eos_logprobs),
        output_ids=jnp.array([[7, 3, 4, 5, 6]]),
        eos_ids=jnp.array([[0, 2, 1, 2, 2]]),
        done=jnp.array([False]), has_eos=jnp.array([False]), start_step=0)
    new = decoder_utils.collect_results_to_optimize_eos(result, 1)
    # Ending at t (t > start_step) scores sum(logprobs[1:t]) + eos[t].
    scores = [logprobs[0, 1:t].sum() + eos_logprobs[0, t] for t in range(1, 5)]
    best = 1 + int(np.argmax(scores))
    self.assertEqual(best, 2)
    self.assertArraysEqual(new.output_ids, np.array([[7, 3, 1, 0, 0]]))
    self.assertAllClose(new.logprobs, np.array([[1.0, -0.5, -0.4, 1.0, 1.0]]))
    self.assertArraysEqual(new.decode_lengths, np.array([best]))
    self.assertArraysEqual(new.done, np.array([True]))
    self.assertNotIn('eos_ids', new)


if __name__ == '__main__':
  absltest.main()
