"""Tests of the MFU helpers."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
from paxml import mfu


class MfuTest(absltest.TestCase):

  def test_peaks(self):
    self.assertEqual(mfu.peak_flops_per_device('NVIDIA H100 80GB HBM3'),
                     989e12)
    self.assertEqual(mfu.peak_flops_per_device('TPU v5 lite'), 197e12)
    self.assertEqual(mfu.peak_flops_per_device('TPU v5p'), 459e12)
    self.assertIsNone(mfu.peak_flops_per_device('cpu'))

  def test_compiled_flops_of_a_matmul(self):
    a = jnp.ones((64, 32))
    b = jnp.ones((32, 16))
    compiled = jax.jit(jnp.matmul).lower(a, b).compile()
    # A [64, 32] x [32, 16] matmul is 2 * 64 * 32 * 16 FLOPs.
    self.assertEqual(mfu.compiled_flops(compiled), 2 * 64 * 32 * 16)

  def test_mfu(self):
    # 1e12 FLOPs per step at 100 steps/sec on 2 A100s (312 TFLOP/s each).
    self.assertAlmostEqual(mfu.mfu(1e12, 100.0, 2, 'NVIDIA A100-SXM4-40GB'),
                           1e14 / 624e12)
    self.assertIsNone(mfu.mfu(1e12, 100.0, 2, 'cpu'))


if __name__ == '__main__':
  absltest.main()
