"""Tests of LanguageModel, SequenceModel and BertModel."""

import functools

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_layer
from praxis import decoder_hparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
DECODE_CACHE = base_layer.DECODE_CACHE
LanguageModelType = transformer_models.LanguageModelType
instantiate = base_layer.instantiate
VOCAB, D, B, T = 16, 16, 2, 6
SEQ = np.array([1, 5, 9, 3, 7, 11, 2, 0])  # BOS ... EOS(2), then a pad label
EOS = 2


def lm_config(**kwargs):
  p = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=D,
                        vocab_size=VOCAB, **kwargs)
  p.stacked_transformer_tpl.set(num_layers=1, num_heads=2, hidden_dims=32)
  return p


def random_variables(rng, model, *args):
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), *args)
  return jax.tree.map(
      lambda v: jnp.asarray(0.3 * rng.standard_normal(v.shape), jnp.float32),
      shapes)


def np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def lm_batch(ids, paddings, weights, labels=None, segment_ids=None,
             segment_pos=None):
  ids = np.asarray(ids)
  paddings = np.asarray(paddings, np.float32)
  if segment_ids is None:
    segment_ids = (1 - paddings).astype(np.int32)
    segment_pos = np.tile(np.arange(ids.shape[1]), (ids.shape[0], 1))
  labels = np.roll(ids, -1, 1) if labels is None else labels
  return NestedMap(
      ids=jnp.asarray(ids), labels=jnp.asarray(labels),
      paddings=jnp.asarray(paddings),
      weights=jnp.asarray(weights, jnp.float32),
      segment_ids=jnp.asarray(segment_ids),
      segment_pos=jnp.asarray(segment_pos))


@functools.cache
def packed_model():
  """A packed-input LanguageModel returning its predictions, compiled once."""
  model = instantiate(pax_fiddle.Config(
      models.LanguageModel, name='lm', return_predictions=True,
      lm_tpl=lm_config(packed_input=True)))
  batch = lm_batch(np.zeros((B, T), np.int32), np.zeros((B, T)),
                   np.ones((B, T)))
  variables = random_variables(np.random.default_rng(0), model, batch)
  return model, variables, jax.jit(model.apply)


