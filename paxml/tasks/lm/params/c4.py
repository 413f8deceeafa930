r"""Decoder-only LM experiments on a local copy of C4 (Pax's `c4`).

Public names: C4_DATA_DIR_ENV, GPT_EOS_ID, GPT_SPM_NAME, c4_files, C4Input,
c4_datasets, C4UnsupervisedDataset, set_adam_and_learning_rate_schedule,
configure_gpt3_task, TransformerLmSpmdAdam, TransformerLmSpmdPipelineAdam,
LmCloudSpmdAdam, LmCloudSpmdAdamLimitSteps, EarlyStoppingFn, C4SpmdAdam,
C4SpmdGpt3AdamOrgHP, C4SpmdGpt3AdamOrgHPBS1p5k1536Replicas,
C4SpmdGpt3L16AdamOrgHP, C4SpmdPipelineAdam, C4SpmdPipelineGpt3AdamOrgHP,
C4SpmdPipelineGpt3AdamMLPerfHP, C4SpmdPipelineGpt3AdamOrgHPBS1p5k768Replicas,
C4SpmdPipelineGpt3AdamMLPerfHPBS1p5k768Replicas,
C4SpmdPipelineGpt3AdamMLPerfHPBS2k512Replicas,
C4SpmdPipelineGpt3AdamMLPerfHPBS3k768Replicas,
C4SpmdPipelineGpt3AdamMLPerfHPBS4k1024Replicas,
C4SpmdPipelineGpt3AdamMLPerfHPBS8k1024Replicas,
C4SpmdPipelineGpt3SmallAdam64Replicas, C4SpmdPipelineGpt3SmallAdam8Replicas,
C4Spmd1BAdam4Replicas, C4Spmd1BAdam4ReplicasLimitSteps, C4Spmd2BAdam4Replicas,
C4Spmd16BAdam32Replicas, C4Spmd32BAdam64Replicas.

No TensorFlow, SeqIO or TFDS: `C4Input` reads the `c4/en` shards from a
local folder (`$C4_DATA_DIR`, or the input's `data_dir` field) with
`paxml.grain_input.LmTextInput`. The files are those of the allenai/c4
`en/` release as they ship, `c4-train.00000-of-01024.json.gz` ..., or
decompressed (`.json`): JSON lines with a `text` field (`.jsonl` and
`.array_record` work too). Tokens come
from Pax's GPT SentencePiece model `c4_en_301_5Mexp2_spm.model` when that
file is in the folder (or `spm_model_path` names one), else from the
input's `tokenizer` (bytes by default). Training packs documents into rows of
MAX_SEQ_LEN tokens; eval reads the first validation shard unpacked:

  C4_DATA_DIR=/data/c4/en python -m paxml.main \
      --exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas --job_log_dir=/tmp/c4

Families (`C4SpmdAdam`, `C4SpmdGpt3AdamOrgHP`, `C4SpmdPipelineAdam`,
`C4SpmdPipelineGpt3AdamOrgHP`) subclass the Adam bases here; the sized
experiments subclass a family and change CLASS_ATTRs. Two of Pax's typos are
fixed: `C4SpmdPipelineGpt3AdamOrgHPBS1p5k768Replicas` uses MICROBATCH_SIZE 8
and `C4SpmdPipelineGpt3SmallAdam64Replicas` PERCORE_BATCH_SIZE 8, as their
docstrings intend.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from absl import logging
import jax
from jax import numpy as jnp

from paxml import base_experiment
from paxml import experiment_registry
from paxml import grain_input
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import _c4_recipes
from paxml.tasks.lm.params import lm_cloud
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import tokenizers
from praxis.layers import activations
from praxis.layers import checkpoint_policy

WeightInit = base_layer.WeightInit
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
TaskConfig = model_params.TaskConfig

C4_DATA_DIR_ENV = 'C4_DATA_DIR'
GPT_EOS_ID = 1
GPT_SPM_NAME = 'c4_en_301_5Mexp2_spm.model'
_SUFFIXES = ('.json', '.jsonl', '.json.gz', '.jsonl.gz', '.array_record')


# ----------------------------------------------------------------------------
# Data.
# ----------------------------------------------------------------------------


def c4_files(data_dir: str | None, split: str, max_files: int = 0
             ) -> list[str]:
  """The sorted C4 files of `split` in `data_dir` (or in $C4_DATA_DIR).

  Args:
    data_dir: The folder; None or '' reads the environment variable.
    split: 'train' or 'validation'.
    max_files: Keep only the first this many files (0: all).

  Returns:
    The paths.

  Raises:
    ValueError: If there is no folder or it holds no file of the split.
  """
  directory = data_dir or os.environ.get(C4_DATA_DIR_ENV, '')
  found = sorted(
      f for f in glob.glob(os.path.join(directory, f'c4-{split}.*'))
      if f.endswith(_SUFFIXES)) if directory else []
  if not found:
    where = (f'{directory} holds none' if directory
             else f'{C4_DATA_DIR_ENV} is not set')
    raise ValueError(
        f'C4 data not found: set {C4_DATA_DIR_ENV} (or the input\'s data_dir '
        f'field) to a folder of the c4/en files c4-{split}.NNNNN-of-NNNNN'
        f'.json.gz (as released), .json (gunzipped) or .array_record, but '
        f'{where}.')
  return found[:max_files] if max_files > 0 else found


class C4Input(grain_input.LmTextInput):
  """C4 documents from local files, as LmTextInput batches.

  Attributes:
    data_dir: Folder of the `c4-<split>.*` files; None reads $C4_DATA_DIR.
    split: 'train' or 'validation'.
    max_files: Read only the first this many files of the split (0: all).
    spm_model_path: SentencePiece model of the tokens; None uses
      `<data_dir>/c4_en_301_5Mexp2_spm.model` if it exists, else `tokenizer`.
  """

  data_dir: str | None = None
  split: str = 'train'
  max_files: int = 0
  spm_model_path: str | None = None

  def __post_init__(self):
    if self.file_pattern is None:
      self.file_pattern = c4_files(self.data_dir, self.split, self.max_files)
    directory = self.data_dir or os.environ.get(C4_DATA_DIR_ENV, '')
    spm_path = self.spm_model_path or os.path.join(directory, GPT_SPM_NAME)
    if os.path.isfile(spm_path):
      self.tokenizer = pax_fiddle.Config(tokenizers.SentencePieceTokenizer,
                                         model_path=spm_path)
    elif self.spm_model_path:
      raise ValueError(f'C4Input {self.name!r}: spm_model_path='
                       f'{self.spm_model_path!r} is not a file.')
    else:
      logging.warning('C4Input: no %s in %s; using the configured tokenizer.',
                      GPT_SPM_NAME, directory)
    super().__post_init__()


def c4_datasets(percore_batch_size: float, max_seq_len: int,
                data_dir: str | None = None) -> list[pax_fiddle.Config[Any]]:
  """Train and eval C4Input configs, batched for this host's devices.

  As Pax: PERCORE_BATCH_SIZE rows per local device; below 1, several hosts'
  devices share a row and fewer hosts feed the global batch.

  Args:
    percore_batch_size: Rows per local device.
    max_seq_len: Tokens per row.
    data_dir: The C4 folder (default: $C4_DATA_DIR when the input is built).

  Returns:
    [train input, eval input] configs.
  """
  devices, hosts = jax.local_device_count(), jax.process_count()
  batch_size, num_hosts = max(1, int(percore_batch_size * devices)), hosts
  if percore_batch_size < 1 and hosts > 1:
    batch_size = devices
    num_hosts = int(percore_batch_size * devices * hosts) // devices
  data_dir = data_dir or os.environ.get(C4_DATA_DIR_ENV)

  def one(train: bool) -> pax_fiddle.Config[C4Input]:
    return pax_fiddle.Config(
        C4Input, name='C4Train' if train else 'C4Validation',
        data_dir=data_dir, split='train' if train else 'validation',
        max_files=0 if train else 1, seq_len=max_seq_len, pack=train,
        is_training=train, reset_for_eval=not train,
        input_random_seed=9876 if train else 4321, batch_size=batch_size,
        num_infeed_hosts=num_hosts)

  return [one(True), one(False)]


class C4UnsupervisedDataset(base_experiment.BaseExperiment):
  """The C4 datasets, for experiments written Pax's way (see lm_cloud)."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 1024

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return c4_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)


