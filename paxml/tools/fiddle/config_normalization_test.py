"""Tests of config_normalization and make_parameterized_experiment."""

import dataclasses

from absl.testing import absltest
import fiddle as fdl
from paxml.tools.fiddle import config_normalization
from paxml.tools.fiddle import make_parameterized_experiment
from paxml.tools.fiddle import test_fixtures
from praxis import py_utils


@dataclasses.dataclass
class _Point:
  x: int = 0


def _experiment(cls=test_fixtures.SampleExperimentWithSharedShardingAnnotations,
                **kwargs):
  return make_parameterized_experiment.from_legacy(
      cls, normalizer=None, has_input_specs_provider=False, **kwargs)


class NormalizationTest(absltest.TestCase):

  def test_from_legacy_reads_the_experiment_methods(self):
    config = make_parameterized_experiment.from_legacy(
        test_fixtures.SampleExperimentWithDatasets, normalizer=None)
    self.assertEqual([d.batch_size for d in config.train_datasets], [1024])
    self.assertEqual([d.batch_size for d in config.eval_datasets], [128])
    self.assertEqual(config.task.model.derived_list_setting, [4123, 8246])
    self.assertNotIn('decode_datasets', fdl.ordered_arguments(config))
    self.assertEqual(
        fdl.ordered_arguments(config.input_specs_provider)['input_p']
        .batch_size, 1024)

  def test_default_trims_defaults_and_unshares_annotations(self):
    config = _experiment()
    normalized = config_normalization.default_normalizer()(config)
    sub = normalized.task.model.sublayers
    self.assertIsNot(sub[0].activation_split_dims_mapping,
                     sub[1].activation_split_dims_mapping)
    self.assertEqual(sub[0].activation_split_dims_mapping.out,
                     ['foo_axis', 'bar_axis'])
    # TestLayer's x is left at its default: trimmed away.
    self.assertNotIn('x', fdl.ordered_arguments(sub[0]))
    self.assertIs(config.task.model.sublayers[0].activation_split_dims_mapping,
                  config.task.model.sublayers[1].activation_split_dims_mapping)

  def test_aggressive_removes_annotations(self):
    normalized = config_normalization.aggressive_normalizer()(_experiment())
    for layer in normalized.task.model.sublayers:
      self.assertNotIn('activation_split_dims_mapping',
                       fdl.ordered_arguments(layer))

  def test_lowlevel_config_edits_one_part(self):
    low = config_normalization.default_normalizer().lowlevel_config()
    low.task_normalizer.unshare_sharding_config = False
    normalized = fdl.build(low)(_experiment())
    sub = normalized.task.model.sublayers
    self.assertIs(sub[0].activation_split_dims_mapping,
                  sub[1].activation_split_dims_mapping)

  def test_dataclasses_nested_maps_and_dropped_inputs(self):
    config = _experiment(test_fixtures.SampleExperimentWithDecodeDatasets,
                         has_train_dataset=False)
    config.eval_datasets = [config.decode_datasets[0]]
    config.decode_datasets[0].batch_size = py_utils.NestedMap(a=_Point(3))
    normalized = config_normalization.ConfigNormalizer(
        remove_decode_datasets=True)(config)
    self.assertNotIn('decode_datasets', fdl.ordered_arguments(normalized))
    batch_size = normalized.eval_datasets[0].batch_size
    self.assertIsInstance(batch_size, fdl.Config)
    self.assertIsInstance(batch_size.base['a'], fdl.Config)
    self.assertEqual(batch_size.base['a'].x, 3)
    noop = config_normalization.noop_normalizer()(config)
    self.assertIsInstance(noop.decode_datasets[0].batch_size,
                          py_utils.NestedMap)


if __name__ == '__main__':
  absltest.main()