class LanguageModelMetricsTest(test_utils.TestCase):

  def test_metrics_match_numpy(self):
    _, variables, apply = packed_model()
    ids = self.np_rng.integers(0, VOCAB, (B, T))
    paddings = np.array([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
    weights = np.array([[1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0]], np.float32)
    batch = lm_batch(ids, paddings, weights)
    metrics, predictions = apply(variables, batch)
    logp = np_log_softmax(np.asarray(predictions.logits, np.float64))
    labels = np.asarray(batch.labels)
    xent = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    total = weights.sum()
    avg = (xent * weights).sum() / total
    acc = ((logp.argmax(-1) == labels) * weights).sum() / total
    expected = {
        'total_loss': (avg, total), 'avg_xent': (avg, total),
        'log_pplx': (avg, total), 'aux_loss': (0.0, 1.0),
        'fraction_of_correct_next_step_preds': (acc, total),
        'num_predictions': (total, 1.0),
    }
    self.assertCountEqual(metrics.keys(), expected.keys())
    for key, (value, weight) in expected.items():
      self.assertAllClose(metrics[key][0], np.float32(value), atol=1e-5,
                          msg=key)
      self.assertAllClose(metrics[key][1], np.float32(weight), msg=key)

  def test_packed_sequences_score_as_unpacked(self):
    _, variables, apply = packed_model()
    a, b = self.np_rng.integers(0, VOCAB, (2, 3))
    a_labels, b_labels = self.np_rng.integers(0, VOCAB, (2, 3))
    packed = lm_batch(
        [np.r_[a, b], np.zeros(T, int)], [np.zeros(T), np.ones(T)],
        [np.ones(T), np.zeros(T)],
        labels=[np.r_[a_labels, b_labels], np.zeros(T, int)],
        segment_ids=[[1, 1, 1, 2, 2, 2], [0] * T],
        segment_pos=[[0, 1, 2, 0, 1, 2], list(range(T))])
    half = np.r_[np.zeros(3), np.ones(3)]
    unpacked = lm_batch(
        [np.r_[a, 0, 0, 0], np.r_[b, 0, 0, 0]], [half, half],
        [1 - half, 1 - half],
        labels=[np.r_[a_labels, 0, 0, 0], np.r_[b_labels, 0, 0, 0]])
    m_packed, p_packed = apply(variables, packed)
    m_unpacked, p_unpacked = apply(variables, unpacked)
    xent_packed = np.asarray(p_packed.per_token_xent)
    xent_unpacked = np.asarray(p_unpacked.per_token_xent)
    self.assertAllClose(xent_packed[0, :3], xent_unpacked[0, :3], atol=1e-5)
    self.assertAllClose(xent_packed[0, 3:], xent_unpacked[1, :3], atol=1e-5)
    self.assertAllClose(m_packed.avg_xent, m_unpacked.avg_xent, atol=1e-5)
    self.assertAllClose(m_packed.num_predictions, m_unpacked.num_predictions)

  def test_eval_sample_weights_and_strict_accuracy(self):
    labels = jnp.array([[1, 2, 3], [1, 2, 3], [4, 4, 4]])
    argmax = jnp.array([[1, 2, 0], [1, 0, 3], [4, 4, 4]])
    weights = jnp.array([[1.0, 1, 0], [1, 1, 1], [1, 1, 1]])
    sample_weights = jnp.array([1.0, 1, 0])
    merged = weights * sample_weights[:, None]
    predictions = NestedMap(
        per_example_argmax=argmax, total_weight=jnp.sum(merged),
        avg_xent=jnp.float32(0.5), total_loss=jnp.float32(0.7),
        aux_loss=jnp.float32(0.2), per_sequence_xent=jnp.array([1.0, 2, 3]))
    batch = NestedMap(labels=labels, weights=weights,
                      eval_sample_weights=sample_weights)
    metrics, per_example = models.compute_xent_loss_helper(
        predictions, batch, False, apply_eval_sample_weights=True,
        report_strict_acc=True)
    # 4 of the 5 weighted tokens are right; row 0 is all right, row 1 is
    # not, row 2 is a padding example.
    self.assertAllClose(metrics.fraction_of_correct_next_step_preds,
                        (np.float32(0.8), np.float32(5.0)))
    self.assertAllClose(metrics.acc_strict, (np.float32(0.5),
                                             np.float32(2.0)))
    self.assertAllClose(per_example.scores, np.array([-1.0, -2, -3]))
    with self.assertRaisesRegex(ValueError, 'eval_sample_weights'):
      models.compute_xent_loss_helper(
          predictions, NestedMap(labels=labels, weights=weights), False,
          apply_eval_sample_weights=True)

  def test_missing_keys_are_named(self):
    model, variables, _ = packed_model()
    batch = lm_batch(np.zeros((B, T), int), np.zeros((B, T)),
                     np.ones((B, T)))
    del batch['segment_pos']
    with self.assertRaisesRegex(ValueError, r"lacks \['segment_pos'\]"):
      model.apply(variables, batch)


@functools.cache
def trained_copy_model():
  """A LanguageModel trained with Adam to continue SEQ (compiled once)."""
  model = instantiate(pax_fiddle.Config(models.LanguageModel, name='lm',
                                        lm_tpl=lm_config()))
  n = len(SEQ) - 1
  batch = NestedMap(ids=jnp.asarray(np.tile(SEQ[:-1], (B, 1))),
                    labels=jnp.asarray(np.tile(SEQ[1:], (B, 1))),
                    paddings=jnp.zeros((B, n)), weights=jnp.ones((B, n)))
  params = random_variables(np.random.default_rng(1), model, batch)['params']
  opt = optax.adam(0.02)

  def loss_fn(p):
    metrics, _ = model.apply({'params': p}, batch)
    return metrics.total_loss[0]

  @jax.jit
  def train(params):
    def step(carry, _):
      p, s = carry
      loss, grads = jax.value_and_grad(loss_fn)(p)
      updates, s = opt.update(grads, s)
      return (optax.apply_updates(p, updates), s), loss
    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)),
                                       None, length=40)
    return params, losses

  params, losses = train(params)
  logits = jax.jit(lambda p: model.apply(
      {'params': p}, method=lambda m: m.lm(batch.ids,
                                           batch.paddings).logits))(params)
  return model, params, np.asarray(losses), np_log_softmax(
      np.asarray(logits[0], np.float64))


def decode(decoder_params, prefix_lengths=(3, 1)):
  model, params, _, _ = trained_copy_model()
  n = len(SEQ) - 1
  pos = np.arange(n)[None]
  lengths = np.array(prefix_lengths)[:, None]
  batch = NestedMap(ids=jnp.asarray(np.where(pos < lengths, SEQ[:-1], 0)),
                    paddings=jnp.asarray(pos >= lengths, jnp.float32))
  (metrics, result, _), _ = jax.jit(lambda p: model.apply(
      {'params': p}, decoder_params, batch, method=model.decode_with_params,
      mutable=[DECODE_CACHE], rngs={'random': jax.random.PRNGKey(0)}))(
          params)
  return test_utils.to_np(metrics), test_utils.to_np(result)


