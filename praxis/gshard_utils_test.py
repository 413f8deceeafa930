"""Tests for praxis.gshard_utils against token-by-token numpy routing."""

import importlib.util
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import gshard_utils

_TESTDATA = os.path.join(os.path.dirname(__file__), 'testdata')


def _load_recorder():
  spec = importlib.util.spec_from_file_location(
      'make_ref_gshard_utils',
      os.path.join(_TESTDATA, 'make_ref_gshard_utils.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _jitted(fn, arrays, **static):
  """fn(**arrays, **static) compiled once (faster than op-by-op dispatch)."""
  return jax.jit(lambda a: fn(**a, **static))(arrays)


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _np_token_choice(logits, paddings, k, capacity, legacy=True):
  """Routes token by token: all first choices in token order, then all
  second choices, ...; a choice fits while its expert has < capacity tokens.

  Returns (combine [G, S, E, C], aux_loss, over-capacity fractions).
  """
  g_dim, s_dim, e_dim = logits.shape
  probs = _softmax(logits.astype(np.float64))
  if paddings is None:
    paddings = np.zeros((g_dim, s_dim))
  combine = np.zeros((g_dim, s_dim, e_dim, capacity))
  over = np.zeros(k)
  routed = np.zeros(k)
  aux = 0.0
  for g in range(g_dim):
    order = [np.argsort(-probs[g, s], kind='stable')[:k] for s in range(s_dim)]
    gates = np.array([probs[g, s, order[s]] for s in range(s_dim)])
    if legacy and k > 1:  # a single gate stays the raw probability.
      gates = gates / gates.sum(-1, keepdims=True)
    fill = np.zeros(e_dim, int)  # tokens that found room
    seen = np.zeros(e_dim, int)  # tokens that asked, per choice
    kept = np.zeros((s_dim, k), bool)
    slot = np.zeros((s_dim, k), int)
    for i in range(k):
      seen[:] = fill
      for s in range(s_dim):
        if paddings[g, s]:
          continue
        e = order[s][i]
        routed[i] += 1
        if seen[e] < capacity:
          kept[s, i], slot[s, i] = True, seen[e]
          fill[e] += 1
        else:
          over[i] += 1
        seen[e] += 1
    for s in range(s_dim):
      w = gates[s] * kept[s]
      if not legacy and w.sum() > 0:
        w = w / w.sum()
      for i in range(k):
        if kept[s, i]:
          combine[g, s, order[s][i], slot[s, i]] = w[i]
    live = 1.0 - paddings[g]
    first = np.zeros(e_dim)
    for s in range(s_dim):
      first[order[s][0]] += live[s]
    density = first / s_dim
    proxy = (probs[g] * live[:, None]).mean(0)
    aux += (density * proxy).mean() * e_dim * e_dim / g_dim
  return combine, aux, over / np.maximum(routed, 1)


class GshardUtilsTest(parameterized.TestCase):

  def test_remove_dim(self):
    self.assertEqual(gshard_utils.remove_dim(1, ['a', None, 'b']), ['a', 'b'])
    self.assertEqual(gshard_utils.remove_dim(-1, ('a', None, 'b')),
                     ['a', None])
    with self.assertRaisesRegex(ValueError, 'dim=3 is out of range'):
      gshard_utils.remove_dim(3, ['a', None, 'b'])

  def test_cum_sum_options(self):
    x = jnp.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(
        gshard_utils.cum_sum(x, axis=1), [[1, 3, 6], [4, 9, 15]])
    np.testing.assert_array_equal(
        gshard_utils.cum_sum(x, axis=1, exclusive=True),
        [[0, 1, 3], [0, 4, 9]])
    np.testing.assert_array_equal(
        gshard_utils.cum_sum(x, axis=1, reverse=True), [[6, 5, 3],
                                                        [15, 11, 6]])
    np.testing.assert_array_equal(
        gshard_utils.cum_sum(x, axis=0, exclusive=True, reverse=True),
        [[4, 5, 6], [0, 0, 0]])

  def test_top_k_is_ascending(self):
    vals, idx = gshard_utils.top_k(jnp.array([[0.3, 0.9, 0.1, 0.5]]), 2)
    np.testing.assert_allclose(vals, [[0.5, 0.9]])
    np.testing.assert_array_equal(idx, [[3, 1]])

  def test_top2_hand_example(self):
    # One group, 3 tokens, 2 experts, capacity 1. Every token prefers expert
    # 0: token 0 takes its slot, tokens 1 and 2 are dropped there; expert 1's
    # single slot goes to token 0's second choice.
    logits = jnp.log(jnp.array([[[0.7, 0.3], [0.6, 0.4], [0.8, 0.2]]]))
    aux, combine, dispatch, stats = _jitted(
        gshard_utils.top2_gating_on_logits, dict(logits=logits),
        paddings=None,
        experts_dim=2, expert_capacity_dim=1, fprop_dtype=jnp.float32)
    want = np.zeros((1, 3, 2, 1))
    want[0, 0, 0, 0], want[0, 0, 1, 0] = 0.7, 0.3
    np.testing.assert_allclose(combine, want, atol=1e-6)
    np.testing.assert_array_equal(dispatch, want > 0)
    # density of expert 0 is 1, its mean probability 0.7: 4 * (0.7 + 0) / 2.
    np.testing.assert_allclose(aux, 1.4, rtol=1e-6)
    over_1, over_2, d0, d1, d2 = stats
    np.testing.assert_allclose([over_1, over_2], [2 / 3, 2 / 3], rtol=1e-6)
    self.assertEqual((int(d0), int(d1), int(d2)), (2, 0, 1))

  @parameterized.parameters(True, False)
  def test_top2_matches_numpy(self, legacy):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 12, 4)).astype(np.float32)
    paddings = np.zeros((2, 12), np.float32)
    paddings[1, -3:] = 1.0
    aux, combine, dispatch, stats = _jitted(
        gshard_utils.top2_gating_on_logits,
        dict(paddings=paddings, logits=logits), experts_dim=4,
        expert_capacity_dim=4, fprop_dtype=jnp.float32,
        legacy_mtf_behavior=legacy)
    want, want_aux, want_over = _np_token_choice(logits, paddings, 2, 4,
                                                 legacy)
    self.assertGreater(want_over.sum(), 0)  # capacity binds somewhere.
    np.testing.assert_allclose(combine, want, atol=1e-5)
    np.testing.assert_array_equal(dispatch, want > 0)
    np.testing.assert_allclose(stats[:2], want_over, rtol=1e-5)
    counts = (want > 0).sum((-2, -1))[paddings == 0]
    self.assertEqual([int(x) for x in stats[2:]],
                     [int((counts == n).sum()) for n in range(3)])
    if legacy:  # the legacy density divides by S, as the numpy reference.
      np.testing.assert_allclose(aux, want_aux, rtol=1e-5)

  def test_top2_capacity_factor_rounds_up_to_4(self):
    logits = jnp.zeros((1, 40, 4))
    _, combine, _, _ = _jitted(
        gshard_utils.top2_gating_on_logits, dict(logits=logits),
        paddings=None,
        experts_dim=4, expert_capacity_dim=None, fprop_dtype=jnp.float32,
        capacity_factor=1.5)
    self.assertEqual(combine.shape, (1, 40, 4, 16))  # 40*1.5/4=15 -> 16.

  def test_top2_random_policy_keeps_confident_second_choices(self):
    logits = jnp.log(jnp.array([[[0.5, 0.45, 0.05], [0.9, 0.05, 0.05]]]))
    _, combine, _, _ = _jitted(
        gshard_utils.top2_gating_on_logits,
        dict(logits=logits, prng_key=jax.random.PRNGKey(1)),
        paddings=None, experts_dim=3, expert_capacity_dim=4,
        fprop_dtype=jnp.float32, second_expert_policy='random',
        second_expert_threshold=0.2)
    # gate_2 of token 0 is 0.45/0.95 > 0.2: always kept.
    self.assertGreater(float(combine[0, 0, 1].sum()), 0.4)
    with self.assertRaisesRegex(ValueError, 'needs a prng_key'):
      gshard_utils.top2_gating_on_logits(
          None, logits, 3, 4, jnp.float32, second_expert_policy='random')

  def test_top2_sampling_never_repeats_the_first_expert(self):
    logits = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 5))
    _, combine, dispatch, _ = _jitted(
        gshard_utils.top2_gating_on_logits,
        dict(logits=logits, prng_key=jax.random.PRNGKey(3)),
        paddings=None, experts_dim=5, expert_capacity_dim=16,
        fprop_dtype=jnp.float32, second_expert_policy='sampling')
    per_expert = dispatch.sum(-1)  # [G, S, E]
    self.assertEqual(float(per_expert.max()), 1.0)
    np.testing.assert_array_equal(per_expert.sum(-1), 2)
    np.testing.assert_allclose(combine.sum((-2, -1)), 1.0, rtol=1e-5)

  @parameterized.parameters(1, 2, 3)
  def test_topk_matches_numpy(self, k):
    rng = np.random.default_rng(k)
    logits = rng.normal(size=(2, 10, 5)).astype(np.float32)
    paddings = np.zeros((2, 10), np.float32)
    paddings[0, :2] = 1.0
    aux, combine, dispatch, over = _jitted(
        gshard_utils.topk_gating_on_logits,
        dict(paddings=paddings, logits=logits), experts_dim=5,
        expert_capacity_dim=3, fprop_dtype=jnp.float32, k=k)
    want, want_aux, want_over = _np_token_choice(logits, paddings, k, 3)
    np.testing.assert_allclose(combine, want, atol=1e-5)
    np.testing.assert_array_equal(dispatch, want > 0)
    np.testing.assert_allclose(aux, want_aux, rtol=1e-5)
    np.testing.assert_allclose(over, want_over, rtol=1e-5)

  def test_expert_choice_picks_each_experts_best_tokens(self):
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 8, 2)).astype(np.float32)
    aux, gates, perm = _jitted(
        gshard_utils.expert_choice_gating_on_logits, dict(logits=logits),
        experts_dim=2,
        expert_capacity_dim=None, fprop_dtype=jnp.float32,
        capacity_factor=0.5)
    self.assertEqual(float(aux), 0.0)
    probs = _softmax(logits)
    for g in range(2):
      for e in range(2):
        best = np.argsort(probs[g, :, e])[-2:]  # 8 // 2 * 0.5 tokens
        np.testing.assert_array_equal(np.argmax(perm[g, e], -1), best)
        np.testing.assert_allclose(gates[g, e], probs[g, best, e], rtol=1e-6)

  def test_expert_choice_v2_matches_numpy(self):
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(1, 8, 3)).astype(np.float32)
    paddings = np.zeros((1, 8), np.float32)
    paddings[0, 5] = 1.0
    _, combine, dispatch = _jitted(
        gshard_utils.expert_choice_gating_on_logits_v2,
        dict(paddings=paddings, logits=logits),
        experts_dim=3, expert_capacity_dim=2, fprop_dtype=jnp.float32)
    probs = _softmax(logits)[0] * (1 - paddings[0])[:, None]
    want = np.zeros((1, 8, 3, 2))
    for e in range(3):
      picked = sorted(np.argsort(probs[:, e])[-2:])
      for c, s in enumerate(t for t in picked if not paddings[0, t]):
        want[0, s, e, c] = probs[s, e]
    np.testing.assert_allclose(combine, want, rtol=1e-6)
    np.testing.assert_array_equal(dispatch, want > 0)

  def test_compute_gating_dispatches(self):
    logits = jax.random.normal(jax.random.PRNGKey(0), (1, 8, 4))
    dims = dict(paddings=None, experts_dim=4, expert_capacity_dim=4,
                fprop_dtype=jnp.float32)
    by_name = _jitted(gshard_utils.compute_gating, dict(logits=logits),
                      **dims)
    direct = _jitted(gshard_utils.top2_gating_on_logits, dict(logits=logits),
                     **dims)
    np.testing.assert_array_equal(by_name[1], direct[1])
    self.assertLen(jax.eval_shape(lambda x: gshard_utils.compute_gating(
        logits=x, gating_func='expert_choice_v2', **dims), logits), 3)
    with self.assertRaisesRegex(ValueError, "'top3'"):
      gshard_utils.compute_gating(None, logits, 4, 4, jnp.float32,
                                  gating_func='top3')

  def test_missing_capacity_is_an_error(self):
    with self.assertRaisesRegex(ValueError, 'expert_capacity_dim or'):
      gshard_utils.top2_gating_on_logits(None, jnp.zeros((1, 4, 2)), 2, None,
                                         jnp.float32)


  def test_matches_values_recorded_from_pax_1_4(self):
    # Pax 1.4's JAX drew random numbers with threefry_partitionable off.
    with jax.threefry_partitionable(False):
      ours = _load_recorder().run_cases(gshard_utils)
    ref = np.load(os.path.join(_TESTDATA, 'ref_gshard_utils.npz'))
    self.assertEqual(sorted(ours), sorted(ref.files))
    for name in ref.files:
      self.assertEqual(ours[name].dtype, ref[name].dtype, name)
      np.testing.assert_allclose(ours[name], ref[name], atol=1e-6,
                                 err_msg=name)


if __name__ == '__main__':
  absltest.main()
