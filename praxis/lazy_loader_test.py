"""Tests of LazyLoader and of the Fiddle tags."""

import sys

from absl.testing import absltest
import fiddle as fdl
from praxis import fiddle_tags
from praxis import lazy_loader
from praxis import pax_fiddle
from praxis import test_utils


def _scaled(x: float = 1.0, rate: float = 0.0) -> float:
  return x * (1.0 - rate)


class LazyLoaderTest(test_utils.TestCase):

  def test_imports_on_first_use_and_rebinds_the_global(self):
    sys.modules.pop('colorsys', None)
    scope = {}
    lazy = lazy_loader.LazyLoader('cs', scope, 'colorsys', warning='loaded')
    scope['cs'] = lazy
    self.assertNotIn('colorsys', sys.modules)
    self.assertEqual(repr(lazy), '<LazyLoader colorsys as cs>')
    with self.assertLogs(level='WARNING') as logs:
      self.assertEqual(lazy.rgb_to_hsv(1.0, 0.0, 0.0), (0.0, 1.0, 1.0))
    self.assertIn('loaded', logs.output[0])
    self.assertIs(scope['cs'], sys.modules['colorsys'])
    self.assertIn('hsv_to_rgb', dir(lazy))


class FiddleTagsTest(test_utils.TestCase):

  def test_tagged_values_are_set_together(self):
    self.assertTrue(issubclass(fiddle_tags.ParamsDType, fiddle_tags.BaseDType))
    cfg = pax_fiddle.Config(
        _scaled,
        x=fiddle_tags.ParamsDType.new(2.0),
        rate=fiddle_tags.DropoutRate.new(0.5),
    )
    self.assertEqual(pax_fiddle.build(cfg), 1.0)
    fdl.set_tagged(cfg, tag=fiddle_tags.DropoutRate, value=0.25)
    self.assertEqual(pax_fiddle.build(cfg), 1.5)


if __name__ == '__main__':
  absltest.main()