class FakeInput:

  def ids_to_strings(self, ids, lengths, key=None):
    del key
    return [' '.join(str(i) for i in row[:n]) for row, n in zip(ids, lengths)]


class LanguageModelDecodeTest(test_utils.TestCase):

  def test_training_learned_the_sequence(self):
    _, _, losses, _ = trained_copy_model()
    self.assertLess(losses[-1], 0.05)
    self.assertLess(losses[-1], losses[0])

  def test_greedy_decode_reproduces_the_sequence(self):
    metrics, out = decode(decoder_hparams.GreedyDecoderHParams(
        seqlen=8, eos_id=EOS))
    self.assertArraysEqual(out.output_ids[:, 0], np.tile(SEQ, (B, 1)))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([7, 7]))
    self.assertArraysEqual(out.prefix_lengths[:, 0], np.array([3, 1]))
    self.assertAllClose(metrics.num_decoded, (np.float32(2), np.float32(1)))
    # Every step's log-probability is the forward pass's.
    _, _, _, logp = trained_copy_model()
    expected = [logp[t - 1, SEQ[t]] for t in range(1, 7)]
    self.assertAllClose(out.logprobs[0, 0, 1:7], np.array(expected),
                        atol=1e-4)
    self.assertAllClose(out.logprobs[0, 0, [0, 7]], np.array([1.0, 1.0]))

  def test_greedy_with_fprop_for_prefix_reproduces_the_sequence(self):
    _, out = decode(decoder_hparams.GreedyDecoderHParams(
        eos_id=EOS, fprop_for_prefix=True, max_decode_steps=6))
    self.assertEqual(out.output_ids.shape, (B, 1, 7 + 6))
    self.assertArraysEqual(out.output_ids[:, 0, :8], np.tile(SEQ, (B, 1)))
    self.assertArraysEqual(out.output_ids[:, 0, 8:], np.zeros((B, 5), np.int32))
    self.assertArraysEqual(out.decode_lengths[:, 0], np.array([7, 7]))
    self.assertArraysEqual(out.prefix_ids[:, 0, :3],
                           np.array([SEQ[:3], [1, 0, 0]]))

  def test_beam_search_scores_match_the_forward_pass(self):
    alpha = 0.8
    _, out = decode(decoder_hparams.BeamSearchHParams(
        eos_id=EOS, fprop_for_prefix=True, max_decode_steps=6, beam_size=2,
        length_norm_alpha=alpha))
    self.assertArraysEqual(out.output_ids[:, 0, :8], np.tile(SEQ, (B, 1)))
    _, _, _, logp = trained_copy_model()
    for row, prefix_len in enumerate((3, 1)):
      steps = range(prefix_len, 7)
      total = sum(logp[t - 1, SEQ[t]] for t in steps)
      norm = ((len(steps) + 5) / 5) ** alpha
      self.assertAllClose(out.scores[row, 0], np.float32(total / norm),
                          atol=1e-4)
    self.assertGreater(out.scores[0, 0], out.scores[0, 1])

  def test_top_k_one_samples_equal_greedy(self):
    _, out = decode(decoder_hparams.SampleDecoderHParams(
        seqlen=8, eos_id=EOS, k=1, num_samples=2, temperature=1.0))
    self.assertArraysEqual(out.output_ids, np.tile(SEQ, (B, 2, 1)))
    model = trained_copy_model()[0]
    _, outputs, _ = model.process_decode_out(FakeInput(), out)
    self.assertEqual(outputs[0][1]['sampled'], ['1 5 9 3 7 11 2'] * 2)

  def test_process_decode_out(self):
    _, out = decode(decoder_hparams.GreedyDecoderHParams(
        seqlen=8, eos_id=EOS))
    model = trained_copy_model()[0]
    metrics, outputs, _ = model.process_decode_out(FakeInput(), out)
    self.assertLen(outputs, 2)
    key, entry = outputs[0]
    self.assertEqual(key, '1 5 9')
    self.assertEqual(entry['decoded'], '1 5 9 3 7 11 2')
    self.assertEqual(entry['decoded_substr'], '3 7 11 2')
    self.assertEqual(entry['original'], '1 5 9')
    self.assertEqual(outputs[1][1]['prefix'], '1')
    self.assertEqual(outputs[1][1]['decoded_substr'], '5 9 3 7 11 2')
    self.assertAllClose(metrics.decoded_length[0], np.float32(7.0))

  def test_process_decode_out_spans_per_row(self):
    # Rows with different prefix and decode lengths, one padded row (weight
    # 0) and one that decoded nothing past its prefix.
    ids = np.array([[4, 5, 6, 7, 8, 0], [9, 9, 9, 9, 9, 9],
                    [1, 2, 3, 4, 0, 0]], np.int32)
    out = py_utils.NestedMap(
        output_ids=ids[:, None], decode_lengths=np.array([[5], [3], [4]]),
        prefix_lengths=np.array([[2], [0], [4]]), prefix_ids=ids[:, None],
        logprobs=np.zeros((3, 1, 6), np.float32), ids=ids,
        eval_sample_weights=np.array([1.0, 0.0, 1.0], np.float32))
    model = trained_copy_model()[0]
    _, outputs, _ = model.process_decode_out(FakeInput(), out)
    self.assertEqual([k for k, _ in outputs], ['4 5', '1 2 3 4'])
    self.assertEqual([e['decoded_substr'] for _, e in outputs],
                     ['6 7 8', ''])
    self.assertEqual([list(e['decoded_ids']) for _, e in outputs],
                     [[6, 7, 8], []])
    self.assertEqual([(e['prefix_length'], e['decode_length'])
                      for _, e in outputs], [(2, 5), (4, 4)])

  def test_bad_decoder_params_are_rejected(self):
    with self.assertRaisesRegex(ValueError, 'fprop_for_prefix'):
      decode(decoder_hparams.BeamSearchHParams(eos_id=EOS, seqlen=8,
                                               max_decode_steps=4))
    with self.assertRaisesRegex(ValueError, 'vanilla_sample_decode need'):
      decode(decoder_hparams.SampleDecoderHParams(
          seqlen=8, vanilla_sample_decode=True))
    with self.assertRaisesRegex(ValueError, 'seqlen > 0'):
      decode(decoder_hparams.GreedyDecoderHParams())


