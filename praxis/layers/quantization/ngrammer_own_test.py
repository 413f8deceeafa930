"""Tests of the quantized N-grammer layers against numpy dequantization."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer
from praxis.layers.quantization import ngrammer as qngrammer
from praxis.layers.quantization import quantization_hparams

QuantizationParams = quantization_hparams.QuantizationParams
QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams

_FIELDS = dict(unigram_vocab_size=3, ngram_vocab_size=8, ngram_emb_dim=2,
               num_heads=2, dim_per_head=4, concat_ngrams=True)


def _quantization(mode, use_symmetric=True):
  return QuantizationParams(
      quantization_type=QuantizationType.PTQ, mode=mode,
      weight_params=WeightQuantizationParams(use_symmetric=use_symmetric))


class QuantizedNgrammerTest(parameterized.TestCase):

  @parameterized.named_parameters(('symmetric', True), ('asymmetric', False))
  def test_inference_dequantizes_rows(self, use_symmetric):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 3, size=(2, 3))
    embs = rng.normal(size=(2, 3, 8)).astype(np.float32)
    q_layer = base_layer.instantiate(pax_fiddle.Config(
        qngrammer.Ngrammer, name='q', **_FIELDS,
        quantization=_quantization(QuantizationMode.INFERENCE,
                                   use_symmetric)))
    f_layer = base_layer.instantiate(pax_fiddle.Config(
        ngrammer.Ngrammer, name='f', **_FIELDS))
    with base_layer.JaxContext.new_context():
      q_vars = q_layer.init(jax.random.PRNGKey(0), ids, embs)
      f_vars = f_layer.init(jax.random.PRNGKey(0), ids, embs)
      for i in range(2):
        table = q_vars['params'][f'ngram_table_{i}']
        self.assertEqual(table['emb_var'].dtype, jnp.int8)
        self.assertEqual(table['emb_var'].shape, (8, 2))
        self.assertEqual(table['emb_var_quantized_scale'].shape, (8,))
        self.assertEqual('emb_var_quantized_zp' in table, not use_symmetric)
        q8 = rng.integers(-127, 128, size=(8, 2)).astype(np.int8)
        scale = rng.uniform(0.01, 0.1, size=(8,)).astype(np.float32)
        zp = rng.normal(size=(8,)).astype(np.float32)
        table['emb_var'] = jnp.asarray(q8)
        table['emb_var_quantized_scale'] = jnp.asarray(scale)
        # The float twin gets the dequantized table: q * scale (- zp).
        dequant = q8 * scale[:, None]
        if not use_symmetric:
          table['emb_var_quantized_zp'] = jnp.asarray(zp)
          dequant = dequant - zp[:, None]
        f_vars['params'][f'ngram_table_{i}']['emb_var'] = jnp.asarray(dequant)
      q_out = q_layer.apply(q_vars, ids, embs)
      f_out = f_layer.apply(f_vars, ids, embs)
    np.testing.assert_allclose(q_out, f_out, rtol=1e-5, atol=1e-5)

  def test_vq_ngrammer_materialize_quantizes_tables(self):
    embs = np.random.default_rng(1).normal(size=(2, 3, 8)).astype(np.float32)
    layer = base_layer.instantiate(pax_fiddle.Config(
        qngrammer.VQNgrammer, name='vq', ngram_vocab_size=9,
        ngram_emb_dim=2, num_heads=2, num_clusters=2, dim_per_head=4,
        concat_ngrams=True,
        quantization=_quantization(QuantizationMode.MATERIALIZE)))
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(0), None, embs)
      table = np.arange(18, dtype=np.float32).reshape(9, 2) - 8.0
      variables['params']['ngram_layer']['ngram_table_0']['emb_var'] = table
      res, _ = layer.apply(variables, mutable=[],
                           method=layer.quantize_weight)
    got = res['params']['ngram_layer']['ngram_table_0']
    scale = np.abs(table).max(axis=1) / 127.0
    np.testing.assert_allclose(got['emb_var_quantized_scale'], scale,
                               rtol=1e-6)
    np.testing.assert_array_equal(
        got['emb_var'], np.round(table / scale[:, None]).astype(np.int8))
    # The VQ centroids are not quantized.
    self.assertEqual(res['non_trainable']['vq_layer']['means'].dtype,
                     jnp.float32)


if __name__ == '__main__':
  absltest.main()
