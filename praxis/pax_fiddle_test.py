"""Tests of pax_fiddle: configs, template and instance fields, building."""

import dataclasses
import functools
from typing import Any, NamedTuple

from absl.testing import absltest
import fiddle as fdl
from fiddle import daglish
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils


@dataclasses.dataclass
class Leaf:
  x: int = 1
  y: str = 'a'


@dataclasses.dataclass
class Tree:
  leaf_tpl: pax_fiddle.Config[Leaf] = pax_fiddle.template_field(Leaf)
  leaf: Leaf = pax_fiddle.instance_field(Leaf)
  maybe_tpl: pax_fiddle.Config[Leaf] | None = None
  tpls: list[pax_fiddle.Config[Leaf]] = dataclasses.field(default_factory=list)
  size: int = 3


class Marked(fdl.Tag):
  """A tag used by these tests."""


_NUMBERS = (1, 2)


@pax_fiddle.auto_config
def _leaf_seven():
  return Leaf(x=7)


@dataclasses.dataclass
class Fields:
  marked: int = pax_fiddle.field(tags=Marked, default=0)
  auto: Leaf = pax_fiddle.field(default_factory=_leaf_seven)
  conf: Leaf = pax_fiddle.field(default_factory=Leaf, configurable_factory=True)
  items: list[Any] = pax_fiddle.instance_field(list)
  lam_tpl: pax_fiddle.Config[Leaf] = pax_fiddle.template_field(
      lambda: Leaf(y='lam'))
  # Calls only builtins: auto_config would run it as is.
  copied: list[int] = pax_fiddle.instance_field(lambda: list(_NUMBERS))


@dataclasses.dataclass
class Maker:
  make_leaf: Any = pax_fiddle.field(
      default_factory=Leaf, configurable_factory=True)


class TplTuple(NamedTuple):
  tpls: list[pax_fiddle.Config[Leaf]]


