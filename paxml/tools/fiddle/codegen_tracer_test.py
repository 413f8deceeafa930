"""Tests of codegen_tracer: named settings in an experiment's config."""

import enum

from absl.testing import absltest
from paxml.tools.fiddle import codegen_tracer
from paxml.tools.fiddle import test_fixtures


class _Color(enum.IntEnum):
  RED = 1


class _Exp(test_fixtures.SampleExperiment):
  FLAG = True
  COLOR = _Color.RED
  AXES = ('data', 'model')


class TracerTest(absltest.TestCase):

  def test_experiment_settings_reach_the_config_named(self):
    exp = codegen_tracer.make_subclass_mixin(_Exp)()
    model = exp.task().model
    self.assertEqual(model.my_setting, 4123)
    self.assertEqual(model.my_setting.__highlevel_name__, 'FOO_SETTING')
    self.assertEqual(model.derived_setting.__highlevel_name__,
                     'derived_setting')
    self.assertEqual(model.derived_list_setting, [4123, 8246])
    self.assertIsInstance(exp.FLAG, codegen_tracer.BoolTracer)
    self.assertTrue(exp.FLAG)
    self.assertIs(exp.COLOR, _Color.RED)
    self.assertLessEqual({'FOO_SETTING', 'derived_setting', 'FLAG'},
                         exp.__trace_names__)

  def test_remove_tracers_restores_plain_types(self):
    inner = codegen_tracer.make_tracer('n', 3)
    traced = {'a': codegen_tracer.make_tracer('axes', ['x', inner]),
              'b': codegen_tracer.make_tracer('flag', False),
              'c': codegen_tracer.make_tracer('f', 0.5)}
    plain = codegen_tracer.remove_tracers(traced)
    self.assertEqual(plain, {'a': ['x', 3], 'b': False, 'c': 0.5})
    self.assertIs(type(plain['a']), list)
    self.assertIs(type(plain['a'][1]), int)
    self.assertIs(type(plain['b']), bool)
    self.assertIs(type(plain['c']), float)

  def test_bad_inputs_are_refused(self):
    with self.assertRaisesRegex(ValueError, "setting 'd' of type"):
      codegen_tracer.make_tracer('d', {'a': 1})
    with self.assertRaisesRegex(TypeError, 'subclass of BaseExperiment'):
      codegen_tracer.make_subclass_mixin(int)


if __name__ == '__main__':
  absltest.main()