class BertModelTest(test_utils.TestCase):

  def test_metrics_on_given_masks_match_numpy(self):
    lm_p = lm_config(packed_input=True,
                     model_type=LanguageModelType.BIDIRECTIONAL)
    model = instantiate(pax_fiddle.Config(models.BertModel, name='bert',
                                          lm_tpl=lm_p, mask_token_id=15))
    labels = self.np_rng.integers(0, 15, (B, T))
    masked_pos = np.array([[0, 1, 0, 0, 1, 0], [1, 0, 0, 1, 0, 0]],
                          np.float32)
    batch = NestedMap(
        labels=jnp.asarray(labels),
        masked_ids=jnp.asarray(np.where(masked_pos > 0, 15, labels)),
        masked_pos=jnp.asarray(masked_pos),
        paddings=jnp.asarray([[0.0] * T, [0, 0, 0, 0, 1, 1]]),
        segment_ids=jnp.asarray([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 0, 0]]),
        segment_pos=jnp.asarray([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 0, 0]]))
    variables = random_variables(self.np_rng, model, batch)
    predictions, (metrics, _) = jax.jit(lambda v: model.apply(
        v, batch, method=lambda m, b: (m.compute_predictions(b), m(b))))(
            variables)
    self.assertArraysEqual(predictions.augmented_labels, batch.masked_ids)
    logp = np_log_softmax(np.asarray(predictions.logits, np.float64))
    xent = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
    avg = (xent * masked_pos).sum() / masked_pos.sum()
    self.assertAllClose(metrics.avg_xent[0], np.float32(avg), atol=1e-5)
    self.assertAllClose(metrics.num_predictions[0], np.float32(4))
    self.assertAllClose(metrics.num_tokens[0], np.float32(10))
    self.assertAllClose(metrics.num_seqs[0], np.float32(3))

  def test_mask_lm_inputs_statistics(self):
    ids = jnp.asarray(self.np_rng.integers(1, 100, (128, 128)))
    paddings = jnp.asarray(self.np_rng.integers(0, 2, (128, 128)), jnp.float32)
    out, picked = models.mask_lm_inputs(jax.random.PRNGKey(0), ids, paddings,
                                        vocab_size=100, mask_token_id=0)
    out, picked = np.asarray(out), np.asarray(picked) > 0
    ids, paddings = np.asarray(ids), np.asarray(paddings)
    self.assertFalse(np.any(picked & (paddings > 0)))
    self.assertArraysEqual(out[~picked], ids[~picked])
    self.assertAllClose(picked.sum() / (paddings == 0).sum(), 0.15,
                        atol=0.01)
    self.assertAllClose((out[picked] == 0).mean(), 0.8, atol=0.03)

  def test_needs_a_bidirectional_packed_lm(self):
    model = instantiate(pax_fiddle.Config(models.BertModel, name='bert',
                                          lm_tpl=lm_config(packed_input=True)))
    batch = NestedMap(labels=jnp.zeros((1, 4), jnp.int32),
                      paddings=jnp.zeros((1, 4)))
    with self.assertRaisesRegex(ValueError, 'BIDIRECTIONAL'):
      jax.eval_shape(model.init, jax.random.PRNGKey(0), batch)