class ConfigTest(test_utils.TestCase):

  def test_template_and_instance_defaults_are_configs(self):
    cfg = pax_fiddle.Config(Tree)
    self.assertIsInstance(cfg.leaf_tpl, pax_fiddle.Config)
    self.assertIsInstance(cfg.leaf, pax_fiddle.Config)
    cfg.leaf_tpl.x = 5
    cfg.leaf.y = 'b'
    tree = pax_fiddle.build(cfg)
    # The template stays a config; the instance field is built.
    self.assertIsInstance(tree.leaf_tpl, pax_fiddle.Config)
    self.assertEqual(tree.leaf_tpl.x, 5)
    self.assertEqual(tree.leaf, Leaf(x=1, y='b'))

  def test_annotated_template_without_template_field(self):
    cfg = pax_fiddle.Config(Tree, maybe_tpl=pax_fiddle.Config(Leaf, x=9),
                            tpls=[pax_fiddle.Config(Leaf, x=i) for i in (1, 2)])
    tree = pax_fiddle.instantiate(cfg)
    self.assertIsInstance(tree.maybe_tpl, pax_fiddle.Config)
    self.assertEqual(tree.maybe_tpl.x, 9)
    self.assertEqual([t.x for t in tree.tpls], [1, 2])
    self.assertTrue(all(isinstance(t, pax_fiddle.Config) for t in tree.tpls))

  def test_build_does_not_change_or_share_the_config(self):
    cfg = pax_fiddle.Config(Tree)
    tree = pax_fiddle.build(cfg)
    tree.leaf_tpl.x = 100
    self.assertEqual(cfg.leaf_tpl.x, 1)

  def test_clone_set_and_cls(self):
    cfg = pax_fiddle.Config(Leaf, x=2)
    clone = cfg.clone().set(x=3).Set(y='z')
    self.assertEqual((cfg.x, clone.x, clone.y), (2, 3, 'z'))
    self.assertIs(clone.cls, Leaf)

    @dataclasses.dataclass
    class Other(Leaf):
      z: float = 0.5

    clone.cls = Other
    self.assertEqual(clone.Instantiate(), Other(x=3, y='z', z=0.5))
    self.assertEqual(cfg.Instantiate(y='q'), Leaf(x=2, y='q'))
    self.assertEqual(cfg.y, 'a')  # Instantiate's overrides don't stick.

  def test_unknown_attribute_raises_at_once(self):
    cfg = pax_fiddle.Config(Leaf)
    with self.assertRaisesRegex(AttributeError, "Leaf has no field 'xx'"):
      cfg.xx = 1

  def test_copy_fields_from(self):
    src = pax_fiddle.Config(Leaf, x=7, y='s')
    dst = pax_fiddle.Config(Leaf)
    dst.copy_fields_from(src)
    self.assertEqual((dst.x, dst.y), (7, 's'))

    @dataclasses.dataclass
    class Small:
      x: int = 0

    small = pax_fiddle.Config(Small)
    with self.assertRaisesRegex(ValueError, "'y' not in self"):
      small.copy_fields_from(src)
    small.copy_fields_from(src, missing_fields_in_self=('y',))
    self.assertEqual(small.x, 7)

  def test_partial(self):
    part = pax_fiddle.build(pax_fiddle.Partial(Leaf, x=4))
    self.assertEqual(part(y='w'), Leaf(x=4, y='w'))

  def test_nested_map_inside_config_is_built(self):
    cfg = pax_fiddle.Config(
        Leaf, y=py_utils.NestedMap(a=pax_fiddle.Config(Leaf, x=8)))
    built = pax_fiddle.build(cfg)
    self.assertIsInstance(built.y, py_utils.NestedMap)
    self.assertEqual(built.y.a, Leaf(x=8))

  def test_do_not_build_tag(self):
    cfg = pax_fiddle.Config(Leaf)
    cfg.y = pax_fiddle.Config(Leaf, x=3)
    fdl.add_tag(cfg, 'y', pax_fiddle.DoNotBuild)
    self.assertIsInstance(pax_fiddle.build(cfg).y, pax_fiddle.Config)

  def test_auto_config_makes_pax_configs(self):

    @pax_fiddle.auto_config
    def make():
      return Tree(leaf=Leaf(x=2), size=4)

    cfg = make.as_buildable()
    self.assertIsInstance(cfg, pax_fiddle.Config)
    self.assertEqual(pax_fiddle.build(cfg).leaf, Leaf(x=2))

  def test_objects_passed_as_arguments_are_shared(self):
    leaf = Leaf(x=5)
    tree = pax_fiddle.instantiate(pax_fiddle.Config(Tree), leaf=leaf)
    self.assertIs(tree.leaf, leaf)

  def test_template_field_with_a_config_default(self):

    @dataclasses.dataclass
    class Holder:
      tpl: pax_fiddle.Config[Leaf] = pax_fiddle.template_field(
          pax_fiddle.Config(Leaf, x=7))

    first, second = pax_fiddle.Config(Holder), pax_fiddle.Config(Holder)
    first.tpl.x = 8
    self.assertEqual((first.tpl.x, second.tpl.x), (8, 7))
    self.assertIsInstance(pax_fiddle.build(second).tpl, pax_fiddle.Config)

  def test_required_field(self):

    @dataclasses.dataclass
    class Needs:
      n: int

    with self.assertRaisesRegex(ValueError, "Needs: required field 'n'"):
      pax_fiddle.build(pax_fiddle.Config(Needs))


