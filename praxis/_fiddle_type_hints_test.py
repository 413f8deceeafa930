"""Tests of the type-hint cache installed for fiddle by praxis.pax_fiddle."""

import dataclasses
import gc
from typing import Annotated
import weakref

from absl.testing import absltest
import fiddle as fdl
from fiddle import signatures
from fiddle._src import signatures as signatures_src
from praxis import _fiddle_type_hints
from praxis import pax_fiddle


class Unit(fdl.Tag):
  """A tag for the tests."""


@dataclasses.dataclass
class Scaled:
  factor: Annotated[float, Unit] = 1.0
  name: str = ''


class FiddleTypeHintsTest(absltest.TestCase):

  def test_hints_are_computed_once(self):
    first = signatures.get_type_hints(Scaled, include_extras=True)
    again = signatures.get_type_hints(Scaled, include_extras=True)
    # Without a working cache every call evaluates the annotations anew.
    self.assertIs(first, again)
    self.assertEqual(set(first), {'factor', 'name'})
    plain = signatures.get_type_hints(Scaled)
    self.assertIs(plain['factor'], float)  # Extras stripped: its own entry.
    self.assertIs(signatures.get_type_hints(Scaled), plain)

  def test_annotation_tags_still_reach_configs(self):
    config = pax_fiddle.Config(Scaled, factor=2.0)
    self.assertEqual(config.__argument_tags__['factor'], {Unit})
    self.assertEqual(fdl.build(config), Scaled(factor=2.0))

  def test_cached_classes_can_be_collected(self):

    @dataclasses.dataclass
    class Temporary:
      size: int = 0

    signatures.get_type_hints(Temporary, include_extras=True)
    ref = weakref.ref(Temporary)
    del Temporary
    gc.collect()
    self.assertIsNone(ref())

  def test_a_failed_evaluation_is_retried(self):

    @dataclasses.dataclass
    class Forward:
      later: '_DefinedLater' = None  # pytype: disable=name-error

    self.assertEqual(signatures.get_type_hints(Forward), {})  # NameError.
    globals()['_DefinedLater'] = int
    try:
      self.assertEqual(signatures.get_type_hints(Forward), {'later': int})
    finally:
      del globals()['_DefinedLater']

  def test_a_working_cache_is_left_alone(self):
    installed = signatures_src._type_hints_cache
    self.assertIsInstance(installed, _fiddle_type_hints._TypeHintsCache)
    self.assertFalse(_fiddle_type_hints.install())  # Already replaced.
    working = {}
    signatures_src._type_hints_cache = working
    try:
      self.assertFalse(_fiddle_type_hints.install())
      self.assertIs(signatures_src._type_hints_cache, working)
    finally:
      signatures_src._type_hints_cache = installed

  def test_the_cache_fiddle_ships_never_hits(self):
    # Why the cache is replaced: fiddle's keys are tuples, which a
    # WeakKeyDictionary cannot hold.
    shipped = weakref.WeakKeyDictionary()
    with self.assertRaises(TypeError):
      shipped[Scaled, True]  # pylint: disable=pointless-statement
    self.assertTrue(_fiddle_type_hints._cache_is_broken(shipped))


if __name__ == '__main__':
  absltest.main()
