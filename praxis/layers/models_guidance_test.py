"""Tests of the classifier-free guidance hook of LanguageModel/SequenceModel."""

from absl.testing import absltest
import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import decoder_hparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = py_utils.NestedMap


class _Seen(Exception):
  pass


class _GuidedLm(models.LanguageModel):

  def _prepare_guidance_decode_data(self, decode_data):
    raise _Seen(sorted(decode_data.keys()))


def _lm(cls, scale):
  stack = pax_fiddle.Config(transformers.StackedTransformer, model_dims=8,
                            hidden_dims=8, num_heads=2, num_layers=1)
  return base_layer.instantiate(pax_fiddle.Config(
      cls, name='lm',
      lm_tpl=pax_fiddle.Config(transformer_models.TransformerLm,
                               model_dims=8, vocab_size=8,
                               stacked_transformer_tpl=stack),
      decoder_tpl=decoder_hparams.SampleDecoderHParams(
          seqlen=4, cf_guidance_scale=scale)))


def _decode(model):
  batch = NestedMap(ids=jnp.array([[1, 2]], jnp.int32),
                    paddings=jnp.zeros((1, 2)))
  with base_layer.JaxContext.new_context():
    return model.apply({}, batch, method=model.decode,
                       rngs={base_layer.RANDOM: jax.random.PRNGKey(0)},
                       mutable=True)


class GuidanceHookTest(absltest.TestCase):

  def test_language_model_refuses_guidance(self):
    with self.assertRaisesRegex(NotImplementedError,
                                'LanguageModel does not support guidance'):
      _decode(_lm(models.LanguageModel, 2.0))

  def test_subclass_hook_gets_the_decode_data(self):
    with self.assertRaises(_Seen) as ctx:
      _decode(_lm(_GuidedLm, 2.0))
    self.assertIn('fprop_input_ids', str(ctx.exception))

  def test_no_scale_no_hook(self):
    with self.assertRaises(Exception) as ctx:  # Decoding without params.
      _decode(_lm(_GuidedLm, None))
    self.assertNotIsInstance(ctx.exception, _Seen)

  def test_sequence_model_refuses_guidance(self):
    model = base_layer.instantiate(pax_fiddle.Config(
        models.SequenceModel, name='seq',
        decoder_tpl=decoder_hparams.SampleDecoderHParams(
            seqlen=4, cf_guidance_scale=1.5)))
    data = NestedMap(ids=jnp.ones((1, 2), jnp.int32),
                     paddings=jnp.zeros((1, 2)))
    with self.assertRaisesRegex(NotImplementedError,
                                'SequenceModel does not support guidance'):
      model.apply({}, NestedMap(src=data, tgt=data), method=model.decode)


if __name__ == '__main__':
  absltest.main()
