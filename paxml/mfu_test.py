"""Tests of the MFU helpers."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import mfu

P = jax.sharding.PartitionSpec


class MfuTest(absltest.TestCase):

  def test_peaks(self):
    self.assertEqual(mfu.peak_flops_per_device('NVIDIA H100 80GB HBM3'),
                     989e12)
    self.assertEqual(mfu.peak_flops_per_device('TPU v5 lite'), 197e12)
    self.assertEqual(mfu.peak_flops_per_device('TPU v5p'), 459e12)
    self.assertIsNone(mfu.peak_flops_per_device('cpu'))

  def test_xla_flops_of_a_matmul(self):
    a = jnp.ones((64, 32))
    b = jnp.ones((32, 16))
    lowered = jax.jit(jnp.matmul).lower(a, b)
    # A [64, 32] x [32, 16] matmul is 2 * 64 * 32 * 16 FLOPs.
    self.assertEqual(mfu.xla_flops(lowered), 2 * 64 * 32 * 16)
    self.assertEqual(mfu.xla_flops(lowered.compile()), 2 * 64 * 32 * 16)
    self.assertIsNone(mfu.xla_flops(object()))  # No cost analysis: None.

  def test_lowered_count_is_the_whole_step_compiled_one_devices_share(self):
    devices = jax.devices()
    if len(devices) < 2:
      self.skipTest('needs several devices')
    mesh = jax.sharding.Mesh(np.array(devices), ('data',))
    a = jax.device_put(jnp.ones((8 * len(devices), 32)),
                       jax.sharding.NamedSharding(mesh, P('data')))
    lowered = jax.jit(jnp.matmul).lower(a, jnp.ones((32, 16)))
    whole = 2 * a.shape[0] * 32 * 16
    self.assertAlmostEqual(mfu.xla_flops(lowered) / whole, 1.0, delta=1e-3)
    self.assertEqual(mfu.xla_flops(lowered.compile()), whole / len(devices))

  def test_mfu(self):
    # 1e12 FLOPs per step at 100 steps/sec on 2 A100s (312 TFLOP/s each).
    self.assertAlmostEqual(mfu.mfu(1e12, 100.0, 2, 'NVIDIA A100-SXM4-40GB'),
                           1e14 / 624e12)
    self.assertIsNone(mfu.mfu(1e12, 100.0, 2, 'cpu'))


if __name__ == '__main__':
  absltest.main()
