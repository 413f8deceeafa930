"""Tests of the codegen passes: InitTask, high-level settings, checkpoints."""

from absl.testing import absltest
from fiddle._src.codegen.auto_config import ir_printer
from fiddle.experimental import visualize
from paxml.tools.fiddle import codegen
from paxml.tools.fiddle import codegen_external_init_checkpoint_fns
from paxml.tools.fiddle import codegen_highlevel_parameterization
from paxml.tools.fiddle import codegen_pax_code_ir
from paxml.tools.fiddle import codegen_tracer
from paxml.tools.fiddle import test_fixtures


def _output(task):
  return task.top_level_call.fn.output_value


class HighlevelParameterizationTest(absltest.TestCase):

  def test_traced_values_and_keys_become_self_attributes(self):
    task = codegen.InitTask()({
        'width': codegen_tracer.make_tracer('WIDTH', 8),
        codegen_tracer.make_tracer('KEY', 'k'): 1, 'plain': 3})
    self.assertIsInstance(task, codegen_pax_code_ir.PaxCodegenTask)
    result = codegen_highlevel_parameterization.HighlevelParameterization(
        lowercasing=True)(task)
    self.assertIs(result, task)
    out = _output(task)
    self.assertEqual(ir_printer.format_expr(out['width']), 'self.width')
    keys = list(out)
    self.assertEqual(keys[1].attribute, 'key')
    self.assertEqual(out['plain'], 3)
    self.assertEqual(sorted(task.highlevel_accesses), ['key', 'width'])
    self.assertEqual(task.top_level_call.fn.parameters[0].name.value, 'self')

  def test_needs_a_pax_task(self):
    with self.assertRaisesRegex(TypeError, 'PaxCodegenTask'):
      codegen_highlevel_parameterization.HighlevelParameterization()(object())


class InitCheckpointRulesTest(absltest.TestCase):

  def _task(self, experiment):
    config = visualize.with_defaults_trimmed(experiment().task(),
                                             remove_deep_defaults=True)
    return codegen.InitTask()(config)

  def test_rules_refer_to_the_experiment(self):
    task = self._task(test_fixtures.SampleExperimentWithInitFromCheckpointRules)
    codegen_external_init_checkpoint_fns.InitCheckpointRulesFromOtherTask()(
        task, init_checkpoint_experiments={
            '/path/to/my/checkpoint':
                test_fixtures.SampleExperimentWithInputSpecsProvider})
    text = ir_printer.format_task(task)
    self.assertIn('SampleExperimentWithInputSpecsProvider(*[[]], **{})>'
                  '.task(', text)
    self.assertIn('.get_input_specs_provider_params(', text)
    self.assertNotIn('SampleInputSpecsProvider', text.replace(
        'SampleExperimentWithInputSpecsProvider', ''))

  def test_missing_or_unused_rules_are_named(self):
    rules_cls = (
        codegen_external_init_checkpoint_fns.InitCheckpointRulesFromOtherTask)
    rules_pass = rules_cls()
    task = self._task(test_fixtures.SampleExperimentWithInitFromCheckpointRules)
    with self.assertRaisesRegex(ValueError, 'No task for checkpoint /path'):
      rules_pass(task, init_checkpoint_experiments={})
    task = self._task(test_fixtures.SampleExperiment)
    with self.assertRaisesRegex(ValueError, "Didn't encounter.*'/other'"):
      rules_pass(task, init_checkpoint_experiments={'/other': None})
    lenient = rules_cls(strict=False)
    task = self._task(test_fixtures.SampleExperimentWithInitFromCheckpointRules)
    self.assertIs(lenient(task, init_checkpoint_experiments={}), task)


if __name__ == '__main__':
  absltest.main()
