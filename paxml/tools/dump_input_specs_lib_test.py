"""Tests of dump_input_specs_lib on small experiments."""

from absl.testing import absltest
import jax
import numpy as np
from paxml.tasks.test import regression
from paxml.tools import dump_input_specs_lib
from paxml.tools.fiddle import test_fixtures


class _WithProvider(regression.RegressionExperiment):

  def get_input_specs_provider_params(self):
    return test_fixtures.SampleExperimentWithInputSpecsProvider(
    ).get_input_specs_provider_params()


class InputSpecsTest(absltest.TestCase):

  def test_default_provider_reads_only_the_batch(self):
    provider, batch = dump_input_specs_lib.extract_input_specs(
        regression.RegressionExperiment())
    self.assertIsNone(provider)
    leaves = jax.tree.leaves(batch)
    self.assertTrue(leaves)
    self.assertTrue(all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves))

  def test_a_provider_is_asked_too(self):
    provider, batch = dump_input_specs_lib.extract_input_specs(_WithProvider())
    self.assertEqual(provider['inputs'].shape, (16, 32))
    self.assertEqual(provider['inputs'].dtype, np.int32)
    text = dump_input_specs_lib.specs_to_string('Exp', (provider, batch))
    self.assertTrue(text.startswith('Exp\nFrom InputSpecsProvider:\n'))
    self.assertIn('From training input pipeline:', text)

  def test_no_training_input(self):
    self.assertEqual(dump_input_specs_lib.extract_input_specs(
        test_fixtures.SampleExperiment()), (None, None))


if __name__ == '__main__':
  absltest.main()
