"""Tests of xla_passthrough: which values leave the batch and come back."""

from absl.testing import absltest
import numpy as np
from paxml import xla_passthrough


class SplitTest(absltest.TestCase):

  def test_numeric_batch_comes_back_as_the_same_objects(self):
    batch = {'x': np.zeros(3, np.float32), 'n': {'y': np.ones(2, np.int32)}}
    specs = {'x': 'px', 'n': {'y': 'py'}}
    out, strings, new_specs = xla_passthrough.split_out_xla_unsupported_batch(
        batch, specs)
    self.assertIs(out, batch)
    self.assertIs(new_specs, specs)
    self.assertEqual(strings, {})

  def test_strings_and_objects_leave_and_merge_back(self):
    ids = np.array(['a', 'b'])
    objs = np.array([{}, None], dtype=object)
    batch = {'x': np.arange(2), 'ids': ids, 'objs': objs}
    out, strings, new_specs = xla_passthrough.split_out_xla_unsupported_batch(
        batch, {'x': 'px', 'ids': 'pi', 'objs': 'po'})
    self.assertEqual(sorted(out), ['x'])
    self.assertEqual(new_specs, {'x': 'px'})
    self.assertIs(strings['ids'], ids)
    self.assertIs(strings['objs'], objs)
    xla_passthrough.merge_back_xla_unsupported_batch(out, strings)
    self.assertEqual(sorted(out), ['ids', 'objs', 'x'])
    self.assertEqual(sorted(batch), ['ids', 'objs', 'x'])  # Input untouched.

  def test_nested_strings_take_their_top_level_key_out(self):
    batch = {'x': np.arange(2),
             'n': {'s': np.array(['u', 'v']), 'y': np.arange(2)}}
    out, strings, new_specs = xla_passthrough.split_out_xla_unsupported_batch(
        batch, {'x': 'px', 'n': {'s': 'ps', 'y': 'py'}})
    self.assertEqual(sorted(out), ['x'])
    self.assertEqual(list(strings['n']['s']), ['u', 'v'])
    self.assertEqual(sorted(strings['n']), ['s'])
    self.assertEqual(new_specs, {'x': 'px', 'n': {'y': 'py'}})
    _, _, no_specs = xla_passthrough.split_out_xla_unsupported_batch(batch)
    self.assertIsNone(no_specs)

  def test_merge_of_nothing_is_a_no_op(self):
    out = {'x': 1}
    xla_passthrough.merge_back_xla_unsupported_batch(out, {})
    xla_passthrough.merge_back_xla_unsupported_batch(out, None)
    self.assertEqual(out, {'x': 1})


if __name__ == '__main__':
  absltest.main()
