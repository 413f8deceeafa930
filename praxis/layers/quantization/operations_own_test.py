"""Quantize/dequantize arithmetic checked against numpy written here."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import test_utils
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils


def _np_symmetric(t, axis, bits):
  hi = 2 ** (bits - 1) - 1
  scale = np.max(np.abs(t), axis=axis, keepdims=True) / hi
  q = np.clip(np.round(t / scale), -hi - 1, hi)
  return q, scale


def _np_asymmetric(t, axis, bits):
  lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
  t_min = np.min(t, axis=axis, keepdims=True)
  t_max = np.max(t, axis=axis, keepdims=True)
  scale = (t_max - t_min) / (hi - lo)
  zp = lo - t_min / scale
  q = np.clip(np.round(t / scale + zp), lo, hi)
  return q, scale, zp * scale


class ReducePrecisionTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.t = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)

  @parameterized.parameters((8, [0]), (8, [1]), (4, [0]), (8, None))
  def test_symmetric_matches_numpy(self, bits, axis):
    q, s, zp = operations.reduce_precision(self.t, axis, bits=bits)
    q_np, s_np = _np_symmetric(self.t, None if axis is None else tuple(axis),
                               bits)
    self.assertIsNone(zp)
    self.assertEqual(q.dtype, jnp.int8)
    self.assertArraysEqual(np.asarray(q), q_np.astype(np.int8))
    self.assertAllClose(s, s_np)
    # The largest magnitude of each channel maps to the edge, +-(2**(b-1)-1).
    self.assertEqual(int(np.max(np.abs(np.asarray(q)))), 2 ** (bits - 1) - 1)

  @parameterized.parameters((8, [1]), (4, [0]), (8, None))
  def test_asymmetric_matches_numpy(self, bits, axis):
    q, s, zp = operations.reduce_precision(
        self.t, axis, bits=bits, use_symmetric=False
    )
    q_np, s_np, zp_np = _np_asymmetric(
        self.t, None if axis is None else tuple(axis), bits
    )
    self.assertArraysEqual(np.asarray(q), q_np.astype(np.int8))
    self.assertAllClose(s, s_np)
    self.assertAllClose(zp, zp_np, atol=1e-6)
    # Min and max land on the two edges of the integer range.
    self.assertEqual(int(np.min(np.asarray(q))), -(2 ** (bits - 1)))
    self.assertEqual(int(np.max(np.asarray(q))), 2 ** (bits - 1) - 1)
    # Dequantization error is at most half a step.
    deq = np.asarray(q) * np.asarray(s) - np.asarray(zp)
    self.assertLessEqual(np.max(np.abs(deq - self.t) - np.asarray(s) / 2),
                         1e-5)

  def test_rounding_and_clipping_at_the_edges(self):
    # Scale 1 (max |t| = 127): 2.5 -> 2 (half to even), -0.5 -> 0, 126.5 -> 126
    t = np.array([[2.5, -0.5, 126.5, 127.0, -127.0]], np.float32)
    q, s, _ = operations.reduce_precision(t, [1], bits=8)
    self.assertAllClose(s, [[1.0]])
    self.assertArraysEqual(np.asarray(q),
                           np.array([[2, 0, 126, 127, -127]], np.int8))
    # Clipping to half the range (percentile): values beyond saturate.
    q, s, _ = operations.reduce_precision(t, [1], bits=8, percentile=0.5)
    self.assertAllClose(s, [[0.5]])
    self.assertArraysEqual(np.asarray(q),
                           np.array([[5, -1, 127, 127, -128]], np.int8))

  def test_zero_channel_scale_is_one(self):
    t = np.zeros((2, 3), np.float32)
    q, s, _ = operations.reduce_precision(t, [0], bits=8)
    self.assertArraysEqual(np.asarray(s), np.ones((1, 3), np.float32))
    self.assertArraysEqual(np.asarray(q), np.zeros((2, 3), np.int8))

  def test_fakequant_is_dequantized_quantization_with_identity_grad(self):
    w = self.t
    fq = operations.fakequant_einsum('...y,yz->...z', w, bits=8)
    q_np, s_np = _np_symmetric(w, (0,), 8)
    self.assertAllClose(fq, q_np * s_np, atol=1e-6)
    grad = jax.grad(lambda x: jnp.sum(
        operations.fakequant_einsum('...y,yz->...z', x, bits=8)))(w)
    # Straight-through: 1 everywhere but at each channel's largest |w|,
    # through which the gradient of the scale also flows.
    edge = np.abs(w) == np.max(np.abs(w), axis=0, keepdims=True)
    self.assertAllClose(np.asarray(grad)[~edge], np.ones(np.sum(~edge)))

  def test_quantized_einsum_matches_float_math(self):
    x = np.random.default_rng(1).normal(size=(3, 6)).astype(np.float32)
    q, s, zp = operations.reduce_einsum_weight_precision(
        '...y,yz->...z', self.t, calculation_dtype=jnp.float32,
        use_symmetric=False,
    )
    out = operations.einsum('...y,yz->...z', x, q, s, zp)
    w_deq = np.asarray(q) * np.asarray(s) - np.asarray(zp)
    self.assertAllClose(out, x @ w_deq, atol=1e-5)

  def test_int_activation_einsum_uses_int_matmul(self):
    x = np.random.default_rng(2).normal(size=(3, 6)).astype(np.float32)
    qx, sx, _ = operations.reduce_einsum_activation_precision(
        '...y,yz->...z', x, per_channel=True
    )
    qw, sw, _ = operations.reduce_einsum_weight_precision(
        '...y,yz->...z', self.t, calculation_dtype=jnp.float32
    )
    out = operations.einsum('...y,yz->...z', qx.astype(jnp.int8), qw, sw,
                            scale_act=sx)
    expected = (np.asarray(qx, np.float64) @ np.asarray(qw, np.float64)
                ) * np.asarray(sx)[:, None] * np.asarray(sw)[None, :]
    self.assertAllClose(out, expected, atol=1e-5)


class PackingTest(test_utils.TestCase):

  @parameterized.parameters(jnp.int8, jnp.int32)
  def test_pack_matches_numpy_nibbles(self, container):
    x = np.array([[-8, 7], [3, -1], [0, 5], [-2, 1],
                  [4, -4], [6, -7], [1, 2], [-3, 0]], np.int8)
    packed = utils.pack_4bit(jnp.asarray(x), 0, container)
    per_word = 2 if container == jnp.int8 else 8
    bits = np.dtype(np.dtype(container).name).itemsize * 8
    for col in range(2):
      for w in range(x.shape[0] // per_word):
        word = 0
        for i in range(per_word):
          word |= (int(x[w * per_word + i, col]) & 0xF) << (4 * i)
        if word >= 2 ** (bits - 1):
          word -= 2**bits
        self.assertEqual(int(packed[w, col]), word)
    self.assertArraysEqual(
        np.asarray(utils.unpack_4bit(packed, 0, jnp.int8)), x
    )

  def test_pack_rejects_bad_shapes(self):
    with self.assertRaisesRegex(ValueError, 'divisible by 8'):
      utils.pack_4bit(jnp.zeros((6, 2), jnp.int8), 0, jnp.int32)


class BadInputTest(test_utils.TestCase):

  @parameterized.parameters(0, 33, 2.5)
  def test_weight_precision_out_of_range(self, bits):
    with self.assertRaisesRegex(ValueError, 'precision'):
      quantization_hparams.WeightQuantizationParams(precision=bits)

  def test_act_precision_out_of_range(self):
    with self.assertRaisesRegex(ValueError, 'ActQuantizationParams.precision'):
      quantization_hparams.ActQuantizationParams(precision=-1)

  def test_quant_method(self):
    with self.assertRaisesRegex(ValueError, 'quant_method'):
      quantization_hparams.WeightQuantizationParams(quant_method='round')

  def test_sub_channel_block_must_divide(self):
    with self.assertRaisesRegex(ValueError, 'block_size 5 must fully divide'):
      operations.get_sub_channel_shape([12, 4], 5, [0],
                                       error_on_misaligned_shape=True)


if __name__ == '__main__':
  absltest.main()
