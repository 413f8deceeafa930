"""Tests of praxis.layers.convolutions against numpy loops."""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import convolutions

NON_TRAINABLE = base_layer.NON_TRAINABLE


def _make(cfg_or_cls, **kwargs):
  if isinstance(cfg_or_cls, pax_fiddle.Config):
    cfg = cfg_or_cls.set(name='conv', **kwargs)
  else:
    cfg = pax_fiddle.Config(cfg_or_cls, name='conv', **kwargs)
  return base_layer.instantiate(cfg)


def _jit_apply(layer, variables, *inputs, **kwargs):
  """`layer.apply` compiled once (faster than op-by-op for deep layers)."""
  return jax.jit(functools.partial(layer.apply, **kwargs))(variables, *inputs)


def _shapes(layer, *inputs):
  """{collection: {name: shape}} of the layer's variables (no compute)."""
  meta = layer.abstract_init_with_metadata(*inputs)
  return jax.tree.map(
      lambda hp: tuple(hp.shape), meta,
      is_leaf=lambda x: isinstance(x, base_layer.WeightHParams),
  )


def _random_variables(rng, layer, *inputs):
  """Variables of the layer's shapes: normal params, positive statistics."""
  shapes = _shapes(layer, *inputs)
  variables = {'params': jax.tree.map(
      lambda s: rng.normal(size=s).astype(np.float32), shapes['params'],
      is_leaf=lambda x: isinstance(x, tuple))}
  if NON_TRAINABLE in shapes:
    variables[NON_TRAINABLE] = jax.tree.map(
        lambda s: rng.uniform(0.5, 1.5, size=s).astype(np.float32),
        shapes[NON_TRAINABLE], is_leaf=lambda x: isinstance(x, tuple))
  return variables


