"""Tests of HfCausalLm, HfTokenizer and the example fine-tuning experiment."""

import json
import os
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paxml import hf
from paxml.hf import experiment
from paxml.hf import tokenizer as hf_tokenizer
from paxml.tasks.lm.params import hf_finetune
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils

_WORDS = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'dog', 'ran', 'to', 'park']


def _word_tokenizer(directory, extra=0):
  tokenizers = pytest.importorskip('tokenizers')
  vocab = {'<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3}
  for w in _WORDS + [f'x{i}' for i in range(extra)]:
    vocab[w] = len(vocab)
  tok = tokenizers.Tokenizer(
      tokenizers.models.WordLevel(vocab, unk_token='<unk>'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(os.path.join(directory, 'tokenizer.json'))


def assert_greedy_decode_equals_generate(torch, directory, model, steps):
  """Greedy `HfCausalLm` decoding of two prompts equals `model.generate`."""
  prompts = os.path.join(directory, 'prompts.jsonl')
  with open(prompts, 'w') as f:
    for text in ('the cat sat', 'a dog ran to the'):
      f.write(json.dumps({'text': text}) + '\n')

  class Exp(experiment.HfCausalLm):
    HF_MODEL_DIR = directory
    DECODE_FILES = prompts
    SEQ_LEN = 8
    BATCH_SIZE = 2
    MAX_DECODE_STEPS = steps

  exp = Exp()
  batch = base_hyperparams.instantiate(exp.decode_datasets()[0]).get_next()
  task = base_hyperparams.instantiate(exp.task())
  variables = {'params': {'lm': hf.import_variables(directory)['params']}}
  with base_layer.JaxContext.new_context():
    (_, results, _), _ = task.model.apply(
        variables, py_utils.NestedMap(jax.tree.map(jnp.asarray, batch)),
        method=task.model.decode, mutable=[base_layer.DECODE_CACHE])
  for i, (row, pad) in enumerate(zip(batch.ids, batch.paddings)):
    prompt = row[pad == 0].astype(np.int64)
    want = model.generate(torch.tensor(prompt[None]), max_new_tokens=steps,
                          do_sample=False, eos_token_id=2,
                          pad_token_id=0).numpy()[0]
    length = int(np.asarray(results.decode_lengths)[i, 0])
    got = np.asarray(results.output_ids)[i, 0, :length]
    np.testing.assert_array_equal(got, want)


class HfTokenizerTest(absltest.TestCase):

  def test_tokenizer_json_ids_and_specials(self):
    directory = tempfile.mkdtemp()
    _word_tokenizer(directory)
    with open(os.path.join(directory, 'config.json'), 'w') as f:
      json.dump({'bos_token_id': 1, 'eos_token_id': 2}, f)
    tok = hf_tokenizer.HfTokenizer(model_dir=directory)
    self.assertEqual((tok.bos_id, tok.eos_id, tok.vocab_size), (1, 2, 14))
    np.testing.assert_array_equal(tok.encode('the cat sat'), [4, 5, 6])
    self.assertEqual(tok.decode([1, 4, 5, 2]), 'the cat')

  def test_sentencepiece_model(self):
    spm = pytest.importorskip('sentencepiece')
    directory = tempfile.mkdtemp()
    text = os.path.join(directory, 'text.txt')
    with open(text, 'w') as f:
      f.write('\n'.join(' '.join(_WORDS[i:] + _WORDS[:i]) for i in range(10)))
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=os.path.join(directory, 'tokenizer'),
        vocab_size=13, model_type='word', bos_id=1, eos_id=2, unk_id=0,
        minloglevel=2)
    tok = hf_tokenizer.HfTokenizer(model_dir=directory)
    self.assertEqual((tok.bos_id, tok.eos_id), (1, 2))
    self.assertEqual(tok.decode(tok.encode('the cat sat')), 'the cat sat')

  def test_no_tokenizer_is_named(self):
    with self.assertRaisesRegex(FileNotFoundError, 'tokenizer.json'):
      hf_tokenizer.HfTokenizer(model_dir=tempfile.mkdtemp())


_ARCHS = {
    'llama': ('LlamaConfig', 'LlamaForCausalLM', dict(
        vocab_size=16, hidden_size=16, intermediate_size=24,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)),
    'gemma': ('GemmaConfig', 'GemmaForCausalLM', dict(
        vocab_size=16, hidden_size=16, intermediate_size=24,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        head_dim=8)),
    'gpt2': ('GPT2Config', 'GPT2LMHeadModel', dict(
        vocab_size=16, n_embd=16, n_layer=2, n_head=4, n_positions=32)),
}


class HfCausalLmTest(parameterized.TestCase):

  def _model_dir(self, torch, transformers, extra_words=0, scale=0.0,
                 arch='llama'):
    directory = tempfile.mkdtemp()
    config_cls, name, kwargs = _ARCHS[arch]
    config = getattr(transformers, config_cls)(
        **kwargs, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config.architectures = [name]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # Larger weights: distinct greedy continuations.
      for p in model.parameters():
        p.add_(torch.randn_like(p) * scale)
    model.save_pretrained(directory)
    _word_tokenizer(directory, extra_words)
    return directory, model

  def test_step0_loss_equals_transformers_loss(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, model = self._model_dir(torch, transformers)
    data = os.path.join(directory, 'train.jsonl')
    with open(data, 'w') as f:
      f.write(json.dumps({'text': 'the cat sat on a mat'}) + '\n')

    class Exp(experiment.HfCausalLm):
      HF_MODEL_DIR = directory
      EVAL_FILES = data
      SEQ_LEN = 7
      BATCH_SIZE = 1

    exp = Exp()
    inp = base_hyperparams.instantiate(exp.datasets()[0])
    batch = inp.get_next()
    # [BOS] the cat sat on a mat [EOS]: ids are the first 7, labels the last.
    np.testing.assert_array_equal(batch.ids[0], [1, 4, 5, 6, 7, 8, 9])
    with torch.no_grad():
      out = model(torch.tensor(batch.ids.astype(np.int64)))
      logits = out.logits.numpy()[0]
    labels = batch.labels[0]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = -log_probs[np.arange(7), labels].mean()
    task = base_hyperparams.instantiate(exp.task())
    variables = {'params': {'lm': hf.import_variables(directory)['params']}}
    with base_layer.JaxContext.new_context():
      metrics, _ = task.model.apply(
          variables, py_utils.NestedMap(jax.tree.map(jnp.asarray, batch)),
          rngs={'dropout': jax.random.PRNGKey(0)})
    got = float(metrics['avg_xent'][0])
    self.assertAlmostEqual(got, want, places=5)

  @parameterized.parameters('llama', 'gemma', 'gpt2')
  def test_greedy_decode_equals_transformers_generate(self, arch):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, model = self._model_dir(torch, transformers, scale=0.3,
                                       arch=arch)
    assert_greedy_decode_equals_generate(torch, directory, model, steps=5)

  def test_tokenizer_larger_than_the_model_is_refused(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    directory, _ = self._model_dir(torch, transformers, extra_words=10)

    class Exp(experiment.HfCausalLm):
      HF_MODEL_DIR = directory
      TRAIN_FILES = '/nonexistent/*.jsonl'

    with self.assertRaisesRegex(ValueError, '24 ids.*vocab_size.*16'):
      Exp().datasets()


class HfFinetuneTest(absltest.TestCase):

  def test_needs_the_model_dir(self):
    with mock.patch.dict(os.environ, {}, clear=True):
      with self.assertRaisesRegex(ValueError, 'PAX_HF_MODEL_DIR'):
        hf_finetune.HfFinetune()

  def test_reads_paths_from_the_environment(self):
    env = {'PAX_HF_MODEL_DIR': '/m/hf', 'PAX_TRAIN_FILES': '/d/*.parquet'}
    with mock.patch.dict(os.environ, env, clear=True):
      exp = hf_finetune.HfInstructionFinetune()
    self.assertEqual((exp.HF_MODEL_DIR, exp.TRAIN_FILES, exp.PROMPT_FIELD),
                     ('/m/hf', '/d/*.parquet', 'prompt'))


if __name__ == '__main__':
  absltest.main()
