"""Lambada126M's acc_strict and LLaMA7B's boolq_acc, wired in the configs."""

import json
import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from paxml.contrib.gpu.scripts_gpu import configs
from paxml.tasks.lm.params import nvidia
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils
from praxis.contrib.gpu.scripts_gpu import models


class LambadaAccuracyTest(absltest.TestCase):

  def test_acc_strict_of_a_tiny_model_on_local_lambada(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    texts = ['the cat sat on the mat', 'go home now', 'we like tea']
    (folder / 'lambada_test.jsonl').write_text(
        ''.join(json.dumps({'text': t}) + '\n' for t in texts))
    exp = nvidia.shrunk(configs.Lambada126M, VOCAB_SIZE=259,
                        VOCAB_PATH='bytes', LAMBADA_DATA_DIR=str(folder),
                        MAX_SEQ_LEN=32, PERCORE_BATCH_SIZE=4,
                        FPROP_DTYPE=jnp.float32)()
    task_p = exp.task()
    self.assertIs(task_p.model.cls, models.CustomMetricsLM)
    self.assertEqual(task_p.model.eval_task, 'lambada')
    inp_p = exp.datasets()[0]
    inp_p.batch_size = 4  # 3 passages and 1 padding row.
    batch = base_hyperparams.instantiate(inp_p).get_next()
    np.testing.assert_array_equal(batch.eval_sample_weights, [1, 1, 1, 0])
    batch = py_utils.NestedMap(jax.tree.map(jnp.asarray, batch))
    model_p = task_p.model.clone().set(name='lm', ici_mesh_shape=None,
                                       dcn_mesh_shape=None)
    model = base_layer.instantiate(model_p)
    with base_layer.JaxContext.new_context():
      variables = model.init(jax.random.PRNGKey(0), batch)
      predictions = model.apply(variables, batch,
                                method=model.compute_predictions)
      argmax = np.asarray(predictions.per_example_argmax)
      weights = np.asarray(batch.weights)
      # Passage 1's target made what the model predicts: right by design.
      labels = np.asarray(batch.labels).copy()
      labels[1] = np.where(weights[1] > 0, argmax[1], labels[1])
      batch.labels = jnp.asarray(labels)
      metrics, _ = model.apply(variables, predictions, batch,
                               method=model.compute_loss)
    whole = [np.all((argmax[i] == labels[i])[weights[i] > 0])
             for i in range(3)]
    self.assertTrue(whole[1])
    value, weight = metrics.acc_strict
    self.assertAlmostEqual(float(value), np.mean(whole), places=6)
    self.assertEqual(float(weight), 3.0)


class BoolQTokensTest(absltest.TestCase):

  def test_llama_boolq_tokens_from_the_tokenizer(self):
    exp = nvidia.shrunk(configs.LLaMA7B, VOCAB_PATH='bytes')()
    model_p = exp.task().model
    self.assertIs(model_p.cls, models.CustomMetricsLM)
    self.assertEqual(model_p.eval_task, 'boolq')
    # Byte tokenizer: byte + 3; the first tokens of 'yes' and 'no'.
    self.assertEqual(model_p.boolq_yn_tokens, (ord('y') + 3, ord('n') + 3))
    exp = nvidia.shrunk(configs.LLaMA7B, TRUE_TOKEN=9, FALSE_TOKEN=7)()
    self.assertEqual(exp.task().model.boolq_yn_tokens, (9, 7))

  def test_without_a_vocabulary_the_model_names_the_tokens(self):
    with mock.patch.dict(os.environ):
      os.environ.pop('VOCAB_PATH', None)
      model_p = configs.LLaMA7B().task().model
    self.assertIsNone(model_p.boolq_yn_tokens)


if __name__ == '__main__':
  absltest.main()
