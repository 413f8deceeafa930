"""Tests of the quantized OneHeadedAttentionProjection against numpy."""

from absl.testing import absltest
import jax
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.quantization import multi_query_attention as qmqa
from praxis.layers.quantization import quantization_hparams as qh


def config(mode, input_dim=6, **weight_kw):
  return pax_fiddle.Config(
      qmqa.OneHeadedAttentionProjection, name='p', input_dim=input_dim,
      output_dim=3,
      quantization=qh.QuantizationParams(
          quantization_type=qh.QuantizationType.PTQ, mode=mode,
          weight_params=qh.WeightQuantizationParams(**weight_kw)))


class OneHeadedProjectionTest(test_utils.TestCase):

  def test_quantize_then_serve(self):
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    train = base_layer.instantiate(config(qh.QuantizationMode.TRAINING))
    variables = train.init(jax.random.PRNGKey(0), x)
    w = np.asarray(variables['params']['w'])
    b = np.random.default_rng(1).normal(size=3).astype(np.float32)
    variables['params']['b'] = b
    out = train.apply(variables, x)
    self.assertAllClose(out, x @ w + b, atol=1e-5)  # PTQ training: float.

    q = train.apply(variables, method=train.quantize_weight)['params']
    # Per output channel: scale = max |w| over D / 127.
    want_scale = np.abs(w).max(0) / 127.0
    self.assertAllClose(q['w_quantized_scale'], want_scale, rtol=1e-5)
    self.assertEqual(q['w'].dtype, np.int8)
    np.testing.assert_allclose(q['w'], np.round(w / want_scale), atol=1)

    serve = base_layer.instantiate(config(qh.QuantizationMode.INFERENCE))
    served = serve.apply({'params': dict(q, b=b)}, x)
    self.assertAllClose(served, x @ w + b, atol=0.05)

  def test_int4_packed_shape(self):
    layer = base_layer.instantiate(config(
        qh.QuantizationMode.INFERENCE, input_dim=16, precision=4,
        use_int4_packed_weights=True))
    v = layer.init(jax.random.PRNGKey(0), np.zeros((1, 16), np.float32))
    # Eight int4 values per int32 container, packed along D.
    self.assertEqual(v['params']['w'].shape, (2, 3))

  def test_bad_input(self):
    layer = base_layer.instantiate(config(qh.QuantizationMode.TRAINING))
    with self.assertRaisesRegex(ValueError, 'input_dim=6'):
      layer.init(jax.random.PRNGKey(0), np.zeros((1, 5), np.float32))


if __name__ == '__main__':
  absltest.main()
