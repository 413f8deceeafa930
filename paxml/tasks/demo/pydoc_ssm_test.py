"""The SSM demo learns: a shrunk run beats the unigram baseline, and decodes."""

import json
import pathlib
import tempfile

from absl.testing import absltest
from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.demo import pydoc_lm
from paxml.tasks.demo import pydoc_ssm
from praxis import tokenizers
from praxis.layers import ssm_transformers
from tensorboard.backend.event_processing import event_accumulator


class _Shrunk(pydoc_ssm.PydocSsmLm):
  """One layer, shorter sequences, no dropout, and as few compiled programs
  as possible (summaries at every step: one train-step program; no
  evaluation on the training data)."""

  NUM_LAYERS = 1
  DROPOUT = 0.0
  SEQ_LEN = 64
  BATCH_SIZE = 16
  NUM_TRAIN_STEPS = 60
  WARMUP_STEPS = 5
  LEARNING_RATE = 1e-2
  PROMPT_LEN = 8
  DECODE_STEPS = 8

  def datasets(self):
    train_p, test_p = super().datasets()
    test_p.eval_loop_num_batches = 4  # Instead of the whole test split.
    test_p.reset_for_eval = False
    return [train_p, test_p]

  def task(self):
    task_p = super().task()
    train_p = task_p.train
    train_p.eval_interval_steps = self.NUM_TRAIN_STEPS
    train_p.decode_interval_steps = self.NUM_TRAIN_STEPS
    train_p.summary_interval_steps = 1
    train_p.eval_skip_train = True
    train_p.save_interval_steps = self.NUM_TRAIN_STEPS
    return task_p


class PydocSsmLmTest(absltest.TestCase):

  def test_registered_with_ssm_layers(self):
    exp = experiment_registry.get('tasks.demo.pydoc_ssm.PydocSsmLm')()
    stack = exp.task().model.lm_tpl.stacked_transformer_tpl
    layer = stack.transformer_layer_params_tpl
    self.assertIs(layer.__fn_or_cls__, ssm_transformers.SSMGated)
    self.assertEqual(layer.ssm_dim, exp.MODEL_DIMS)
    self.assertGreaterEqual(layer.ssm_l_max, exp.SEQ_LEN)

  def test_short_run_beats_the_unigram_baseline_and_decodes(self):
    exp = _Shrunk()
    name = 'tasks.demo.pydoc_ssm_test._Shrunk'
    configs = train.ExperimentConfigs.from_experiment(exp, name)
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, eval_on_test=True, decode_during_train=True))

    files = exp._files()  # pylint: disable=protected-access
    tok = tokenizers.SentencePieceTokenizer(
        train_on=files['train'], vocab_size=exp.VOCAB_SIZE)
    baseline = pydoc_lm.unigram_log_pplx(files['train'], files['test'], tok)
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'eval_test_test'))
    acc.Reload()
    log_pplx = acc.Scalars('Metrics/log_pplx')[-1].value
    self.assertLess(log_pplx, baseline - 0.3)

    records = [json.loads(x) for x in (
        job_dir / 'decoder_out' / 'prompts' /
        f'decoder_out_{exp.NUM_TRAIN_STEPS}_shard_0.jsonl'
    ).read_text().splitlines()]
    self.assertLen(records, 8)
    for record in records:
      self.assertTrue(record['decoded'].startswith(record['prefix']))


if __name__ == '__main__':
  absltest.main()
