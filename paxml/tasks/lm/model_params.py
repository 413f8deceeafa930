"""Base configs of the language-model experiments, driven by CLASS_ATTRs.

Public names: REPLICA_AXIS, DATA_AXIS, MDL_AXIS, STAGE_AXIS,
set_sharding_annotations_v1, set_default_adam, set_default_adafactor,
inner_stack, maybe_setup_moe_params, num_heads_of, ClassificationModelAdam,
TransformerBertPmapAdam, TransformerBertSpmdAdafactor, TransformerLmPmapAdam,
TransformerLmSpmdAdafactor, TransformerLmSpmdPipelineAdafactor.

Each base class is a `BaseExperiment` whose `task()` builds a
`tasks_lib.SingleTask` config from upper-case class attributes (NUM_LAYERS,
MODEL_DIMS, HIDDEN_DIMS, NUM_HEADS, DIMS_PER_HEAD, VOCAB_SIZE,
ICI_MESH_SHAPE, DCN_MESH_SHAPE, FPROP_DTYPE, USE_REPEATED_LAYER,
CHECKPOINT_POLICY, ...), with Pax's names and defaults. An experiment
subclasses one of them, sets the attributes that differ and adds
`datasets()`:

  @experiment_registry.register
  class MyLm(model_params.TransformerLmSpmdAdafactor):
    NUM_LAYERS = 4
    MODEL_DIMS = 256
    HIDDEN_DIMS = 1024
    ICI_MESH_SHAPE = (1, 8, 1)

    def datasets(self):
      return lm_cloud.synthetic_datasets(percore_batch_size=1,
                                         max_seq_len=128)

The SPMD bases shard the model over a [replica, data, mdl] mesh
(`set_sharding_annotations_v1`); the pipelined base over [stage, replica,
data, mdl]. `get_input_specs_provider_params()` reads the batch shapes off the
training input's config (`input_generator.LmInputSpecsProvider`), so a model
can be initialised without reading data.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import fiddle as fdl
from jax import numpy as jnp

from paxml import base_experiment
from paxml import tasks_lib
from paxml.tasks.lm import input_generator
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import checkpoint_policy
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
WeightInit = base_layer.WeightInit
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
TaskConfig = pax_fiddle.Config[tasks_lib.SingleTask]

REPLICA_AXIS, DATA_AXIS, MDL_AXIS = 'replica', 'data', 'mdl'
STAGE_AXIS = 'stage'


# ----------------------------------------------------------------------------
# Helpers on task configs (Pax's public functions).
# ----------------------------------------------------------------------------


def _check_mesh(shape: Sequence[int] | None, name: str, rank: int) -> None:
  if shape is None or len(shape) != rank:
    raise ValueError(f'{name}={shape} must list {rank} mesh dimensions.')


def set_sharding_annotations_v1(
    task_p: TaskConfig,
    training_optimized: bool,
    ici_mesh_shape: Sequence[int],
    dcn_mesh_shape: Sequence[int] | None = None,
) -> None:
  """Shards the task's model over a [replica, data, mdl] mesh.

  Sets the model's mesh, splits the inputs' batch over replica x data and,
  for models with an `lm_tpl`, annotates the LM with
  `TransformerLm.set_sharding_params_v1`.

  Args:
    task_p: The task config (changed in place).
    training_optimized: Also split D of [B, L, D] activations over mdl,
      saving activation memory between the forward and backward passes.
    ici_mesh_shape: The mesh within a slice: three dimensions.
    dcn_mesh_shape: The mesh across slices (three dimensions), or None.
  """
  _check_mesh(ici_mesh_shape, 'ici_mesh_shape', 3)
  if dcn_mesh_shape is not None:
    _check_mesh(dcn_mesh_shape, 'dcn_mesh_shape', 3)
  model_p = task_p.model
  model_p.ici_mesh_shape = list(ici_mesh_shape)
  if dcn_mesh_shape is not None:
    model_p.dcn_mesh_shape = list(dcn_mesh_shape)
  names = [REPLICA_AXIS, DATA_AXIS, MDL_AXIS]
  model_p.mesh_axis_names = names
  batch = (REPLICA_AXIS, DATA_AXIS)
  task_p.train.inputs_split_mapping = NestedMap(
      map_1d=(batch,), map_2d=(batch, None))
  if getattr(model_p, 'lm_tpl', None) is not None:
    lm_cls = fdl.get_callable(model_p.lm_tpl)
    model_p.lm_tpl = lm_cls.set_sharding_params_v1(
        model_p.lm_tpl, replica_axis=REPLICA_AXIS, data_axis=DATA_AXIS,
        mdl_axis=MDL_AXIS, ici_mesh_shape=model_p.ici_mesh_shape,
        dcn_mesh_shape=model_p.dcn_mesh_shape, mesh_axis_names=names,
        training_optimized=training_optimized)


def _set_optimizer(task_p: TaskConfig, optimizer_p: Any, learning_rate: float,
                   schedule_p: Any) -> None:
  learner_p = task_p.train.learner
  learner_p.loss_name = 'total_loss'
  optimizer_p.learning_rate = learning_rate
  optimizer_p.lr_schedule = schedule_p
  learner_p.optimizer = optimizer_p


def _rampup_exp_decay(warmup_steps: int, decay_start: int, decay_end: int):
  return pax_fiddle.Config(
      schedules.LinearRampupExponentialDecay, warmup_steps=warmup_steps,
      decay_start=decay_start, decay_end=decay_end, min_ratio=0.1, max=1.0)


def set_default_adam(task_p: TaskConfig,
                     learning_rate: float,
                     weight_decay: float,
                     *,
                     warmup_steps: int = 4000,
                     decay_start: int = 4001,
                     decay_end: int = 300000) -> None:
  """Adam (0.9, 0.99), gradient norm clipped at 5, Pax's LR schedule.

  The learning rate ramps up linearly over `warmup_steps`, holds until
  `decay_start`, then decays exponentially to a tenth at `decay_end`.

  Args:
    task_p: The task config (changed in place).
    learning_rate: The peak learning rate.
    weight_decay: Adam's weight decay.
    warmup_steps: Steps of the ramp.
    decay_start: First step of the decay.
    decay_end: Last step of the decay.
  """
  _set_optimizer(
      task_p,
      pax_fiddle.Config(optimizers.Adam, beta1=0.9, beta2=0.99,
                        weight_decay=weight_decay,
                        clip_gradient_norm_to_value=5.0),
      learning_rate, _rampup_exp_decay(warmup_steps, decay_start, decay_end))


def set_default_adafactor(task_p: TaskConfig,
                          learning_rate: float,
                          weight_decay: float,
                          *,
                          warmup_steps: int = 4000,
                          decay_start: int = 4001,
                          decay_end: int = 100000,
                          clip_gradient_norm_to_value: float = 5.0) -> None:
  """ShardedAdafactor with Adam-style decay (0.9, 0.99); see set_default_adam.

  Args:
    task_p: The task config (changed in place).
    learning_rate: The peak learning rate.
    weight_decay: The weight decay.
    warmup_steps: Steps of the ramp.
    decay_start: First step of the decay.
    decay_end: Last step of the decay.
    clip_gradient_norm_to_value: The gradient norm clip.
  """
  _set_optimizer(
      task_p,
      pax_fiddle.Config(
          optimizers.ShardedAdafactor, decay_method='adam', beta1=0.9,
          decay_adam=0.99, weight_decay=weight_decay,
          clip_gradient_norm_to_value=clip_gradient_norm_to_value),
      learning_rate, _rampup_exp_decay(warmup_steps, decay_start, decay_end))


def inner_stack(stack_p: LayerTpl) -> LayerTpl:
  """The StackedTransformer inside a pipelined and/or repeated stack."""
  pipelined_cls = getattr(transformers, 'PipelinedTransformer', None)
  if pipelined_cls and issubclass(fdl.get_callable(stack_p), pipelined_cls):
    stack_p = stack_p.pipeline_stage
  if issubclass(fdl.get_callable(stack_p),
                transformers.StackedTransformerRepeated):
    stack_p = stack_p.block
  return stack_p


def maybe_setup_moe_params(model_p: LayerTpl) -> None:
  """Gives a stack's MoE template the settings of its feed-forward layers.

  A no-op unless the (inner) StackedTransformer has `num_experts` > 0.

  Args:
    model_p: A StackedTransformer, StackedTransformerRepeated or
      PipelinedTransformer config (changed in place).
  """
  model_p = inner_stack(model_p)
  if not model_p.num_experts:
    return
  ff_p = model_p.transformer_layer_params_tpl.tr_fflayer_tpl
  moe_p = model_p.moe_layer_tpl
  base_layer.BaseLayer.copy_base_hparams(ff_p, moe_p)
  moe_p.name = ff_p.name
  moe_p.input_dims = ff_p.input_dims
  moe_p.hidden_dims = moe_p.hidden_dims or ff_p.hidden_dims
  for name in ('ln_tpl', 'activation_tpl', 'relu_dropout_tpl',
               'residual_dropout_tpl'):
    setattr(moe_p, name, getattr(ff_p, name).clone())
  for name in ('relu_dropout_prob', 'residual_dropout_prob',
               'add_skip_connection', 'norm_policy'):
    setattr(moe_p, name, getattr(ff_p, name))


def num_heads_of(exp: Any) -> int:
  """NUM_HEADS, or MODEL_DIMS // DIMS_PER_HEAD when NUM_HEADS is None."""
  where = type(exp).__name__
  heads, per_head = exp.NUM_HEADS, exp.DIMS_PER_HEAD
  if per_head is None:
    if heads is None:
      raise ValueError(f'{where}: set NUM_HEADS or DIMS_PER_HEAD.')
    return heads
  if heads is None:
    if exp.MODEL_DIMS % per_head:
      raise ValueError(f'{where}: MODEL_DIMS={exp.MODEL_DIMS} is not a '
                       f'multiple of DIMS_PER_HEAD={per_head}.')
    return exp.MODEL_DIMS // per_head
  if heads * per_head != exp.MODEL_DIMS:
    raise ValueError(f'{where}: MODEL_DIMS={exp.MODEL_DIMS} must equal '
                     f'NUM_HEADS * DIMS_PER_HEAD = {heads} * {per_head}.')
  return heads


