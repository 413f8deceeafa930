"""Tests of model_analysis: parameter counts and FLOPs against hand counts."""

import subprocess
import sys

from absl.testing import absltest
from paxml.tasks.test import regression
from paxml.tools import model_analysis_lib


class Hidden(regression.RegressionExperiment):

  def task(self):
    task_p = super().task()
    task_p.model.hidden_dims = 8
    return task_p


class ModelAnalysisTest(absltest.TestCase):

  def test_params_per_variable_and_layer(self):
    rows = model_analysis_lib.ExperimentParser(Hidden()).params()
    # Linear layers without bias: 4 x 8 and 8 x 2.
    self.assertEqual([(r.path, r.shape, r.size, r.trainable) for r in rows],
                     [('params/hidden/w', (4, 8), 32, True),
                      ('params/proj/w', (8, 2), 16, True)])
    self.assertEqual(model_analysis_lib.per_layer_totals(rows),
                     {'params/hidden': 32, 'params/proj': 16})
    report = model_analysis_lib.params_report(rows)
    self.assertIn('Total #params (all): 48', report)
    self.assertIn('Total #params (trainable): 48', report)

  def test_flops_of_the_forward_pass(self):
    parser = model_analysis_lib.ExperimentParser(
        regression.RegressionExperiment())
    # One (8, 4) @ (4, 2) matmul: 2 * 8 * 4 * 2 multiply-adds.
    self.assertEqual(parser.flops(), 2 * 8 * 4 * 2)
    outputs = parser.fprop()
    self.assertEqual(outputs.shape, (8, 2))

  def test_unknown_method_is_named(self):
    parser = model_analysis_lib.ExperimentParser(
        regression.RegressionExperiment())
    with self.assertRaisesRegex(ValueError, '--fprop_func=nope'):
      parser.flops('nope')

  def test_command(self):
    out = subprocess.run(
        [sys.executable, '-m', 'paxml.tools.model_analysis',
         '--exp=tasks.test.regression.RegressionExperiment', '--usage=params'],
        capture_output=True, text=True, check=True).stdout
    self.assertIn('params/proj/w', out)
    self.assertIn('Total #params (all): 8', out)


if __name__ == '__main__':
  absltest.main()
