r"""Decoder-only LM experiments on synthetic data (Pax's `lm_cloud`).

Public names: synthetic_datasets, SyntheticDataset, LargeMlp, SmallMlp,
LmCloudTransformerAdam, LmCloudTransformerAdamTest,
LmCloudTransformerAdamLimitSteps, LmCloudSpmd, LmCloudSpmdTest,
LmCloudSpmd2B, LmCloudSpmd2BLimitSteps, LmCloudSpmd32B, LmCloudSpmd64B,
LmCloudSpmd128B, LmCloudSpmd256B, LmCloudSpmd512B, LmCloudSpmd1024B,
LmCloudSpmdMultislice2B, LmCloudSpmdPipeline, LmCloudSpmdPipeline9B,
LmCloudSpmdPipeline175B, LmCloudSpmdPipelineMultislice2B,
LmCloudSpmdPipelineMultislice2BCircular.

Every experiment trains on `input_generator.SyntheticLmData` (all-ones
tokens) with PERCORE_BATCH_SIZE rows per local device and MAX_SEQ_LEN
tokens, so it runs anywhere without data:

  python -m paxml.main --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps \
      --job_log_dir=/tmp/lm_2b

The SPMD sizes (2B ... 1024B) need as many devices as their ICI_MESH_SHAPE
holds; `LmCloudTransformerAdam*` are data parallel over all devices and
`LmCloudSpmdTest` is a tiny model for one device. Each experiment is its
family base (`LmCloudSpmd`, ...) with other CLASS_ATTRs.
"""

from __future__ import annotations

import jax
from jax import numpy as jnp

from paxml import base_experiment
from paxml import experiment_registry
from paxml.tasks.lm import input_generator
from paxml.tasks.lm import model_params
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import checkpoint_policy

AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
InputConfig = pax_fiddle.Config[input_generator.SyntheticLmData]


def synthetic_datasets(percore_batch_size: float,
                       max_seq_len: int) -> list[InputConfig]:
  """Train and eval SyntheticLmData configs for this host's devices.

  Args:
    percore_batch_size: Rows per local device (fractions round, at least 1).
    max_seq_len: Tokens per row.

  Returns:
    [train input, eval input] configs.
  """
  batch_size = max(1, round(percore_batch_size * jax.local_device_count()))
  return [
      pax_fiddle.Config(input_generator.SyntheticLmData, name=name,
                        is_training=name == 'train', batch_size=batch_size,
                        seq_len=max_seq_len)
      for name in ('train', 'test')
  ]


class SyntheticDataset(base_experiment.BaseExperiment):
  """The synthetic LM datasets, for experiments written Pax's way.

  Combine it with a model base (`class MyExp(TransformerLmSpmdAdafactor,
  SyntheticDataset)`); the experiments below call `synthetic_datasets`
  instead.
  """

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024

  def datasets(self) -> list[InputConfig]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)


class _SyntheticMlp(model_params.ClassificationModelAdam):
  """The MLP experiments' shared settings and data."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  MESH_SHAPE = (8, 1, 1)
  MLP_WEIGHT_SHARDING = (-1, -1)
  SOFTMAX_WEIGHT_SHARDING = (-1, -1)

  def datasets(self) -> list[InputConfig]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)


@experiment_registry.register
class LargeMlp(_SyntheticMlp):
  """An 8-layer MLP with large hidden dimensions, on 8 devices."""

  NUM_LAYER = 8
  INPUT_DIM = 4096
  OUTPUT_DIM = 4096
  HIDDEN_DIM = 7168


@experiment_registry.register
class SmallMlp(_SyntheticMlp):
  """An 8-layer MLP with small hidden dimensions, on 8 devices."""

  NUM_LAYER = 8
  INPUT_DIM = 1024
  OUTPUT_DIM = 1024
  HIDDEN_DIM = 1024


# Data parallel training.


@experiment_registry.register
class LmCloudTransformerAdam(model_params.TransformerLmPmapAdam):
  """32-layer Transformer LM, data parallel, Adam."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3

  def datasets(self) -> list[InputConfig]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> model_params.TaskConfig:
    task_p = super().task()
    task_p.train.learner.repeat_prefix_sep = '_'
    return task_p