# ----------------------------------------------------------------------------
# Building blocks of the task configs (read the experiment's CLASS_ATTRs).
# ----------------------------------------------------------------------------


def _stack(exp: Any, num_layers: int, num_heads: int,
           dim_per_head: int | None = None) -> LayerTpl:
  """A StackedTransformer config from the experiment's attributes."""
  stack_p = pax_fiddle.Config(
      transformers.StackedTransformer, model_dims=exp.MODEL_DIMS,
      hidden_dims=exp.HIDDEN_DIMS, num_layers=num_layers, num_heads=num_heads,
      dim_per_head=dim_per_head, dropout_prob=exp.DROPOUT_PROB)
  layer_p = stack_p.transformer_layer_params_tpl
  layer_p.tr_atten_tpl.atten_logit_cap = getattr(exp, 'ATTEN_LOGIT_CAP', 50.0)
  layer_p.tr_atten_tpl.use_bias = getattr(exp, 'USE_BIAS', False)
  layer_p.tr_fflayer_tpl.activation_tpl = pax_fiddle.Config(
      exp.ACTIVATION_CLS)
  layer_p.tr_fflayer_tpl.use_gated_activation = exp.USE_GATED_ACTIVATION
  return stack_p


def _spmd_layer_options(exp: Any, stack_p: LayerTpl) -> None:
  """The SPMD bases' extra layer settings (norm, fused QKV, position bias)."""
  if exp.RELATIVE_BIAS and exp.USE_ROTARY_POSITION_EMB:
    raise ValueError(f'{type(exp).__name__}: set at most one of '
                     'RELATIVE_BIAS and USE_ROTARY_POSITION_EMB.')
  layer_p = stack_p.transformer_layer_params_tpl
  layer_p.norm_policy = exp.NORM_POLICY
  layer_p.tr_atten_tpl.combine_qkv = exp.COMBINE_QKV
  layer_p.tr_atten_tpl.dconv_qkv = exp.ENABLE_DCONV
  if exp.RELATIVE_BIAS:
    layer_p.tr_atten_tpl.relative_bias_tpl = pax_fiddle.Config(
        attentions.RelativeBias)
  if exp.USE_ROTARY_POSITION_EMB:
    layer_p.tr_atten_tpl.use_rotary_position_emb = True


