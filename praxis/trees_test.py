"""Tests for praxis.trees."""

import re
from typing import NamedTuple

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import py_utils
from praxis import trees

NestedMap = py_utils.NestedMap


class Point(NamedTuple):
  x: int
  y: int


class Masked:
  """A leaf type the tests ask `is_leaf` to single out."""


def _is_masked(x):
  return isinstance(x, Masked)


class ToPathTreeTest(absltest.TestCase):

  def test_paths_of_mixed_containers(self):
    tree = {
        'a': [1, 2, Point(x=3, y=4), (5, 6)],
        'b': NestedMap(c=7, d=NestedMap(e=8)),
    }
    expected = {
        'a': [
            'a[0]',
            'a[1]',
            Point(x='a[2]/x', y='a[2]/y'),
            ('a[3][0]', 'a[3][1]'),
        ],
        'b': NestedMap(c='b/c', d=NestedMap(e='b/d/e')),
    }
    result = trees.to_path_tree(tree)
    self.assertEqual(result, expected)
    self.assertIsInstance(result['b'], NestedMap)
    self.assertIsInstance(result['a'][2], Point)

  def test_top_level_list(self):
    self.assertEqual(trees.to_path_tree([1, [2]]), ['[0]', ['[1][0]']])

  def test_is_leaf_gives_none(self):
    tree = {'w': 1, 'm': Masked()}
    self.assertEqual(
        trees.to_path_tree(tree, is_leaf=_is_masked), {'w': 'w', 'm': None}
    )


class FullmatchPathTest(absltest.TestCase):

  def test_single_and_multiple_patterns(self):
    tree = NestedMap(
        dense=NestedMap(w=1, b=2), norm=NestedMap(scale=3), blocks=[4, 5]
    )
    self.assertEqual(
        trees.fullmatch_path(tree, r'dense/.*'),
        NestedMap(
            dense=NestedMap(w=True, b=True),
            norm=NestedMap(scale=False),
            blocks=[False, False],
        ),
    )
    self.assertEqual(
        trees.fullmatch_path(tree, [re.compile(r'.*/b'), r'blocks\[1\]']),
        NestedMap(
            dense=NestedMap(w=False, b=True),
            norm=NestedMap(scale=False),
            blocks=[False, True],
        ),
    )

  def test_fullmatch_not_search(self):
    self.assertEqual(trees.fullmatch_path({'ab': 1}, 'a'), {'ab': False})

  def test_is_leaf_subtrees_stay_none(self):
    result = trees.fullmatch_path({'a': 1, 'm': Masked()}, '.*', _is_masked)
    self.assertEqual(result, {'a': True, 'm': None})


class IsSubsetTest(absltest.TestCase):

  def test_cases(self):
    superset = {'a': [1, 2, 3], 'b': NestedMap(c=4, d=5), 'e': (6, 7)}
    self.assertTrue(trees.is_subset({}, superset))
    self.assertTrue(trees.is_subset({'a': [1, 2]}, superset))
    self.assertTrue(trees.is_subset({'b': {'c': 4}}, superset))  # dict ~ NM
    self.assertTrue(trees.is_subset({'e': (6,)}, superset))
    self.assertFalse(trees.is_subset({'a': [1, 3]}, superset))
    self.assertFalse(trees.is_subset({'a': (1, 2)}, superset))  # list != tuple
    self.assertFalse(trees.is_subset({'b': {'c': 5}}, superset))
    self.assertFalse(trees.is_subset({'z': 1}, superset))
    self.assertFalse(trees.is_subset([1, 2, 3, 4], [1, 2, 3]))
    self.assertFalse(trees.is_subset(1, 1.5))


class ExtractElementsTest(absltest.TestCase):

  def test_takes_superset_values_in_subset_layout(self):
    superset = NestedMap(a=[10, 20, 30], b=NestedMap(c=40, d=50), e=60)
    subset = {'a': [0, 0], 'b': {'d': 0}}
    result = trees.extract_elements_matching_subset_structure(subset, superset)
    self.assertEqual(result, {'a': [10, 20], 'b': {'d': 50}})
    self.assertIs(type(result), dict)  # The container type comes from subset.

  def test_leaf_in_subset_takes_whole_superset_subtree(self):
    superset = {'a': {'x': 1, 'y': 2}}
    result = trees.extract_elements_matching_subset_structure(
        {'a': 0}, superset
    )
    self.assertEqual(result, {'a': {'x': 1, 'y': 2}})

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, r"Keys \['z'\]"):
      trees.extract_elements_matching_subset_structure({'z': 1}, {'a': 1})
    with self.assertRaisesRegex(ValueError, r'has 3 elements'):
      trees.extract_elements_matching_subset_structure([1, 2, 3], [1, 2])
    with self.assertRaisesRegex(ValueError, r'list'):
      trees.extract_elements_matching_subset_structure([1], (1,))


class ShapeDtypeAndCopyTest(absltest.TestCase):

  def test_get_shape_dtype(self):
    tree = NestedMap(
        a=np.zeros((2, 3), np.int32), b=[jnp.ones((4,), jnp.bfloat16)]
    )
    result = trees.get_shape_dtype(tree)
    self.assertEqual(
        result,
        NestedMap(
            a=jax.ShapeDtypeStruct((2, 3), np.int32),
            b=[jax.ShapeDtypeStruct((4,), jnp.bfloat16)],
        ),
    )

  def test_copy_new_containers_same_leaves(self):
    leaf = object()
    tree = NestedMap(a=[leaf], b={'c': leaf})
    result = trees.copy(tree)
    self.assertEqual(result, tree)
    self.assertIsNot(result, tree)
    self.assertIsNot(result.a, tree.a)
    self.assertIs(result.a[0], leaf)
    self.assertIs(result.b['c'], leaf)


if __name__ == '__main__':
  absltest.main()
