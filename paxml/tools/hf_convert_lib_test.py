"""Tests of hf_import / hf_export: round trip, bad input, fine-tuning start."""

import gzip
import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax
import numpy as np
import pytest

from paxml import hf
from paxml.tools import hf_convert_lib as lib
from praxis import base_layer

_LLAMA = {'architectures': ['LlamaForCausalLM'], 'model_type': 'llama',
          'vocab_size': 32, 'hidden_size': 16, 'intermediate_size': 24,
          'num_hidden_layers': 2, 'num_attention_heads': 4,
          'num_key_value_heads': 2, 'rms_norm_eps': 1e-6,
          'bos_token_id': 1, 'eos_token_id': 2, 'pad_token_id': 0,
          'torch_dtype': 'bfloat16'}
_WORDS = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'dog', 'ran', 'to', 'park']


def _random_hf_dir(config, dtype=np.float32):
  """A HF directory whose tensors are random (written with numpy)."""
  st_numpy = pytest.importorskip('safetensors.numpy')
  directory = tempfile.mkdtemp()
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(config, f)
  spec = hf.model_spec(config, directory)
  lm = base_layer.instantiate(hf.lm_config(spec).set(name='lm'))
  ids = np.zeros([1, 4], np.int32)
  with base_layer.JaxContext.new_context():
    params = lm.init(jax.random.PRNGKey(1), ids, np.zeros([1, 4]))['params']
  rng = np.random.RandomState(0)
  params = jax.tree.map(lambda x: rng.randn(*x.shape).astype(dtype), params)
  tensors = hf.export_tensors(spec, params, 'test')
  st_numpy.save_file(tensors, os.path.join(directory, 'model.safetensors'))
  return directory


def _write_tokenizer(directory, extra_words=0):
  tokenizers = pytest.importorskip('tokenizers')
  vocab = {'<pad>': 0, '<s>': 1, '</s>': 2, '<unk>': 3}
  for w in _WORDS + [f'w{i}' for i in range(extra_words)]:
    vocab[w] = len(vocab)
  tok = tokenizers.Tokenizer(
      tokenizers.models.WordLevel(vocab, unk_token='<unk>'))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  tok.save(os.path.join(directory, 'tokenizer.json'))


def _files(directory):
  return sorted(os.listdir(directory))


class RoundTripTest(absltest.TestCase):

  def test_import_export_keeps_every_bit(self):
    ml_dtypes = pytest.importorskip('ml_dtypes')
    st_numpy = pytest.importorskip('safetensors.numpy')
    src = _random_hf_dir(_LLAMA, ml_dtypes.bfloat16)
    root = tempfile.mkdtemp()
    imported = lib.import_model(src, os.path.join(root, 'imp'))
    self.assertEqual(_files(imported),
                     ['checkpoints', 'hf', 'hf_experiment.py'])
    out = lib.export_model(os.path.join(imported, 'checkpoints'),
                           os.path.join(root, 'out'))
    self.assertEqual(_files(out), ['config.json', 'model.safetensors'])
    want = st_numpy.load_file(os.path.join(src, 'model.safetensors'))
    got = st_numpy.load_file(os.path.join(out, 'model.safetensors'))
    self.assertEqual(sorted(want), sorted(got))
    for name, value in want.items():
      self.assertEqual(got[name].dtype, value.dtype, name)
      self.assertEqual(got[name].tobytes(), value.tobytes(), name)
    self.assertEqual(_files(root), ['imp', 'out'])  # No temporary left.

  def test_gpt2_round_trip(self):
    st_numpy = pytest.importorskip('safetensors.numpy')
    config = {'architectures': ['GPT2LMHeadModel'], 'vocab_size': 32,
              'n_embd': 16, 'n_layer': 1, 'n_head': 2, 'n_positions': 8}
    src = _random_hf_dir(config)
    root = tempfile.mkdtemp()
    imported = lib.import_model(src, os.path.join(root, 'imp'),
                                model_only=True)
    out = lib.export_model(os.path.join(imported, 'checkpoints'),
                           os.path.join(root, 'out'))
    want = st_numpy.load_file(os.path.join(src, 'model.safetensors'))
    got = st_numpy.load_file(os.path.join(out, 'model.safetensors'))
    self.assertEqual(sorted(want), sorted(got))
    for name, value in want.items():
      self.assertEqual(got[name].tobytes(), value.tobytes(), name)

  def test_transformers_loads_the_export(self):
    torch = pytest.importorskip('torch')
    transformers = pytest.importorskip('transformers')
    config = dict(_LLAMA, torch_dtype='float32')
    src = _random_hf_dir(config)
    root = tempfile.mkdtemp()
    imported = lib.import_model(src, os.path.join(root, 'imp'))
    out = lib.export_model(os.path.join(imported, 'checkpoints'),
                           os.path.join(root, 'out'))
    a = transformers.AutoModelForCausalLM.from_pretrained(src).eval()
    b = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 7, 9, 4]])
    with torch.no_grad():
      np.testing.assert_array_equal(a(ids).logits.numpy(),
                                    b(ids).logits.numpy())