def _maybe_repeat(exp: Any, stack_p: LayerTpl, num_layers: int) -> LayerTpl:
  """`stack_p`, or one layer of it repeated `num_layers` times."""
  if not exp.USE_REPEATED_LAYER:
    return stack_p
  stack_p.num_layers = 1
  return pax_fiddle.Config(
      transformers.StackedTransformerRepeated, block=stack_p,
      x_times=num_layers,
      checkpoint_policy=getattr(exp, 'CHECKPOINT_POLICY',
                                AutodiffCheckpointType.SAVE_NOTHING))


def _lm_softmax(exp: Any, lm_p: LayerTpl) -> None:
  """Vocabulary, (separate) embedding and softmax settings of an LM."""
  lm_p.model_dims = exp.MODEL_DIMS
  lm_p.vocab_size = exp.VOCAB_SIZE
  emb_p = lm_p.softmax_tpl
  if getattr(exp, 'SEPARATE_EMBEDDING', False):
    lm_p.separate_embedding_tpl = pax_fiddle.Config(
        embedding_softmax.Embedding)
    lm_p.softmax_tpl = pax_fiddle.Config(embedding_softmax.FullSoftmax)
    emb_p = lm_p.separate_embedding_tpl
  lm_p.softmax_tpl.params_init = WeightInit.Gaussian(
      1.0 / math.sqrt(exp.MODEL_DIMS))
  emb_p.scale_sqrt_depth = True
  if getattr(exp, 'TRAINABLE_POSITION_EMB', False):
    lm_p.position_emb_tpl = pax_fiddle.Config(
        embedding_softmax.TrainablePositionalEmbedding,
        max_seq_length=exp.TRAINABLE_PE_MAX_SEQ_LEN)