class CopyTest(test_utils.TestCase):

  def test_clone_is_independent_and_shares_signature_information(self):
    cfg = pax_fiddle.Config(Tree, tpls=[pax_fiddle.Config(Leaf, x=2)])
    cfg.leaf_tpl.x = 5
    copy_ = cfg.clone()
    copy_.leaf_tpl.x = 6
    copy_.tpls[0].y = 'b'
    copy_.tpls.append(pax_fiddle.Config(Leaf))
    self.assertEqual((cfg.leaf_tpl.x, cfg.tpls[0].y, len(cfg.tpls)),
                     (5, 'a', 1))
    self.assertEqual((copy_.leaf_tpl.x, copy_.tpls[0].y, len(copy_.tpls)),
                     (6, 'b', 2))
    self.assertIs(copy_.__signature_info__, cfg.__signature_info__)

  def test_clone_keeps_history_tags_and_sharing_as_fiddle_copies(self):
    shared = pax_fiddle.Config(Leaf, x=3)
    cfg = pax_fiddle.Config(Tree, leaf_tpl=shared, maybe_tpl=shared,
                            tpls=[shared, pax_fiddle.Config(Leaf)])
    cfg.size = 4
    cfg.size = 5
    fdl.add_tag(cfg, 'size', Marked)  # `size` has three history entries.
    copy_ = cfg.clone()
    # fiddle's own copy (the generic walk of the whole `__dict__`).
    reference = fdl.Config.__deepcopy__(cfg, {})
    self.assertEqual(copy_, reference)
    self.assertEqual(copy_, cfg)
    for name in ('size', 'leaf_tpl', 'tpls'):
      self.assertEqual(
          [(e.param_name, e.kind, e.new_value) for e in
           copy_.__argument_history__[name]],
          [(e.param_name, e.kind, e.new_value) for e in
           reference.__argument_history__[name]])
    self.assertLen(copy_.__argument_history__['size'], 3)
    self.assertEqual(fdl.get_tags(copy_, 'size'), {Marked})
    # The copy's bookkeeping is its own.
    fdl.add_tag(copy_, 'leaf', Marked)
    copy_.size = 6
    self.assertEqual(fdl.get_tags(cfg, 'leaf'), set())
    self.assertLen(cfg.__argument_history__['size'], 3)
    # One shared config stays one (new) config in the copy.
    self.assertIs(copy_.leaf_tpl, copy_.maybe_tpl)
    self.assertIs(copy_.leaf_tpl, copy_.tpls[0])
    self.assertIsNot(copy_.leaf_tpl, shared)
    copy_.leaf_tpl.x = 9
    self.assertEqual((copy_.tpls[0].x, shared.x), (9, 3))

  def test_build_owned_builds_like_build_and_changes_its_argument(self):
    def make():
      return pax_fiddle.Config(Tree, leaf_tpl=pax_fiddle.Config(Leaf, x=4),
                               leaf=pax_fiddle.Config(Leaf, y='c'))

    cfg = make()
    built = pax_fiddle.build(cfg)
    self.assertEqual(cfg, make())  # build copies.
    owned = make()
    built_owned = pax_fiddle.build_owned(owned)
    self.assertEqual(built_owned.leaf, Leaf(x=1, y='c'))
    self.assertEqual(built_owned.leaf, built.leaf)
    self.assertEqual(built_owned.leaf_tpl, built.leaf_tpl)
    self.assertIsInstance(built_owned.leaf_tpl, pax_fiddle.Config)
    # The template argument was wrapped in place.
    self.assertNotEqual(owned, make())
    self.assertIs(built_owned.leaf_tpl,
                  fdl.get_callable(owned.leaf_tpl).template)


