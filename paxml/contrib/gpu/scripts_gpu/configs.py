"""NVIDIA's GPU experiments of Pax: GPT-3 126M/5B/175B and LLaMA.

Public names (as in Pax): GPT126MBase, GPT5BBase, GPT175BBase,
Synthetic126M, Synthetic5B, Synthetic175B, Pile126M, Pile5B, Pile175B,
Lambada126M, LLaMA7B, LLaMA13B, LLaMA70B; GPT126M (Pile126M, Pax 1.2's
name), GPT5B (Pile5B), GPT175B (Pile175B), registered subclasses where Pax
has aliases; `configure_gpt3_task`.

The Pile*, Lambada* and LLaMA* experiments read local files (see
`local_data`: PILE_DATA_DIR, LAMBADA_DATA_DIR, BOOLQ_DATA_DIR and the
tokenizer VOCAB_PATH, as environment variables or attributes):

  VOCAB_PATH=/data/gpt2.model PILE_DATA_DIR=/data/pile python -m paxml.main \\
      --fdl_config=paxml.contrib.gpu.scripts_gpu.configs.Pile126M \\
      --fdl.ICI_MESH_SHAPE=[8,1,1] --fdl.DCN_MESH_SHAPE=[1,1,1] \\
      --job_log_dir=/tmp/pile126m

LLaMA*: BoolQ fine-tuning or eval, with LoRA adapters (USE_LORA, LORA_RANK,
LORA_TARGET_LAYERS) and a restored base checkpoint
(CHECKPOINT_RESTORE_PATH).

The models are Pax's `CustomMetricsLM`: Lambada126M's eval reports
`acc_strict` (the last word and EOS all predicted right), the LLaMA*
`boolq_acc` (yes/no accuracy).
"""

from __future__ import annotations

from typing import Any

from jax import numpy as jnp
from paxml import experiment_registry
from paxml.contrib.gpu.scripts_gpu import checkpoint_utils
from paxml.contrib.gpu.scripts_gpu import llama_utils
from paxml.contrib.gpu.scripts_gpu import lora_utils
from paxml.contrib.gpu.scripts_gpu import tasks
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import c4
from paxml.tasks.lm.params import lm_cloud
from praxis import base_layer
from praxis.contrib.gpu.scripts_gpu.models import CustomMetricsLM
from praxis.layers import activations
from praxis.layers import checkpoint_policy

WeightInit = base_layer.WeightInit
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType

GPT_EOS_ID = 1


def configure_gpt3_task(cls: Any, task_p: Any) -> Any:
  """GPT-3's details: unscaled matmul embeddings, unbiased softmax without
  logit cap, biased attention without per-dim scale, tanh-GELU, LayerNorm
  epsilon LAYERNORM_EPSILON (float32 statistics), N(0, INIT_STD) weights."""
  model_p = task_p.model
  model_p.decoder_tpl.eos_id = GPT_EOS_ID
  model_p.decoder_tpl.seqlen = cls.MAX_SEQ_LEN
  model_p.apply_eval_sample_weights = True
  model_p.params_init = WeightInit.Gaussian(cls.INIT_STD)
  lm_p = model_p.lm_tpl
  softmax_p = lm_p.softmax_tpl
  softmax_p.params_init = WeightInit.Gaussian(cls.SOFTMAX_INIT_STD)
  softmax_p.feed_forward_tpl.has_bias = False
  softmax_p.soft_cap_logits = None
  embedding_p = lm_p.separate_embedding_tpl or softmax_p
  embedding_p.scale_sqrt_depth = False
  embedding_p.lookup_style = cls.EMBEDDING_LOOKUP_STYLE
  if cls.TRAINABLE_POSITION_EMB:
    lm_p.position_emb_tpl.lookup_style = cls.EMBEDDING_LOOKUP_STYLE
  layer_p = model_params.inner_stack(
      lm_p.stacked_transformer_tpl).transformer_layer_params_tpl
  for ln_p in (layer_p.ln_tpl, layer_p.tr_fflayer_tpl.ln_tpl,
               lm_p.final_ln_tpl):
    ln_p.epsilon = cls.LAYERNORM_EPSILON
    ln_p.reductions_in_fp32 = True
  layer_p.tr_fflayer_tpl.activation_tpl.approximate = True
  for atten_p in (layer_p.tr_atten_tpl, layer_p.cross_atten_tpl):
    if atten_p is not None:
      atten_p.internal_enable_per_dim_scale = False
      atten_p.use_bias = True
      atten_p.weight_split_dims_mapping.proj = ['data', 'mdl', None]
  return task_p