def _set_train_intervals(exp: Any, train_p: Any) -> None:
  train_p.num_train_steps = exp.NUM_TRAIN_STEPS
  train_p.save_interval_steps = exp.CHECKPOINT_EVERY_N_STEPS
  train_p.summary_interval_steps = exp.SUMMARY_INTERVAL_STEPS
  train_p.save_max_to_keep = exp.CHECKPOINT_MAX_TO_KEEP
  train_p.eval_interval_steps = exp.EVAL_INTERVAL_STEPS
  train_p.profiler_num_steps = exp.PROFILER_NUM_STEPS
  train_p.profiler_min_duration_sec = exp.PROFILER_MIN_DURATION_SEC
  train_p.profiler_capture_step = exp.PROFILER_CAPTURE_STEP


class _LmExperiment(base_experiment.BaseExperiment):
  """Input specs from the training input's config (no data is read)."""

  def get_input_specs_provider_params(self) -> pax_fiddle.Config[Any]:
    return pax_fiddle.Config(input_generator.LmInputSpecsProvider,
                             input_p=self.training_dataset())


# ----------------------------------------------------------------------------
# Base experiments.
# ----------------------------------------------------------------------------


class ClassificationModelAdam(_LmExperiment):
  """An MLP over embedded ids (ClassificationMLPModel), trained with Adam.

  Sharded over MESH_SHAPE when it is set (weights as MLP_WEIGHT_SHARDING and
  SOFTMAX_WEIGHT_SHARDING).
  """

  NUM_LAYER = 8
  INPUT_DIM = 4096
  HIDDEN_DIM = 7168
  OUTPUT_DIM = 4096
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  CHECKPOINT_EVERY_N_STEPS = 5
  SUMMARY_INTERVAL_STEPS = 5
  NUM_TRAIN_STEPS = 10
  MLP_WEIGHT_SHARDING = None
  SOFTMAX_WEIGHT_SHARDING = None
  MESH_SHAPE = None
  TRAINING_OPTIMIZED_SHARDING = True

  def task(self) -> TaskConfig:
    task_p = pax_fiddle.Config(tasks_lib.SingleTask,
                               name='classification_task')
    model_p = pax_fiddle.Config(models.ClassificationMLPModel,
                                name='classification_model')
    task_p.model = model_p
    mlp_p = model_p.mlp_tpl
    mlp_p.ff_tpl.input_dims = self.INPUT_DIM
    mlp_p.ff_tpl.output_dims = self.OUTPUT_DIM
    mlp_p.hidden_dims = self.HIDDEN_DIM
    mlp_p.num_layers = self.NUM_LAYER
    model_p.softmax_tpl.input_dims = self.INPUT_DIM
    model_p.softmax_tpl.num_classes = self.INPUT_DIM
    task_p.train.save_interval_steps = self.CHECKPOINT_EVERY_N_STEPS
    task_p.train.summary_interval_steps = self.SUMMARY_INTERVAL_STEPS
    task_p.train.num_train_steps = self.NUM_TRAIN_STEPS
    if self.MESH_SHAPE is not None:
      as_list = lambda x: None if x is None else list(x)
      mlp_p.weight_split_dims_mapping.wt = as_list(self.MLP_WEIGHT_SHARDING)
      model_p.softmax_tpl.weight_split_dims_mapping.wt = as_list(
          self.SOFTMAX_WEIGHT_SHARDING)
      set_sharding_annotations_v1(task_p, self.TRAINING_OPTIMIZED_SHARDING,
                                  self.MESH_SHAPE)
    set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY)
    return task_p