class BadInputTest(absltest.TestCase):

  def _assert_nothing_written(self, root):
    self.assertEqual(_files(root), [])

  def test_corrupt_safetensors_leaves_nothing(self):
    src = _random_hf_dir(_LLAMA)
    path = os.path.join(src, 'model.safetensors')
    with open(path, 'r+b') as f:
      f.truncate(os.path.getsize(path) // 2)
    root = tempfile.mkdtemp()
    with self.assertRaisesRegex(ValueError, 'model.safetensors'):
      lib.import_model(src, os.path.join(root, 'imp'))
    self._assert_nothing_written(root)

  def test_tokenizer_bigger_than_vocab_is_refused(self):
    src = _random_hf_dir(_LLAMA)
    _write_tokenizer(src, extra_words=40)  # 54 ids > vocab_size 32.
    root = tempfile.mkdtemp()
    with self.assertRaisesRegex(ValueError, '54 ids.*vocab_size.*32'):
      lib.import_model(src, os.path.join(root, 'imp'))
    self._assert_nothing_written(root)

  def test_existing_output_is_not_overwritten(self):
    src = _random_hf_dir(_LLAMA)
    root = tempfile.mkdtemp()
    os.makedirs(os.path.join(root, 'imp'))
    with open(os.path.join(root, 'imp', 'keep'), 'w') as f:
      f.write('x')
    with self.assertRaisesRegex(FileExistsError, 'not empty'):
      lib.import_model(src, os.path.join(root, 'imp'))
    self.assertEqual(_files(os.path.join(root, 'imp')), ['keep'])

  def test_export_of_another_model_names_the_variables(self):
    src = _random_hf_dir(_LLAMA)
    root = tempfile.mkdtemp()
    imported = lib.import_model(src, os.path.join(root, 'imp'))
    other = tempfile.mkdtemp()
    with open(os.path.join(other, 'config.json'), 'w') as f:
      json.dump(dict(_LLAMA, num_hidden_layers=3), f)
    with self.assertRaisesRegex(ValueError, 'x_layers_2'):
      lib.export_model(os.path.join(imported, 'checkpoints'),
                       os.path.join(root, 'out'), hf_model_dir=other)
    self.assertEqual(_files(root), ['imp'])


class FineTuneTest(absltest.TestCase):

  def test_train_restores_the_imported_checkpoint(self):
    src = _random_hf_dir(dict(_LLAMA, torch_dtype='float32'))
    _write_tokenizer(src)
    root = tempfile.mkdtemp()
    imported = lib.import_model(src, os.path.join(root, 'imp'))
    data = os.path.join(root, 'c4-train.00000-of-01024.json.gz')
    rng = np.random.RandomState(0)
    with gzip.open(data, 'wt') as f:
      for _ in range(20):
        words = ' '.join(rng.choice(_WORDS, 10))
        f.write(json.dumps({'text': words, 'url': 'u'}) + '\n')
    with open(os.path.join(root, 'ft.py'), 'w') as f:
      f.write(
          'from paxml import experiment_registry\n'
          'import hf_experiment\n'
          '@experiment_registry.register\n'
          'class Ft(hf_experiment.Imported):\n'
          f'  TRAIN_FILES = {data!r}\n'
          '  SEQ_LEN = 8\n  BATCH_SIZE = 2\n  NUM_TRAIN_STEPS = 2\n'
          '  CHECKPOINT_EVERY_N_STEPS = 2\n'
          '@experiment_registry.register\n'
          'class FtInit(Ft):\n'
          f'  INIT_FROM_CHECKPOINT = {imported + "/checkpoints"!r}\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [imported, root, os.environ.get('PYTHONPATH', '')]))

    def train(exp, job, *flags):
      run = subprocess.run(
          [sys.executable, '-m', 'paxml.main', f'--exp=ft.{exp}',
           f'--job_log_dir={job}', *flags], env=env, capture_output=True,
          text=True, timeout=300, check=False)
      self.assertEqual(run.returncode, 0, run.stderr[-3000:])
      self.assertIn('checkpoint_00000002', os.listdir(f'{job}/checkpoints'))
      return run.stderr

    job = os.path.join(root, 'job')
    log = train('Ft', job, f'--restore_checkpoint_dir={imported}/checkpoints')
    self.assertIn('Restored the checkpoint of step 0', log)
    # Pax's init_from_checkpoint_rules: all 21 variables of the 2-layer model.
    log = train('FtInit', os.path.join(root, 'job_init'))
    self.assertIn(f'Loaded 21 variables from {imported}/checkpoints', log)
    # The fine-tuned checkpoint exports, with the imported hf/ files.
    out = lib.export_model(f'{job}/checkpoints', os.path.join(root, 'out'),
                           hf_model_dir=os.path.join(imported, 'hf'))
    self.assertIn('tokenizer.json', os.listdir(out))


if __name__ == '__main__':
  absltest.main()
