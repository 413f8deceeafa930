"""Tests that DigitsViT and DigitsResNet learn the digits (briefly)."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.vision.params import digits_models
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils

_PREFIX = 'tasks.vision.params.digits_models.'


def _accuracy(job_dir: pathlib.Path) -> dict[int, tuple[float, float]]:
  """{step: (accuracy, its weight)} of the test split's eval summaries."""
  acc = event_accumulator.EventAccumulator(
      str(job_dir / 'summaries' / 'eval_test_test'))
  acc.Reload()
  weights = {e.step: e.value for e in acc.Scalars('Metrics/accuracy-weight')}
  return {e.step: (e.value, weights[e.step])
          for e in acc.Scalars('Metrics/accuracy')}


def _train_briefly(name: str, steps: int) -> dict[int, tuple[float, float]]:
  exp = experiment_registry.get(_PREFIX + name)()
  configs = train.ExperimentConfigs.from_experiment(exp, _PREFIX + name)
  configs.task.train.num_train_steps = steps
  configs.task.train.eval_interval_steps = steps
  configs.task.train.summary_interval_steps = steps
  configs.task.train.save_interval_steps = steps
  job_dir = pathlib.Path(tempfile.mkdtemp())
  train.train_and_evaluate(configs, executors.RunOptions(
      job_log_dir=job_dir, enable_checkpoint_saving=False,
      eval_on_test=True))
  return _accuracy(job_dir)


class DigitsOneHotInputTest(test_utils.TestCase):

  def test_one_hot_labels_and_zero_weight_padding(self):
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        digits_models.DigitsOneHotInput, batch_size=64, split='test',
        reset_for_eval=True))
    batches = []
    while True:
      try:
        batches.append(inp.get_next())
      except StopIteration:
        break
    # 360 test images: 5 full batches and one of 40 real rows.
    self.assertLen(batches, 6)
    last = batches[-1]
    self.assertArraysEqual(last.weight, np.repeat([1.0, 0.0], [40, 24]))
    self.assertArraysEqual(last.label_probs[40:], np.zeros((24, 10)))
    for batch in batches:
      n = int(batch.weight.sum())
      want = np.zeros((n, 10), np.float32)
      want[np.arange(n), batch.labels[:n]] = 1.0
      self.assertArraysEqual(batch.label_probs[:n], want)


class DigitsModelsTest(test_utils.TestCase):

  def test_resnet_learns_the_digits(self):
    accuracy = _train_briefly('DigitsResNet', 40)
    self.assertEqual(sorted(accuracy), [40])
    value, weight = accuracy[40]
    self.assertEqual(weight, 360.0)  # Every test image once, no padding.
    self.assertGreater(value, 0.5)

  def test_vit_learns_the_digits(self):
    accuracy = _train_briefly('DigitsViT', 60)
    value, weight = accuracy[60]
    self.assertEqual(weight, 360.0)
    self.assertGreater(value, 0.5)

  def test_patch_size_must_divide_the_image(self):
    exp = digits_models.DigitsViT()
    exp.PATCH_SIZE = 3
    with self.assertRaisesRegex(ValueError, r'DigitsViT.PATCH_SIZE must be '
                                r'a positive divisor .* got 3'):
      exp.task()


if __name__ == '__main__':
  absltest.main()