def _bert_task(exp: Any, num_heads: int, dim_per_head: int | None
               ) -> TaskConfig:
  """The BertModel task shared by the BERT bases."""
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='bert_task')
  task_p.model = pax_fiddle.Config(models.BertModel, name='bert_lm')
  lm_p = task_p.model.lm_tpl
  lm_p.model_type = transformer_models.LanguageModelType.BIDIRECTIONAL
  lm_p.packed_input = True
  _lm_softmax(exp, lm_p)
  lm_p.softmax_tpl.soft_cap_logits = 30.0
  stack_p = _stack(exp, exp.NUM_LAYERS, num_heads, dim_per_head)
  lm_p.stacked_transformer_tpl = _maybe_repeat(exp, stack_p, exp.NUM_LAYERS)
  if exp.ENABLE_BFLOAT16:
    task_p.model.fprop_dtype = jnp.bfloat16
  task_p.train.save_interval_steps = exp.CHECKPOINT_EVERY_N_STEPS
  task_p.train.num_train_steps = exp.NUM_TRAIN_STEPS
  return task_p


class TransformerBertPmapAdam(_LmExperiment):
  """A BERT masked LM, data parallel, trained with Adam."""

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
  DECAY_END = 300000
  NUM_TRAIN_STEPS = 1e7
  FORCE_MASK_GENERATION = False
  ENABLE_BFLOAT16 = True

  def task(self) -> TaskConfig:
    task_p = _bert_task(self, self.NUM_HEADS, None)
    task_p.model.force_mask_generation = self.FORCE_MASK_GENERATION
    maybe_setup_moe_params(task_p.model.lm_tpl.stacked_transformer_tpl)
    set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY,
                     decay_end=self.DECAY_END)
    return task_p


class TransformerBertSpmdAdafactor(_LmExperiment):
  """A BERT masked LM sharded over MESH_SHAPE, trained with Adafactor."""

  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  DIMS_PER_HEAD = None
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  USE_REPEATED_LAYER = False
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_WITH_NO_BATCH_DIM
  ENABLE_BFLOAT16 = False
  MASK_TOKEN_ID = 0
  DECAY_END = 100000
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  MESH_SHAPE = None
  TRAINING_OPTIMIZED_SHARDING = True
  CHECKPOINT_EVERY_N_STEPS = 500
  CHECKPOINT_SAVE_MAX_TO_KEEP = 10
  NUM_TRAIN_STEPS = 1e7

  def task(self) -> TaskConfig:
    task_p = _bert_task(self, num_heads_of(self), self.DIMS_PER_HEAD)
    task_p.model.mask_token_id = self.MASK_TOKEN_ID
    layer_p = inner_stack(task_p.model.lm_tpl.stacked_transformer_tpl
                           ).transformer_layer_params_tpl
    layer_p.tr_atten_tpl.combine_qkv = True
    task_p.train.save_max_to_keep = self.CHECKPOINT_SAVE_MAX_TO_KEEP
    set_default_adafactor(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY,
                          decay_end=self.DECAY_END)
    maybe_setup_moe_params(task_p.model.lm_tpl.stacked_transformer_tpl)
    if self.MESH_SHAPE is not None:
      set_sharding_annotations_v1(task_p, self.TRAINING_OPTIMIZED_SHARDING,
                                  self.MESH_SHAPE)
    return task_p


