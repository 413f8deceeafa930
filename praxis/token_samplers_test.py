"""Tests of the token samplers against numpy references."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import test_utils
from praxis import token_samplers

B, V = 4, 10


def np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_top_p_keep(logits, p):
  """Boolean [B, V]: the fewest most likely tokens with mass >= p (per row)."""
  keep = np.zeros(logits.shape, bool)
  probs = np.exp(np_log_softmax(logits))
  for b in range(logits.shape[0]):
    mass = 0.0
    for v in np.argsort(-logits[b]):
      keep[b, v] = True
      mass += probs[b, v]
      if mass >= p[b]:
        break
  return keep


def kept(masked, logits):
  return np.asarray(masked) == logits


class TopKTopPTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.logits = self.np_rng.standard_normal((B, V)).astype(np.float32) * 2

  def test_top_k_matches_numpy_sort(self):
    values, ids = token_samplers.get_top_k(jnp.asarray(self.logits), 3)
    order = np.argsort(-self.logits, axis=-1)[:, :3]
    self.assertArraysEqual(ids, order)
    self.assertAllClose(values, np.take_along_axis(self.logits, order, -1))

  def test_per_example_top_k_masks_the_rest(self):
    values, _ = token_samplers.get_top_k(
        jnp.asarray(self.logits), 3, per_example_top_k=jnp.array([1, 2, 3, 5]))
    num_valid = (np.asarray(values) > -1e20).sum(-1)
    self.assertArraysEqual(num_valid, np.array([1, 2, 3, 3]))

  def test_top_k_zero_keeps_every_token(self):
    values, ids = token_samplers.get_top_k(jnp.asarray(self.logits), 0)
    self.assertAllClose(values, self.logits)
    self.assertArraysEqual(ids, np.tile(np.arange(V), (B, 1)))

  def test_top_p_matches_numpy(self):
    for p in (0.0, 0.3, 0.75, 0.95):
      masked = token_samplers.top_p_mask_logits(jnp.asarray(self.logits), p)
      self.assertArraysEqual(kept(masked, self.logits),
                             np_top_p_keep(self.logits, [p] * B))

  def test_per_example_top_p_matches_numpy(self):
    p = np.array([0.1, 0.5, 0.8, 0.99], np.float32)
    masked = token_samplers.top_p_mask_logits(jnp.asarray(self.logits),
                                              jnp.asarray(p))
    self.assertArraysEqual(kept(masked, self.logits),
                           np_top_p_keep(self.logits, p))

  def test_top_p_of_one_keeps_everything(self):
    masked = token_samplers.top_p_mask_logits(jnp.asarray(self.logits), 1.0)
    self.assertAllClose(masked, self.logits)

  def test_global_normalize_divides_by_the_sum_of_all_logits(self):
    # Pax's global normalization: the "probability" of a top-k token is its
    # logit over the sum of all V logits; tokens are kept up to and including
    # the first whose running total exceeds p.
    logits = np.array([[4.0, 3.0, 2.0, 1.0, 1.0, 1.0]], np.float32)
    for p, expected_kept in ((0.3, 1), (0.5, 2), (0.6, 3)):
      masked, _, ids = token_samplers._apply_top_k_and_top_p(
          jnp.asarray(logits), top_k=3, top_p=p, global_normalize=True)
      running = np.cumsum(logits[0, :3] / logits.sum())
      n = min(int((running <= p).sum()) + 1, 3)
      self.assertEqual(n, expected_kept)
      self.assertArraysEqual(ids, np.array([[0, 1, 2]]))
      self.assertArraysEqual(np.asarray(masked) > -1e20,
                             np.arange(3)[None] < n)

  def test_apply_top_k_and_top_p_returns_top_k_logprobs(self):
    logits = self.logits
    top_p_logits, logprobs, ids = token_samplers._apply_top_k_and_top_p(
        jnp.asarray(logits), top_k=4, top_p=0.5)
    order = np.argsort(-logits, axis=-1)[:, :4]
    top4 = np.take_along_axis(logits, order, -1)
    self.assertArraysEqual(ids, order)
    self.assertAllClose(logprobs, np_log_softmax(top4), atol=1e-6)
    self.assertArraysEqual(kept(top_p_logits, top4),
                           np_top_p_keep(top4, [0.5] * B))

  def test_get_argmax_ids_picks_along_the_last_dim(self):
    items = np.array([[[5, 6, 7], [8, 9, 10]]])
    pos = np.array([[2, 0]])
    got = token_samplers._get_argmax_ids(jnp.asarray(pos), jnp.asarray(items))
    self.assertArraysEqual(got, np.array([[7, 8]]))

  def test_epsilon_mask_matches_numpy(self):
    masked = token_samplers.epsilon_mask_logits(jnp.asarray(self.logits), 0.1)
    probs = np.exp(np_log_softmax(self.logits))
    self.assertArraysEqual(kept(masked, self.logits), probs >= 0.1)


class SamplingTest(test_utils.TestCase):

  def test_gumbel_max_matches_numpy_with_the_same_noise(self):
    logits = self.np_rng.standard_normal((B, V)).astype(np.float32)
    key = jax.random.PRNGKey(3)
    noise = np.asarray(jax.random.gumbel(key, (B, V)))
    temperature = np.array([0.5, 1.0, 2.0, 0.0], np.float32)
    ids = token_samplers.gumbel_max_sample(key, jnp.asarray(logits),
                                           jnp.asarray(temperature))
    expected = np.argmax(logits + noise * temperature[:, None], -1)
    self.assertArraysEqual(ids, expected)
    self.assertArraysEqual(ids[3], np.argmax(logits[3]))

  def test_temperature_frequencies_match_numpy_softmax(self):
    logits = np.array([1.0, 0.0, -0.5, 0.5], np.float32)
    n = 20000
    for i, t in enumerate((0.5, 2.0)):
      ids = token_samplers.gumbel_max_sample(
          jax.random.PRNGKey(i), jnp.tile(jnp.asarray(logits), (n, 1)), t)
      freq = np.bincount(np.asarray(ids), minlength=4) / n
      expected = np.exp(np_log_softmax(logits / t))
      self.assertAllClose(freq, expected, atol=0.015)

  def test_top_k_sampling_frequencies_and_logprobs(self):
    logits = np.array([0.2, 1.0, -1.0, 0.7, 0.0], np.float32)
    n = 20000
    ids, logprobs = token_samplers.sample_from_top_k_and_top_p(
        jnp.tile(jnp.asarray(logits), (n, 1)), jax.random.PRNGKey(0),
        temperature=1.0, top_k=2)
    freq = np.bincount(np.asarray(ids), minlength=5) / n
    top2 = np.exp(np_log_softmax(logits[[1, 3]]))
    self.assertAllClose(freq, np.array([0, top2[0], 0, top2[1], 0]),
                        atol=0.015)
    self.assertAllClose(logprobs, np.log(top2)[(np.asarray(ids) == 3) * 1],
                        atol=1e-5)

  def test_top_p_sampling_only_draws_from_the_nucleus(self):
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32))
    ids, _ = token_samplers.sample_from_top_k_and_top_p(
        jnp.tile(jnp.asarray(logits), (4000, 1)), jax.random.PRNGKey(1),
        temperature=1.0, top_k=0, top_p=0.7)
    freq = np.bincount(np.asarray(ids), minlength=4) / 4000
    self.assertAllClose(freq, np.array([0.625, 0.375, 0, 0]), atol=0.03)

  def test_per_example_keys(self):
    logits = jnp.zeros((3, V))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    ids = token_samplers.gumbel_max_sample(keys, logits, 1.0)
    expected = [np.argmax(jax.random.gumbel(k, (V,))) for k in keys]
    self.assertArraysEqual(ids, np.array(expected))
    with self.assertRaisesRegex(ValueError, 'Per-example keys'):
      token_samplers.gumbel_max_sample(keys[:2], logits, 1.0)


class NextTokenSamplerTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.logits = jnp.asarray(self.np_rng.standard_normal((B, V)), jnp.float32)
    self.keys = jax.random.split(jax.random.PRNGKey(0), B)

  def test_top_k_one_is_greedy(self):
    sampler = token_samplers.DefaultNextTokenSampler(top_k=1)
    out = sampler(None, self.logits, 5.0, None, gumbel_prng_key=self.keys)
    self.assertArraysEqual(out.new_ids, np.argmax(self.logits, -1))
    self.assertIs(out.logits, self.logits)

  def test_zero_temperature_is_greedy(self):
    sampler = token_samplers.DefaultNextTokenSampler(top_k=0, top_p=0.9)
    out = sampler(None, self.logits, 0.0, None)
    self.assertArraysEqual(out.new_ids, np.argmax(self.logits, -1))

  def test_sampling_is_reproducible_and_uses_the_key(self):
    sampler = token_samplers.DefaultNextTokenSampler(
        top_k=5, use_top_k_for_logprobs=True)
    many = jnp.tile(self.logits, (50, 1))
    keys = jax.random.split(jax.random.PRNGKey(7), 50 * B)
    a = sampler(None, many, 1.0, None, gumbel_prng_key=keys)
    b = sampler(None, many, 1.0, None, gumbel_prng_key=keys)
    c = sampler(None, many, 1.0, None, gumbel_prng_key=keys[::-1])
    self.assertArraysEqual(a.new_ids, b.new_ids)
    self.assertFalse(np.array_equal(a.new_ids, c.new_ids))
    top5 = np.sort(np.asarray(many), -1)[:, -5:]
    lp = np_log_softmax(top5)
    chosen = np.take_along_axis(np.asarray(many),
                                np.asarray(a.new_ids)[:, None], -1)
    expected = lp[top5 == chosen]
    self.assertAllClose(a.logprobs_at_new_ids, expected, atol=1e-5)

  def test_negative_top_k_is_rejected(self):
    with self.assertRaisesRegex(ValueError, 'top_k must be >= 0'):
      token_samplers.DefaultNextTokenSampler(top_k=-1)


if __name__ == '__main__':
  absltest.main()
