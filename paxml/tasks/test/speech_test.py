"""The speech experiment: its data, greedy CTC decoding, and that it learns."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax
from paxml import experiment_registry
from paxml.tasks.test import speech
from praxis import base_layer
from praxis import py_utils
from praxis.layers import ctc_objectives

NestedMap = py_utils.NestedMap


class DataTest(absltest.TestCase):

  def test_every_utterance_has_a_ctc_path(self):
    d = speech.make_data(64, seed=5)
    valid = ctc_objectives.is_valid_ctc_seq(d['paddings'], d['labels'],
                                            d['label_paddings'])
    np.testing.assert_array_equal(np.asarray(valid), np.ones(64))
    lengths = (1 - d['label_paddings']).sum(1)
    self.assertTrue(set(lengths.tolist()) <= {2.0, 3.0})
    self.assertTrue(np.all(d['features'][d['paddings'] == 1] == 0))

  def test_greedy_decode_by_hand(self):
    # Frames 2, 2, blank, 2, 3, 3(padded) -> labels 2, 2, 3; 3 found.
    best = np.array([[2, 2, 0, 2, 3, 3], [1, 1, 1, 0, 0, 4]])
    logits = np.where(np.arange(5)[None, None] == best[..., None], 5.0, -5.0)
    paddings = np.array([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]], np.float32)
    labels, lengths = speech.greedy_ctc_decode(jnp.asarray(logits),
                                               jnp.asarray(paddings), 3)
    np.testing.assert_array_equal(np.asarray(labels), [[2, 2, 3], [1, 4, 0]])
    np.testing.assert_array_equal(np.asarray(lengths), [3, 2])


class LearnsTest(absltest.TestCase):

  def test_a_few_adam_steps_learn_to_transcribe(self):
    exp = experiment_registry.get('tasks.test.speech.SpeechCtcConformer')()
    model_p = exp.task().model
    model_p.specaug_tpl = None
    model = base_layer.instantiate(model_p)
    train = NestedMap(speech.make_data(128, seed=1))
    test = NestedMap(speech.make_data(64, seed=2))
    context = base_layer.JaxContext.HParams(do_eval=False)
    with base_layer.JaxContext.new_context(hparams=context):
      # Jitted: eager init would compile each small op on its own.
      variables = jax.jit(model.init)(
          jax.random.PRNGKey(0), jax.tree.map(lambda x: x[:16], train))
    params = variables['params']
    opt = optax.adam(0.01)

    def loss_fn(params, batch):
      with base_layer.JaxContext.new_context(hparams=context):
        (metrics, _), _ = model.apply(
            {**variables, 'params': params}, batch, mutable=True,
            rngs={'random': jax.random.PRNGKey(1)})
      return metrics.loss[0]

    @jax.jit
    def step(params, opt_state, batch):
      loss, grads = jax.value_and_grad(loss_fn)(params, batch)
      updates, opt_state = opt.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state, loss

    opt_state = opt.init(params)
    losses = []
    for i in range(60):
      batch = jax.tree.map(lambda x, i=i: x[(i % 8) * 16:][:16], train)
      params, opt_state, loss = step(params, opt_state, batch)
      losses.append(float(loss))
    self.assertLess(np.mean(losses[-5:]), 0.3 * np.mean(losses[:5]))

    def decode(params):
      eval_ctx = base_layer.JaxContext.HParams(do_eval=True)
      with base_layer.JaxContext.new_context(hparams=eval_ctx):
        return model.apply({**variables, 'params': params}, test,
                           method=model.decode, mutable=True)[0][0]

    metrics = jax.jit(decode)(params)
    # Chance is about 1 in 4**2.5; a trained model gets most right.
    self.assertGreater(float(metrics.sequence_accuracy[0]), 0.5)


if __name__ == '__main__':
  absltest.main()
