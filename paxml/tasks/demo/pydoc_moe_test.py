"""The MoE demo (a GLaM LM) learns in a short run."""

import pathlib
import tempfile

from absl.testing import absltest
from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.demo import pydoc_lm
from paxml.tasks.demo import pydoc_moe
from praxis import base_hyperparams
from praxis import tokenizers
from praxis.layers import transformers
from tensorboard.backend.event_processing import event_accumulator


class PydocMoeTest(absltest.TestCase):

  def test_registered(self):
    for name in ('PydocMoeLm', 'PydocMoeLmTest'):
      self.assertIs(
          experiment_registry.get(f'tasks.demo.pydoc_moe.{name}'),
          getattr(pydoc_moe, name))

  def test_model_has_experts(self):
    lm = base_hyperparams.instantiate(
        pydoc_moe.PydocMoeLm().task()).model.lm_tpl
    block = lm.stacked_transformer_tpl
    self.assertEqual((block.num_layers, block.moe_layers), (2, [0]))
    self.assertIs(block.moe_layer_tpl.cls,
                  transformers.TransformerFeedForwardMoe)
    self.assertEqual(block.moe_layer_tpl.num_experts, 4)

  def test_short_run_beats_the_unigram_baseline(self):
    exp = pydoc_moe.PydocMoeLmTest()
    configs = train.ExperimentConfigs.from_experiment(exp, 'PydocMoeLmTest')
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, eval_on_test=True))
    files = exp._files()  # pylint: disable=protected-access
    tok = tokenizers.SentencePieceTokenizer(
        train_on=files['train'], vocab_size=exp.VOCAB_SIZE)
    baseline = pydoc_lm.unigram_log_pplx(files['train'], files['test'], tok)
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'eval_test_test'))
    acc.Reload()
    log_pplx = acc.Scalars('Metrics/log_pplx')[-1].value
    self.assertLess(log_pplx, baseline - 0.3)


if __name__ == '__main__':
  absltest.main()
