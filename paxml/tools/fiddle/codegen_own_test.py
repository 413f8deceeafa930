"""Generated experiment code runs and rebuilds the experiment's config."""

import dataclasses

from absl.testing import absltest
from fiddle.experimental import visualize
from paxml import tasks_lib
from paxml.tools.fiddle import codegen
from paxml.tools.fiddle import make_parameterized_experiment
from paxml.tools.fiddle import test_fixtures
from praxis import base_input
from praxis import pax_fiddle


class TinyExperiment(test_fixtures.SampleExperiment):
  """Width drives the model and a sublayer; one train, one eval input."""

  WIDTH = 3

  def datasets(self):
    return [pax_fiddle.Config(base_input.BaseInput, is_training=True,
                              batch_size=8),
            pax_fiddle.Config(base_input.BaseInput, is_training=False,
                              batch_size=2)]

  def task(self):
    model = pax_fiddle.Config(
        test_fixtures.SampleModel, my_setting=self.WIDTH,
        sublayers=[pax_fiddle.Config(test_fixtures.TestLayer, x=self.WIDTH)])
    return pax_fiddle.Config(tasks_lib.SingleTask, model=model)


class ShardedTinyExperiment(TinyExperiment):

  def task(self):
    task = super().task()
    task.model.activation_split_dims_mapping.out = ['data', None]
    return task


class DerivedExperiment(test_fixtures.SampleExperiment):
  """A new FOO_SETTING and one low-level change."""

  FOO_SETTING = 7

  def task(self):
    task = super().task()
    task.model.sublayers = [pax_fiddle.Config(test_fixtures.TestLayer, x=5)]
    return task


def _trimmed(config):
  """Without default values (generated PaxConfigs fill them in)."""
  return visualize.with_defaults_trimmed(config, remove_deep_defaults=True)


def _run(code: str, name: str, **names) -> type:
  """Executes generated source; returns its class called `name`."""
  namespace = {'__name__': 'generated_by_codegen_own_test', **names}
  # pylint: disable-next=exec-used
  exec(compile(code, '<generated>', 'exec'), namespace)
  return namespace[name]


class BaselineTest(absltest.TestCase):

  def test_baseline_rebuilds_config_and_is_parameterized(self):
    code = codegen.codegen_baseline_from_legacy(
        TinyExperiment, has_input_specs_provider=False)
    cls = _run(code, 'TinyExperimentNewBaseline')
    self.assertTrue(dataclasses.is_dataclass(cls))
    # The class constant read by task() became a lowercase field.
    self.assertEqual(cls().width, 3)
    expected = make_parameterized_experiment.from_legacy(
        TinyExperiment, has_input_specs_provider=False)
    self.assertEqual(_trimmed(cls().experiment_fixture()), expected)
    self.assertEqual(len(cls().train_datasets_fixture()), 1)
    self.assertEqual(cls().eval_datasets_fixture()[0].batch_size, 2)
    # Both uses of WIDTH follow the field.
    model = cls(width=5).experiment_fixture().task.model
    self.assertEqual((model.my_setting, model.sublayers[0].x), (5, 5))

  def test_sharding_is_factored_into_a_function(self):
    code = codegen.codegen_baseline_from_legacy(
        ShardedTinyExperiment, has_input_specs_provider=False)
    self.assertIn('def shard_model_config(model_config):', code)
    self.assertIn('shard_model_config(model_config)\n', code)
    cls = _run(code, 'ShardedTinyExperimentNewBaseline')
    expected = make_parameterized_experiment.from_legacy(
        ShardedTinyExperiment, has_input_specs_provider=False)
    config = cls().experiment_fixture()
    self.assertEqual(_trimmed(config), expected)
    self.assertEqual(
        config.task.model.activation_split_dims_mapping.out, ['data', None])

  def test_sharding_kept_inline(self):
    code = codegen.codegen_baseline_from_legacy(
        ShardedTinyExperiment, has_input_specs_provider=False,
        factor_out_sharding_annotations=False)
    self.assertNotIn('shard_model_config', code)
    cls = _run(code, 'ShardedTinyExperimentNewBaseline')
    model = cls().experiment_fixture().task.model
    self.assertEqual(model.activation_split_dims_mapping.out, ['data', None])


class ExperimentDiffTest(absltest.TestCase):

  def test_subclass_rebuilds_derived_config(self):
    code = codegen.codegen_experiment_diff(
        DerivedExperiment, baseline=test_fixtures.SampleExperimentNewBaseline)
    # As in Pax, the diff module does not import dataclasses itself.
    self.assertNotIn('import dataclasses', code)
    cls = _run(code, 'DerivedExperimentNewExperiment',
               dataclasses=dataclasses)
    self.assertTrue(issubclass(cls, test_fixtures.SampleExperimentNewBaseline))
    instance = cls()
    self.assertEqual(
        (instance.foo_setting, instance.derived_setting,
         instance.derived_list_setting), (7, 14, [7, 14]))
    expected = make_parameterized_experiment.from_legacy(
        DerivedExperiment, has_train_dataset=False,
        has_input_specs_provider=False)
    self.assertEqual(_trimmed(instance.experiment_fixture()), expected)

  def test_baseline_must_be_dataclass(self):
    with self.assertRaisesRegex(TypeError, 'baseline should be a dataclass'):
      codegen.codegen_experiment_diff(
          DerivedExperiment, baseline=test_fixtures.SampleExperiment)


class ErrorsTest(absltest.TestCase):

  def test_custom_object_is_named_by_path(self):
    with self.assertRaisesRegex(ValueError, r'task\.model\.my_setting'):
      codegen.codegen_baseline_from_legacy(
          test_fixtures.SampleExperimentCustomObject,
          has_train_dataset=False, has_input_specs_provider=False)


if __name__ == '__main__':
  absltest.main()