# ----------------------------------------------------------------------------
# Task settings.
# ----------------------------------------------------------------------------


set_adam_and_learning_rate_schedule = (
    _c4_recipes.set_adam_and_learning_rate_schedule)
configure_gpt3_task = _c4_recipes.configure_gpt3_task


def _c4_decoding(exp: Any, task_p: TaskConfig) -> TaskConfig:
  task_p.model.decoder_tpl.eos_id = GPT_EOS_ID
  task_p.model.decoder_tpl.seqlen = exp.MAX_SEQ_LEN
  return task_p


def _adam_task(exp: Any, task_p: TaskConfig) -> TaskConfig:
  layer_p = model_params.inner_stack(
      task_p.model.lm_tpl.stacked_transformer_tpl).transformer_layer_params_tpl
  layer_p.tr_atten_tpl.use_bias = exp.USE_BIAS
  return set_adam_and_learning_rate_schedule(exp, task_p)


# ----------------------------------------------------------------------------
# Adam bases.
# ----------------------------------------------------------------------------


class TransformerLmSpmdAdam(model_params.TransformerLmSpmdAdafactor):
  """TransformerLmSpmdAdafactor trained with Adam (ADAM_*, LR_* attributes)."""

  NUM_LAYERS = 32
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.float32
  PACKED_INPUT = True
  USE_BIAS = False
  EMBEDDING_LOOKUP_STYLE = 'matmul'
  LEARNING_RATE = 1e-3
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.99
  ADAM_CLIP_THRESHOLD = 1.0
  ADAM_EPSILON = 1e-6
  ADAM_EPSILON_ROOT = 0.0
  LR_SCHEDULE = 'linear_rampup_exponential_decay'
  LR_LRED_WARMUP = 4000
  LR_LRED_DECAY_START = 4001
  LR_LRED_DECAY_END = 300000
  LR_LRED_MIN_RATIO = 0.1
  LR_LRED_MAX = 1.0
  LR_COS_MIN_RATIO = 0.1
  LR_COS_MAX = 1.0
  LR_COS_WARMUP = 4000
  LR_COS_DECAY_START = 4001
  LR_COS_DECAY_END = 300000

  def task(self) -> TaskConfig:
    return _adam_task(self, super().task())


