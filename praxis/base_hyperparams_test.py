"""Tests of base_hyperparams: the text format and the HParams styles."""

import dataclasses
import pickle
from typing import NamedTuple

from absl.testing import absltest
from flax import linen as nn
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


class Rule(NamedTuple):
  path: str = 'p'
  safe: bool = False


class Adder(base_hyperparams.BaseParameterizable):
  """A legacy class: HParams dataclass plus an extra __init__ argument."""

  _USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True

  class HParams(base_hyperparams.BaseParameterizable.HParams):
    offset: int = 0
    scale: float = 1.0

  def __init__(self, hparams, bias: int = 0):
    super().__init__(hparams)
    self.bias = bias

  def __call__(self, x):
    return self.hparams.scale * x + self.hparams.offset + self.bias


class AdderPair(base_hyperparams.BaseParameterizable):

  _USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True

  class HParams(base_hyperparams.BaseHyperParams):
    first: base_hyperparams.BaseHyperParams = (
        base_hyperparams.sub_config_field(Adder.HParams))


class FiddleBaseParameterizableTest(test_utils.TestCase):

  def test_is_a_keyword_only_dataclass(self):
    s = Schedule(rate=0.5)
    self.assertEqual((s.name, s.rate, s.steps), ('', 0.5, [1, 2]))
    with self.assertRaisesRegex(TypeError, r'Only keyword.*\(0.5,\)'):
      Schedule(0.5)  # pylint: disable=too-many-function-args
    with self.assertRaisesRegex(TypeError, 'Schedule2.rate.*float'):

      class Schedule2(Schedule):  # pylint: disable=unused-variable
        rate = 0.2

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
    with self.assertRaisesRegex(AttributeError, "Attribute c doesn't exist"):
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


class BaseParameterizableTest(test_utils.TestCase):

  def test_hparams_build_the_class(self):
    p = Adder.HParams(offset=2, scale=3.0)
    self.assertIs(p.cls, Adder)
    self.assertEqual([f.name for f in dataclasses.fields(p)],
                     ['cls', 'name', 'offset', 'scale'])
    adder = base_hyperparams.instantiate(p, bias=1)
    self.assertEqual(adder(1.0), 3.0 * 1.0 + 2 + 1)
    with self.assertRaisesRegex(AttributeError, 'frozen'):
      adder.hparams.offset = 5
    p.offset = 5  # The object holds a frozen copy.
    self.assertEqual(adder.hparams.offset, 2)

  def test_make_and_config(self):
    self.assertEqual(Adder.make(offset=1, bias=10)(2.0), 13.0)
    cfg = Adder.config(offset=4)
    cfg.bias = 1
    with self.assertRaisesRegex((AttributeError, TypeError), 'typo'):
      cfg.typo = 1
    built = pax_fiddle.build(pickle.loads(pickle.dumps(cfg)))
    self.assertEqual(built(0.5), 0.5 + 4 + 1)

  def test_sub_config_fields(self):
    p = AdderPair.HParams()
    self.assertIsInstance(p.first, Adder.HParams)
    cfg = AdderPair.HParams.config()
    cfg.first.offset = 7
    self.assertEqual(pax_fiddle.build(cfg).first.offset, 7)

  def test_class_checks(self):
    with self.assertRaisesRegex(ValueError, 'FiddleBaseParameterizable'):

      # pylint: disable-next=unused-variable
      class NotMarked(base_hyperparams.BaseParameterizable):
        pass

    with self.assertRaisesRegex(TypeError, 'Duplicated parameter.*scale'):

      class Clash(Adder):  # pylint: disable=unused-variable

        def __init__(self, hparams, scale=1):
          super().__init__(hparams)

    with self.assertRaisesRegex(AttributeError, 'offset was overridden'):

      class Redeclared(Adder):  # pylint: disable=unused-variable

        class HParams(Adder.HParams):
          offset: float = 0.0

  def test_freeze_clone_copy_fields(self):
    p = AdderPair.HParams()
    p.freeze()
    with self.assertRaisesRegex(AttributeError, 'frozen'):
      p.first.offset = 1
    q = p.clone()
    q.first.offset = 3
    target = AdderPair.HParams()
    target.copy_fields_from(q)
    self.assertEqual(target.first.offset, 3)
    self.assertIsNot(target.first, q.first)


class TextFormatTest(test_utils.TestCase):

  def test_legacy_hparams_and_named_tuples(self):
    p = Adder.HParams(offset=1)
    self.assertEqual(
        base_hyperparams.nested_struct_to_text({'p': p, 'r': Rule()}),
        f"p.cls : type/{__name__}/Adder\np.name : ''\np.offset : 1\n"
        "p.scale : 1.0\n"
        "r[path] : 'p'\nr[safe] : False\n")
    self.assertEqual(
        base_hyperparams.nested_struct_to_text([p, 2]),
        f" : [{{'cls': 'type/{__name__}/Adder', 'name': '', 'offset': 1, "
        "'scale': 1.0}, 2]\n")

  def test_module_parent_skipped_and_cycles_refused(self):

    class Leaf(nn.Module):
      size: int = 3

    class Root(nn.Module):

      @nn.compact
      def __call__(self):
        leaf = Leaf()
        texts.append(base_hyperparams.nested_struct_to_text(leaf))

    texts = []
    Root().init({})
    self.assertEqual(texts, ["name : 'Leaf_0'\nsize : 3\n"])
    cfg = pax_fiddle.Config(OldTask)
    cfg.schedule = [cfg]
    with self.assertRaisesRegex(ValueError, 'circular reference'):
      base_hyperparams.nested_struct_to_text(cfg)

  def test_nested_struct_to_text(self):
    cfg = pax_fiddle.Config(OldTask, name='t', num_steps=3)
    cfg.schedule.rate = 0.5
    text = base_hyperparams.nested_struct_to_text(cfg)
    mod = __name__
    expected = '\n'.join([
        f'cls : type/{mod}/OldTask',
        "name : 't'",
        'num_steps : 3',
        f'schedule.cls : type/{mod}/Schedule',
        "schedule.name : ''",
        'schedule.rate : 0.5',
        'schedule.steps : [1, 2]',
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