@experiment_registry.register
class LmCloudTransformerAdamTest(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 2 layers."""

  NUM_LAYERS = 2


@experiment_registry.register
class LmCloudTransformerAdamLimitSteps(LmCloudTransformerAdam):
  """LmCloudTransformerAdam with 10 layers, for 2000 steps."""

  NUM_LAYERS = 10
  NUM_TRAIN_STEPS = 2000


# SPMD model-parallel training.


class LmCloudSpmd(model_params.TransformerLmSpmdAdafactor):
  """Base of the SPMD sizes: repeated GELU layers, Adam."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  USE_REPEATED_LAYER = True
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING

  def datasets(self) -> list[InputConfig]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> model_params.TaskConfig:
    task_p = super().task()
    model_params.set_default_adam(task_p, self.LEARNING_RATE,
                                  self.WEIGHT_DECAY)
    task_p.train.learner.repeat_prefix_sep = '_'
    return task_p


@experiment_registry.register
class LmCloudSpmdTest(LmCloudSpmd):
  """A tiny SPMD model for a local CPU run; global batch 1 * 1 * 1 * 4."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 2
  MODEL_DIMS = 64
  HIDDEN_DIMS = MODEL_DIMS * 4
  DIMS_PER_HEAD = 8
  ICI_MESH_SHAPE = (1, 1, 1)


@experiment_registry.register
class LmCloudSpmd2B(LmCloudSpmd):
  """2B parameters; global batch 2 * 2 * 1 * 32 = 128."""

  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 4, 1)


@experiment_registry.register
class LmCloudSpmd2BLimitSteps(LmCloudSpmd2B):
  """LmCloudSpmd2B for 300 steps."""

  NUM_TRAIN_STEPS = 300


@experiment_registry.register
class LmCloudSpmd32B(LmCloudSpmd):
  """32B parameters; global batch 4 * 4 * 4 * 8 = 512."""

  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 40
  MODEL_DIMS = 8192
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_CONTEXT_AND_OUT_PROJ
  ICI_MESH_SHAPE = (1, 16, 4)


@experiment_registry.register
class LmCloudSpmd64B(LmCloudSpmd):
  """64B parameters; global batch 4 * 4 * 8 * 4 = 512."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 51
  MODEL_DIMS = 10240
  HIDDEN_DIMS = MODEL_DIMS * 4
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_CONTEXT_AND_OUT_PROJ
  ICI_MESH_SHAPE = (1, 16, 8)


@experiment_registry.register
class LmCloudSpmd128B(LmCloudSpmd):
  """128B parameters; global batch 4 * 8 * 8 * 4 = 1024."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 71
  MODEL_DIMS = 12288
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 64, 4)


@experiment_registry.register
class LmCloudSpmd256B(LmCloudSpmd):
  """256B parameters; global batch 4 * 8 * 8 * 8 = 2048."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 80
  MODEL_DIMS = 16384
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 64, 8)


@experiment_registry.register
class LmCloudSpmd512B(LmCloudSpmd):
  """512B parameters; global batch 4 * 8 * 8 * 16 = 4096."""

  PERCORE_BATCH_SIZE = 4
  NUM_LAYERS = 102
  MODEL_DIMS = 20480
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 64, 16)


@experiment_registry.register
class LmCloudSpmd1024B(LmCloudSpmd):
  """1024B parameters; global batch 2 * 8 * 16 * 16 = 4096."""

  PERCORE_BATCH_SIZE = 2
  NUM_LAYERS = 142
  MODEL_DIMS = 24576
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 256, 8)


@experiment_registry.register
class LmCloudSpmdMultislice2B(LmCloudSpmd):
  """2B parameters on 2 slices of 2x2x1; global batch 2 * 4 * 16 = 128.

  2-way replica parallelism over DCN, 4-way data parallelism over ICI.
  """

  PERCORE_BATCH_SIZE = 16
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 4, 1)
  DCN_MESH_SHAPE = (2, 1, 1)


# Pipelined SPMD training.


class LmCloudSpmdPipeline(model_params.TransformerLmSpmdPipelineAdafactor):
  """Base of the pipelined sizes: GELU layers, Adam."""

  PERCORE_BATCH_SIZE = 16
  MAX_SEQ_LEN = 1024
  NUM_LAYERS = 10
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING

  def datasets(self) -> list[InputConfig]:
    return synthetic_datasets(self.PERCORE_BATCH_SIZE, self.MAX_SEQ_LEN)

  def task(self) -> model_params.TaskConfig:
    task_p = super().task()
    model_params.set_default_adam(task_p, self.LEARNING_RATE,
                                  self.WEIGHT_DECAY)
    return task_p


@experiment_registry.register
class LmCloudSpmdPipeline9B(LmCloudSpmdPipeline):
  """9B parameters, 16 stages x 4-way data; global batch 4 * 16 * 8 = 512."""

  MICROBATCH_SIZE = 4
  PERCORE_BATCH_SIZE = 8
  NUM_STAGES = 16
  NUM_LAYERS = 48
  MODEL_DIMS = 4096
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.float32
  ICI_MESH_SHAPE = (16, 4, 1, 1)


@experiment_registry.register
class LmCloudSpmdPipeline175B(LmCloudSpmdPipeline):
  """175B parameters (GPT-3), 8 stages over DCN x 16-way model parallel.

  Global batch 96, on 8 hosts of 16 A100s.
  """

  MICROBATCH_SIZE = 2
  PERCORE_BATCH_SIZE = 0.75
  NUM_STAGES = 8
  NUM_LAYERS = 96
  MODEL_DIMS = 12288
  NUM_HEADS = 96
  DIMS_PER_HEAD = 128
  MAX_SEQ_LEN = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.bfloat16
  ICI_MESH_SHAPE = (1, 1, 1, 16)
  DCN_MESH_SHAPE = (8, 1, 1, 1)


@experiment_registry.register
class LmCloudSpmdPipelineMultislice2B(LmCloudSpmdPipeline):
  """2B parameters on 2 slices of 2x2x1; global batch 2 * 4 * 16 = 128.

  2-way pipeline parallelism over DCN, 4-way replica parallelism over ICI.
  """

  MICROBATCH_SIZE = 4
  PERCORE_BATCH_SIZE = 16
  NUM_STAGES = 2
  NUM_LAYERS = 18
  MODEL_DIMS = 3072
  HIDDEN_DIMS = MODEL_DIMS * 4
  ICI_MESH_SHAPE = (1, 4, 1, 1)
  DCN_MESH_SHAPE = (2, 1, 1, 1)
  EMB_W_DATA_DIMS = (model_params.REPLICA_AXIS, model_params.DATA_AXIS)
  STREAM_IO = True


@experiment_registry.register
class LmCloudSpmdPipelineMultislice2BCircular(LmCloudSpmdPipelineMultislice2B):
  """LmCloudSpmdPipelineMultislice2B with a circular schedule of 3 repeats."""

  MICROBATCH_SIZE = 8
  CIRCULAR_REPEAT = 3