class TransformerLmSpmdPipelineAdam(
    model_params.TransformerLmSpmdPipelineAdafactor):
  """TransformerLmSpmdPipelineAdafactor trained with Adam (as above)."""

  NUM_LAYERS = 32
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.float32
  PACKED_INPUT = True
  USE_BIAS = False
  EMBEDDING_LOOKUP_STYLE = 'matmul'
  LEARNING_RATE = 1e-3
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.99
  ADAM_CLIP_THRESHOLD = 1.0
  ADAM_EPSILON = 1e-6
  ADAM_EPSILON_ROOT = 0.0
  LR_SCHEDULE = 'linear_rampup_exponential_decay'
  LR_LRED_WARMUP = 4000
  LR_LRED_DECAY_START = 4001
  LR_LRED_DECAY_END = 300000
  LR_LRED_MIN_RATIO = 0.1
  LR_LRED_MAX = 1.0
  LR_COS_MIN_RATIO = 0.1
  LR_COS_MAX = 1.0
  LR_COS_WARMUP = 4000
  LR_COS_DECAY_START = 4001
  LR_COS_DECAY_END = 300000

  def task(self) -> TaskConfig:
    return _adam_task(self, super().task())


@experiment_registry.register
class LmCloudSpmdAdam(TransformerLmSpmdAdam):
  """A 2-layer SPMD model with Adam on synthetic data, on 8 devices."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 2
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 4, 2)

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return lm_cloud.synthetic_datasets(self.PERCORE_BATCH_SIZE,
                                       self.MAX_SEQ_LEN)


@experiment_registry.register
class LmCloudSpmdAdamLimitSteps(LmCloudSpmdAdam):
  """LmCloudSpmdAdam stopped after 4,000 steps."""

  NUM_TRAIN_STEPS = 4000


class EarlyStoppingFn(base_hyperparams.FiddleBaseParameterizable):
  """Stops training once C4 validation log-perplexity reaches a target.

  Set as `task_p.early_stopping_fn`; the runner calls it after each eval.

  Attributes:
    target_log_pplx: Stop when eval_test_C4Validation's log_pplx is at or
      below this.
  """

  target_log_pplx: float | None = None

  def __call__(self, metrics: dict[str, float], running_mode: Any,
               global_step: int, is_last_ckpt: bool,
               checkpoint_path: Any) -> bool:
    """True when training should stop."""
    del running_mode, global_step, is_last_ckpt, checkpoint_path
    log_pplx = metrics.get('eval_test_C4Validation/metrics/log_pplx')
    if log_pplx is None or self.target_log_pplx is None:
      return False
    return log_pplx <= self.target_log_pplx


# ----------------------------------------------------------------------------
# C4 families and sizes.
# ----------------------------------------------------------------------------


@experiment_registry.register
class C4SpmdAdam(TransformerLmSpmdAdam):
  """Base decoder-only Transformer on C4 (24 layers, D 2048), 8 devices."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 24
  NUM_HEADS = 32
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 32128
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 1000
  ICI_MESH_SHAPE = (1, 4, 2)

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return c4_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> TaskConfig:
    return _c4_decoding(self, super().task())


