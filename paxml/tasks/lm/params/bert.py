"""BERT masked-LM experiments (Pax's `bert`), on synthetic or local text.

Public names: BertTextInput, bert_datasets, BertDataset, BertAdamL4H128,
BertSpmd, BertSpmdL4H128, BertSpmdL33H12kBiggerBatch,
BertSpmdL33H12kBiggerBatch8x8x16, BertSpmdL66H12kBiggerBatch8x8x16,
BertSpmdL66H12kBiggerBatch8x8x8.

Pax trains these on the MLPerf BERT TFRecords; here the data is
`input_generator.SyntheticLmData` unless TRAIN_FILE_PATTERN names local text
or JSONL files, read by `BertTextInput` (an `LmTextInput` whose `labels` are
the unshifted ids, as `BertModel` expects; bytes as tokens unless its
`tokenizer` is set). `BertModel` draws the 15% masks itself.

  python -m paxml.main --exp=tasks.lm.params.bert.BertAdamL4H128 \
      --job_log_dir=/tmp/bert \
      --fdl_set=datasets[0].batch_size=8
"""

from __future__ import annotations

from typing import Any

import jax

from paxml import base_experiment
from paxml import experiment_registry
from paxml import grain_input
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import lm_cloud
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import activations
from praxis.layers import checkpoint_policy

NestedMap = py_utils.NestedMap
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
TaskConfig = model_params.TaskConfig


class BertTextInput(grain_input.LmTextInput):
  """LmTextInput batches for a masked LM: `labels` are the ids themselves."""

  def get_next(self) -> NestedMap:
    batch = super().get_next()
    batch.labels = batch.ids.copy()
    return batch


def bert_datasets(percore_batch_size: int, max_seq_len: int,
                  train_file_pattern: str | None = None,
                  eval_file_pattern: str | None = None
                  ) -> list[pax_fiddle.Config[Any]]:
  """Train and eval inputs: synthetic, or BertTextInput over local files.

  Args:
    percore_batch_size: Rows per local device.
    max_seq_len: Tokens per row.
    train_file_pattern: Local training files; None: synthetic data.
    eval_file_pattern: Local eval files (default: the training files).

  Returns:
    [train input, eval input] configs.
  """
  if train_file_pattern is None:
    return lm_cloud.synthetic_datasets(percore_batch_size, max_seq_len)
  batch_size = percore_batch_size * jax.local_device_count()
  train = pax_fiddle.Config(
      BertTextInput, name='train', file_pattern=train_file_pattern,
      seq_len=max_seq_len, batch_size=batch_size, is_training=True)
  test = train.clone().set(
      name='test', file_pattern=eval_file_pattern or train_file_pattern,
      pack=False, is_training=False, reset_for_eval=True)
  return [train, test]


class BertDataset(base_experiment.BaseExperiment):
  """The BERT datasets, for experiments written Pax's way (see lm_cloud)."""

  PERCORE_BATCH_SIZE = 8
  MAX_SEQ_LEN = 512
  MLPERF_REMASK = True  # Kept for configs: BertModel always draws masks.
  RANDOM_BUFFER_SIZE = 100_000  # Kept for configs.
  TRAIN_FILE_PATTERN = None
  EVAL_FILE_PATTERN = None

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return bert_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN,
                         self.TRAIN_FILE_PATTERN, self.EVAL_FILE_PATTERN)


@experiment_registry.register
class BertAdamL4H128(model_params.TransformerBertPmapAdam):
  """4-layer BERT with Adam, data parallel; global batch 2 * 2 * 2 * 8."""

  PERCORE_BATCH_SIZE = 8
  MAX_SEQ_LEN = 512
  TRAIN_FILE_PATTERN = None
  EVAL_FILE_PATTERN = None
  NUM_LAYERS = 4
  VOCAB_SIZE = 32000
  NUM_HEADS = 8
  MODEL_DIMS = 128
  HIDDEN_DIMS = MODEL_DIMS * 4
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  USE_REPEATED_LAYER = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_EVERY_N_STEPS = 5000
  ENABLE_BFLOAT16 = True

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return bert_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN,
                         self.TRAIN_FILE_PATTERN, self.EVAL_FILE_PATTERN)


