"""Tests of beam search on a hand-made bigram model."""

import functools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import beam_search
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import sample_decode
from praxis import sample_decode_test
from praxis import test_utils

DECODE_CACHE = base_layer.DECODE_CACHE
PAD, BOS, EOS, A, B_ = 0, 1, 2, 3, 4
V = 5
# p(next | previous). From BOS, A is likelier than B, but B is almost
# always followed by EOS: the best 2-token sequence is B EOS (0.4 * 0.9 =
# 0.36), while greedy takes A A (0.6 * 0.45 = 0.27).
P_NEXT = {BOS: {A: 0.6, B_: 0.4}, A: {A: 0.45, B_: 0.3, EOS: 0.25},
          B_: {EOS: 0.9, A: 0.05, B_: 0.05}, EOS: {EOS: 1.0},
          PAD: {BOS: 1.0}}
# A table whose greedy path, BOS A B EOS (0.27), is also the likeliest
# finished sequence.
P_CHAIN = {**P_NEXT, A: {B_: 0.5, A: 0.4, EOS: 0.1}}


def log_table(p_next):
  probs = np.full((V, V), 1e-9)
  for prev, row in p_next.items():
    for nxt, p in row.items():
      probs[prev, nxt] = p
  return np.log(probs).astype(np.float32)


# logits = log p(next | previous id); the same toy LM as sample_decode's tests.
BigramLm = sample_decode_test.BigramLm


MODELS = {
    name: base_layer.instantiate(pax_fiddle.Config(
        BigramLm, name='toy',
        table=tuple(map(tuple, log_table(p_next).tolist()))))
    for name, p_next in (('beam', P_NEXT), ('chain', P_CHAIN))
}


def extend_fn(model, ids, segment_pos):
  return model.extend_step(ids, segment_pos)


def transform_fn(model, fn):
  model.transform_decode_state(fn)


def fprop_fn(model, ids, paddings):
  model(ids, paddings)


@functools.cache
def run_beam(prefix, model='beam', **hparams):
  """Beam search from right-aligned prefixes (tuples, 0 = left padding)."""
  ids = jnp.asarray(prefix, jnp.int32)
  paddings = jnp.cumsum(ids != 0, axis=1) == 0
  hp = decoder_hparams.BeamSearchHParams(
      fprop_for_prefix=True, eos_id=EOS, **hparams)
  out, _ = jax.jit(lambda: MODELS[model].apply(
      {}, method=lambda m: beam_search.beam_search(
          m, extend_fn, fprop_fn, transform_fn, ids,
          paddings.astype(jnp.float32), hp),
      mutable=[DECODE_CACHE]))()
  return test_utils.to_np(out)


