"""Tests of remove_sharding: which fields go, what stays shared."""

from absl.testing import absltest
import fiddle as fdl
from fiddle import daglish
from paxml.tools.fiddle import remove_sharding
from praxis import base_layer
from praxis import pax_fiddle


class _Layer(base_layer.BaseLayer):
  x: int = 1


def _annotated(x=2):
  config = pax_fiddle.Config(_Layer, x=x)
  config.weight_split_dims_mapping.wt = ('data', 'model')
  config.activation_split_dims_mapping.out = ('data',)
  return config


class RemoveShardingTest(absltest.TestCase):

  def test_annotations_are_found_by_class_or_by_field_name(self):
    is_annotation = remove_sharding._is_sharding_annotation
    sharding = pax_fiddle.Config(base_layer.BaseLayer.ActivationSharding)
    self.assertTrue(is_annotation(sharding, ()))
    self.assertTrue(is_annotation(
        {'any': 1}, (daglish.Attr('weight_split_dims_mapping'),)))
    self.assertFalse(is_annotation(pax_fiddle.Config(_Layer), ()))
    self.assertFalse(is_annotation(('data',), (daglish.Attr('wt'),)))

  def test_removes_annotations_and_keeps_the_rest(self):
    shared = _annotated()
    config = [shared, {'again': shared}]
    result = remove_sharding.remove_sharding(config)
    args = fdl.ordered_arguments(result[0])
    self.assertEqual(args['x'], 2)
    self.assertNotIn('weight_split_dims_mapping', args)
    self.assertNotIn('activation_split_dims_mapping', args)
    self.assertIs(result[0], result[1]['again'])
    self.assertEqual(shared.weight_split_dims_mapping.wt, ('data', 'model'))

  def test_replace_with_default_gives_empty_annotations(self):
    result = remove_sharding.remove_sharding(_annotated(),
                                             replace_with_default=True)
    self.assertIsNone(result.weight_split_dims_mapping.wt)
    self.assertIsNone(result.activation_split_dims_mapping.out)
    self.assertEqual(result.x, 2)


if __name__ == '__main__':
  absltest.main()
