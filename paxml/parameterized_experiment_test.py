"""Tests of ParameterizedExperiment: an experiment built from one config."""

from absl.testing import absltest
from paxml import parameterized_experiment
from paxml import tasks_lib
from praxis import base_input
from praxis import pax_fiddle

_Exp = parameterized_experiment.ParameterizedExperiment


def _input(name, is_training=False):
  return pax_fiddle.Config(base_input.BaseInput, name=name,
                           is_training=is_training)


def _config(**kwargs):
  return pax_fiddle.Config(
      _Exp, task=pax_fiddle.Config(tasks_lib.SingleTask, name='t'), **kwargs)


class ParameterizedExperimentTest(absltest.TestCase):

  def test_built_experiment_returns_its_configs_unbuilt(self):
    cfg = _config(train_datasets=[_input('tr', True)],
                  eval_datasets=[_input('ev1'), _input('ev2')],
                  decode_datasets=[_input('de')])
    exp = pax_fiddle.build(cfg)
    self.assertIsInstance(exp.task(), pax_fiddle.Config)
    self.assertEqual(exp.task().name, 't')
    self.assertEqual([d.name for d in exp.datasets()], ['tr', 'ev1', 'ev2'])
    self.assertEqual([d.name for d in exp.decode_datasets()], ['de'])
    self.assertEqual(exp.training_dataset().name, 'tr')
    specs = exp.get_input_specs_provider_params()
    self.assertIs(pax_fiddle.get_callable(specs),
                  base_input.DatasetInputSpecsProvider)
    self.assertEqual(specs.input_p.name, 'tr')

  def test_given_input_specs_provider_is_kept(self):
    provider = pax_fiddle.Config(base_input.BaseInputSpecsProvider)
    exp = pax_fiddle.build(_config(input_specs_provider=provider))
    self.assertEqual(exp.get_input_specs_provider_params(), provider)
    self.assertEmpty(exp.datasets())

  def test_inputs_in_the_wrong_role_are_named(self):
    for field, role in (('train_datasets', 'training'),
                        ('eval_datasets', 'evaluation'),
                        ('decode_datasets', 'decode')):
      wrong = _input('x', is_training=(field != 'train_datasets'))
      with self.assertRaisesRegex(
          ValueError, f"The {role} dataset with name 'x' must have "
          '`is_training` set to'):
        pax_fiddle.build(_config(**{field: [wrong]}))

  def test_deprecated_arguments_add_to_the_new_ones(self):
    with self.assertWarns(DeprecationWarning):
      exp = _Exp(task=None, training_dataset=_input('a', True),
                 train_datasets=[_input('b', True)])
    self.assertEqual([d.name for d in exp.train_datasets()], ['b', 'a'])
    with self.assertWarns(DeprecationWarning):
      exp = _Exp(task=None, decoder_datasets=[_input('d')])
    self.assertEqual([d.name for d in exp.decode_datasets()], ['d'])


if __name__ == '__main__':
  absltest.main()