class C4SpmdGpt3AdamOrgHP(TransformerLmSpmdAdam):
  """GPT-3 175B with its original hyper-parameters, on C4.

  From the paper, after matching convergence with NVIDIA's Megatron-LM.
  Sizes below set the mesh and batch.
  """

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 2048
  NUM_LAYERS = 96
  NUM_HEADS = 96
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 50257
  USE_REPEATED_LAYER = True
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  SEPARATE_EMBEDDING = False
  TRAINABLE_POSITION_EMB = True
  TRAINABLE_PE_MAX_SEQ_LEN = 16384
  ATTEN_LOGIT_CAP = -1.0  # No cap.
  LEARNING_RATE = 6e-5
  WEIGHT_DECAY = 0.1
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.95
  ADAM_EPSILON = 1e-8
  ADAM_CLIP_THRESHOLD = -1.0  # No update clipping.
  CLIP_GRADIENT_NORM_TO_VALUE = 1.0
  LAYERNORM_EPSILON = 1e-5
  LR_SCHEDULE = 'linear_rampup_cosine_decay'  # Steps of a 1.5k batch.
  LR_COS_WARMUP = 265
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 108600
  LR_COS_MAX = 1.0
  LR_COS_MIN_RATIO = 0.1
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_EVERY_N_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10
  ICI_MESH_SHAPE = (1, 4, 2)

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return c4_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> TaskConfig:
    return configure_gpt3_task(self, _c4_decoding(self, super().task()))


@experiment_registry.register
class C4SpmdGpt3AdamOrgHPBS1p5k1536Replicas(C4SpmdGpt3AdamOrgHP):
  """GPT-3 in fp32 on 1536 replicas, global batch 1536."""

  VOCAB_SIZE = 51200  # Padded to a TPU-friendly size.
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = (1, 64, 24)
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 25
  SUMMARY_INTERVAL_STEPS = 1


@experiment_registry.register
class C4SpmdGpt3L16AdamOrgHP(C4SpmdGpt3AdamOrgHP):
  """16 layers of GPT-3 in bf16 on 64 replicas, global batch 192."""

  NUM_LAYERS = 16
  FPROP_DTYPE = jnp.bfloat16
  PERCORE_BATCH_SIZE = 3
  EVAL_INTERVAL_STEPS = 25000
  ICI_MESH_SHAPE = (1, 16, 4)


@experiment_registry.register
class C4SpmdPipelineAdam(TransformerLmSpmdPipelineAdam):
  """Base pipelined decoder-only Transformer on C4: 2 stages, 8 devices."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 24
  NUM_HEADS = 32
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 32128
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 1000
  MICROBATCH_SIZE = 2
  ICI_MESH_SHAPE = (2, 1, 2, 2)
  NUM_STAGES = 2
  EMB_W_DATA_DIMS = (model_params.REPLICA_AXIS, model_params.DATA_AXIS)

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return c4_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> TaskConfig:
    return _c4_decoding(self, super().task())


class C4SpmdPipelineGpt3AdamOrgHP(TransformerLmSpmdPipelineAdam):
  """Pipelined GPT-3 175B with its original hyper-parameters, on C4."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 2048
  NUM_LAYERS = 96
  NUM_HEADS = 96
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = None
  VOCAB_SIZE = 50257
  USE_REPEATED_LAYER = False
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  SEPARATE_EMBEDDING = False
  TRAINABLE_POSITION_EMB = True
  TRAINABLE_PE_MAX_SEQ_LEN = 16384
  ATTEN_LOGIT_CAP = -1.0
  LEARNING_RATE = 6e-5
  WEIGHT_DECAY = 0.1
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.95
  ADAM_EPSILON = 1e-8
  ADAM_CLIP_THRESHOLD = -1.0
  CLIP_GRADIENT_NORM_TO_VALUE = 1.0
  LAYERNORM_EPSILON = 1e-5
  LR_SCHEDULE = 'linear_rampup_cosine_decay'
  LR_COS_WARMUP = 265
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 108600
  LR_COS_MAX = 1.0
  LR_COS_MIN_RATIO = 0.1
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_EVERY_N_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10
  MICROBATCH_SIZE = 2
  ICI_MESH_SHAPE = (2, 1, 2, 2)
  NUM_STAGES = 2
  EMB_W_DATA_DIMS = (model_params.REPLICA_AXIS, model_params.DATA_AXIS)

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return c4_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> TaskConfig:
    return configure_gpt3_task(self, _c4_decoding(self, super().task()))


