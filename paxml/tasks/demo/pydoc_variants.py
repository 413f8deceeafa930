"""Variants of the demo LM: multi-query attention and LoRA fine-tuning.

Public names: PydocMqaLm, PydocGqaLm, PydocLoraLm.

`PydocMqaLm` is `pydoc_lm.PydocTransformerLm` with
`multi_query_attention.MultiQueryDotProductAttention` (one key/value head
shared by the 4 query heads; `PydocGqaLm`: 2, grouped-query attention):

  python -m paxml.main --exp=tasks.demo.pydoc_variants.PydocMqaLm \\
      --job_log_dir=/tmp/pax_mqa

`PydocLoraLm` fine-tunes the demo model with LoRA adapters of rank
`LORA_RANK` in every attention projection and feed-forward linear
(`paxml.contrib.gpu.scripts_gpu.lora_utils.configure_lora`); only the
adapters train (the learner's `bprop_variable_inclusion`). Start it from a
trained `PydocTransformerLm` run by pointing `INIT_FROM_CHECKPOINT` at that
run's `checkpoints` directory (Pax's `init_from_checkpoint_rules`; the new
adapter variables keep their initial values, so step 0 equals the base
model):

  class MyLora(pydoc_variants.PydocLoraLm):
    INIT_FROM_CHECKPOINT = '/tmp/pax_demo/checkpoints'

  python -m paxml.main --exp=my_module.MyLora --job_log_dir=/tmp/pax_lora
"""

from paxml import experiment_registry
from paxml import tasks_lib
from paxml.contrib.gpu.scripts_gpu import lora_utils
from paxml.tasks.demo import pydoc_lm
from praxis import pax_fiddle
from praxis.layers import multi_query_attention


def _layer_tpl(task_p):
  stack = task_p.model.lm_tpl.stacked_transformer_tpl
  return stack.transformer_layer_params_tpl


@experiment_registry.register
class PydocMqaLm(pydoc_lm.PydocTransformerLm):
  """The demo LM with multi-query attention (NUM_KV_HEADS key/value heads)."""

  NUM_KV_HEADS = 1

  def task(self):
    task_p = super().task()
    _layer_tpl(task_p).tr_atten_tpl = pax_fiddle.Config(
        multi_query_attention.MultiQueryDotProductAttention,
        num_kv_heads=self.NUM_KV_HEADS)
    return task_p


@experiment_registry.register
class PydocGqaLm(PydocMqaLm):
  """The demo LM with grouped-query attention (2 key/value heads)."""

  NUM_KV_HEADS = 2


@experiment_registry.register
class PydocLoraLm(pydoc_lm.PydocTransformerLm):
  """LoRA fine-tuning of the demo LM (adapters only; see module doc)."""

  LORA_RANK = 8
  LORA_TARGET_LAYERS = 'all'
  INIT_FROM_CHECKPOINT: str | None = None
  NUM_TRAIN_STEPS = 300
  WARMUP_STEPS = 20
  LEARNING_RATE = 1e-2

  def task(self):
    task_p = super().task()
    lora_utils.configure_lora(task_p, self.LORA_RANK, self.LORA_TARGET_LAYERS)
    if self.INIT_FROM_CHECKPOINT:
      base = pydoc_lm.PydocTransformerLm()
      for name in ('VOCAB_SIZE', 'SEQ_LEN', 'BATCH_SIZE', 'MODEL_DIMS',
                   'NUM_LAYERS', 'NUM_HEADS', 'HIDDEN_DIMS'):
        setattr(base, name, getattr(self, name))
      task_p.train.init_from_checkpoint_rules = {
          self.INIT_FROM_CHECKPOINT: tasks_lib.CheckpointLoadingRules(
              task_p=pydoc_lm.PydocTransformerLm.task(base),
              load_rules=[(r'(.*)', '{}')],
              ignore_rules=[lora_utils.LORA_VARIABLES],
              input_specs_provider_p=(
                  base.get_input_specs_provider_params()))}
    return task_p
