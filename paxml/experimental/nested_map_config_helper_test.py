"""Tests of make_nested_map, called and built from a config."""

from absl.testing import absltest
from paxml.experimental import nested_map_config_helper
from praxis import pax_fiddle
from praxis import py_utils


class MakeNestedMapTest(absltest.TestCase):

  def test_built_config_is_a_nested_map(self):
    cfg = pax_fiddle.Config(nested_map_config_helper.make_nested_map,
                            base={'a': 1, 'b': {'c': 2}})
    built = pax_fiddle.build(cfg)
    self.assertIsInstance(built, py_utils.NestedMap)
    self.assertEqual(built.a, 1)
    self.assertEqual(built.b, {'c': 2})
    self.assertEqual(sorted(built.keys()), ['a', 'b'])


if __name__ == '__main__':
  absltest.main()
