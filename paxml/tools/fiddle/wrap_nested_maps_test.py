"""Tests of wrap_nested_maps: NestedMaps become configs that rebuild them."""

from absl.testing import absltest
import fiddle as fdl
from paxml.experimental import nested_map_config_helper
from paxml.tools.fiddle import wrap_nested_maps
from praxis import pax_fiddle
from praxis import py_utils


class WrapNestedMapsTest(absltest.TestCase):

  def test_nested_maps_become_configs_and_build_back(self):
    leaf = [1, 2]
    config = {'m': py_utils.NestedMap(a=py_utils.NestedMap(b=leaf), c=leaf)}
    wrapped = wrap_nested_maps.wrap_nested_maps(config)
    outer = wrapped['m']
    self.assertIsInstance(outer, fdl.Config)
    self.assertIs(fdl.get_callable(outer),
                  nested_map_config_helper.make_nested_map)
    self.assertIs(type(outer.base), dict)
    self.assertIsInstance(outer.base['a'], fdl.Config)
    self.assertIs(outer.base['a'].base['b'], outer.base['c'])  # Still shared.
    built = pax_fiddle.build(wrapped)['m']
    self.assertIsInstance(built, py_utils.NestedMap)
    self.assertIsInstance(built.a, py_utils.NestedMap)
    self.assertEqual(built.a.b, [1, 2])


if __name__ == '__main__':
  absltest.main()