class TransformerLmPmapAdam(_LmExperiment):
  """A decoder-only Transformer LM, data parallel, trained with Adam."""

  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  NUM_HEADS = 16
  MODEL_DIMS = 1024
  HIDDEN_DIMS = MODEL_DIMS * 4
  INPUT_DROPOUT_PROB = 0.0
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 1e-3
  WEIGHT_DECAY = 1e-3
  USE_REPEATED_LAYER = False
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  DECAY_END = 300000
  REL_POS_EMB_DIM = None
  PACKED_INPUT = True
  ATTEN_LOGIT_CAP = 50.0
  USE_BIAS = False
  NUM_TRAIN_STEPS = 1e7

  def task(self) -> TaskConfig:
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='xformer_task')
    task_p.model = pax_fiddle.Config(models.LanguageModel, name='xformer_lm')
    lm_p = task_p.model.lm_tpl
    lm_p.packed_input = self.PACKED_INPUT
    _lm_softmax(self, lm_p)
    stack_p = _stack(self, self.NUM_LAYERS, self.NUM_HEADS)
    stack_p.input_dropout_prob = self.INPUT_DROPOUT_PROB
    if self.REL_POS_EMB_DIM is not None:
      xl_cls = getattr(attentions, 'DotProductAttentionXL', None)
      if xl_cls is None:
        raise NotImplementedError(
            f'{type(self).__name__}: REL_POS_EMB_DIM needs praxis.layers.'
            'attentions.DotProductAttentionXL, which this build lacks.')
      layer_p = stack_p.transformer_layer_params_tpl
      xl_p = pax_fiddle.Config(xl_cls)
      xl_p.copy_fields_from(layer_p.tr_atten_tpl)
      xl_p.rel_pos_emb_dim = self.REL_POS_EMB_DIM
      layer_p.tr_atten_tpl = xl_p
    lm_p.stacked_transformer_tpl = _maybe_repeat(self, stack_p,
                                                 self.NUM_LAYERS)
    task_p.train.num_train_steps = self.NUM_TRAIN_STEPS
    maybe_setup_moe_params(lm_p.stacked_transformer_tpl)
    set_default_adam(task_p, self.LEARNING_RATE, self.WEIGHT_DECAY,
                     decay_end=self.DECAY_END)
    return task_p


