"""Tests of BaselineExperiment: high-level settings lowered to a config."""

import dataclasses

from absl.testing import absltest
from paxml import parameterized_experiment
from paxml import tasks_lib
from paxml.experimental import baseline_experiment
from praxis import pax_fiddle


def _double(x):
  return 2 * x


@dataclasses.dataclass
class _Baseline(baseline_experiment.BaselineExperiment):
  steps: int = 10

  def experiment_fixture(self):
    task = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
    task.train.num_train_steps = self.steps
    task.train.save_interval_steps = self.steps + 1  # Derived from a setting.
    return pax_fiddle.Config(parameterized_experiment.ParameterizedExperiment,
                             task=task)


class BaselineExperimentTest(absltest.TestCase):

  def test_highlevel_config_builds_the_experiment(self):
    cfg = _Baseline.highlevel_config()
    cfg.steps = 3
    exp = pax_fiddle.build(cfg)
    self.assertIsInstance(exp, parameterized_experiment.ParameterizedExperiment)
    self.assertEqual(exp.task().train.num_train_steps, 3)
    self.assertEqual(exp.task().train.save_interval_steps, 4)

  def test_lowlevel_config_derives_then_allows_low_level_edits(self):
    cfg = _Baseline.lowlevel_config(steps=5)
    self.assertEqual(cfg.task.train.save_interval_steps, 6)
    cfg.task.train.save_interval_steps = 100
    exp = pax_fiddle.build(cfg)
    self.assertEqual(exp.task().train.num_train_steps, 5)
    self.assertEqual(exp.task().train.save_interval_steps, 100)

  def test_settings_given_as_configs_are_built_before_deriving(self):
    cfg = _Baseline.highlevel_config(steps=pax_fiddle.Config(_double, x=4))
    low = baseline_experiment.lower(cfg)
    self.assertEqual(low.task.train.num_train_steps, 8)
    self.assertEqual(low.task.train.save_interval_steps, 9)
    self.assertIsInstance(cfg.steps, pax_fiddle.Config)  # Input untouched.

  def test_lower_refuses_other_configs(self):
    with self.assertRaisesRegex(ValueError, 'Expected config of Baseline'):
      baseline_experiment.lower(_Baseline.lowlevel_config())
    with self.assertRaisesRegex(ValueError, 'Expected config of Baseline'):
      baseline_experiment.lower(pax_fiddle.Config(_double, x=1))


if __name__ == '__main__':
  absltest.main()
