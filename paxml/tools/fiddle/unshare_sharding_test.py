"""Tests of unshare_sharding: annotations copied apart, the rest shared."""

from absl.testing import absltest
from paxml.tools.fiddle import unshare_sharding
from praxis import base_layer
from praxis import pax_fiddle


class _Layer(base_layer.BaseLayer):
  x: int = 1


class UnshareShardingTest(absltest.TestCase):

  def test_deep_copy_unshares_everything(self):
    inner = [1, 2]
    copied = unshare_sharding._deep_copy({'a': inner, 'b': (inner, inner)})
    self.assertEqual(copied, {'a': [1, 2], 'b': ([1, 2], [1, 2])})
    self.assertIsNot(copied['a'], copied['b'][0])
    self.assertIsNot(copied['b'][0], copied['b'][1])

  def test_shared_annotation_objects_and_their_lists_are_unshared(self):
    sharding = pax_fiddle.Config(base_layer.BaseLayer.WeightSharding,
                                 wt=['data', 'model'])
    shared_layer = pax_fiddle.Config(_Layer, x=3)
    config = [pax_fiddle.Config(_Layer, weight_split_dims_mapping=sharding),
              pax_fiddle.Config(_Layer, weight_split_dims_mapping=sharding),
              shared_layer, shared_layer]
    result = unshare_sharding.unshare_sharding(config)
    first, second = (c.weight_split_dims_mapping for c in result[:2])
    self.assertIsNot(first, second)
    self.assertIsNot(first.wt, second.wt)
    self.assertEqual(first.wt, ['data', 'model'])
    self.assertEqual(second.wt, ['data', 'model'])
    self.assertIs(result[2], result[3])  # Layers stay shared.
    self.assertIsNot(result[2], shared_layer)  # ... in a copy.


if __name__ == '__main__':
  absltest.main()
