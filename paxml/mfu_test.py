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

  def test_step_flops_counts_every_scan_iteration(self):
    m, k = 16, 32  # [m, k] x [k, k] matmuls: 2 m k k FLOPs each.
    matmul = 2 * m * k * k
    x = jnp.ones((m, k))

    def layers(x, w):  # One matmul per layer, in a scan.
      return jax.lax.scan(lambda h, w: (h @ w, None), x, w)[0]

    def blocks(x, w):  # A scan of 2 blocks, each a scan of 3 layers.
      return jax.lax.scan(lambda h, w: (layers(h, w), None), x, w)[0]

    for fn, w, matmuls in ((layers, jnp.ones((5, k, k)), 5),
                           (blocks, jnp.ones((2, 3, k, k)), 6)):
      traced = jax.jit(fn).trace(x, w)
      once = mfu.xla_flops(traced.lower())
      self.assertLess(once, 2 * matmul)  # XLA: each body once.
      # The loops' counters add a few FLOPs per iteration.
      self.assertAlmostEqual(mfu.step_flops(traced), matmuls * matmul,
                             delta=4 * matmuls)

    # Unrolled by k, the loop holds k bodies (and the remainder's apart).
    for unroll in (2, 3, 5, True):
      fn = lambda x, w, u=unroll: jax.lax.scan(
          lambda h, w: (h @ w, None), x, w, unroll=u)[0]
      traced = jax.jit(fn).trace(x, jnp.ones((5, k, k)))
      self.assertAlmostEqual(mfu.step_flops(traced), 5 * matmul, delta=20)

    # Backward: per layer, the forward matmul and two more (for the weight
    # and for the input), in a second (reversed) scan.
    loss = lambda w, x: jnp.sum(layers(x, w))
    traced = jax.jit(jax.grad(loss)).trace(jnp.ones((5, k, k)), x)
    self.assertAlmostEqual(mfu.step_flops(traced) / (15 * matmul), 1.0,
                           delta=0.02)

  def test_mfu(self):
    # 1e12 FLOPs per step at 100 steps/sec on 2 A100s (312 TFLOP/s each).
    self.assertAlmostEqual(mfu.mfu(1e12, 100.0, 2, 'NVIDIA A100-SXM4-40GB'),
                           1e14 / 624e12)
    self.assertIsNone(mfu.mfu(1e12, 100.0, 2, 'cpu'))


if __name__ == '__main__':
  absltest.main()
