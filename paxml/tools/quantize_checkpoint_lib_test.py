"""quantize_checkpoint_lib: float checkpoint -> int8 checkpoint -> serving."""

import tempfile

import jax
import numpy as np
from absl.testing import absltest
from paxml.tools import quantize_checkpoint_lib as lib
from praxis import base_layer
from praxis import decoder_hparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.quantization import quantization_hparams as qh


def _model_p(repeated=False):
  lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=16,
                         vocab_size=32)
  lm.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=1, model_dims=16,
      hidden_dims=32, num_heads=2)
  if repeated:
    lm.stacked_transformer_tpl = pax_fiddle.Config(
        transformers.StackedTransformerRepeated, x_times=2,
        block=lm.stacked_transformer_tpl)
  return pax_fiddle.Config(
      models.LanguageModel, name='lm', lm_tpl=lm,
      decoder_tpl=decoder_hparams.GreedyDecoderHParams(
          seqlen=8, max_decode_steps=4))


def _batch():
  ids = np.random.default_rng(0).integers(2, 32, (2, 8)).astype(np.int32)
  return py_utils.NestedMap(
      ids=ids, labels=np.roll(ids, -1, axis=1),
      paddings=np.zeros((2, 8), np.float32),
      weights=np.ones((2, 8), np.float32))


class QuantizeCheckpointTest(test_utils.TestCase):

  def test_round_trip_and_quality(self):
    model_p, batch = _model_p(), _batch()
    float_model = base_layer.instantiate(model_p)
    with base_layer.JaxContext.new_context():
      float_vars = float_model.init(jax.random.PRNGKey(0), batch)
    float_vars = {'params': float_vars['params']}
    tmp = tempfile.mkdtemp()
    options = lib.QuantizeOptions()
    mat = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.MATERIALIZE))
    inf = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.INFERENCE))
    int_vars = lib.materialize(mat, float_vars)
    lib.save_quantized(inf, batch, int_vars, 7, tmp, options)
    self.assertEqual(lib.read_options(tmp), options)
    served = lib.restore_quantized(inf, batch, tmp)
    ffn = served['params']['lm']['transformer']['x_layers_0']['ff_layer']
    self.assertEqual(ffn['ffn_layer1']['linear']['w'].dtype, np.int8)
    # An int8 weight takes 1/4 of its float bytes; the whole tree is smaller.
    f_ffn = float_vars['params']['lm']['transformer']['x_layers_0']['ff_layer']
    self.assertEqual(
        4 * lib.checkpoint_bytes(ffn['ffn_layer1']['linear']['w']),
        lib.checkpoint_bytes(f_ffn['ffn_layer1']['linear']['w']))
    self.assertLess(lib.checkpoint_bytes(served),
                    0.6 * lib.checkpoint_bytes(float_vars))
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=True)):
      f_metrics, _ = float_model.apply(float_vars, batch)
      q_metrics, _ = inf.apply(served, batch)
    f_pplx, q_pplx = (float(m['log_pplx'][0]) for m in (f_metrics, q_metrics))
    self.assertAllClose(q_pplx, f_pplx, rtol=0.01)
    # A quantized checkpoint does not load into the float config.
    with self.assertRaisesRegex(ValueError, 'quantized checkpoint'):
      lib.restore_float_variables(float_model, batch, tmp + '/checkpoints')

  def test_repeated_stack(self):
    model_p, batch = _model_p(repeated=True), _batch()
    float_model = base_layer.instantiate(model_p)
    with base_layer.JaxContext.new_context():
      float_vars = {
          'params': float_model.init(jax.random.PRNGKey(0), batch)['params']}
    options = lib.QuantizeOptions()
    mat = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.MATERIALIZE))
    inf = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.INFERENCE))
    int_vars = lib.materialize(mat, float_vars)  # Through Repeat's scan.
    tmp = tempfile.mkdtemp()
    lib.save_quantized(inf, batch, int_vars, 1, tmp, options)
    served = lib.restore_quantized(inf, batch, tmp)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=True)):
      f_metrics, _ = float_model.apply(float_vars, batch)
      q_metrics, _ = inf.apply(served, batch)
    self.assertAllClose(float(q_metrics['log_pplx'][0]),
                        float(f_metrics['log_pplx'][0]), rtol=0.01)

  def test_bad_bits(self):
    with self.assertRaisesRegex(ValueError, 'num_bits'):
      lib.QuantizeOptions(num_bits=16)


if __name__ == '__main__':
  absltest.main()