class BertSpmd(model_params.TransformerBertSpmdAdafactor):
  """Base of the SPMD BERT sizes (set MESH_SHAPE)."""

  PERCORE_BATCH_SIZE = 8
  MAX_SEQ_LEN = 512
  TRAIN_FILE_PATTERN = None
  EVAL_FILE_PATTERN = None
  LABEL_SMOOTHING_PROB = None
  MLPERF_REMASK = True  # Kept for configs.
  RANDOM_BUFFER_SIZE = 100_000  # Kept for configs.
  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  USE_REPEATED_LAYER = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM
  ENABLE_BFLOAT16 = False
  MASK_TOKEN_ID = 0
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  MESH_SHAPE = None
  CHECKPOINT_EVERY_N_STEPS = 500
  CHECKPOINT_SAVE_MAX_TO_KEEP = 10

  def datasets(self) -> list[pax_fiddle.Config[Any]]:
    return bert_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN,
                         self.TRAIN_FILE_PATTERN, self.EVAL_FILE_PATTERN)

  def task(self) -> TaskConfig:
    task_p = super().task()
    task_p.model.label_smoothing_prob = self.LABEL_SMOOTHING_PROB
    return task_p


@experiment_registry.register
class BertSpmdL4H128(BertSpmd):
  """A 4-layer SPMD BERT on 8 devices."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 4
  MODEL_DIMS = 128
  DIMS_PER_HEAD = 16
  HIDDEN_DIMS = MODEL_DIMS * 4
  NUM_HEADS = MODEL_DIMS // DIMS_PER_HEAD
  LEARNING_RATE = 2.5e-4
  ENABLE_BFLOAT16 = True
  MESH_SHAPE = (1, 4, 2)
  CHECKPOINT_EVERY_N_STEPS = 5000


@experiment_registry.register
class BertSpmdL33H12kBiggerBatch(BertSpmd):
  """100B BERT on 512 chips, global batch 8 * 8 * 8 * 4 = 2048."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 33
  MODEL_DIMS = 12288
  DIMS_PER_HEAD = 96
  HIDDEN_DIMS = MODEL_DIMS * 8
  NUM_HEADS = MODEL_DIMS // DIMS_PER_HEAD
  LEARNING_RATE = 2.5e-4
  WEIGHT_DECAY = 1e-2
  ENABLE_BFLOAT16 = True
  LABEL_SMOOTHING_PROB = 0.1
  MESH_SHAPE = (1, 64, 8)
  CHECKPOINT_EVERY_N_STEPS = 1000


@experiment_registry.register
class BertSpmdL33H12kBiggerBatch8x8x16(BertSpmdL33H12kBiggerBatch):
  """100B BERT on 1024 chips, global batch 8 * 8 * 16 * 4 = 4096."""

  RANDOM_BUFFER_SIZE = 50_000
  MESH_SHAPE = (1, 64, 16)
  CHECKPOINT_EVERY_N_STEPS = 500


@experiment_registry.register
class BertSpmdL66H12kBiggerBatch8x8x16(BertSpmdL33H12kBiggerBatch):
  """200B BERT on 1024 chips, global batch 8 * 8 * 16 * 4 = 4096."""

  NUM_LAYERS = 66
  RANDOM_BUFFER_SIZE = 50_000
  MESH_SHAPE = (1, 64, 16)
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 200
  CHECKPOINT_SAVE_MAX_TO_KEEP = 20


@experiment_registry.register
class BertSpmdL66H12kBiggerBatch8x8x8(BertSpmdL33H12kBiggerBatch):
  """200B BERT on 1024 chips, global batch 8 * 8 * 8 * 1 = 512."""

  NUM_LAYERS = 66
  PERCORE_BATCH_SIZE = 1
  RANDOM_BUFFER_SIZE = 50_000
  MESH_SHAPE = (1, 64, 8)
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_FOR_MLPERF_200B
  CHECKPOINT_EVERY_N_STEPS = 200
  CHECKPOINT_SAVE_MAX_TO_KEEP = 20