class FieldMetadataTest(test_utils.TestCase):

  def test_field_defaults_and_tags_in_configs(self):
    cfg = pax_fiddle.Config(Fields)
    self.assertEqual(fdl.get_tags(cfg, 'marked'), {Marked})
    # An auto_config'd factory's body is read: Config(Leaf, x=7).
    self.assertIsInstance(cfg.auto, pax_fiddle.Config)
    self.assertEqual((cfg.auto.cls, cfg.auto.x), (Leaf, 7))
    self.assertIsInstance(cfg.conf, pax_fiddle.Config)
    self.assertEqual(cfg.items, [])
    self.assertEqual((cfg.lam_tpl.cls, cfg.lam_tpl.y), (Leaf, 'lam'))
    self.assertEqual(cfg.copied, [1, 2])
    self.assertIsNot(cfg.copied, pax_fiddle.Config(Fields).copied)
    cfg.auto.y = 'b'
    fdl.set_tagged(cfg, tag=Marked, value=5)
    built = pax_fiddle.build(cfg)
    self.assertEqual((built.marked, built.auto), (5, Leaf(x=7, y='b')))
    self.assertIsNot(built.items, pax_fiddle.build(cfg).items)
    # The plain Python defaults are values, templates stay configs.
    self.assertEqual(Fields().auto, Leaf(x=7))
    self.assertEqual(Fields().items, [])
    self.assertEqual(Fields().lam_tpl, pax_fiddle.Config(Leaf, y='lam'))

  def test_field_errors(self):
    with self.assertRaisesRegex(ValueError, 'configurable_factory'):
      pax_fiddle.field(default_factory=_leaf_seven, configurable_factory=True)
    with self.assertRaisesRegex(ValueError, 'signature'):
      pax_fiddle.field(default_factory=None, configurable_factory=True)
    self.assertTrue(pax_fiddle.field_has_tag(Fields.__dataclass_fields__[
        'marked'], Marked))
    self.assertIsNone(pax_fiddle.field_metadata(dataclasses.field()))

  def test_partial_defaults_are_arg_factories(self):
    part = pax_fiddle.Partial(Maker)
    self.assertIsInstance(part.make_leaf, pax_fiddle.ArgFactory)
    make = pax_fiddle.build(part)
    self.assertIsNot(make().make_leaf, make().make_leaf)
    self.assertEqual(make().make_leaf, Leaf())

  def test_partial_holding_config_default_is_refused(self):

    @pax_fiddle.auto_config
    def partial_with_config():
      return functools.partial(Tree, leaf=Leaf())

    @dataclasses.dataclass
    class Bad:
      fn: Any = pax_fiddle.field(default_factory=partial_with_config)

    with self.assertRaisesRegex(ValueError, 'Unable to safely replace'):
      pax_fiddle.Config(Bad)
    cfg = pax_fiddle.Config(Bad, fn=None)  # Set explicitly: fine.
    self.assertIsNone(cfg.fn)

  def test_update_callable_adds_tags_and_defaults(self):

    @dataclasses.dataclass
    class Plain:
      marked: int = 0

    cfg = pax_fiddle.Config(Plain)
    self.assertEqual(fdl.get_tags(cfg, 'marked'), set())
    cfg.cls = Fields
    self.assertEqual(fdl.get_tags(cfg, 'marked'), {Marked})
    self.assertEqual(cfg.auto.x, 7)

  def test_templates_of_any_callable_stay_configs(self):

    def fn(tpl: pax_fiddle.Config[Leaf] | None, leaf: Leaf):
      return tpl, leaf

    self.assertEqual(pax_fiddle.template_argument_names(fn), {'tpl'})

    def odd(tpls: set[pax_fiddle.Config[Leaf]]):
      return tpls

    with self.assertRaisesRegex(ValueError, 'Unsupported type .*odd.tpls'):
      pax_fiddle.build(pax_fiddle.Config(odd, tpls=set()))
    self.assertEqual(pax_fiddle.template_argument_names(TplTuple), {'tpls'})
    self.assertEqual(pax_fiddle.template_argument_names(Tree),
                     {'leaf_tpl', 'maybe_tpl', 'tpls'})
    tpl, leaf = pax_fiddle.build(pax_fiddle.Config(
        fn, tpl=pax_fiddle.Config(Leaf), leaf=pax_fiddle.Config(Leaf)))
    self.assertIsInstance(tpl, pax_fiddle.Config)
    self.assertEqual(leaf, Leaf())
    built = pax_fiddle.build(
        pax_fiddle.Config(TplTuple, tpls=[pax_fiddle.Config(Leaf, x=2)]))
    self.assertEqual(built.tpls, [pax_fiddle.Config(Leaf, x=2)])