def _np_conv2d(x, w, stride, dilation, pads):
  """Direct NHWC / HWIO convolution; pads = ((top, bottom), (left, right))."""
  b, _, _, cin = x.shape
  kh, kw, cin_g, cout = w.shape
  groups = cin // cin_g
  xp = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
  out_h = (xp.shape[1] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
  out_w = (xp.shape[2] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
  out = np.zeros((b, out_h, out_w, cout), np.float64)
  for o in range(cout):
    g = o // (cout // groups)
    for i in range(out_h):
      for j in range(out_w):
        for di in range(kh):
          for dj in range(kw):
            r = i * stride[0] + di * dilation[0]
            c = j * stride[1] + dj * dilation[1]
            patch = xp[:, r, c, g * cin_g:(g + 1) * cin_g]
            out[:, i, j, o] += patch @ w[di, dj, :, o]
  return out


def _even_pads(k, d):
  total = d * (k - 1)
  return (total // 2, total - total // 2)


def _tf_same_pads(size, k, s, d):
  total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
  return (total // 2, total - total // 2)


class Conv2DTest(test_utils.TestCase):

  @parameterized.parameters(
      ('SAME', (1, 1), (1, 1)),
      ('SAME', (2, 2), (1, 1)),
      ('SAME', (1, 1), (2, 1)),
      ('VALID', (2, 1), (1, 1)),
  )
  def test_matches_numpy(self, padding, stride, dilation):
    x = self.np_rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    layer = _make(
        convolutions.Conv2D, filter_shape=(3, 2, 3, 4), filter_stride=stride,
        dilations=dilation, padding=padding, bias=True,
    )
    self.assertEqual(
        _shapes(layer, x)['params'], {'w': (3, 2, 3, 4), 'b': (4,)}
    )
    w = self.np_rng.normal(size=(3, 2, 3, 4)).astype(np.float32)
    b = self.np_rng.normal(size=4).astype(np.float32)
    y = layer.apply({'params': {'w': w, 'b': b}}, x)
    if padding == 'SAME':
      pads = (_even_pads(3, dilation[0]), _even_pads(2, dilation[1]))
    else:
      pads = ((0, 0), (0, 0))
    expected = _np_conv2d(x, w, stride, dilation, pads) + b
    self.assertAllClose(y, expected, atol=1e-4)

  def test_tf_equivalent_same_with_stride(self):
    x = self.np_rng.normal(size=(1, 6, 5, 2)).astype(np.float32)
    layer = _make(
        convolutions.Conv2D, filter_shape=(3, 3, 2, 2), filter_stride=(2, 2),
        tf_equivalent_padding=True,
    )
    w = self.np_rng.normal(size=(3, 3, 2, 2)).astype(np.float32)
    y = layer.apply({'params': {'w': w}}, x)
    pads = (_tf_same_pads(6, 3, 2, 1), _tf_same_pads(5, 3, 2, 1))
    self.assertAllClose(y, _np_conv2d(x, w, (2, 2), (1, 1), pads), atol=1e-4)

  def test_causal_pads_top_only(self):
    x = self.np_rng.normal(size=(1, 5, 4, 1)).astype(np.float32)
    layer = _make(
        convolutions.Conv2D, filter_shape=(3, 3, 1, 2), filter_stride=(1, 1),
        tf_equivalent_padding=True, is_causal=True,
    )
    w = self.np_rng.normal(size=(3, 3, 1, 2)).astype(np.float32)
    y = layer.apply({'params': {'w': w}}, x)
    expected = _np_conv2d(x, w, (1, 1), (1, 1), ((2, 0), (1, 1)))
    self.assertAllClose(y, expected, atol=1e-4)
    # Row t does not depend on later rows.
    x2 = x.copy()
    x2[:, 3:] += 10.0
    y2 = layer.apply({'params': {'w': w}}, x2)
    self.assertAllClose(y2[:, :3], y[:, :3], atol=1e-5)

  def test_depthwise(self):
    cfg = convolutions.Conv2D.HParamsDepthwise(
        kernel_shape=(3, 3), in_channels=3, channel_multipliers=2,
        filter_stride=(1, 1),
    )
    self.assertEqual(tuple(cfg.filter_shape), (3, 3, 1, 6))
    layer = _make(cfg)
    x = self.np_rng.normal(size=(1, 4, 4, 3)).astype(np.float32)
    w = self.np_rng.normal(size=(3, 3, 1, 6)).astype(np.float32)
    y = layer.apply({'params': {'w': w}}, x)
    expected = _np_conv2d(x, w, (1, 1), (1, 1), ((1, 1), (1, 1)))
    self.assertAllClose(y, expected, atol=1e-4)

  def test_bad_configs_name_the_field(self):
    x = np.ones((1, 4, 4, 1), np.float32)
    bad = [
        ({'filter_shape': (3, 3, 1), 'filter_stride': (1, 1)},
         'filter_shape'),
        ({'filter_shape': (3, 3, 1, 1), 'filter_stride': (0, 1)},
         'filter_stride'),
        ({'filter_shape': (3, 3, 1, 1), 'filter_stride': (1, 1),
          'is_causal': True}, 'tf_equivalent_padding'),
    ]
    for kwargs, field in bad:
      with self.assertRaisesRegex(ValueError, f'Conv2D .*{field}'):
        _shapes(_make(convolutions.Conv2D, **kwargs), x)

  def test_channel_mismatch_fails(self):
    layer = _make(
        convolutions.Conv2D, filter_shape=(1, 1, 2, 4), filter_stride=(1, 1)
    )
    with self.assertRaisesRegex(ValueError, 'multiple of the filter input'):
      _shapes(layer, np.ones((1, 2, 2, 3), np.float32))


class Conv3DTest(test_utils.TestCase):

  def test_depth_one_time_matches_conv2d(self):
    x = self.np_rng.normal(size=(1, 1, 4, 4, 2)).astype(np.float32)
    layer = _make(
        convolutions.Conv3D, filter_shape=(1, 3, 3, 2, 3),
        filter_stride=(1, 1, 1),
    )
    w = self.np_rng.normal(size=(1, 3, 3, 2, 3)).astype(np.float32)
    y = layer.apply({'params': {'w': w}}, x)
    expected = _np_conv2d(x[:, 0], w[0], (1, 1), (1, 1), ((1, 1), (1, 1)))
    self.assertAllClose(y[:, 0], expected, atol=1e-4)


class ConvBNActTest(test_utils.TestCase):

  def test_conv_batch_norm_relu(self):
    x = self.np_rng.normal(size=(2, 4, 4, 2)).astype(np.float32)
    layer = _make(
        convolutions.ConvBNAct, filter_shape=(3, 3, 2, 3),
        filter_stride=(1, 1),
    )
    self.assertEqual(
        _shapes(layer, x)[NON_TRAINABLE],
        {'bn': {'moving_mean': (3,), 'moving_variance': (3,)}},
    )
    variables = _random_variables(self.np_rng, layer, x)
    params = variables['params']
    y, _ = _jit_apply(layer, variables, x, mutable=[NON_TRAINABLE])
    conv = _np_conv2d(x, params['w'], (1, 1), (1, 1), ((1, 1), (1, 1)))
    mean, var = conv.mean((0, 1, 2)), conv.var((0, 1, 2))
    bn = params['bn']
    normed = (conv - mean) / np.sqrt(var + 1e-3) * (1 + bn['gamma'])
    expected = np.maximum(normed + bn['beta'], 0)
    self.assertAllClose(y, expected, atol=1e-4)

  @parameterized.parameters('SAME', 'VALID')
  def test_with_padding_strided(self, padding):
    x = self.np_rng.normal(size=(2, 6, 3, 1)).astype(np.float32)
    pad = np.zeros((2, 6), np.float32)
    pad[1, 3:] = 1.0
    layer = _make(
        convolutions.ConvBNActWithPadding, filter_shape=(2, 1, 1, 2),
        filter_stride=(2, 1), padding=padding, batch_norm_tpl=None,
    )
    variables = _random_variables(self.np_rng, layer, x, pad)
    w = variables['params']['w']
    y, out_pad = layer.apply(variables, x, pad)
    if padding == 'SAME':
      # Output step i starts at input step 2i (even split of 1 pad row).
      expected_pad = pad[:, ::2]
      pads = ((0, 1), (0, 0))
    else:
      # Window [2i, 2i + 1] is padded only if both steps are.
      expected_pad = np.minimum(pad[:, 0::2], pad[:, 1::2])
      pads = ((0, 0), (0, 0))
    self.assertAllClose(out_pad, expected_pad)
    masked = x * (1 - pad)[:, :, None, None]
    conv = _np_conv2d(masked, w, (2, 1), (1, 1), pads)
    expected = np.maximum(conv, 0) * (1 - expected_pad)[:, :, None, None]
    self.assertAllClose(y, expected, atol=1e-5)


def _np_depthwise(x, w, dilation, causal):
  """x [B, T, C], w [K, 1, C * M] -> [B, T, C * M]."""
  k, _, cm = w.shape
  m = cm // x.shape[2]
  total = dilation * (k - 1)
  lo = total if causal else total // 2
  xp = np.pad(x, ((0, 0), (lo, total - lo), (0, 0)))
  out = np.zeros(x.shape[:2] + (cm,), np.float64)
  for o in range(cm):
    for t in range(x.shape[1]):
      for j in range(k):
        out[:, t, o] += xp[:, t + j * dilation, o // m] * w[j, 0, o]
  return out


class DepthwiseConv1DTest(test_utils.TestCase):

  @parameterized.parameters((False, 1), (True, 2))
  def test_matches_numpy(self, causal, dilation):
    x = self.np_rng.normal(size=(2, 6, 3)).astype(np.float32)
    pad = np.zeros((2, 6), np.float32)
    pad[0, 4:] = 1.0
    layer = _make(
        convolutions.DepthwiseConv1D, filter_shape=(3, 3, 2), is_causal=causal,
        rhs_dilation_rate=dilation, bias=True,
    )
    self.assertEqual(
        _shapes(layer, x, pad)['params'], {'w': (3, 1, 6), 'b': (6,)}
    )
    w = self.np_rng.normal(size=(3, 1, 6)).astype(np.float32)
    b = self.np_rng.normal(size=6).astype(np.float32)
    y = layer.apply({'params': {'w': w, 'b': b}}, x, pad)
    masked = x * (1 - pad)[..., None]
    expected = _np_depthwise(masked, w, dilation, causal) + b
    self.assertAllClose(y, expected, atol=1e-5)

  def test_2d_weight_shape(self):
    layer = _make(
        convolutions.DepthwiseConv1D, filter_shape=(3, 2, 1),
        use_2d_conv_weight_shape=True,
    )
    x = self.np_rng.normal(size=(1, 4, 2)).astype(np.float32)
    variables = _random_variables(self.np_rng, layer, x)
    w = variables['params']['w']
    self.assertEqual(w.shape, (3, 1, 2, 1))
    y = layer.apply(variables, x)
    self.assertAllClose(y, _np_depthwise(x, w[..., 0], 1, False), atol=1e-5)


class LightConv1DTest(test_utils.TestCase):

  def test_matches_numpy(self):
    d = 4
    x = self.np_rng.normal(size=(2, 5, d)).astype(np.float32)
    pad = np.zeros((2, 5), np.float32)
    pad[1, 3:] = 1.0
    layer = _make(convolutions.LightConv1D, input_dims=d, kernel_size=3)
    variables = _random_variables(self.np_rng, layer, x, pad)
    params = variables['params']
    self.assertEqual(params['depthwise_conv1d']['w'].shape, (3, 1, d))
    y, _ = _jit_apply(layer, variables, x, pad, mutable=[NON_TRAINABLE])

    ln = params['ln']
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(
        x.var(-1, keepdims=True) + 1e-6
    ) * (1 + ln['scale']) + ln['bias']
    def lin(v, name):
      return v @ params[name]['linear']['w'] + params[name]['bias']['b']
    h = lin(h, 'linear_start_act') / (1 + np.exp(-lin(h, 'linear_start_gated')))
    h = _np_depthwise(
        h * (1 - pad)[..., None], params['depthwise_conv1d']['w'], 1, False
    )
    valid = h[pad == 0]
    bn = params['conv_norm']
    h = (h - valid.mean(0)) / np.sqrt(valid.var(0) + 1e-3)
    h = (h * (1 + bn['gamma']) + bn['beta']) * (1 - pad)[..., None]
    h = h / (1 + np.exp(-h))
    expected = lin(h, 'linear_end') + x
    self.assertAllClose(y, expected, atol=1e-4)


if __name__ == '__main__':
  absltest.main()
