"""Tests of LanguageModel decoding options: lazy prefix broadcast, vanilla
sampling, flat beam search and streaming (see _lm_decode)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import flat_beam_search
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import models
from praxis.layers import transformer_models

NestedMap = py_utils.NestedMap
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX = base_layer.PREFIX_DECODE_CACHE
VOCAB, EOS, STEPS = 16, 2, 4


def lm_model(lpb):
  lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=16,
                         vocab_size=VOCAB)
  lm.stacked_transformer_tpl.set(num_layers=2, num_heads=2, hidden_dims=32)
  if lpb:
    layer = lm.stacked_transformer_tpl.transformer_layer_params_tpl
    layer.tr_atten_tpl = pax_fiddle.Config(
        attentions.DotProductAttentionWithLPB)
  return base_layer.instantiate(pax_fiddle.Config(
      models.LanguageModel, name='lm', lm_tpl=lm))


def batch():
  ids = np.array([[1, 5, 9, 4], [1, 7, 0, 0]], np.int32)
  paddings = np.array([[0, 0, 0, 0], [0, 0, 1, 1]], np.float32)
  return NestedMap(ids=jnp.asarray(ids), paddings=jnp.asarray(paddings),
                   labels=jnp.asarray(ids), weights=1 - jnp.asarray(paddings))


def variables_of(model):
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), batch())
  rng = np.random.default_rng(0)
  return jax.tree.map(
      lambda v: jnp.asarray(0.5 * rng.standard_normal(v.shape), jnp.float32),
      shapes)


def run_decode(model, variables, params, callback=None):
  out, _ = model.apply(
      variables, params, batch(), callback, method=model.decode_with_params,
      mutable=[DECODE_CACHE, PREFIX],
      rngs={'random': jax.random.PRNGKey(7)})
  return test_utils.to_np(out[1])


def sample_params(**kw):
  return decoder_hparams.SampleDecoderHParams(
      num_samples=3, k=0, temperature=1.0, fprop_for_prefix=True,
      max_decode_steps=STEPS, seqlen=4 + STEPS, eos_id=EOS, **kw)


class LazyPrefixBroadcastTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.plain, self.lpb = lm_model(False), lm_model(True)
    # Both configs have the same variables (the LPB layer adds none).
    self.variables = variables_of(self.plain)

  def test_sample_decode_equals_without(self):
    want = run_decode(self.plain, self.variables, sample_params())
    got = run_decode(self.lpb, self.variables,
                     sample_params(lazy_prefix_broadcast=True))
    self.assertEqual(got.output_ids.shape, (2, 3, 4 + STEPS))
    self.assertArraysEqual(got.output_ids, want.output_ids)
    self.assertAllClose(got.logprobs, want.logprobs, atol=1e-5)
    self.assertArraysEqual(got.decode_lengths, want.decode_lengths)
    # The samples differ (sampling at temperature 1 over random weights).
    self.assertGreater(len({tuple(r) for r in got.output_ids[0]}), 1)

  def test_greedy_and_beam_search_equal_without(self):
    greedy = dict(fprop_for_prefix=True, max_decode_steps=STEPS,
                  seqlen=4 + STEPS, eos_id=EOS)
    want = run_decode(self.plain, self.variables,
                      decoder_hparams.GreedyDecoderHParams(**greedy))
    got = run_decode(self.lpb, self.variables,
                     decoder_hparams.GreedyDecoderHParams(
                         lazy_prefix_broadcast=True, **greedy))
    self.assertArraysEqual(got.output_ids, want.output_ids)
    beam = dict(greedy, beam_size=2)
    want = run_decode(self.plain, self.variables,
                      decoder_hparams.BeamSearchHParams(**beam))
    got = run_decode(self.lpb, self.variables,
                     decoder_hparams.BeamSearchHParams(
                         lazy_prefix_broadcast=True, **beam))
    self.assertArraysEqual(got.output_ids, want.output_ids)
    self.assertAllClose(got.scores, want.scores, atol=1e-5)

  def test_errors(self):
    with self.assertRaisesRegex(NotImplementedError, 'WithLPB'):
      run_decode(self.plain, self.variables,
                 sample_params(lazy_prefix_broadcast=True))
    with self.assertRaisesRegex(ValueError, 'prefix_decoder_cache'):
      self.lpb.apply(self.variables, sample_params(lazy_prefix_broadcast=True),
                     batch(), method=self.lpb.decode_with_params,
                     mutable=[DECODE_CACHE],
                     rngs={'random': jax.random.PRNGKey(7)})
    with self.assertRaisesRegex(ValueError, 'needs fprop_for_prefix'):
      run_decode(self.lpb, self.variables, decoder_hparams.BeamSearchHParams(
          seqlen=8, max_decode_steps=STEPS, lazy_prefix_broadcast=True,
          beam_size=2))


class OtherDecodersTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.model = lm_model(False)
    self.variables = variables_of(self.model)

  def test_vanilla_sample_decode_top1_equals_greedy(self):
    common = dict(fprop_for_prefix=True, max_decode_steps=STEPS,
                  seqlen=4 + STEPS, eos_id=[99])
    greedy = run_decode(self.model, self.variables,
                        decoder_hparams.GreedyDecoderHParams(**common))
    got = run_decode(self.model, self.variables,
                     decoder_hparams.SampleDecoderHParams(
                         k=1, vanilla_sample_decode=True, **common))
    # Greedy's ids are left-aligned [B, 1, P + steps]; vanilla's [B, ...].
    self.assertArraysEqual(got.output_ids, greedy.output_ids[:, 0])
    self.assertArraysEqual(got.prefix_lengths, [4, 2])

  def test_flat_beam_search_equals_direct_call(self):
    params = decoder_hparams.FlatBeamSearchHParams(
        beam_size=3, seqlen=6, eos_id=EOS, length_norm_alpha=0.5)
    got = run_decode(self.model, self.variables, params)

    def direct(model):
      lm = model.lm
      lm(jnp.zeros((2, 1), jnp.int32), jnp.ones((2, 1)))  # fills the caches
      lm.transform_decode_state(decoder_utils.pad_state_fn(5))
      lm.transform_decode_state(decoder_utils.batch_broadcast_state_fn(3))
      step = lambda mdl, ids, _: mdl.extend_step(ids.reshape(-1)).logits
      return flat_beam_search.flat_beam_search(
          lm, step, batch().ids, batch().paddings, 6, beam_size=3,
          fprop_dtype=jnp.float32, eos_id=EOS, length_norm_alpha=0.5)

    want, _ = self.model.apply(self.variables, method=direct,
                               mutable=[DECODE_CACHE])
    want = test_utils.to_np(want)
    self.assertEqual(got.output_ids.shape, (2, 3, 6))
    self.assertArraysEqual(got.output_ids, want.output_ids)
    self.assertAllClose(got.scores, want.scores, atol=1e-5)
    # Beam search starts from the last prefix id.
    self.assertArraysEqual(got.output_ids[:, 0, 0], [4, 0])

  def test_result_callback_streams_the_greedy_tokens(self):
    seen = []

    def callback_fn(out):
      jax.debug.callback(lambda ids: seen.append(np.asarray(ids)),
                         out.output_ids)

    callback = decoder_utils.StreamingResultCallback(callback_fn,
                                                     interval_steps=2)
    params = decoder_hparams.GreedyDecoderHParams(
        fprop_for_prefix=True, max_decode_steps=STEPS, seqlen=4 + STEPS,
        eos_id=[99])
    got = run_decode(self.model, self.variables, params, callback)
    want = run_decode(self.model, self.variables, params)
    self.assertArraysEqual(got.output_ids, want.output_ids)
    streamed = np.concatenate(seen, axis=-1)  # [B, 1, STEPS]
    self.assertEqual(streamed.shape, (2, 1, STEPS))
    # Right-aligned decoding: the new ids follow each prefix.
    for row, length in enumerate([4, 2]):
      self.assertArraysEqual(streamed[row, 0],
                             want.output_ids[row, 0, length:length + STEPS])


class ContinuousBatchingTest(test_utils.TestCase):
  """Prefill + step-wise top-1 sampling follows greedy decoding."""

  def test_prefill_insert_generate_follow_greedy(self):
    lm = lm_model(False).lm_tpl
    model = base_layer.instantiate(pax_fiddle.Config(
        models.LanguageModelContinuousBatching, name='lm', lm_tpl=lm))
    variables = variables_of(lm_model(False))
    common = dict(fprop_for_prefix=True, max_decode_steps=STEPS,
                  seqlen=4 + STEPS, eos_id=[99])
    greedy = run_decode(model, variables,
                        decoder_hparams.GreedyDecoderHParams(**common))
    params = decoder_hparams.SampleDecoderHParams(
        k=1, temperature=0.0, num_cache_slots=2, **common)

    def prefill(b):
      return model.apply(variables, b, params, method=model.sample_prefill,
                         mutable=[DECODE_CACHE])

    state, cache = prefill(batch())
    reversed_batch = jax.tree.map(lambda x: x[::-1], batch())
    other_state, other_cache = prefill(reversed_batch)
    # Slot 0 takes row 0 of the reversed batch (the second prompt).
    state, cache = model.apply(
        dict(variables, **cache), params, other_state, other_cache, state,
        0, 0, method=model.sample_insert, mutable=[DECODE_CACHE])
    tokens = [state.output_ids]
    for _ in range(STEPS - 1):
      state, cache = model.apply(
          dict(variables, **cache), state, params,
          method=model.sample_generate, mutable=[DECODE_CACHE])
      tokens.append(state.output_ids)
    tokens = np.stack(tokens, -1)
    want = greedy.output_ids[:, 0]
    self.assertArraysEqual(tokens[0], want[1, 2:2 + STEPS])
    self.assertArraysEqual(tokens[1], want[1, 2:2 + STEPS])
    self.assertArraysEqual(state.prefix_lengths, [2, 2])


if __name__ == '__main__':
  absltest.main()