class TransformerLmSpmdAdafactor(_LmExperiment):
  """A decoder-only Transformer LM sharded over ICI_MESH_SHAPE x DCN_MESH_SHAPE.

  Trained with ShardedAdafactor; bfloat16 activations by default.
  """

  NUM_LAYERS = 10
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = None
  MODEL_DIMS = 2048
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.bfloat16
  PACKED_INPUT = True
  USE_REPEATED_LAYER = False
  SEPARATE_EMBEDDING = False
  TRAINABLE_POSITION_EMB = False
  TRAINABLE_PE_MAX_SEQ_LEN = 16 * 1024
  RELATIVE_BIAS = False
  USE_ROTARY_POSITION_EMB = False
  NORM_POLICY = 'pre'
  ENABLE_DCONV = False
  COMBINE_QKV = True
  ACTIVATION_CLS = activations.ReLU
  USE_GATED_ACTIVATION = False
  DECAY_END = 100000
  DROPOUT_PROB = 0.0
  LEARNING_RATE = 2.5e-4
  CLIP_GRADIENT_NORM_TO_VALUE = 5.0
  WEIGHT_DECAY = 1e-3
  SOFTMAX_CAP_LOGITS = 30.0
  ATTEN_LOGIT_CAP = 50.0
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_NOTHING
  CHECKPOINT_EVERY_N_STEPS = 5000
  SUMMARY_INTERVAL_STEPS = 100
  CHECKPOINT_MAX_TO_KEEP = 10
  EVAL_INTERVAL_STEPS = 100
  NUM_TRAIN_STEPS = 1e7
  PROFILER_NUM_STEPS = 2
  PROFILER_MIN_DURATION_SEC = 1
  PROFILER_CAPTURE_STEP = None
  ICI_MESH_SHAPE = None
  DCN_MESH_SHAPE = (1, 1, 1)
  TRAINING_OPTIMIZED_SHARDING = True
  MODEL_CLASS = models.LanguageModel

  def _lm_task(self, num_layers: int) -> TaskConfig:
    """The task with a (repeated) stack of `num_layers` layers, unsharded."""
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='xformer_task')
    task_p.model = pax_fiddle.Config(self.MODEL_CLASS, name='xformer_lm',
                                     fprop_dtype=self.FPROP_DTYPE)
    lm_p = task_p.model.lm_tpl
    lm_p.packed_input = self.PACKED_INPUT
    _lm_softmax(self, lm_p)
    lm_p.softmax_tpl.soft_cap_logits = self.SOFTMAX_CAP_LOGITS
    stack_p = _stack(self, num_layers, num_heads_of(self), self.DIMS_PER_HEAD)
    _spmd_layer_options(self, stack_p)
    lm_p.stacked_transformer_tpl = _maybe_repeat(self, stack_p, num_layers)
    set_default_adafactor(
        task_p, self.LEARNING_RATE, self.WEIGHT_DECAY,
        decay_end=self.DECAY_END,
        clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE)
    _set_train_intervals(self, task_p.train)
    return task_p

  def task(self) -> TaskConfig:
    task_p = self._lm_task(self.NUM_LAYERS)
    if self.ICI_MESH_SHAPE is not None:
      set_sharding_annotations_v1(task_p, self.TRAINING_OPTIMIZED_SHARDING,
                                  self.ICI_MESH_SHAPE, self.DCN_MESH_SHAPE)
    maybe_setup_moe_params(task_p.model.lm_tpl.stacked_transformer_tpl)
    return task_p


