"""Tests of the default demo experiment (a short run of it)."""

import json
import math
import pathlib
import tempfile

from absl.testing import absltest
from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.demo import pydoc_lm
from praxis import tokenizers
from tensorboard.backend.event_processing import event_accumulator


def _write_jsonl(path: pathlib.Path, texts: list[str]) -> str:
  path.write_text(''.join(json.dumps({'text': t}) + '\n' for t in texts))
  return str(path)


class UnigramBaselineTest(absltest.TestCase):

  def test_matches_hand_computation(self):
    tmp = pathlib.Path(tempfile.mkdtemp())
    train_file = _write_jsonl(tmp / 'train.jsonl', ['ab', 'a'])
    test_file = _write_jsonl(tmp / 'test.jsonl', ['b'])
    tok = tokenizers.ByteTokenizer()
    # Train tokens: a, b, EOS, a, EOS -> counts a:2, b:1, EOS:2; total 5 plus
    # add-one over 259 ids = 264. Test tokens: b, EOS.
    expected = -(math.log(2 / 264) + math.log(3 / 264)) / 2
    self.assertAlmostEqual(
        pydoc_lm.unigram_log_pplx(train_file, test_file, tok), expected)


class DemoRunTest(absltest.TestCase):

  def test_short_run_beats_the_unigram_baseline_and_decodes_text(self):
    name = 'tasks.demo.pydoc_lm.PydocTransformerLmTest'
    exp = experiment_registry.get(name)()
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
    self.assertLess(log_pplx, baseline)

    records = [json.loads(x) for x in (
        job_dir / 'decoder_out' / 'prompts' /
        'decoder_out_60_shard_0.jsonl').read_text().splitlines()]
    self.assertLen(records, 8)
    for record in records:
      self.assertTrue(record['decoded'].startswith(record['prefix']))
    # After 60 steps greedy continuations are mostly blanks or EOS (how
    # many depends on the random init); some text is produced.
    continued = [r for r in records if r['decoded_substr'].strip()]
    self.assertNotEmpty(continued)


if __name__ == '__main__':
  absltest.main()