class GPT126MBase(c4.TransformerLmSpmdAdam):
  """GPT-3 126M (12 layers, width 768) on 8x8 GPUs."""

  MODEL_CLASS = CustomMetricsLM
  USE_REPEATED_LAYER = False
  ICI_MESH_SHAPE = [8, 1, 1]
  DCN_MESH_SHAPE = [8, 1, 1]
  FPROP_DTYPE = jnp.bfloat16
  MAX_STEPS = 600000
  MAX_SEQ_LEN = 2048
  VOCAB_SIZE = 50304
  PACKED_INPUT = True
  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 12
  NUM_HEADS = 12
  MODEL_DIMS = 768
  HIDDEN_DIMS = 3072
  DIMS_PER_HEAD = 64
  TRAINABLE_POSITION_EMB = True
  USE_BIAS = True
  LAYERNORM_EPSILON = 1e-5
  ATTEN_LOGIT_CAP = -1.0
  INIT_STD = 0.023
  SOFTMAX_INIT_STD = 0.023
  ACTIVATION_CLS = activations.GELU
  LEARNING_RATE = 6e-4
  ADAM_EPSILON_ROOT = 0.0
  ADAM_EPSILON = 1e-8
  WEIGHT_DECAY = 0.1
  ADAM_CLIP_THRESHOLD = -1.0
  CLIP_GRADIENT_NORM_TO_VALUE = 1.0
  LR_SCHEDULE = 'linear_rampup_cosine_decay'
  LR_COS_WARMUP = 636
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 500000
  R_COS_MIN_RATIO = 0.1  # Pax's typo: LR_COS_MIN_RATIO stays 0.1 anyway.
  LR_COS_MAX = 1.0

  def get_input_specs_provider_params(self) -> Any:
    return tasks.batch_specs_provider(self)

  def task(self) -> Any:
    self.TRAINABLE_PE_MAX_SEQ_LEN = self.MAX_SEQ_LEN
    task_p = configure_gpt3_task(self, super().task())
    task_p.train.num_train_steps = self.MAX_STEPS
    task_p.train.compute_steps_per_sec_interval_steps = (
        self.SUMMARY_INTERVAL_STEPS)
    return task_p


class GPT5BBase(GPT126MBase):
  """GPT-3 5B (24 layers, width 4096), FSDP over 32x8 GPUs."""

  USE_REPEATED_LAYER = True
  ICI_MESH_SHAPE = [1, 8, 1]
  DCN_MESH_SHAPE = [1, 32, 1]
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM
  MAX_STEPS = 75000
  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 24
  NUM_HEADS = 32
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 16384
  DIMS_PER_HEAD = 128
  INIT_STD = 0.01
  SOFTMAX_INIT_STD = 0.01
  LEARNING_RATE = 1.6e-4
  LR_COS_WARMUP = 115
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 62500
  CHECKPOINT_EVERY_N_STEPS = 250
  SUMMARY_INTERVAL_STEPS = 10

  def task(self) -> Any:
    task_p = super().task()
    model_params.inner_stack(
        task_p.model.lm_tpl.stacked_transformer_tpl).input_dropout_prob = 0.1
    return task_p