class LayerParamsInitTest(test_utils.TestCase):

  def test_params_init_is_a_config_until_built(self):

    class Child(base_layer.BaseLayer):
      pass

    class Parent(base_layer.BaseLayer):
      child_tpl: pax_fiddle.Config[Child] = pax_fiddle.template_field(Child)

    cfg = pax_fiddle.Config(Parent, name='p')
    self.assertEqual(
        cfg.params_init,
        pax_fiddle.Config(base_layer.WeightInit, 'xavier', 1.000001),
    )
    self.assertTrue(base_layer.is_default_param_init(cfg.params_init))
    self.assertEqual(Child().params_init,
                     base_layer.WeightInit('xavier', 1.000001))
    cfg.params_init = pax_fiddle.Config(base_layer.WeightInit, 'gaussian', 2.)
    self.assertFalse(base_layer.is_default_param_init(cfg.params_init))
    parent = pax_fiddle.build(cfg)
    self.assertEqual(parent.params_init,
                     base_layer.WeightInit('gaussian', 2.0))
    # The child template inherits the parent's non-default initialiser.
    self.assertEqual(parent.child_tpl.params_init.method, 'gaussian')


class TraversalTest(test_utils.TestCase):

  def test_registered_hparams_dataclasses_are_entered(self):

    @dataclasses.dataclass
    class Hp:
      a: int = 1
      leaf: Any = None

    @dataclasses.dataclass
    class Plain:
      b: int = 2

    hp = Hp(leaf=pax_fiddle.Config(Leaf, x=3))
    cfg = pax_fiddle.Config(Leaf, y=[hp, Plain()])
    paths = lambda it: {daglish.path_str(p) for _, p in it(cfg)}
    self.assertNotIn('.y[0].leaf', paths(daglish.iterate))
    pax_fiddle.register_hparams_traverser(Hp)
    found = paths(pax_fiddle.iterate)
    self.assertContainsSubset({'.y[0].a', '.y[0].leaf', '.y[0].leaf.x'},
                              found)
    self.assertNotIn('.y[1].b', found)  # Unregistered: a leaf.

    def bump(value, state):
      value = state.map_children(value)
      return value + 1 if isinstance(value, int) else value

    for traversal in (pax_fiddle.BasicTraversal,
                      pax_fiddle.MemoizedTraversal):
      bumped = traversal.run(bump, cfg)
      self.assertEqual(bumped.y[0],
                       Hp(a=2, leaf=pax_fiddle.Config(Leaf, x=4)))
      self.assertEqual(bumped.y[1], Plain())


class CopyFieldsFromTest(test_utils.TestCase):

  def test_copies_name_and_unsets_shared_factories(self):

    @dataclasses.dataclass
    class Stop:
      name: str
      times: list[int] = dataclasses.field(default_factory=list)
      parent: Any = None

    src = pax_fiddle.Config(Stop, 'a', parent='p')
    dst = pax_fiddle.Config(Stop, 'b', times=[1], parent='q')
    dst.copy_fields_from(src)
    self.assertEqual(dst, pax_fiddle.Config(Stop, 'a', parent='q'))
    self.assertNotIn('times', dst.__arguments__)
    with self.assertRaisesRegex(ValueError, 'missing required value'):
      dst.copy_fields_from(pax_fiddle.Config(Stop))

    @dataclasses.dataclass
    class OtherStop(Stop):
      times: list[int] = dataclasses.field(default_factory=lambda: [0])

    with self.assertRaisesRegex(ValueError, "default_factory .*Stop.times"):
      pax_fiddle.Config(OtherStop).copy_fields_from(src)
    with self.assertRaisesRegex(TypeError, 'pax_fiddle.Config'):
      dst.copy_fields_from(Stop('x'))


if __name__ == '__main__':
  absltest.main()
