"""The default demo: a small transformer LM on English text every Python has.

Public names: PydocTransformerLm, PydocTransformerLmTest, unigram_log_pplx.

The data are the documentation topics shipped in `pydoc_data.topics` (about
450k characters of English prose and code), split by topic into train and
test JSON-lines files; a SentencePiece model is trained on the training split
on first use. The model is a 2-layer transformer LM with rotary-free sinusoid
positions, trained with Adam for about five minutes on a 2-core laptop CPU:

  python -m paxml.main --exp=tasks.demo.pydoc_lm.PydocTransformerLm \\
      --job_log_dir=/tmp/pax_demo --eval_on_test --decode_during_train

The eval log-perplexity (`Metrics/log_pplx` under
`summaries/eval_test_test`) falls well below the unigram baseline that the
experiment logs at start-up, and the decode program continues test prompts
(`decoder_out/prompts/*.jsonl`, and a sample in the log).
"""

import collections
import json
import math

from absl import logging
from paxml import base_experiment
from paxml import experiment_registry
from paxml import grain_input
from paxml import learners
from paxml import tasks_lib
from paxml import text_corpus
from praxis import base_layer
from praxis import decoder_hparams
from praxis import optimizers
from praxis import pax_fiddle
from praxis import schedules
from praxis import tokenizers
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers


def unigram_log_pplx(train_file: str, test_file: str,
                     tokenizer: tokenizers.BaseTokenizer) -> float:
  """Per-token log-perplexity on `test_file` of train-set unigram frequencies.

  Counts include the EOS that ends each document (as the LM predicts it);
  add-one smoothing over the vocabulary.

  Args:
    train_file: JSONL with a `text` field, for the counts.
    test_file: JSONL scored.
    tokenizer: The experiment's tokenizer.

  Returns:
    The mean negative log-probability per test token, in nats.
  """

  def tokens(path):
    with open(path) as f:
      for line in f:
        yield from tokenizer.encode(json.loads(line)['text'])
        yield tokenizer.eos_id

  counts = collections.Counter(tokens(train_file))
  total = sum(counts.values()) + tokenizer.vocab_size
  test = list(tokens(test_file))
  return -sum(math.log((counts[t] + 1) / total) for t in test) / len(test)


@experiment_registry.register
class PydocTransformerLm(base_experiment.BaseExperiment):
  """A 2-layer, 128-wide transformer LM on the pydoc topics (see module doc)."""

  VOCAB_SIZE = 1024
  SEQ_LEN = 128
  BATCH_SIZE = 16
  MODEL_DIMS = 128
  NUM_LAYERS = 2
  NUM_HEADS = 4
  HIDDEN_DIMS = 512
  DROPOUT = 0.1
  NUM_TRAIN_STEPS = 1000
  LEARNING_RATE = 3e-3
  WARMUP_STEPS = 100
  PROMPT_LEN = 24
  DECODE_STEPS = 40

  def _files(self) -> dict[str, str]:
    return text_corpus.pydoc_topics_jsonl()

  def _tokenizer(self) -> pax_fiddle.Config[tokenizers.SentencePieceTokenizer]:
    return pax_fiddle.Config(
        tokenizers.SentencePieceTokenizer, train_on=self._files()['train'],
        vocab_size=self.VOCAB_SIZE)

  def _input(self, name: str, split: str, **kwargs):
    return pax_fiddle.Config(
        grain_input.LmTextInput, name=name, file_pattern=self._files()[split],
        tokenizer=self._tokenizer(), input_random_seed=1234, **kwargs)

  def datasets(self):
    return [
        self._input('train', 'train', is_training=True,
                    batch_size=self.BATCH_SIZE, seq_len=self.SEQ_LEN),
        self._input('test', 'test', batch_size=self.BATCH_SIZE,
                    seq_len=self.SEQ_LEN, reset_for_eval=True),
    ]

  def decode_datasets(self):
    return [self._input('prompts', 'test', batch_size=8, pack=False,
                        add_eos=False, seq_len=self.PROMPT_LEN,
                        eval_loop_num_batches=1)]

  def validate(self):
    files = self._files()
    tokenizer = base_layer.instantiate(self._tokenizer())
    logging.info('Unigram baseline: test log_pplx %.3f (a model must beat it).',
                 unigram_log_pplx(files['train'], files['test'], tokenizer))

  def task(self):
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='pydoc_lm')
    lm = pax_fiddle.Config(
        transformer_models.TransformerLm, model_dims=self.MODEL_DIMS,
        vocab_size=self.VOCAB_SIZE, packed_input=True)
    stack = pax_fiddle.Config(
        transformers.StackedTransformer, num_layers=self.NUM_LAYERS,
        model_dims=self.MODEL_DIMS, hidden_dims=self.HIDDEN_DIMS,
        num_heads=self.NUM_HEADS, dropout_prob=self.DROPOUT)
    lm.stacked_transformer_tpl = stack
    lm.softmax_tpl.scale_sqrt_depth = True
    task_p.model = pax_fiddle.Config(
        models.LanguageModel, name='lm', lm_tpl=lm,
        decoder_tpl=decoder_hparams.GreedyDecoderHParams(
            seqlen=self.PROMPT_LEN + self.DECODE_STEPS,
            max_decode_steps=self.DECODE_STEPS, eos_id=1),
        params_init=base_layer.WeightInit.Xavier(1.0))
    train = task_p.train
    train.num_train_steps = self.NUM_TRAIN_STEPS
    train.summary_interval_steps = 50
    train.eval_interval_steps = 250
    train.decode_interval_steps = 500
    train.save_interval_steps = 500
    train.learner = pax_fiddle.Config(
        learners.Learner, loss_name='total_loss',
        optimizer=pax_fiddle.Config(
            optimizers.Adam, learning_rate=self.LEARNING_RATE,
            clip_gradient_norm_to_value=1.0, weight_decay=0.0,
            lr_schedule=pax_fiddle.Config(
                schedules.LinearRampupCosineDecay,
                warmup_steps=self.WARMUP_STEPS,
                decay_start=self.WARMUP_STEPS + 1,
                decay_end=self.NUM_TRAIN_STEPS, min_ratio=0.1, max=1.0)))
    return task_p


@experiment_registry.register
class PydocTransformerLmTest(PydocTransformerLm):
  """A short run of the demo, for tests."""

  NUM_TRAIN_STEPS = 60
  WARMUP_STEPS = 10

  def task(self):
    task_p = super().task()
    task_p.train.eval_interval_steps = 60
    task_p.train.decode_interval_steps = 60
    task_p.train.summary_interval_steps = 20
    return task_p
