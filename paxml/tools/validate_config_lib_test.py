"""Tests of validate_config_lib: each level runs its checks and no more."""

from unittest import mock

from absl.testing import absltest
from paxml.tasks.test import regression
from paxml.tools import validate_config_lib


class _BadModel(regression.RegressionExperiment):

  def task(self):
    task_p = super().task()
    task_p.model.input_dims = -1  # Caught when the model initializes.
    return task_p


class ValidateTest(absltest.TestCase):

  def test_levels_run_more_checks(self):
    exp = regression.RegressionExperiment()
    calls = []
    real = validate_config_lib.instantiate

    def counting(config, **kwargs):
      calls.append(getattr(config, 'name', None) or type(config).__name__)
      return real(config, **kwargs)

    with mock.patch.object(validate_config_lib, 'instantiate', counting):
      validate_config_lib.validate(exp, 0)
      self.assertEqual(calls, [])
      validate_config_lib.validate(exp, 1)
      self.assertEqual(calls, ['regression'])
      calls.clear()
      validate_config_lib.validate(exp, 10)
      self.assertEqual(calls[0], 'regression')
      self.assertEqual(calls[-3:], ['train', 'test', 'decode'])

  def test_a_broken_model_fails_at_level_3_not_1(self):
    validate_config_lib.validate(_BadModel(), 1)
    with self.assertRaises(Exception):
      validate_config_lib.validate(_BadModel(), 3)


if __name__ == '__main__':
  absltest.main()
