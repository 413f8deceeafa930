"""Tests of NVIDIA's GPU experiments: names, builds, tiny local-data runs."""

import json
import math
import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.contrib.gpu.scripts_gpu import configs
from paxml.contrib.gpu.scripts_gpu import lora_utils
from paxml.tasks.lm.params import nvidia
from praxis import base_hyperparams
from praxis.contrib.gpu.scripts_gpu import lora_layers

_NAMES = ('Synthetic126M', 'Synthetic5B', 'Synthetic175B', 'Pile126M',
          'Pile5B', 'Pile175B', 'Lambada126M', 'GPT126M', 'GPT5B', 'GPT175B',
          'LLaMA7B', 'LLaMA13B', 'LLaMA70B')
_WORDS = ('the cat sat on the mat . a dog ran in the park . '
          'we like green tea . ').split()


def _write_jsonl(path: pathlib.Path, texts) -> None:
  path.write_text(''.join(json.dumps({'text': t}) + '\n' for t in texts))


def _tiny(cls, data_dir, **overrides):
  """A CPU-sized `cls` on the byte tokenizer (259 ids) and local files."""
  overrides.setdefault('ICI_MESH_SHAPE', [jax.device_count(), 1, 1])
  return nvidia.shrunk(
      cls, VOCAB_SIZE=259, VOCAB_PATH='bytes', PILE_DATA_DIR=data_dir,
      LAMBADA_DATA_DIR=data_dir, **overrides)()


class ConfigsTest(parameterized.TestCase):

  def test_every_experiment_resolves_under_its_pax_name_and_builds(self):
    for name in _NAMES:
      cls = experiment_registry.load(
          f'paxml.contrib.gpu.scripts_gpu.configs.{name}')
      self.assertIs(cls, getattr(configs, name))
      task_p = cls().task()  # Full size, configs only.
      self.assertEqual(task_p.model.lm_tpl.vocab_size, cls.VOCAB_SIZE)
    self.assertTrue(issubclass(configs.GPT5B, configs.Pile5B))

  def test_llama_lora_checkpoint_restore_and_boolq(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    for split in ('train', 'val'):
      (folder / f'{split}.jsonl').write_text(
          json.dumps({'passage': 'Tea is green.', 'question': 'is tea green',
                      'label': True}) + '\n'
          + json.dumps({'passage': 'Sky.', 'question': 'is it red',
                        'label': 0}) + '\n')
    exp = type('LoRA7B', (configs.LLaMA7B,), dict(
        USE_LORA=True, LORA_RANK=4, CHECKPOINT_RESTORE_PATH='/ckpt/base',
        BOOLQ_DATA_DIR=str(folder), VOCAB_PATH='bytes', MAX_SEQ_LEN=64,
        PERCORE_BATCH_SIZE=0.25))()
    task_p = exp.task()
    layer_p = task_p.model.lm_tpl.stacked_transformer_tpl
    layer_p = layer_p.transformer_layer_params_tpl
    qkv = layer_p.tr_atten_tpl.combined_qkv_proj_tpl
    self.assertIs(qkv.cls, lora_layers.LoraCombinedQKVProjection)
    self.assertEqual(qkv.rank, 4)
    rules = task_p.train.init_from_checkpoint_rules['/ckpt/base']
    self.assertEqual(list(rules.ignore_rules), [lora_utils.LORA_VARIABLES])
    self.assertEqual(list(rules.load_rules), [('(.*)', '{}')])
    # BoolQ rows: the prompt, then the answer, the only weighted label.
    inp = base_hyperparams.instantiate(exp.datasets()[1])
    batch = inp.get_next()
    prompts = ['Tea is green.\nquestion: is tea green?\nanswer:',
               'Sky.\nquestion: is it red?\nanswer:']
    for row, answer in enumerate(['yes', 'no']):
      weighted = np.flatnonzero(batch.weights[row])
      self.assertEqual(inp.vocabulary.decode(batch.labels[row, weighted]),
                       answer)
      self.assertEqual(weighted[0], len(prompts[row]))

  def test_missing_data_folder_is_named(self):
    with mock.patch.dict(os.environ, {'VOCAB_PATH': 'bytes'}):
      os.environ.pop('PILE_DATA_DIR', None)
      with self.assertRaisesRegex(ValueError, 'PILE_DATA_DIR.*train'):
        configs.Pile126M().datasets()
      empty = tempfile.mkdtemp()
      with self.assertRaisesRegex(ValueError, f'LAMBADA_DATA_DIR={empty}'):
        _tiny(configs.Lambada126M, empty).datasets()

  def test_lambada_input_weighs_the_last_word(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    _write_jsonl(folder / 'lambada_test.jsonl',
                 ['He said \u201chi\u201d to the cat', 'go home now'])
    inp_p = _tiny(configs.Lambada126M, str(folder)).datasets()[0]
    inp_p.batch_size = 2
    batch = base_hyperparams.instantiate(inp_p).get_next()
    for row, (prompt, word) in enumerate([('He said "hi" to the', ' cat'),
                                          ('go home', ' now')]):
      # Bytes shifted by 3; BOS 2 first; EOS 1 ends the target.
      seq = [2] + [b + 3 for b in (prompt + word).encode()] + [1]
      n = len(seq) - 1
      np.testing.assert_array_equal(batch.ids[row, :n], seq[:-1])
      np.testing.assert_array_equal(batch.labels[row, :n], seq[1:])
      weighted = np.flatnonzero(batch.weights[row])
      self.assertEqual(list(batch.labels[row, weighted]),
                       [b + 3 for b in word.encode()] + [1])

  def test_tiny_gpt126m_trains_on_local_pile_files(self):
    folder = pathlib.Path(tempfile.mkdtemp())
    (folder / 'train').mkdir()
    rng = np.random.default_rng(0)
    for shard in range(2):
      _write_jsonl(folder / 'train' / f'{shard:02d}.jsonl',
                   [' '.join(rng.choice(_WORDS, 12)) for _ in range(20)])
    _write_jsonl(folder / 'val.jsonl', ['the cat ran in the park'])
    exp = _tiny(configs.GPT126M, str(folder), LEARNING_RATE=3e-3,
                LR_COS_WARMUP=0, LR_COS_DECAY_START=1,
                LR_COS_DECAY_END=1000)
    configs_ = train.ExperimentConfigs.from_experiment(exp, 'GPT126MTiny')
    steps = 3
    configs_.apply_overrides([f'task.train.num_train_steps={steps}',
                              'task.train.summary_interval_steps=1',
                              'task.train.eval_interval_steps=100'])
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs_, executors.RunOptions(
        job_log_dir=job_dir, eval_on_test=False, decode_during_train=False,
        enable_checkpoint_saving=False))
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'train'))
    acc.Reload()
    loss = {e.step: e.value for e in acc.Scalars('loss')}
    self.assertEqual(sorted(loss), [1, 2, 3])
    # Uniform over 259 ids to start (small init): ln 259 = 5.56.
    self.assertAlmostEqual(loss[1], math.log(259), delta=0.1)
    self.assertLess(loss[3], loss[1] - 0.3)


if __name__ == '__main__':
  absltest.main()
