"""Tests for praxis.asserts."""

from absl.testing import absltest
from absl.testing import parameterized

from praxis import asserts
from praxis import py_utils


class _Params:
  dim = 6
  rate = 1.5


class AssertsTest(parameterized.TestCase):

  def test_none_and_not_none(self):
    asserts.none(None)
    asserts.not_none(0)
    x = 3
    with self.assertRaisesRegex(ValueError, r'^`x=3` must be `None`\.$'):
      asserts.none(x)
    y = None
    with self.assertRaisesRegex(ValueError, r'^`y=None` must not be `None`\.$'):
      asserts.not_none(y)

  def test_eq_names_both_arguments_from_the_source(self):
    p, n = _Params(), 2
    asserts.eq(p.dim, 3 * n)
    with self.assertRaises(ValueError) as ctx:
      asserts.eq(p.dim, 4 * n)
    self.assertEqual(
        str(ctx.exception), '`p.dim=6` must be equal to `4 * n=8`.'
    )

  def test_multiline_call_still_names_arguments(self):
    p = _Params()
    with self.assertRaises(ValueError) as ctx:
      asserts.between(
          p.rate,
          0.0,
          1.0,
          right_strict=True,
      )
    self.assertEqual(
        str(ctx.exception), '`p.rate=1.5` must be in the range `[0.0, 1.0)`.'
    )

  def test_ne(self):
    asserts.ne(1, 2)
    a = b = 5
    expected = r'^`a=5` must not be equal to `b=5`\.$'
    with self.assertRaisesRegex(ValueError, expected):
      asserts.ne(a, b)

  @parameterized.parameters(
      (asserts.le, 2, 2, 3, 2, 'less than or equal to'),
      (asserts.lt, 1, 2, 2, 2, 'strictly less than'),
      (asserts.ge, 2, 2, 1, 2, 'greater than or equal to'),
      (asserts.gt, 3, 2, 2, 2, 'strictly greater than'),
  )
  def test_comparisons(self, check, ok1, ok2, bad1, bad2, words):
    check(ok1, ok2)
    with self.assertRaises(ValueError) as ctx:
      check(bad1, bad2, value_str1='lhs', value_str2='rhs')
    self.assertEqual(str(ctx.exception), f'`lhs` must be {words} `rhs`.')

  def test_comparison_function_names(self):
    self.assertEqual(
        [f.__name__ for f in (asserts.le, asserts.lt, asserts.ge, asserts.gt)],
        ['le', 'lt', 'ge', 'gt'],
    )

  def test_instance_and_subclass(self):
    asserts.instance(3, (int, float))
    asserts.subclass(bool, int)
    v = 'x'
    expected = r"^`v=x` must be of type `<class 'int'>`\.$"
    with self.assertRaisesRegex(ValueError, expected):
      asserts.instance(v, int)
    with self.assertRaisesRegex(ValueError, r'must be a subclass of'):
      asserts.subclass(str, int)
    with self.assertRaisesRegex(ValueError, r'must be a subclass of'):
      asserts.subclass(3, int)  # Not a class at all.

  def test_in_set(self):
    asserts.in_set('a', ['a', 'b'])
    mode = 'c'
    expected = r"^`mode=c` must be within `\['a', 'b'\]`\.$"
    with self.assertRaisesRegex(ValueError, expected):
      asserts.in_set(mode, ['a', 'b'])

  @parameterized.parameters(
      (0.0, False, False, True),
      (0.0, True, False, False),
      (1.0, False, False, True),
      (1.0, False, True, False),
      (0.5, True, True, True),
      (-0.1, False, False, False),
  )
  def test_between(self, value, left_strict, right_strict, ok):
    def check():
      asserts.between(
          value, 0.0, 1.0, left_strict=left_strict, right_strict=right_strict
      )

    if ok:
      check()
    else:
      left = '(' if left_strict else '['
      right = ')' if right_strict else ']'
      with self.assertRaises(ValueError) as ctx:
        check()
      self.assertEqual(
          str(ctx.exception),
          f'`value={value}` must be in the range `{left}0.0, 1.0{right}`.',
      )

  def test_msg_and_exception_type_overrides(self):
    with self.assertRaisesRegex(TypeError, r'^custom text$'):
      asserts.eq(1, 2, msg='custom text', exception_type=TypeError)
    with self.assertRaisesRegex(ValueError, r'^`the dim` must be'):
      asserts.gt(0, 1, value_str1='the dim', value_str2='one')

  def test_asserts_context_disables_and_nests(self):
    self.assertTrue(asserts.AssertsContext.assertions_enabled())
    with asserts.AssertsContext(enabled=False):
      asserts.eq(1, 0)
      asserts.assert_same_structure([1], {'a': 1})
      with asserts.AssertsContext(enabled=True), self.assertRaises(ValueError):
        asserts.eq(1, 0)
      asserts.lt(5, 1)
    with self.assertRaises(ValueError):
      asserts.eq(1, 0)

  def test_assert_same_structure(self):
    nmap = py_utils.NestedMap(a=[1, 2], b=py_utils.NestedMap(c=None))
    asserts.assert_same_structure(nmap, {'a': ['x', 'y'], 'b': {'c': 3}})
    with self.assertRaisesRegex(ValueError, r'Not the same structure'):
      asserts.assert_same_structure(nmap, {'a': ['x'], 'b': {'c': 3}})
    with self.assertRaisesRegex(ValueError, r'Not the same structure'):
      asserts.assert_same_structure({'a': [1]}, {'a': (1,)})
    with self.assertRaisesRegex(KeyError, r'^.mine.$'):
      asserts.assert_same_structure(
          [1], [1, 2], msg='mine', exception_type=KeyError
      )


if __name__ == '__main__':
  absltest.main()
