"""Tests of the digits input and of DigitsExperiment's accuracy."""

import pathlib
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np
from sklearn import datasets
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.vision.params import digits
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils

_EXP = 'tasks.vision.params.digits.DigitsExperiment'


def _scalars(summary_dir: pathlib.Path, tag: str) -> dict[int, float]:
  acc = event_accumulator.EventAccumulator(str(summary_dir))
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars(tag)}


class DigitsInputTest(test_utils.TestCase):

  def test_splits_partition_the_bundled_images(self):
    data = datasets.load_digits()
    reference = data.images.reshape(len(data.images), -1) / 16.0
    parts = {}
    for split in ('train', 'test'):
      inp = base_hyperparams.instantiate(pax_fiddle.Config(
          digits.DigitsInput, batch_size=8, split=split, reset_for_eval=True))
      self.assertLessEqual(np.max(inp.data['inputs']), 1.0)
      parts[split] = (inp.data['inputs'].reshape(inp.num_examples, -1),
                      inp.data['labels'])
    self.assertEqual(len(parts['train'][0]), 1437)
    self.assertEqual(len(parts['test'][0]), 360)  # ceil(0.2 * 1797)
    images = np.concatenate([parts['train'][0], parts['test'][0]])
    labels = np.concatenate([parts['train'][1], parts['test'][1]])
    # Together the splits hold each image once, with its label.
    order, ref_order = np.lexsort(images.T), np.lexsort(reference.T)
    self.assertAllClose(images[order], reference[ref_order])
    self.assertArraysEqual(labels[order], data.target[ref_order])
    # Without a seed the test split is the end of the file.
    tail_images, tail_labels = digits.load_digits_split('test', 0.2, None)
    self.assertAllClose(tail_images.reshape(360, -1), reference[-360:])
    self.assertArraysEqual(tail_labels, data.target[-360:])

  def test_missing_sklearn_says_how_to_install(self):
    with (mock.patch.dict(sys.modules, {'sklearn': None}),
          self.assertRaisesRegex(ImportError,
                                 'run `pip install scikit-learn`')):
      digits.load_digits_split('train')

  def test_bad_split_and_fraction(self):
    with self.assertRaisesRegex(ValueError, "'train' or 'test', got 'dev'"):
      digits.load_digits_split('dev')
    with self.assertRaisesRegex(ValueError, r'test_fraction must be in'):
      digits.load_digits_split('test', test_fraction=1.0)


class DigitsExperimentTest(test_utils.TestCase):

  def test_trains_to_95_percent_test_accuracy(self):
    exp = experiment_registry.get(_EXP)()
    configs = train.ExperimentConfigs.from_experiment(exp, _EXP)
    job_dir = pathlib.Path(tempfile.mkdtemp())
    state = train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False,
        eval_on_test=True))
    summaries = job_dir / 'summaries' / 'eval_test_test'
    accuracy = _scalars(summaries, 'Metrics/accuracy')
    self.assertEqual(sorted(accuracy), [100, 200, 300])
    self.assertGreaterEqual(accuracy[300], 0.95)
    # Every test image counted once: the padding rows weigh nothing.
    self.assertEqual(_scalars(summaries, 'Metrics/accuracy-weight')[300],
                     360.0)
    # The summary equals the accuracy of the final weights, counted here.
    task = base_hyperparams.instantiate(configs.task)
    images, labels = digits.load_digits_split('test')
    batch = py_utils.NestedMap(inputs=images, labels=labels)
    logits = task.model.apply(jax.device_get(state.mdl_vars), batch,
                              method=task.model.compute_predictions)
    expected = np.mean(np.argmax(np.asarray(logits), -1) == labels)
    self.assertAllClose(accuracy[300], expected, atol=1e-6)


if __name__ == '__main__':
  absltest.main()
