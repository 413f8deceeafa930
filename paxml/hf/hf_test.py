"""Tests of the HF <-> Pax mappings: logits against transformers, errors."""

import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
import pytest

from paxml import hf
from paxml.hf import _layers
from praxis import base_layer

_TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
             num_hidden_layers=2, num_attention_heads=4)


def _hf_configs():
  """(name, transformers config class name, kwargs, architecture)."""
  llama3 = {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0,
            'high_freq_factor': 4.0, 'original_max_position_embeddings': 4}
  return [
      ('llama_gqa_llama3_rope', 'LlamaConfig',
       dict(_TINY, num_key_value_heads=2, rope_theta=500000.0,
            rope_scaling=llama3), 'LlamaForCausalLM'),
      ('llama_mqa_tied_bias_linear_rope', 'LlamaConfig',
       dict(_TINY, num_key_value_heads=1, tie_word_embeddings=True,
            attention_bias=True, mlp_bias=True,
            rope_scaling={'rope_type': 'linear', 'factor': 2.0}),
       'LlamaForCausalLM'),
      ('mistral', 'MistralConfig',
       dict(_TINY, num_key_value_heads=2, sliding_window=None),
       'MistralForCausalLM'),
      ('gemma', 'GemmaConfig',
       dict(_TINY, num_key_value_heads=1, head_dim=16), 'GemmaForCausalLM'),
      ('gpt2', 'GPT2Config',
       dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=16),
       'GPT2LMHeadModel'),
  ]


def _save_random_hf_model(transformers, torch, config_cls, kwargs, arch,
                          directory):
  config = getattr(transformers, config_cls)(**kwargs)
  config.architectures = [arch]
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(config).eval()
  with torch.no_grad():
    for p in model.parameters():  # Nonzero biases and norm scales too.
      p.add_(torch.randn_like(p) * 0.05)
  model.save_pretrained(directory)
  return model


def _pax_logits(model_dir, ids):
  spec = hf.model_spec(hf.read_config(model_dir), model_dir)
  lm = base_layer.instantiate(
      hf.lm_config(spec).set(name='lm', skip_compute_loss=True))
  variables = hf.import_variables(model_dir, spec)
  with base_layer.JaxContext.new_context():
    act = lm.apply(variables, jnp.asarray(ids), jnp.zeros(ids.shape))
    logits = lm.apply(variables, act,
                      method=lambda m, a: m.softmax.get_logits(a))
  return np.asarray(logits)


class LogitsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (name, cls, kwargs, arch) for name, cls, kwargs, arch in _hf_configs())
  def test_logits_equal_transformers(self, config_cls, kwargs, arch):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory = tempfile.mkdtemp()
    model = _save_random_hf_model(transformers, torch, config_cls, kwargs,
                                  arch, directory)
    ids = np.random.RandomState(0).randint(0, 64, size=(2, 11))
    with torch.no_grad():
      want = model(torch.tensor(ids)).logits.numpy()
    got = _pax_logits(directory, ids)
    self.assertEqual(got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    self.assertGreater(np.abs(want).max(), 0.1)  # Not a trivial model.


class ShardedCheckpointTest(absltest.TestCase):

  def test_sharded_safetensors_import_like_one_file(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    _, cls, kwargs, arch = _hf_configs()[2]
    one, sharded = tempfile.mkdtemp(), tempfile.mkdtemp()
    model = _save_random_hf_model(transformers, torch, cls, kwargs, arch, one)
    model.save_pretrained(sharded, max_shard_size='20KB')
    self.assertIn('model.safetensors.index.json', os.listdir(sharded))
    want = hf.flatten(hf.import_variables(one))
    got = hf.flatten(hf.import_variables(sharded))
    self.assertEqual(sorted(want), sorted(got))
    for name, value in want.items():
      np.testing.assert_array_equal(got[name], value)


class RopeTest(absltest.TestCase):

  def test_default_and_linear_frequencies(self):
    want = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(
        _layers.rope_inverse_frequencies(8, 10000.0), want, rtol=1e-6)
    np.testing.assert_allclose(
        _layers.rope_inverse_frequencies(
            8, 10000.0, {'rope_type': 'linear', 'factor': 4.0}),
        want / 4, rtol=1e-6)

  def test_llama3_keeps_high_scales_low_and_smooths_middle(self):
    # Wavelengths 2*pi/f: 6.28, 62.8, 628, 6283 for theta 10000, dim 8;
    # with an original length of 400: high-frequency limit 400/4 = 100,
    # low-frequency limit 400/1 = 400.
    scaling = {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0,
               'high_freq_factor': 4.0, 'original_max_position_embeddings': 400}
    base = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    got = _layers.rope_inverse_frequencies(8, 10000.0, scaling)
    np.testing.assert_allclose(got[:2], base[:2], rtol=1e-6)
    np.testing.assert_allclose(got[2:], base[2:] / 8, rtol=1e-6)

  def test_unsupported_scaling_is_named(self):
    with self.assertRaisesRegex(ValueError, "'yarn'"):
      _layers.rope_inverse_frequencies(8, 1e4, {'rope_type': 'yarn'})


class ConfigErrorsTest(absltest.TestCase):

  def _write(self, config):
    directory = tempfile.mkdtemp()
    with open(os.path.join(directory, 'config.json'), 'w') as f:
      json.dump(config, f)
    return directory

  def test_unsupported_architecture_names_file_and_field(self):
    directory = self._write({'architectures': ['BertForMaskedLM']})
    with self.assertRaisesRegex(ValueError,
                                'config.json.*architectures.*BertForMaskedLM'):
      hf.model_spec(hf.read_config(directory),
                    os.path.join(directory, 'config.json'))

  def test_missing_field_is_named(self):
    config = {'architectures': ['LlamaForCausalLM'], 'hidden_size': 8,
              'num_attention_heads': 2}
    with self.assertRaisesRegex(ValueError, "'vocab_size' is missing"):
      hf.model_spec(config, 'x/config.json')

  def test_unsupported_rope_type_is_named(self):
    config = dict(_TINY, architectures=['LlamaForCausalLM'],
                  rope_scaling={'rope_type': 'dynamic', 'factor': 2.0})
    with self.assertRaisesRegex(ValueError, "rope type 'dynamic'"):
      hf.model_spec(config, 'x/config.json')

  def test_missing_tensor_is_named(self):
    config = dict(_TINY, architectures=['LlamaForCausalLM'],
                  num_hidden_layers=1)
    directory = self._write(config)
    st_numpy = pytest.importorskip('safetensors.numpy')
    st_numpy.save_file({'model.norm.weight': np.ones(32, np.float32)},
                       os.path.join(directory, 'model.safetensors'))
    with self.assertRaisesRegex(ValueError, 'model.embed_tokens.weight'):
      hf.import_variables(directory)

  def test_corrupt_safetensors_names_the_file(self):
    directory = self._write(dict(_TINY, architectures=['LlamaForCausalLM']))
    with open(os.path.join(directory, 'model.safetensors'), 'wb') as f:
      f.write(b'\x10\x00\x00\x00\x00\x00\x00\x00{not json')
    pytest.importorskip('safetensors.numpy')
    with self.assertRaisesRegex(ValueError, 'model.safetensors.*safetensors'):
      hf.import_variables(directory)


if __name__ == '__main__':
  absltest.main()
