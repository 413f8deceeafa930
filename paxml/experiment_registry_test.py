"""Tests of the experiment registry's lookups."""

from absl.testing import absltest
from paxml import base_experiment
from paxml import experiment_registry
from paxml.tasks.test import synthetic


class RegistryTest(absltest.TestCase):

  def test_lookup_by_suffixes(self):
    key = 'paxml.tasks.test.synthetic.SyntheticClassifier'
    for name in (key, 'tasks.test.synthetic.SyntheticClassifier',
                 'synthetic.SyntheticClassifier', 'SyntheticClassifier'):
      self.assertIs(experiment_registry.get(name),
                    synthetic.SyntheticClassifier, name)
    self.assertIn(key, experiment_registry.get_all())
    self.assertIsNone(experiment_registry.get('NoSuchExperiment'))

  def test_params_segment_may_be_dropped(self):

    class Exp(base_experiment.BaseExperiment):

      def datasets(self):
        return []

      def task(self):
        return None

    Exp.__module__ = 'my.lm.params.lm_cloud'
    experiment_registry.register(Exp, tags=('lm',))
    self.assertIs(experiment_registry.get('lm.lm_cloud.Exp'), Exp)
    self.assertIs(experiment_registry.get('lm.params.lm_cloud.Exp'), Exp)
    self.assertEqual(experiment_registry.get_registry_tags('lm_cloud.Exp'),
                     ['lm'])
    self.assertEqual(experiment_registry.get_registry_tags('NoSuchExp'), [])

  def test_ambiguous_and_duplicate_names(self):

    def make(module):
      cls = type('Twin', (synthetic.SyntheticClassifier,), {})
      cls.__module__ = module
      return experiment_registry.register(cls)

    first = make('pkg_a.twins')
    make('pkg_b.twins')
    with self.assertRaisesRegex(ValueError, 'ambiguous'):
      experiment_registry.get('twins.Twin')
    self.assertIs(experiment_registry.get('pkg_a.twins.Twin'), first)
    with self.assertRaisesRegex(ValueError, 'already registered'):
      make('pkg_a.twins')
    second = type('Twin', (synthetic.SyntheticClassifier,), {})
    second.__module__ = 'pkg_a.twins'
    experiment_registry.register(allow_overwrite=True)(second)
    self.assertIs(experiment_registry.get('pkg_a.twins.Twin'), second)

  def test_closest_names(self):
    self.assertIn('paxml.tasks.test.synthetic.SyntheticClassifier',
                  experiment_registry.closest_names('SynteticClassifier'))

  def test_load_imports_the_module_and_names_failures(self):
    cls = experiment_registry.load('tasks.test.regression.RegressionExperiment')
    self.assertEqual(cls.__name__, 'RegressionExperiment')
    with self.assertRaisesRegex(
        ValueError, 'Could not find experiment `no_such_module_x.Exp` because '
        'could not import module `no_such_module_x`'):
      experiment_registry.load('no_such_module_x.Exp')
    with self.assertRaisesRegex(
        ValueError, '(?s)Could not find experiment `builtins.SyntheticClasifier`.'
        '\nRegistered experiments are: .*Closest registered: .*synthetic'):
      experiment_registry.load('builtins.SyntheticClasifier')


if __name__ == '__main__':
  absltest.main()