class GPT175BBase(GPT126MBase):
  """GPT-3 175B (96 layers, width 12288), FSDP over 32x8 GPUs."""

  NUM_LAYERS = 96
  NUM_HEADS = 96
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 50257
  USE_REPEATED_LAYER = True
  MAX_STEPS = 75000
  USE_GATED_ACTIVATION = False
  SEPARATE_EMBEDDING = False
  LEARNING_RATE = 2e-5
  LR_COS_WARMUP = 265
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 108600
  LR_COS_MIN_RATIO = 0.1
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_EVERY_N_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10
  ICI_MESH_SHAPE = [1, 8, 1]
  DCN_MESH_SHAPE = [1, 32, 1]
  PERCORE_BATCH_SIZE = 6


@experiment_registry.register
class Synthetic126M(GPT126MBase, lm_cloud.SyntheticDataset):
  MAX_STEPS = 100


@experiment_registry.register
class Synthetic5B(GPT5BBase, lm_cloud.SyntheticDataset):
  MAX_STEPS = 100


@experiment_registry.register
class Synthetic175B(GPT175BBase, lm_cloud.SyntheticDataset):
  MAX_STEPS = 100


@experiment_registry.register
class Pile126M(GPT126MBase, tasks.PileUnsupervisedDataset):
  """GPT126MBase trained on The Pile (PILE_DATA_DIR)."""


@experiment_registry.register
class Pile5B(GPT5BBase, tasks.PileUnsupervisedDataset):
  """GPT5BBase trained on The Pile."""


@experiment_registry.register
class Pile175B(GPT175BBase, tasks.PileUnsupervisedDataset):
  """GPT175BBase trained on The Pile."""


@experiment_registry.register
class Lambada126M(GPT126MBase, tasks.LambadaDataset):
  """GPT126MBase evaluated zero-shot on LAMBADA (LAMBADA_DATA_DIR)."""

  ICI_MESH_SHAPE = [8, 1, 1]

  def task(self) -> Any:
    task_p = super().task()
    task_p.train.always_use_train_for_model_init = False
    task_p.model.eval_task = 'lambada'  # acc_strict: last-word accuracy.
    return task_p


# Pax's other names, registered (as subclasses) so that --exp finds them.
@experiment_registry.register
class GPT126M(Pile126M):
  """Pile126M under its name up to Pax 1.2."""


@experiment_registry.register
class GPT5B(Pile5B):
  """Pile5B under Pax's alias."""


@experiment_registry.register
class GPT175B(Pile175B):
  """Pile175B under Pax's alias."""


@experiment_registry.register
class LLaMA7B(llama_utils.BaseLLaMA, tasks.BoolQDataset, lora_utils.LoRAMixin,
              checkpoint_utils.CheckpointRestoreMixin):
  """LLaMA 7B on BoolQ (BOOLQ_DATA_DIR), optionally with LoRA adapters and
  weights restored from CHECKPOINT_RESTORE_PATH."""

  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = 32
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 11008
  PERCORE_BATCH_SIZE = 16
  ICI_MESH_SHAPE = [1, 8, 1]
  DCN_MESH_SHAPE = [1, 1, 1]

  def task(self) -> Any:
    task_p = super().task()
    task_p.train.always_use_train_for_model_init = False
    task_p.model.apply_eval_sample_weights = True
    task_p.model.eval_task = 'boolq'  # boolq_acc: yes/no accuracy.
    task_p.model.boolq_yn_tokens = self.yes_no_tokens()
    task_p = self.configure_lora(task_p)
    return self.configure_checkpoint_restore(task_p)


@experiment_registry.register
class LLaMA13B(LLaMA7B):
  """LLaMA 13B (40 layers, width 5120)."""

  NUM_LAYERS = 40
  NUM_HEADS = 40
  MODEL_DIMS = 5120
  HIDDEN_DIMS = 13824
  PERCORE_BATCH_SIZE = 8


@experiment_registry.register
class LLaMA70B(LLaMA7B):
  """LLaMA 2 70B (80 layers, width 8192, 8 key/value heads), 2x8 GPUs."""

  NUM_LAYERS = 80
  NUM_HEADS = 64
  MODEL_DIMS = 8192
  HIDDEN_DIMS = 28672
  USE_MQA = True
  NUM_KV_HEADS = 8
  PERCORE_BATCH_SIZE = 4
  DCN_MESH_SHAPE = [1, 2, 1]
