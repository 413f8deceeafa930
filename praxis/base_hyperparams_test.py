"""Tests of base_hyperparams: the text format and the HParams styles."""

import dataclasses

from absl.testing import absltest
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils


class Schedule(base_hyperparams.FiddleBaseParameterizable):
  """A configurable non-layer class, new style."""

  rate: float = 0.1
  steps: list[int] = dataclasses.field(default_factory=lambda: [1, 2])

  def value(self) -> float:
    return self.rate * sum(self.steps)


class OldTask(base_hyperparams.FiddleBaseParameterizable):
  """A configurable class in the older nested-HParams style."""

  class HParams(base_hyperparams.FiddleBaseParameterizable.HParams):
    schedule: Schedule.HParams = base_hyperparams.sub_config_field(
        Schedule.HParams)
    num_steps: int = 10

  def __post_init__(self):
    self.built_schedule = base_hyperparams.instantiate(self.schedule)


class FiddleBaseParameterizableTest(test_utils.TestCase):

  def test_is_a_keyword_only_dataclass(self):
    s = Schedule(rate=0.5)
    self.assertEqual((s.name, s.rate, s.steps), ('', 0.5, [1, 2]))
    with self.assertRaises(TypeError):
      Schedule(0.5)  # pylint: disable=too-many-function-args

  def test_config_and_hparams_stub(self):
    for cfg in (Schedule.config(rate=0.2), Schedule.HParams(rate=0.2),
                Schedule.HParams.config(rate=0.2)):
      self.assertIsInstance(cfg, pax_fiddle.Config)
      self.assertIsInstance(cfg, Schedule.HParams)
      self.assertAlmostEqual(base_hyperparams.instantiate(cfg).value(), 0.6)
    self.assertNotIsInstance(Schedule.HParams(), OldTask.HParams)

  def test_nested_hparams_class_declares_fields(self):
    p = OldTask.HParams(name='task', num_steps=3)
    p.schedule.rate = 1.0
    task = p.Instantiate()
    self.assertEqual(task.num_steps, 3)
    # sub_config_field is a template: the task receives a config.
    self.assertIsInstance(task.schedule, pax_fiddle.Config)
    self.assertEqual(task.built_schedule.value(), 3.0)
    with self.assertRaisesRegex(AttributeError, "OldTask has no field 'nm'"):
      p.nm = 2

  def test_hparams_view(self):
    task = OldTask.HParams(num_steps=4).Instantiate()
    self.assertEqual(task.hparams.num_steps, 4)
    with self.assertRaisesRegex(AttributeError, 'read-only'):
      task.hparams.num_steps = 5
    self.assertEqual(task.hparams.clone().num_steps, 4)
    self.assertIs(task.hparams.cls, OldTask)

  def test_sub_config_field_none_and_lazy(self):

    class Holder(base_hyperparams.FiddleBaseParameterizable):
      empty: pax_fiddle.Config[Schedule] | None = (
          base_hyperparams.sub_config_field(None))
      lazy: pax_fiddle.Config[Schedule] = base_hyperparams.sub_config_field(
          lazy_ref=lambda: Schedule)

    holder = pax_fiddle.build(pax_fiddle.Config(Holder))
    self.assertIsNone(holder.empty)
    self.assertIs(holder.lazy.cls, Schedule)


class BaseHyperParamsTest(test_utils.TestCase):

  def test_legacy_dataclass_params(self):

    class Params(base_hyperparams.BaseHyperParams):
      a: int = 1
      b: str = 'x'

    p = Params(a=2)
    with self.assertRaisesRegex(AttributeError, "no attribute 'c'"):
      p.c = 1
    clone = p.clone().set(b='y')
    self.assertEqual((p.b, clone.b, clone.a), ('x', 'y', 2))
    p.freeze()
    with self.assertRaisesRegex(AttributeError, 'frozen'):
      p.a = 3
    self.assertEqual(pax_fiddle.build(Params.config(a=5)), Params(a=5))

  def test_instantiate_rejects_non_configs(self):
    with self.assertRaisesRegex(TypeError, 'pax_fiddle.Config'):
      base_hyperparams.instantiate(Schedule())


class TextFormatTest(test_utils.TestCase):

  def test_nested_struct_to_text(self):
    cfg = pax_fiddle.Config(OldTask, name='t', num_steps=3)
    cfg.schedule.rate = 0.5
    text = base_hyperparams.nested_struct_to_text(cfg)
    mod = __name__
    expected = '\n'.join([
        f'.cls : type/{mod}/OldTask',
        ".name : 't'",
        '.num_steps : 3',
        f'.schedule.cls : type/{mod}/Schedule',
        ".schedule.name : ''",
        '.schedule.rate : 0.5',
        '.schedule.steps : [1, 2]',
    ]) + '\n'
    self.assertEqual(text, expected)

  def test_leaf_forms_and_types(self):
    text, types = base_hyperparams.nested_struct_to_text(
        {'s': "it's", 'f': len, 'n': None, 'l': [1, 'a'], 'x': 1.5},
        include_types=True, separator='=')
    self.assertEqual(text, '\n'.join([
        'f = callable/builtins/len',
        "l = [1, 'a']",
        'n = NoneType',
        's = "it\'s"',
        'x = 1.5',
    ]) + '\n')
    self.assertEqual(types['x'], 'float')


if __name__ == '__main__':
  absltest.main()