class SequenceModelTest(test_utils.TestCase):

  def test_greedy_decode_follows_the_forward_argmax(self):
    p = pax_fiddle.Config(transformer_models.TransformerEncoderDecoder,
                          model_dims=D)
    p.softmax_tpl.num_classes = VOCAB
    common = {'num_layers': 1, 'num_heads': 2, 'hidden_dims': 32}
    p.encoder_stacked_transformer_tpl = pax_fiddle.Config(
        transformers.StackedTransformer, **common)
    p.decoder_stacked_transformer_tpl = pax_fiddle.Config(
        transformers.StackedTransformer, mask_self_attention=True,
        use_cross_attention=True, **common)
    model = instantiate(pax_fiddle.Config(
        models.SequenceModel, name='seq', model_tpl=p, return_predictions=True,
        decoder_tpl=decoder_hparams.GreedyDecoderHParams(seqlen=T, eos_id=-1)))
    src = NestedMap(ids=jnp.asarray(self.np_rng.integers(1, VOCAB, (B, 4))),
                    paddings=jnp.array([[0.0, 0, 1, 1], [0, 0, 0, 0]]))
    tgt_ids = self.np_rng.integers(1, VOCAB, (B, T))
    tgt = NestedMap(ids=jnp.asarray(tgt_ids),
                    labels=jnp.asarray(np.roll(tgt_ids, -1, 1)),
                    weights=jnp.ones((B, T)), paddings=jnp.zeros((B, T)))
    batch = NestedMap(src=src, tgt=tgt)
    variables = random_variables(self.np_rng, model, batch)
    forward = jax.jit(model.apply)
    (metrics, predictions) = forward(variables, batch)
    logp = np_log_softmax(np.asarray(predictions.logits, np.float64))
    xent = -np.take_along_axis(logp, np.asarray(tgt.labels)[..., None], -1)
    self.assertAllClose(metrics.avg_xent[0], np.float32(xent.mean()),
                        atol=1e-5)
    (_, result, _), _ = jax.jit(lambda v: model.apply(
        v, batch, method=model.decode, mutable=[DECODE_CACHE]))(variables)
    decoded = np.asarray(result.output_ids[:, 0])
    self.assertArraysEqual(decoded[:, 0], tgt_ids[:, 0])
    # Teacher-forcing the decoded ids gives the argmax of every next id.
    batch.tgt.ids = jnp.asarray(decoded)
    _, predictions = forward(variables, batch)
    argmax = np.asarray(predictions.logits).argmax(-1)
    self.assertArraysEqual(argmax[:, :-1], decoded[:, 1:])

    # Beam search (Pax: from the first target id, padded): the best beam's
    # score is the teacher-forced log-likelihood of its ids.
    (_, beams, _), _ = jax.jit(lambda v: model.apply(
        v, batch, decoder_hparams.BeamSearchHParams(
            beam_size=3, seqlen=T, max_decode_steps=4, eos_id=EOS,
            length_norm_alpha=0.0),
        method=model.decode_with_params, mutable=[DECODE_CACHE]))(variables)
    for row in range(B):
      ids = [int(x) for x in beams.output_ids[row, 0]]
      ids = ids[:ids.index(EOS) + 1] if EOS in ids else ids[:4]
      batch.tgt.ids = jnp.asarray(np.tile([tgt_ids[row, 0]] + ids[:-1],
                                          (B, 1)))
      _, predictions = jax.jit(lambda v, b: model.apply(v, b))(variables,
                                                               batch)
      logp = np_log_softmax(np.asarray(predictions.logits[row], np.float64))
      self.assertAllClose(beams.scores[row, 0], np.float32(
          sum(logp[t, i] for t, i in enumerate(ids))), atol=1e-4)
      self.assertGreaterEqual(beams.scores[row, 0], beams.scores[row, 1])


if __name__ == '__main__':
  absltest.main()