class BeamSearchTest(test_utils.TestCase):

  def test_hand_checked_beam_of_two(self):
    out = run_beam(((BOS,),), beam_size=2, max_decode_steps=2,
                   length_norm_alpha=0.0)
    # Only finished hypotheses are kept: B EOS (0.4 * 0.9 = 0.36) and
    # A EOS (0.6 * 0.25 = 0.15); the live A A (0.27) is dropped at the end.
    self.assertArraysEqual(out.output_ids[0],
                           np.array([[BOS, B_, EOS], [BOS, A, EOS]]))
    self.assertAllClose(out.scores[0], np.log([0.36, 0.15]), atol=1e-5)
    self.assertArraysEqual(out.decode_lengths[0], np.array([3, 3]))
    self.assertAllClose(out.logprobs[0],
                        np.array([[1.0, np.log(0.4), np.log(0.9)],
                                  [1.0, np.log(0.6), np.log(0.25)]]),
                        atol=1e-5)
    self.assertArraysEqual(out.prefix_ids, np.array([[[BOS]]]))

  def test_length_norm_divides_the_scores(self):
    out = run_beam(((BOS,),), beam_size=2, max_decode_steps=2,
                   length_norm_alpha=1.0)
    norm = (2 + 5.0) / 5.0
    self.assertAllClose(out.scores[0], np.log([0.36, 0.15]) / norm,
                        atol=1e-5)

  def test_min_decode_steps_bars_eos(self):
    out = run_beam(((BOS,),), beam_size=2, max_decode_steps=3,
                   length_norm_alpha=0.0, min_decode_steps=2)
    # No EOS in the first two steps: the live A A (0.27) and A B (0.18)
    # end at step 3 with A B EOS (0.162) and A A EOS (0.0675).
    self.assertArraysEqual(out.output_ids[0],
                           np.array([[BOS, A, B_, EOS], [BOS, A, A, EOS]]))
    self.assertAllClose(out.scores[0], np.log([0.162, 0.0675]), atol=1e-5)

  def test_right_aligned_prefixes_of_different_lengths(self):
    out = run_beam(((0, BOS), (BOS, B_)), beam_size=2, max_decode_steps=2,
                   length_norm_alpha=0.0)
    self.assertArraysEqual(out.output_ids[0, 0], np.array([BOS, B_, EOS, 0]))
    # Row 1 starts after B: EOS at once (0.9) beats A A (0.05 * 0.45).
    self.assertArraysEqual(out.output_ids[1, 0], np.array([BOS, B_, EOS, 0]))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([3, 3]))
    self.assertAllClose(out.scores[:, 0], np.log([0.36, 0.9]), atol=1e-5)
    self.assertArraysEqual(out.prefix_lengths[:, 0], np.array([1, 2]))

  def test_early_exit_keeps_eos_hypotheses_in_the_beam(self):
    kwargs = {'beam_size': 2, 'max_decode_steps': 4, 'length_norm_alpha': 0.0}
    full = run_beam(((BOS,),), **kwargs)
    early = run_beam(((BOS,),), early_exit=True, **kwargs)
    self.assertArraysEqual(early.output_ids[0, 0], full.output_ids[0, 0])
    self.assertAllClose(early.scores[0, 0], full.scores[0, 0])
    # With early_exit the live beam may take EOS (then it is done): after
    # step 2 it holds B EOS (0.36, done) and A A (0.27); B EOS goes on with
    # EOS (p = 1), so B EOS EOS also finishes with 0.36, while the A A ...
    # hypothesis never takes EOS in the beam.
    self.assertArraysEqual(early.done, np.array([[True, False]]))
    self.assertAllClose(early.scores[0], np.log([0.36, 0.36]), atol=1e-5)
    self.assertArraysEqual(early.output_ids[0, 1],
                           np.array([BOS, B_, EOS, EOS, 0]))

  def test_beam_of_one_equals_greedy(self):
    out = run_beam(((BOS,),), model='chain', beam_size=1, max_decode_steps=4,
                   length_norm_alpha=0.0)
    greedy = jax.jit(lambda: MODELS['chain'].apply(
        {}, method=lambda m: sample_decode.greedy_decode(
            m, extend_fn, jnp.array([[BOS]]), jnp.zeros((1, 1)), 5,
            fprop_fn=lambda m, i, p: m(i[:, :1], p[:, :1]),
            transform_state_fn=transform_fn,
            prefix_lengths=jnp.array([1]), eos_id=EOS),
        mutable=[DECODE_CACHE]))()[0]
    self.assertArraysEqual(greedy.output_ids[0, 0],
                           np.array([BOS, A, B_, EOS, 0]))
    self.assertArraysEqual(out.output_ids[:, 0], greedy.output_ids[:, 0])
    self.assertArraysEqual(out.decode_lengths[:, 0],
                           greedy.decode_lengths[:, 0])
    self.assertAllClose(out.scores[0, 0], np.log(0.6 * 0.5 * 0.9), atol=1e-5)

  def test_needs_max_decode_steps(self):
    with self.assertRaisesRegex(ValueError, 'max_decode_steps'):
      run_beam(((BOS,),), beam_size=2)


class HelpersTest(test_utils.TestCase):

  def test_update_global_beam_keeps_the_best(self):
    ids = lambda *rows: jnp.array([rows])
    end = (ids([1, 1], [2, 2]), jnp.array([[2, 2]]), jnp.array([[-1.0, -5.0]]),
           ids([0.0, 0.0], [0.0, 0.0]))
    cur = (ids([3, 3], [4, 4]), jnp.array([[3, 3]]), jnp.array([[-2.0, -0.5]]),
           ids([1.0, 1.0], [2.0, 2.0]))
    new_ids, lengths, scores, _ = beam_search.update_global_beam(end, cur)
    self.assertArraysEqual(new_ids, np.array([[[4, 4], [1, 1]]]))
    self.assertArraysEqual(lengths, np.array([[3, 2]]))
    self.assertAllClose(scores, np.array([[-0.5, -1.0]]))

  def test_shuffle_state_both_ways(self):
    x = jnp.arange(12.0).reshape(2, 3, 2)
    hyp = jnp.array([[2, 2, 0], [1, 0, 1]])
    expected = np.stack([np.asarray(x)[b][np.asarray(hyp)[b]]
                         for b in range(2)])
    self.assertArraysEqual(beam_search.shuffle_state(x, hyp), expected)
    self.assertAllClose(beam_search.shuffle_state(x, hyp, True), expected)

  def test_two_stage_topk(self):
    logprobs = jnp.log(jnp.array([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]]))
    hyp_scores = jnp.log(jnp.array([[0.5, 0.5]]))
    _, ids, scores, pos = decoder_utils.two_stage_topk(logprobs, hyp_scores,
                                                       [2])
    # Candidates: (hyp 0: ids 0, 1), (hyp 1: ids 2 (terminal), 0).
    self.assertArraysEqual(decoder_utils.gather_output_id(ids, pos),
                           np.array([[0, 1]]))
    self.assertArraysEqual(pos // 2, np.array([[0, 0]]))
    self.assertAllClose(scores, np.log([[0.25, 0.15]]), atol=1e-6)
    self.assertAllClose(decoder_utils.length_norm(3, 0.8),
                        np.float32((8 / 5) ** 0.8))


if __name__ == '__main__':
  absltest.main()
