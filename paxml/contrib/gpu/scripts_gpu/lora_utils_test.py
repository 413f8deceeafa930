"""configure_lora: config edits; a LoRA fine-tune of an imported HF model."""

import gzip
import json
import os
import tempfile

from absl.testing import absltest
import fiddle as fdl
import jax
import numpy as np
import pytest

from paxml import executors
from paxml import train
from paxml.contrib.gpu.scripts_gpu import lora_layers
from paxml.contrib.gpu.scripts_gpu import lora_utils
from paxml.hf import experiment as hf_experiment
from paxml.tasks.demo import pydoc_lm
from paxml.tools import hf_convert_lib
from praxis import base_layer

import paxml.hf as hf

_LLAMA = {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama',
          'vocab_size': 16, 'hidden_size': 8, 'intermediate_size': 12,
          'num_hidden_layers': 1, 'num_attention_heads': 2,
          'num_key_value_heads': 1, 'rms_norm_eps': 1e-6,
          'bos_token_id': 1, 'eos_token_id': 2, 'pad_token_id': 0,
          'torch_dtype': 'float32'}
_WORDS = ['the', 'cat', 'sat', 'on', 'a', 'mat']


def _layer(task_p):
  stack = task_p.model.lm_tpl.stacked_transformer_tpl
  return stack.transformer_layer_params_tpl


class ConfigureLoraTest(absltest.TestCase):

  def test_swaps_layers_and_trains_only_adapters(self):
    task_p = lora_utils.configure_lora(
        pydoc_lm.PydocTransformerLm().task(), rank=4)
    layer = _layer(task_p)
    linear = layer.tr_fflayer_tpl.fflayer_tpl.linear_tpl
    self.assertIs(fdl.get_callable(linear), lora_layers.LoraLinear)
    self.assertEqual(linear.rank, 4)
    proj = layer.tr_atten_tpl.proj_tpl
    self.assertIs(fdl.get_callable(proj), lora_layers.LoraAttentionProjection)
    self.assertEqual(task_p.train.learner.bprop_variable_inclusion,
                     [lora_utils.LORA_VARIABLES])

  def test_mlp_only(self):
    task_p = lora_utils.configure_lora(
        pydoc_lm.PydocTransformerLm().task(), target_layers='mlp')
    proj = _layer(task_p).tr_atten_tpl.proj_tpl
    self.assertNotEqual(fdl.get_callable(proj),
                        lora_layers.LoraAttentionProjection)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, 'target_layers must be one of'):
      lora_utils.configure_lora(pydoc_lm.PydocTransformerLm().task(),
                                target_layers='ffn')
    task_p = pydoc_lm.PydocTransformerLm().task()
    task_p.train.learner.bprop_variable_exclusion = ['.*emb.*']
    with self.assertRaisesRegex(ValueError, 'bprop_variable_exclusion'):
      lora_utils.configure_lora(task_p)

  def test_mixin(self):
    class Exp(lora_utils.LoRAMixin):
      USE_LORA = True
      INIT_IGNORE_RULES = ()

    exp = Exp()
    task_p = exp.configure_lora(pydoc_lm.PydocTransformerLm().task())
    self.assertEqual(exp.INIT_IGNORE_RULES, [lora_utils.LORA_VARIABLES])
    self.assertEqual(task_p.train.learner.bprop_variable_inclusion,
                     [lora_utils.LORA_VARIABLES])


def _random_hf_dir():
  st_numpy = pytest.importorskip('safetensors.numpy')
  tokenizers = pytest.importorskip('tokenizers')
  directory = tempfile.mkdtemp()
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(_LLAMA, f)
  spec = hf.model_spec(_LLAMA, directory)
  lm = base_layer.instantiate(hf.lm_config(spec).set(name='lm'))
  with base_layer.JaxContext.new_context():
    params = lm.init(jax.random.PRNGKey(1), np.zeros([1, 4], np.int32),
                     np.zeros([1, 4]))['params']
  rng = np.random.RandomState(0)
  params = jax.tree.map(
      lambda x: rng.randn(*x.shape).astype(np.float32), params)
  st_numpy.save_file(hf.export_tensors(spec, params, 'test'),
                     os.path.join(directory, 'model.safetensors'))
  vocab = {'<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3}
  vocab.update({w: i + 4 for i, w in enumerate(_WORDS)})
  tok = tokenizers.Tokenizer(
      tokenizers.models.WordLevel(vocab, unk_token='<unk>'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(os.path.join(directory, 'tokenizer.json'))
  return directory


class HfLoraTest(absltest.TestCase):

  def test_lora_finetune_changes_only_adapters(self):
    root = tempfile.mkdtemp()
    imported = hf_convert_lib.import_model(_random_hf_dir(),
                                           os.path.join(root, 'imp'))
    data = os.path.join(root, 'train.jsonl.gz')
    rng = np.random.RandomState(0)
    with gzip.open(data, 'wt') as f:
      for _ in range(20):
        f.write(json.dumps({'text': ' '.join(rng.choice(_WORDS, 10))}) + '\n')

    class Plain(hf_experiment.HfCausalLm):
      HF_MODEL_DIR = os.path.join(imported, 'hf')

    class FtLora(Plain):
      TRAIN_FILES = data
      SEQ_LEN = 8
      BATCH_SIZE = 2
      NUM_TRAIN_STEPS = 2
      CHECKPOINT_EVERY_N_STEPS = 2
      LEARNING_RATE = 1e-2
      INIT_FROM_CHECKPOINT = os.path.join(imported, 'checkpoints')
      USE_LORA = True

    exp = FtLora()
    job = os.path.join(root, 'job')
    train.train_and_evaluate(
        train.ExperimentConfigs.from_experiment(exp, 'FtLora'),
        executors.RunOptions(job_log_dir=job))
    # pylint: disable=protected-access
    before, _ = hf_convert_lib._restore_params(
        Plain(), os.path.join(imported, 'checkpoints'), 0)
    after, step = hf_convert_lib._restore_params(
        exp, os.path.join(job, 'checkpoints'), None)
    # pylint: enable=protected-access
    self.assertEqual(step, 2)
    before, after = hf.flatten(before), hf.flatten(after)
    adapters = {k for k in after if 'lora' in k}
    self.assertEqual(set(after) - adapters, set(before))
    # Gated MLP: three linears (gate, up, down), each lora_a and lora_b.
    self.assertLen(adapters, 6)
    for k, v in before.items():
      np.testing.assert_array_equal(after[k], v, err_msg=k)
    for k in adapters:
      if k.endswith('lora_b'):  # Zero at the start: changed by training.
        self.assertGreater(np.abs(np.asarray(after[k])).max(), 0, k)


if __name__ == '__main__':
  absltest.main()
