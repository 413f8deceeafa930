"""Quantized conformer: serving the materialized int weights gives what fake
quant trained; 8 bits stay close to the float conformer; the quantized
attention keeps the float layer's left/right context."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import conformers
from praxis.layers.quantization import conformers as qconformers
from praxis.layers.quantization import quantization_hparams as qh

instantiate = base_layer.instantiate
QType = qh.QuantizationType
QMode = qh.QuantizationMode


def _conformer(qtype=None, mode=None, bits=8, act_bits=None):
  p = pax_fiddle.Config(conformers.Conformer, name='c', input_dims=8,
                        model_dims=8, kernel_size=3, atten_num_heads=2,
                        ffn_dim_multiplier=2)
  if qtype is not None:
    act = None if act_bits is None else qh.ActQuantizationParams(
        precision=act_bits)
    qconformers.quantize_conformer_layer_weights(
        p, qtype, mode, qh.WeightQuantizationParams(precision=bits), act)
  return instantiate(p)


def _inputs():
  rng = np.random.default_rng(7)
  x = rng.normal(size=(2, 6, 8)).astype(np.float32)
  paddings = np.zeros((2, 6), np.float32)
  paddings[1, 4:] = 1.0
  return x, paddings


class QuantizedConformerTest(test_utils.TestCase):

  @parameterized.parameters(QType.FQ, QType.AQT)
  def test_materialize_then_inference_equals_training(self, qtype):
    x, paddings = _inputs()
    train = _conformer(qtype, QMode.TRAINING)
    mat = _conformer(qtype, QMode.MATERIALIZE)
    serve = _conformer(qtype, QMode.INFERENCE)
    with base_layer.JaxContext.new_context():
      float_vars = train.init(jax.random.PRNGKey(1), x, paddings)
      expected = train.apply(float_vars, x, paddings)
      int_vars = mat.apply(float_vars, method=mat.quantize_weight)
      served = serve.apply(int_vars, x, paddings)
      serve_shapes = jax.eval_shape(
          lambda: serve.init(jax.random.PRNGKey(1), x, paddings))
    self.assertEqual(
        jax.tree.map(lambda a: (a.shape, a.dtype), int_vars),
        jax.tree.map(lambda a: (a.shape, a.dtype), serve_shapes))
    params = int_vars['params']
    for w in (params['fflayer_start']['ffn_layer1']['linear']['w'],
              params['lconv']['linear_end']['linear']['w'],
              params['trans_atten']['self_atten']['query']['w']):
      self.assertEqual(w.dtype, jnp.int8)
    # The depthwise conv stays float, as in Pax.
    self.assertEqual(
        params['lconv']['depthwise_conv1d']['w'].dtype, jnp.float32)
    self.assertAllClose(served, expected, atol=2e-5, rtol=1e-5)

  def test_eight_bits_close_to_float(self):
    x, paddings = _inputs()
    float_layer = _conformer()
    quant = _conformer(QType.AQT, QMode.TRAINING, bits=8, act_bits=8)
    coarse = _conformer(QType.AQT, QMode.TRAINING, bits=2, act_bits=2)
    self.assertIs(
        quant.trans_atten_tpl.self_atten_tpl.cls,
        qconformers.DotProductAttentionWithContext)
    with base_layer.JaxContext.new_context():
      variables = float_layer.init(jax.random.PRNGKey(2), x, paddings)
      want = np.asarray(float_layer.apply(variables, x, paddings))
      got = np.asarray(quant.apply(variables, x, paddings))
      bad = np.asarray(coarse.apply(variables, x, paddings))
    err = np.abs(got - want).max() / np.abs(want).max()
    self.assertLess(err, 3e-2)
    self.assertGreater(err, 0.0)  # It did quantize.
    # 2 bits are far worse: the 8-bit closeness is not an accident.
    self.assertGreater(np.abs(bad - want).max() / np.abs(want).max(), 5 * err)

  def test_attention_keeps_context(self):
    p = pax_fiddle.Config(
        qconformers.DotProductAttentionWithContext, name='a', input_dim=8,
        hidden_dim=8, num_heads=2, left_context=2, right_context=0,
        quantization=qh.QuantizationParams(
            quantization_type=QType.AQT, mode=QMode.TRAINING,
            act_params=qh.ActQuantizationParams(precision=8)))
    layer = instantiate(p)
    rng = np.random.default_rng(3)
    q = rng.normal(size=(1, 5, 8)).astype(np.float32)
    kv = rng.normal(size=(1, 5, 8)).astype(np.float32)
    mask = np.zeros((1, 1, 1, 5), np.float32)
    kv2 = kv.copy()
    kv2[:, 4] += 3.0  # Only the last query sees position 4.
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(0), q, kv, kv, mask)
      out1, probs = layer.apply(variables, q, kv, kv, mask)
      out2, _ = layer.apply(variables, q, kv2, kv2, mask)
    # Query t sees keys t-1 and t only (left context 2 counts itself).
    seen = np.asarray(probs[0, 0]) > 0
    want = np.array([[j in (t - 1, t) for j in range(5)] for t in range(5)])
    np.testing.assert_array_equal(seen, want)
    # AQT scales are per tensor, so an unseen key can only move the others
    # through the quantization scale; the seen one moves the output a lot.
    self.assertLess(np.abs(out2 - out1)[0, :4].max(), 0.05)
    self.assertGreater(np.abs(out2 - out1)[0, 4].max(), 0.5)

  def test_rejects_non_conformer(self):
    with self.assertRaisesRegex(ValueError, 'conformer_tpl'):
      qconformers.quantize_conformer_layer_weights(
          pax_fiddle.Config(conformers.DotProductAttentionWithContext),
          QType.FQ, QMode.TRAINING, qh.WeightQuantizationParams())


if __name__ == '__main__':
  absltest.main()
