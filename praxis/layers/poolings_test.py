"""Tests of praxis.layers.poolings against numpy loops."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import poolings


def _make(cls, **kwargs):
  return base_layer.instantiate(pax_fiddle.Config(cls, name='pool', **kwargs))


def _apply(layer, *inputs, **kwargs):
  """`layer.apply({}, ...)` under one `jax.jit`; keyword arguments traced."""
  return jax.jit(lambda x, kw: layer.apply({}, *x, **kw))(inputs, kwargs)


def _windows(size, k, s, padding):
  """[(start, end)] of in-bounds window extents along one axis."""
  if padding == 'VALID':
    n = (size - k) // s + 1
    lo = 0
  else:
    n = math.ceil(size / s)
    lo = max((n - 1) * s + k - size, 0) // 2
  return [(max(i * s - lo, 0), min(i * s - lo + k, size)) for i in range(n)]


def _np_pool(x, valid_rows, window, stride, kind, padding):
  """x [B, H, W, C]; valid_rows [B, H] bool (True = counts)."""
  b, h, w, c = x.shape
  rows = _windows(h, window[0], stride[0], padding)
  cols = _windows(w, window[1], stride[1], padding)
  out = np.zeros((b, len(rows), len(cols), c), np.float32)
  for n in range(b):
    for i, (r0, r1) in enumerate(rows):
      keep = [r for r in range(r0, r1) if valid_rows[n, r]]
      for j, (c0, c1) in enumerate(cols):
        if not keep:
          continue
        patch = x[n, keep, c0:c1].reshape(-1, c)
        out[n, i, j] = patch.max(0) if kind == 'MAX' else patch.mean(0)
  return out


class PoolingTest(test_utils.TestCase):

  @parameterized.parameters(
      ('MAX', 'SAME', 2), ('AVG', 'SAME', 2), ('MAX', 'VALID', 1),
      ('AVG', 'VALID', 2), ('AVG', 'SAME', 1),
  )
  def test_matches_numpy(self, kind, padding, stride):
    x = self.np_rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    layer = _make(
        poolings.Pooling, window_shape=(3, 2), window_stride=(stride, stride),
        pooling_type=kind, padding=padding,
    )
    out, out_pad = _apply(layer, x)
    self.assertIsNone(out_pad)
    valid = np.ones((2, 5), bool)
    expected = _np_pool(x, valid, (3, 2), (stride, stride), kind, padding)
    self.assertAllClose(out, expected, atol=1e-5)

  @parameterized.parameters('MAX', 'AVG')
  def test_paddings_are_excluded(self, kind):
    x = self.np_rng.normal(size=(2, 6, 4, 2)).astype(np.float32)
    pad = np.zeros((2, 6), np.float32)
    pad[0, 4:] = 1.0
    pad[1, 1] = 1.0
    layer = _make(
        poolings.Pooling, window_shape=(2, 2), window_stride=(2, 1),
        pooling_type=kind,
    )
    out, out_pad = _apply(layer, x, pad)
    # Output row i covers input rows 2i, 2i + 1; it is padded if either is.
    expected_pad = np.maximum(pad[:, 0::2], pad[:, 1::2])
    self.assertAllClose(out_pad, expected_pad)
    expected = _np_pool(x, pad == 0, (2, 2), (2, 1), kind, 'SAME')
    expected *= (1 - expected_pad)[:, :, None, None]
    self.assertAllClose(out, expected, atol=1e-5)
    self.assertTrue(np.isfinite(np.asarray(out)).all())

  def test_bad_config_names_field(self):
    layer = _make(poolings.Pooling, window_shape=(2, 2), window_stride=(0, 1))
    with self.assertRaisesRegex(ValueError, '`window_stride`'):
      _apply(layer, np.ones((1, 2, 2, 1), np.float32))
    layer = _make(
        poolings.Pooling, window_shape=(2, 2), window_stride=(1, 1),
        pooling_type='MIN',
    )
    with self.assertRaisesRegex(ValueError, '`pooling_type`'):
      _apply(layer, np.ones((1, 2, 2, 1), np.float32))


class PoolingGradientTest(test_utils.TestCase):

  @parameterized.parameters('MAX', 'AVG')
  def test_jit_grad(self, kind):
    # Each output of a 2x2 stride-2 pool of a 4x4 image sees 4 inputs: MAX
    # routes the gradient to the largest one, AVG spreads 1/4 to each.
    layer = _make(poolings.Pooling, window_shape=(2, 2), window_stride=(2, 2),
                  pooling_type=kind, padding='VALID')
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)

    def total(x):
      return layer.apply({}, x)[0].sum()

    grad = np.asarray(jax.jit(jax.grad(total))(x))[0, :, :, 0]
    if kind == 'AVG':
      expected = np.full((4, 4), 0.25, np.float32)
    else:
      expected = np.zeros((4, 4), np.float32)
      expected[1::2, 1::2] = 1.0  # The bottom-right of each window is max.
    np.testing.assert_allclose(grad, expected)


class GlobalPoolingTest(test_utils.TestCase):

  @parameterized.parameters(('AVG', False), ('MAX', True))
  def test_matches_numpy(self, kind, keepdims):
    x = self.np_rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    layer = _make(
        poolings.GlobalPooling, pooling_type=kind, pooling_dims=[1, 2],
        keepdims=keepdims,
    )
    reduce = np.mean if kind == 'AVG' else np.max
    self.assertAllClose(
        _apply(layer, x), reduce(x, axis=(1, 2), keepdims=keepdims),
        atol=1e-6,
    )

  @parameterized.parameters('AVG', 'MAX')
  def test_with_paddings(self, kind):
    x = self.np_rng.normal(size=(2, 5, 3)).astype(np.float32)
    pad = np.zeros((2, 5, 1), np.float32)
    pad[0, 3:] = 1.0
    layer = _make(poolings.GlobalPooling, pooling_type=kind, pooling_dims=[1])
    out = _apply(layer, x, compatible_paddings=pad)
    reduce = np.mean if kind == 'AVG' else np.max
    expected = np.stack([reduce(x[0, :3], 0), reduce(x[1], 0)])
    self.assertAllClose(out, expected, atol=1e-5)

  def test_missing_pooling_dims_fails(self):
    layer = _make(poolings.GlobalPooling)
    with self.assertRaisesRegex(ValueError, '`pooling_dims`'):
      _apply(layer, np.ones((2, 2), np.float32))


class Pooling1DTest(test_utils.TestCase):

  @parameterized.parameters('AVG', 'MAX')
  def test_matches_numpy(self, kind):
    x = self.np_rng.normal(size=(2, 7, 3)).astype(np.float32)
    pad = np.zeros((2, 7), np.float32)
    pad[1, 4:] = 1.0
    layer = _make(poolings.Pooling1D, stride=2, window=3, pooling_type=kind)
    out, out_pad = _apply(layer, x, pad)
    self.assertAllClose(out_pad, pad[:, ::2])
    # SAME: 4 outputs, total padding (4 - 1) * 2 + 3 - 7 = 2, one each side.
    expected = np.zeros((2, 4, 3), np.float32)
    for n in range(2):
      for i in range(4):
        steps = [t for t in range(2 * i - 1, 2 * i + 2)
                 if 0 <= t < 7 and pad[n, t] == 0]
        if steps:
          reduce = np.mean if kind == 'AVG' else np.max
          expected[n, i] = reduce(x[n, steps], 0)
    if kind == 'MAX':
      expected *= (1 - pad[:, ::2])[..., None]
    self.assertAllClose(out, expected, atol=1e-5)

  def test_window_one_strides(self):
    x = self.np_rng.normal(size=(1, 5, 2)).astype(np.float32)
    layer = _make(poolings.Pooling1D, stride=2, window=1)
    out, out_pad = _apply(layer, x)
    self.assertArraysEqual(out, x[:, ::2])
    self.assertIsNone(out_pad)


if __name__ == '__main__':
  absltest.main()
