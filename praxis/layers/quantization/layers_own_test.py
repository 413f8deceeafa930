"""Quantized layers: materialized int weights serve what fake quant trained.

For each layer: FQ TRAINING output on float weights == INFERENCE output on
the int weights that MATERIALIZE (`quantize_weight`) made from them.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import quantization
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import quantize

instantiate = base_layer.instantiate


def _quant(mode, qtype=qh.QuantizationType.FQ, bits=8, symmetric=True,
           act_bits=None):
  return qh.QuantizationParams(
      quantization_type=qtype, mode=mode,
      weight_params=qh.WeightQuantizationParams(
          precision=bits, use_symmetric=symmetric,
          use_int4_packed_weights=True),
      act_params=None if act_bits is None else qh.ActQuantizationParams(
          precision=act_bits, per_channel=False),
  )


_LAYERS = {
    'linear': (quantization.Linear, dict(input_dims=16, output_dims=8),
               (3, 16)),
    'einsum': (quantization.Einsum,
               dict(eqn='...d,dnh->...nh', w_shape=(16, 2, 4), use_bias=True),
               (2, 3, 16)),
    'proj': (quantization.AttentionProjection,
             dict(input_dim=16, num_heads=2, dim_per_head=4), (2, 3, 16)),
    'out_proj': (quantization.AttentionProjection,
                 dict(input_dim=16, num_heads=2, dim_per_head=8,
                      is_output_projection=True), (2, 3, 2, 8)),
    'qkv': (quantization.CombinedQKVProjectionLayer,
            dict(input_dim=16, num_heads=2, dim_per_head=4), (2, 3, 16)),
}


class MaterializeThenServeTest(test_utils.TestCase):

  def _run(self, name, bits, symmetric):
    cls, fields, shape = _LAYERS[name]
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    train = instantiate(pax_fiddle.Config(
        cls, name=name, quantization=_quant(qh.QuantizationMode.TRAINING,
                                            bits=bits, symmetric=symmetric),
        **fields))
    mat = instantiate(pax_fiddle.Config(
        cls, name=name, quantization=_quant(qh.QuantizationMode.MATERIALIZE,
                                            bits=bits, symmetric=symmetric),
        **fields))
    serve = instantiate(pax_fiddle.Config(
        cls, name=name, quantization=_quant(qh.QuantizationMode.INFERENCE,
                                            bits=bits, symmetric=symmetric),
        **fields))
    with base_layer.JaxContext.new_context():
      float_vars = train.init(jax.random.PRNGKey(1), x)
      if 'b' in float_vars['params']:
        float_vars['params']['b'] = jnp.full_like(float_vars['params']['b'],
                                                  0.25)
      expected = train.apply(float_vars, x)
      int_vars = mat.apply(float_vars, method=mat.quantize_weight)
      served = serve.apply(int_vars, x)
      serve_vars = serve.init(jax.random.PRNGKey(1), x)
    # The materialized tree is exactly what INFERENCE declares.
    self.assertEqual(
        jax.tree.map(lambda a: (a.shape, a.dtype), int_vars),
        jax.tree.map(lambda a: (a.shape, a.dtype), serve_vars),
    )
    return expected, served

  @parameterized.product(name=list(_LAYERS), symmetric=[True, False])
  def test_int8_equals_fake_quant(self, name, symmetric):
    expected, served = self._run(name, 8, symmetric)
    for e, s in zip(jax.tree.leaves(expected), jax.tree.leaves(served)):
      self.assertAllClose(e, s, atol=2e-5, rtol=1e-5)

  @parameterized.parameters('linear', 'proj')
  def test_int4_packed_equals_fake_quant(self, name):
    expected, served = self._run(name, 4, True)
    self.assertAllClose(expected, served, atol=2e-5, rtol=1e-5)

  def test_int8_weights_and_activations(self):
    x = np.random.default_rng(2).normal(size=(4, 16)).astype(np.float32)
    layers = {
        mode: instantiate(pax_fiddle.Config(
            quantization.Linear, name='l', input_dims=16, output_dims=8,
            quantization=_quant(mode, act_bits=8)))
        for mode in (qh.QuantizationMode.TRAINING,
                     qh.QuantizationMode.INFERENCE)
    }
    with base_layer.JaxContext.new_context():
      train = layers[qh.QuantizationMode.TRAINING]
      float_vars = train.init(jax.random.PRNGKey(1), x)
      expected = train.apply(float_vars, x)
      int_vars = train.apply(float_vars, method=train.quantize_weight)
      served = layers[qh.QuantizationMode.INFERENCE].apply(int_vars, x)
    self.assertAllClose(expected, served, atol=1e-4, rtol=1e-4)

  def test_embedding_rows(self):
    ids = np.array([[0, 3, 5], [7, 1, 1]])
    fields = dict(num_classes=8, input_dims=6)
    train = instantiate(pax_fiddle.Config(
        quantization.Embedding, name='e',
        quantization=_quant(qh.QuantizationMode.TRAINING), **fields))
    serve = instantiate(pax_fiddle.Config(
        quantization.Embedding, name='e',
        quantization=_quant(qh.QuantizationMode.INFERENCE), **fields))
    with base_layer.JaxContext.new_context():
      float_vars = train.init(jax.random.PRNGKey(1), ids)
      expected = train.apply(float_vars, ids)
      served = serve.apply(
          train.apply(float_vars, method=train.quantize_weight), ids)
    self.assertAllClose(expected, served, atol=1e-6)


class BadConfigTest(test_utils.TestCase):

  def test_dtype_too_small_for_precision(self):
    p = pax_fiddle.Config(
        quantization.Linear, name='l', input_dims=4, output_dims=4,
        quantization=qh.QuantizationParams(
            mode=qh.QuantizationMode.INFERENCE,
            weight_params=qh.WeightQuantizationParams(precision=8,
                                                      dtype=jnp.int4)))
    with self.assertRaisesRegex(ValueError, 'weight_params.dtype'):
      instantiate(p).init(jax.random.PRNGKey(0), jnp.ones((1, 4)))

  def test_for_transformer_bits(self):
    with self.assertRaisesRegex(ValueError, 'num_bits'):
      quantize.for_transformer(num_bits=3)

  def test_materialize_needs_quantization(self):
    p = pax_fiddle.Config(quantization.Linear, name='l', input_dims=4,
                          output_dims=4, quantization=None)
    layer = instantiate(p)
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 4)))
      with self.assertRaisesRegex(ValueError, 'quantization'):
        layer.apply(variables, method=layer.quantize_weight)


if __name__ == '__main__':
  absltest.main()
