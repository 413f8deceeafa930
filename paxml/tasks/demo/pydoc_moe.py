"""A GLaM-style mixture-of-experts LM on the pydoc topics (the MoE demo).

Public names: PydocMoeLm, PydocMoeLmTest.

Same data, tokenizer, optimizer and unigram baseline as the default demo
(`pydoc_lm.PydocTransformerLm`); the model is built by
`praxis.layers.glam.GlamUniTransformerLmHParams` (unrepeated: one
StackedTransformer): every other layer's feed-forward, from the first, is
a top-2 mixture of experts (TransformerFeedForwardMoe); the model has gated
GELU feed-forwards, RmsNorms, relative position biases and a shared GShard
embedding-softmax with a z-loss. The MoE load-balancing loss is part of
`total_loss`. (Unrepeated because the trainer's summary writer does not yet
take the per-layer summary lists of a StackedTransformerRepeated.)

  python -m paxml.main --exp=tasks.demo.pydoc_moe.PydocMoeLm \\
      --job_log_dir=/tmp/pax_moe_demo --eval_on_test

The eval log-perplexity (`Metrics/log_pplx` under
`summaries/eval_test_test`) falls well below the unigram baseline that the
experiment logs at start-up.
"""

from paxml import experiment_registry
from paxml.tasks.demo import pydoc_lm
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import glam
from praxis.layers import models


@experiment_registry.register
class PydocMoeLm(pydoc_lm.PydocTransformerLm):
  """A 2-layer GLaM LM (the first layer MoE, 4 experts) on the pydoc topics."""

  MODEL_DIMS = 128
  NUM_LAYERS = 2  # An MoE layer and a dense layer.
  NUM_HEADS = 4
  HIDDEN_DIMS = 256
  NUM_EXPERTS = 4
  MOE_LOAD_BALANCE_LOSS_WEIGHT = 0.01
  Z_LOSS_WEIGHT = 1e-4

  def decode_datasets(self):
    return []

  def _lm(self) -> pax_fiddle.Config:
    return glam.GlamUniTransformerLmHParams(
        vocab_size=self.VOCAB_SIZE,
        model_dim=self.MODEL_DIMS,
        ff_dim=self.HIDDEN_DIMS,
        attention_num_heads=self.NUM_HEADS,
        attention_key_value_dim=self.MODEL_DIMS // self.NUM_HEADS,
        num_transformer_layers=self.NUM_LAYERS,
        moe=True,
        e_dim=self.NUM_EXPERTS,
        capacity_factor=2.0,
        moe_load_balance_loss_weight=self.MOE_LOAD_BALANCE_LOSS_WEIGHT,
        z_loss_weight=self.Z_LOSS_WEIGHT,
        repeat=False,
    )

  def task(self):
    task_p = super().task()
    task_p.name = 'pydoc_moe'
    task_p.model = pax_fiddle.Config(
        models.LanguageModel, name='lm', lm_tpl=self._lm(),
        params_init=base_layer.WeightInit.Xavier(1.0))
    return task_p


@experiment_registry.register
class PydocMoeLmTest(PydocMoeLm):
  """A short run, for tests: a narrow model (40 steps; log-perplexity about
  0.5 below the unigram baseline).

  It compiles as few programs as it can: summaries at every step (one train
  step program instead of two) and no evaluation on the training data.
  """

  SEQ_LEN = 64
  BATCH_SIZE = 16
  MODEL_DIMS = 32
  HIDDEN_DIMS = 64
  NUM_TRAIN_STEPS = 40
  WARMUP_STEPS = 5
  LEARNING_RATE = 4e-2

  def task(self):
    task_p = super().task()
    train = task_p.train
    train.eval_interval_steps = self.NUM_TRAIN_STEPS
    train.eval_skip_train = True
    train.summary_interval_steps = 1
    train.save_interval_steps = self.NUM_TRAIN_STEPS
    return task_p
