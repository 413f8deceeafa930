"""CustomMetricsLM's LAMBADA and BoolQ accuracies on hand-made batches."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.contrib.gpu.scripts_gpu import models
from praxis.layers import transformer_models

NestedMap = py_utils.NestedMap


def _lambada_batch():
  # Example 0: both weighted labels right. Example 1: one of two wrong.
  # Example 2: all right but padding (eval_sample_weights 0). Example 3:
  # the one weighted label right.
  labels = np.array([[5, 6, 7, 1], [4, 8, 9, 1], [3, 3, 3, 3],
                     [2, 2, 5, 1]])
  argmax = np.array([[0, 0, 7, 1], [4, 8, 3, 1], [3, 3, 3, 3],
                     [9, 9, 5, 0]])
  weights = np.array([[0, 0, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1],
                      [0, 0, 1, 0]], np.float32)
  batch = NestedMap(labels=jnp.asarray(labels), weights=jnp.asarray(weights),
                    eval_sample_weights=jnp.asarray([1., 1., 0., 1.]))
  predictions = NestedMap(per_example_argmax=jnp.asarray(argmax),
                          avg_xent=jnp.float32(0.0))
  return predictions, batch


class LambadaTest(absltest.TestCase):

  def test_strict_accuracy_counts_whole_words(self):
    predictions, batch = _lambada_batch()
    metrics = models.compute_eval_metrics_helper(
        NestedMap(), predictions, batch, apply_eval_sample_weights=True,
        eval_task='lambada')
    value, weight = metrics.acc_strict
    # Right: examples 0 and 3 of the 3 real ones.
    self.assertAlmostEqual(float(value), 2 / 3, places=6)
    self.assertEqual(float(weight), 3.0)
    self.assertNotIn('boolq_acc', metrics)

  def test_report_strict_acc_is_the_same(self):
    predictions, batch = _lambada_batch()
    metrics = models.compute_eval_metrics_helper(
        NestedMap(), predictions, batch, report_strict_acc=True)
    self.assertAlmostEqual(float(metrics.acc_strict[0]), 2 / 3, places=6)


class BoolQTest(absltest.TestCase):

  def test_yes_no_accuracy(self):
    yes, no = 3, 4
    logits = np.zeros([4, 3, 6], np.float32)
    labels = np.zeros([4, 3], np.int32)
    weights = np.zeros([4, 3], np.float32)
    # Example 0: answer yes at position 1; yes 2.0 > no 1.0: right.
    labels[0, 1], weights[0, 1], logits[0, 1, [yes, no]] = yes, 1, [2., 1.]
    # Example 1: answer no at position 2; no 0.5 < yes 0.7: wrong (another
    # token, 5, has the highest logit: only yes vs no counts).
    labels[1, 2], weights[1, 2], logits[1, 2, [yes, no, 5]] = no, 1, [
        .7, .5, 9.]
    # Example 2: answer no at 0 (no 1.0 > yes -1.0), then a second weighted
    # token that would be wrong: only the first answer token counts.
    labels[2, 0], weights[2, 0], logits[2, 0, [yes, no]] = no, 1, [-1., 1.]
    labels[2, 1], weights[2, 1], logits[2, 1, [yes, no]] = no, 1, [5., 0.]
    # Example 3: right, but padding.
    labels[3, 0], weights[3, 0], logits[3, 0, yes] = yes, 1, 1.
    batch = NestedMap(labels=jnp.asarray(labels),
                      weights=jnp.asarray(weights),
                      eval_sample_weights=jnp.asarray([1., 1., 1., 0.]))
    predictions = NestedMap(logits=jnp.asarray(logits),
                            avg_xent=jnp.float32(0.0))
    metrics = models.compute_eval_metrics_helper(
        NestedMap(), predictions, batch, True, 'boolq', jnp.array([yes, no]))
    value, weight = metrics.boolq_acc
    self.assertAlmostEqual(float(value), 2 / 3, places=6)
    self.assertEqual(float(weight), 3.0)

  def test_boolq_needs_the_tokens(self):
    with self.assertRaisesRegex(ValueError, 'boolq_yn_tokens'):
      models.compute_eval_metrics_helper(
          NestedMap(), NestedMap(avg_xent=jnp.float32(0)),
          NestedMap(labels=jnp.zeros([1, 2], jnp.int32),
                    weights=jnp.ones([1, 2])), eval_task='boolq')

  def test_unknown_eval_task_is_named(self):
    with self.assertRaisesRegex(ValueError, "'squad'"):
      models.compute_eval_metrics_helper(
          NestedMap(), NestedMap(), NestedMap(weights=None), eval_task='squad')


class CustomMetricsLMTest(absltest.TestCase):

  def _model(self, **kwargs):
    lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=8,
                           vocab_size=6, packed_input=False)
    stack = lm.stacked_transformer_tpl
    stack.num_layers, stack.num_heads = 1, 2
    stack.model_dims, stack.hidden_dims = 8, 16
    lm.softmax_tpl.input_dims, lm.softmax_tpl.num_classes = 8, 6
    return base_layer.instantiate(pax_fiddle.Config(
        models.CustomMetricsLM, name='lm', lm_tpl=lm,
        apply_eval_sample_weights=True, **kwargs))

  def test_metrics_of_a_tiny_model_match_numpy(self):
    model = self._model(eval_task='boolq', boolq_yn_tokens=(3, 4))
    rng = np.random.RandomState(0)
    batch = NestedMap(
        ids=jnp.asarray(rng.randint(0, 6, [4, 5])),
        labels=jnp.asarray(np.array([[0, 0, 3, 0, 0]] * 2
                                    + [[0, 0, 0, 4, 0]] * 2)),
        paddings=jnp.zeros([4, 5]),
        weights=jnp.asarray(np.array([[0, 0, 1, 0, 0]] * 2
                                     + [[0, 0, 0, 1, 0]] * 2, np.float32)),
        eval_sample_weights=jnp.ones([4]))
    with base_layer.JaxContext.new_context():
      variables = model.init(jax.random.PRNGKey(0), batch)
      predictions = model.apply(variables, batch,
                                method=model.compute_predictions)
      (metrics, _) = model.apply(variables, predictions, batch,
                                 method=model.compute_loss)
    logits = np.asarray(predictions.logits)
    rows, cols = np.array([0, 1, 2, 3]), np.array([2, 2, 3, 3])
    answers = np.array([3, 3, 4, 4])
    right = logits[rows, cols, answers] > logits[rows, cols, 7 - answers]
    self.assertAlmostEqual(float(metrics.boolq_acc[0]), right.mean(),
                           places=6)
    self.assertIn('log_pplx', metrics)

  def test_boolq_without_tokens_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'boolq_yn_tokens'):
      model = self._model(eval_task='boolq')
      with base_layer.JaxContext.new_context():
        model.init(jax.random.PRNGKey(0), NestedMap(
            ids=jnp.zeros([1, 2], jnp.int32),
            labels=jnp.zeros([1, 2], jnp.int32), paddings=jnp.zeros([1, 2]),
            weights=jnp.ones([1, 2]), eval_sample_weights=jnp.ones([1])))


if __name__ == '__main__':
  absltest.main()
