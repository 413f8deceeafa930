"""Mistral's sliding-window attention: mask, logits, decoding, export."""

import os
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paxml import hf
from paxml.hf import _layers
from paxml.hf import experiment_test
from paxml.tools import hf_convert_lib as lib
from praxis import base_layer
from praxis import pax_fiddle

_WINDOW = 4
_MISTRAL = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, sliding_window=_WINDOW)


def _mistral_dir(torch, transformers, scale=0.05, **overrides):
  """A random MistralForCausalLM saved in a new directory."""
  config = transformers.MistralConfig(**dict(_MISTRAL, **overrides))
  config.architectures = ['MistralForCausalLM']
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(
      config, attn_implementation='eager').eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * scale)
  directory = tempfile.mkdtemp()
  model.save_pretrained(directory)
  return directory, model


def _pax_logits(directory, ids, spec=None):
  spec = spec or hf.model_spec(hf.read_config(directory), directory)
  lm = base_layer.instantiate(
      hf.lm_config(spec).set(name='lm', skip_compute_loss=True))
  variables = hf.import_variables(directory, spec)
  with base_layer.JaxContext.new_context():
    act = lm.apply(variables, jnp.asarray(ids), jnp.zeros(ids.shape))
    logits = lm.apply(variables, act,
                      method=lambda m, a: m.softmax.get_logits(a))
  return np.asarray(logits)


class MaskTest(absltest.TestCase):

  def test_probs_are_zero_outside_the_band(self):
    t, window = 7, 3
    layer = base_layer.instantiate(pax_fiddle.Config(
        _layers.HfRopeAttention, name='att', input_dim=8, num_heads=2,
        num_kv_heads=1, dim_per_head=4, rope_theta=10_000.0,
        sliding_window=window))
    x = jax.random.normal(jax.random.PRNGKey(0), [1, t, 8])
    causal = np.triu(np.ones([t, t], bool), k=1)[None, None]
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(1), x, x, x, causal)
      _, probs = layer.apply(variables, x, x, x, causal)
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    visible = (j <= i) & (j > i - window)  # HF: i - W < j <= i.
    probs = np.asarray(probs)[0]
    self.assertTrue(np.all(probs[:, ~visible] == 0.0))
    self.assertTrue(np.all(probs[:, visible] > 0.0))

  def test_bad_window_is_named(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        _layers.HfRopeAttention, name='att', input_dim=8, num_heads=2,
        num_kv_heads=1, dim_per_head=4, sliding_window=0))
    x = jnp.zeros([1, 2, 8])
    with self.assertRaisesRegex(ValueError, 'sliding_window'):
      with base_layer.JaxContext.new_context():
        layer.init(jax.random.PRNGKey(1), x, x, x, jnp.zeros([1, 1, 2, 2]))


class ConfigTest(absltest.TestCase):

  def _config(self, **kw):
    return dict(_MISTRAL, architectures=['MistralForCausalLM'], **kw)

  def test_window_read_and_written(self):
    spec = hf.model_spec(self._config(), 'x/config.json')
    self.assertEqual(spec.sliding_window, _WINDOW)
    self.assertEqual(hf.config_from_spec(spec)['sliding_window'], _WINDOW)
    spec = hf.model_spec(self._config(sliding_window=None), 'x/config.json')
    self.assertIsNone(spec.sliding_window)
    self.assertIsNone(hf.config_from_spec(spec)['sliding_window'])

  def test_bad_window_names_file_and_field(self):
    with self.assertRaisesRegex(ValueError,
                                'x/config.json: sliding_window.*-1'):
      hf.model_spec(self._config(sliding_window=-1), 'x/config.json')


class MistralLogitsTest(absltest.TestCase):

  def test_logits_equal_transformers_past_the_window(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, model = _mistral_dir(torch, transformers)
    ids = np.random.RandomState(0).randint(0, 64, size=(2, 13))
    with torch.no_grad():
      want = model(torch.tensor(ids)).logits.numpy()
    got = _pax_logits(directory, ids)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # The window matters: attending over everything gives other logits
    # after the first W positions (and the same ones before).
    spec = hf.model_spec(hf.read_config(directory), directory)
    full = _pax_logits(directory, ids, spec.__class__(
        **dict(vars(spec), sliding_window=None)))
    np.testing.assert_allclose(full[:, :_WINDOW], want[:, :_WINDOW],
                               atol=1e-4, rtol=0)
    self.assertGreater(np.abs(full[:, _WINDOW:] - want[:, _WINDOW:]).max(),
                       1e-2)

  def test_greedy_decode_equals_transformers_generate(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, model = _mistral_dir(torch, transformers, scale=0.3,
                                    vocab_size=16, sliding_window=3,
                                    bos_token_id=1, eos_token_id=2,
                                    pad_token_id=0)
    experiment_test._word_tokenizer(directory)
    experiment_test.assert_greedy_decode_equals_generate(
        torch, directory, model, steps=6)


class ExportTest(absltest.TestCase):

  def test_export_keeps_the_window(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, _ = _mistral_dir(torch, transformers)
    root = tempfile.mkdtemp()
    imported = lib.import_model(directory, os.path.join(root, 'imp'),
                                model_only=True)
    out = lib.export_model(os.path.join(imported, 'checkpoints'),
                           os.path.join(root, 'out'))
    self.assertEqual(hf.read_config(out)['sliding_window'], _WINDOW)
    made_here = tempfile.mkdtemp()
    lib.write_config(hf.model_spec(hf.read_config(directory), directory),
                     made_here)
    self.assertEqual(hf.read_config(made_here)['sliding_window'], _WINDOW)


if __name__ == '__main__':
  absltest.main()
