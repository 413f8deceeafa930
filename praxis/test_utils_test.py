"""Tests of praxis.test_utils: TestCase's generators, and the helpers that
need TensorFlow (skipped without)."""

import importlib.util
import zlib

from absl.testing import absltest
import numpy as np
from praxis import py_utils
from praxis import test_utils

_HAS_TF = importlib.util.find_spec('tensorflow') is not None


@absltest.skipUnless(_HAS_TF, 'needs tensorflow')
class ToTfNmapTest(absltest.TestCase):

  def test_keeps_structure_values_and_dtypes(self):
    nmap = py_utils.NestedMap(
        w=np.array([[1.5, -2.0]], np.float32),
        ids=py_utils.NestedMap(x=np.array([3, 4], np.int32)),
        big=np.array([2**40], np.int64))
    out = test_utils.to_tf_nmap(nmap)
    self.assertIsInstance(out, py_utils.NestedMap)
    self.assertIsInstance(out.ids, py_utils.NestedMap)
    self.assertEqual(out.w.dtype.name, 'float32')
    self.assertEqual(out.ids.x.dtype.name, 'int32')
    self.assertEqual(out.big.dtype.name, 'int64')
    np.testing.assert_array_equal(out.w.numpy(), [[1.5, -2.0]])
    np.testing.assert_array_equal(out.big.numpy(), [2**40])

  def test_unsupported_dtype_is_named(self):
    with self.assertRaisesRegex(ValueError, 'float16'):
      test_utils.to_tf_nmap({'h': np.ones(2, np.float16)})


class TestCaseRngTest(test_utils.TestCase):

  def test_pax_rng_is_seeded_by_the_test_name(self):
    want = np.random.RandomState(
        zlib.adler32(b'test_pax_rng_is_seeded_by_the_test_name')).normal(
            size=3)
    np.testing.assert_array_equal(self.rng().normal(size=3), want)
    self.assertIs(self.rng(), self.rng())

  def test_np_rng_is_a_fixed_generator(self):
    want = np.random.default_rng(12345).integers(0, 100, size=4)
    np.testing.assert_array_equal(self.np_rng.integers(0, 100, size=4), want)


if __name__ == '__main__':
  absltest.main()