@experiment_registry.register
class C4SpmdPipelineGpt3AdamOrgHPBS1p5k768Replicas(C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 768 replicas, global batch 1536."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 2
  NUM_STAGES = 8
  ICI_MESH_SHAPE = (8, 1, 8, 12)
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 25
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 50
  STREAM_IO = False


class C4SpmdPipelineGpt3AdamMLPerfHP(C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 as MLPerf's reference trains it (a base: subclasses set
  the eval and checkpoint intervals; the learning rate and cosine steps
  follow from the global batch, see set_adam_and_learning_rate_schedule)."""

  VOCAB_SIZE = 51200
  FPROP_DTYPE = jnp.float32
  SUMMARY_INTERVAL_STEPS = 1
  EVAL_INTERVAL_STEPS = None
  CHECKPOINT_EVERY_N_STEPS = None
  CHECKPOINT_MAX_TO_KEEP = 100
  LEARNING_RATE = None
  LR_COS_WARMUP = None
  LR_COS_DECAY_START = None
  LR_COS_DECAY_END = None


@experiment_registry.register
class C4SpmdPipelineGpt3AdamMLPerfHPBS1p5k768Replicas(
    C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 768 replicas, global batch 1536 (MLPerf)."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 2
  NUM_STAGES = 8
  ICI_MESH_SHAPE = (8, 1, 8, 12)
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 16
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 32
  LEARNING_RATE = 2e-5
  STREAM_IO = False


@experiment_registry.register
class C4SpmdPipelineGpt3AdamMLPerfHPBS2k512Replicas(
    C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 512 replicas, global batch 2048 (MLPerf)."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 4
  NUM_STAGES = 8
  ICI_MESH_SHAPE = (8, 1, 8, 8)
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 12
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 24
  LEARNING_RATE = 2e-5
  STREAM_IO = True
  LR_COS_WARMUP = 199
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 81450


@experiment_registry.register
class C4SpmdPipelineGpt3AdamMLPerfHPBS3k768Replicas(
    C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 768 replicas, global batch 3072 (MLPerf)."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 4
  NUM_STAGES = 4
  ICI_MESH_SHAPE = (4, 1, 16, 12)
  MICROBATCH_SIZE = 16
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 100
  EVAL_INTERVAL_STEPS = 8
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 16
  LEARNING_RATE = 2e-5
  STREAM_IO = True
  LR_COS_WARMUP = 133
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 54300


@experiment_registry.register
class C4SpmdPipelineGpt3AdamMLPerfHPBS4k1024Replicas(
    C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 1024 replicas, global batch 4096 (MLPerf)."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 4
  NUM_STAGES = 8
  ICI_MESH_SHAPE = (8, 1, 8, 16)
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 36
  EVAL_INTERVAL_STEPS = 6
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 12
  LEARNING_RATE = 3e-5
  STREAM_IO = True
  LR_COS_WARMUP = 99
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 40725


@experiment_registry.register
class C4SpmdPipelineGpt3AdamMLPerfHPBS8k1024Replicas(
    C4SpmdPipelineGpt3AdamOrgHP):
  """Pipelined GPT-3 in fp32 on 1024 replicas, global batch 8192 (MLPerf)."""

  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 8
  NUM_STAGES = 4
  ICI_MESH_SHAPE = (4, 1, 16, 16)
  MICROBATCH_SIZE = 16
  FPROP_DTYPE = jnp.float32
  CHECKPOINT_MAX_TO_KEEP = 36
  EVAL_INTERVAL_STEPS = 3
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 6
  LEARNING_RATE = 3e-5
  STREAM_IO = True
  LR_COS_WARMUP = 50
  LR_COS_DECAY_START = LR_COS_WARMUP + 1
  LR_COS_DECAY_END = 20363


@experiment_registry.register
class C4SpmdPipelineGpt3SmallAdam64Replicas(C4SpmdPipelineGpt3AdamOrgHP):
  """GPT-3 XL (1.3B) in bf16, 4 stages on 64 replicas, global batch 512."""

  NUM_STAGES = 4
  NUM_LAYERS = 24
  NUM_HEADS = 24
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 8
  MICROBATCH_SIZE = 16
  FPROP_DTYPE = jnp.bfloat16
  LEARNING_RATE = 2.0e-4
  ICI_MESH_SHAPE = (4, 1, 4, 4)
  CHECKPOINT_MAX_TO_KEEP = 1000
  EVAL_INTERVAL_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 1
  CHECKPOINT_EVERY_N_STEPS = 200


@experiment_registry.register
class C4SpmdPipelineGpt3SmallAdam8Replicas(C4SpmdPipelineGpt3AdamOrgHP):
  """GPT-3 XL (1.3B) in bf16, 2 stages on 8 replicas, global batch 512."""

  NUM_STAGES = 2
  NUM_LAYERS = 24
  NUM_HEADS = 24
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 128
  VOCAB_SIZE = 51200
  PERCORE_BATCH_SIZE = 64
  MICROBATCH_SIZE = 8
  FPROP_DTYPE = jnp.bfloat16
  LEARNING_RATE = 2.0e-4
  ICI_MESH_SHAPE = (2, 1, 2, 2)
  CHECKPOINT_MAX_TO_KEEP = 1000
  EVAL_INTERVAL_STEPS = 10
  SUMMARY_INTERVAL_STEPS = 5
  CHECKPOINT_EVERY_N_STEPS = 200


@experiment_registry.register
class C4Spmd1BAdam4Replicas(C4SpmdAdam):
  """1B parameters on 4 replicas; global batch 1 * 4 * 1 * 32 = 128."""

  NUM_LAYERS = 13
  MODEL_DIMS = 2560
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 20
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32000
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 4, 1)


@experiment_registry.register
class C4Spmd1BAdam4ReplicasLimitSteps(C4Spmd1BAdam4Replicas):
  """C4Spmd1BAdam4Replicas stopped after 15,000 steps."""

  NUM_TRAIN_STEPS = 15000


@experiment_registry.register
class C4Spmd2BAdam4Replicas(C4SpmdAdam):
  """2B parameters on 4 replicas; global batch 1 * 4 * 1 * 32 = 128."""

  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 24
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 32
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32000
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 4, 1)

  def task(self) -> TaskConfig:
    task_p = super().task()
    task_p.train.learner.repeat_prefix_sep = '_'
    return task_p


@experiment_registry.register
class C4Spmd16BAdam32Replicas(C4SpmdAdam):
  """16B parameters on 32 replicas; global batch 1 * 2 * 16 * 16 = 512."""

  NUM_LAYERS = 36
  MODEL_DIMS = 6144
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 48
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32000
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 16, 2)

  def task(self) -> TaskConfig:
    task_p = super().task()
    task_p.train.learner.repeat_prefix_sep = '_'
    return task_p


@experiment_registry.register
class C4Spmd32BAdam64Replicas(C4SpmdAdam):
  """32B parameters on 64 replicas; global batch 1 * 16 * 4 * 8 = 512."""

  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = 64
  DIMS_PER_HEAD = 128
  PERCORE_BATCH_SIZE = 8
  MAX_SEQ_LEN = 1024
  VOCAB_SIZE = 32000
  FPROP_DTYPE = jnp.bfloat16
  USE_REPEATED_LAYER = True
  SUMMARY_INTERVAL_STEPS = 10
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  ICI_MESH_SHAPE = (1, 16, 4)

  def task(self) -> TaskConfig:
    task_p = super().task()
    task_p.train.learner.repeat_prefix_sep = '_'
    return task_p