class TransformerLmSpmdPipelineAdafactor(TransformerLmSpmdAdafactor):
  """TransformerLmSpmdAdafactor with the layers run as a pipeline.

  The mesh is [stage, replica, data, mdl] (ICI_MESH_SHAPE and DCN_MESH_SHAPE
  have four dimensions, their first ones multiplying to NUM_STAGES); each
  stage holds NUM_LAYERS / (NUM_STAGES * CIRCULAR_REPEAT) layers, and the
  batch runs in microbatches (set NUM_MICROBATCHES or MICROBATCH_SIZE).
  Embedding and softmax run data parallel over every device.
  """

  NUM_STAGES = None
  CIRCULAR_REPEAT = 1
  PIPELINE_BROADCAST_INPUTS = False
  NUM_MICROBATCHES = None
  MICROBATCH_SIZE = None
  DCN_MESH_SHAPE = (1, 1, 1, 1)
  EMB_W_DATA_DIMS = DATA_AXIS
  STREAM_IO = False

  def _check_pipeline(self) -> None:
    where = type(self).__name__
    stages, repeat = self.NUM_STAGES, self.CIRCULAR_REPEAT
    if stages is None or self.NUM_LAYERS % (stages * repeat):
      raise ValueError(f'{where}: NUM_LAYERS={self.NUM_LAYERS} must be a '
                       f'multiple of NUM_STAGES * CIRCULAR_REPEAT = '
                       f'{stages} * {repeat}.')
    if self.NUM_MICROBATCHES is None and self.MICROBATCH_SIZE is None:
      raise ValueError(f'{where}: set NUM_MICROBATCHES or MICROBATCH_SIZE.')
    _check_mesh(self.ICI_MESH_SHAPE, f'{where}.ICI_MESH_SHAPE', 4)
    _check_mesh(self.DCN_MESH_SHAPE, f'{where}.DCN_MESH_SHAPE', 4)
    if self.ICI_MESH_SHAPE[0] * self.DCN_MESH_SHAPE[0] != stages:
      raise ValueError(f'{where}: ICI_MESH_SHAPE[0] * DCN_MESH_SHAPE[0] must '
                       f'equal NUM_STAGES={stages}.')

  def _shard_embedding(self, lm_p: LayerTpl, batch_dims: Any) -> None:
    """Embedding and softmax data parallel over every mesh axis but mdl."""
    bld = [batch_dims, None, MDL_AXIS]
    emb_p = lm_p.separate_embedding_tpl or lm_p.softmax_tpl
    emb_p.activation_split_dims_mapping.emb_out_split_dims_mapping = bld
    emb_p.activation_split_dims_mapping.out = bld
    softmax_cls = fdl.get_callable(lm_p.softmax_tpl)
    vd = [MDL_AXIS, self.EMB_W_DATA_DIMS]
    if issubclass(softmax_cls, embedding_softmax.GShardSharedEmbeddingSoftmax):
      lm_p.softmax_tpl.weight_split_dims_mapping.wt = vd
    elif issubclass(softmax_cls, embedding_softmax.FullSoftmax):
      lm_p.softmax_tpl.weight_split_dims_mapping.wt = vd[::-1]
    else:
      raise NotImplementedError(f'{type(self).__name__}: softmax class '
                                f'{softmax_cls.__name__} is not supported.')
    if lm_p.separate_embedding_tpl is not None:
      lm_p.separate_embedding_tpl.weight_split_dims_mapping.wt = vd[::-1]

  def task(self) -> TaskConfig:
    self._check_pipeline()
    pipelined_cls = getattr(transformers, 'PipelinedTransformer', None)
    if pipelined_cls is None:
      raise NotImplementedError(
          f'{type(self).__name__} needs praxis.layers.transformers.'
          'PipelinedTransformer, which this build does not have yet.')
    per_stage = self.NUM_LAYERS // (self.NUM_STAGES * self.CIRCULAR_REPEAT)
    task_p = self._lm_task(per_stage)
    model_p = task_p.model
    model_p.ici_mesh_shape = list(self.ICI_MESH_SHAPE)
    model_p.dcn_mesh_shape = list(self.DCN_MESH_SHAPE)
    names = [STAGE_AXIS, REPLICA_AXIS, DATA_AXIS, MDL_AXIS]
    model_p.mesh_axis_names = names
    # Annotate the stage's layers, then wrap the stage in the pipeline.
    model_p.lm_tpl = transformer_models.TransformerLm.set_sharding_params_v1(
        model_p.lm_tpl, replica_axis=REPLICA_AXIS, data_axis=DATA_AXIS,
        mdl_axis=MDL_AXIS, ici_mesh_shape=model_p.ici_mesh_shape,
        dcn_mesh_shape=model_p.dcn_mesh_shape, mesh_axis_names=names,
        training_optimized=self.TRAINING_OPTIMIZED_SHARDING)
    lm_p = model_p.lm_tpl
    pipeline_p = pax_fiddle.Config(
        pipelined_cls, pipeline_stage=lm_p.stacked_transformer_tpl,
        num_pipeline_stages=self.NUM_STAGES,
        circular_repeat=self.CIRCULAR_REPEAT,
        num_pipeline_microbatches=self.NUM_MICROBATCHES,
        pipeline_microbatch_size=self.MICROBATCH_SIZE,
        stream_io=self.STREAM_IO, checkpoint_policy=self.CHECKPOINT_POLICY,
        pipeline_broadcast_inputs=self.PIPELINE_BROADCAST_INPUTS)
    batch_dims = (STAGE_AXIS, REPLICA_AXIS, DATA_AXIS)
    pipeline_p.weight_split_dims_mapping.stages = [STAGE_AXIS]
    pipeline_p.activation_split_dims_mapping.final_out = [
        batch_dims, None, MDL_AXIS]
    lm_p.stacked_transformer_tpl = pipeline_p
    task_p.train.inputs_split_mapping = NestedMap(
        map_1d=(batch_dims,), map_2d=(batch_dims, None))
    self._shard_embedding(lm_p, batch_dims)
    maybe_setup_moe_params(pipeline_p)
    return task_p
