"""The GPU recipes of NVIDIA's Pax release: GPT-3 family, Llama 2, MoE.

Public names (as in Pax): NVIDIA1_3B, NVIDIA5B, NVIDIA8_3B, NVIDIA10B,
NVIDIA40BProxy, NVIDIA70BProxy, NVIDIA116BProxy, NVIDIA175BProxy,
NVIDIA175B, TestSmallConfig, Llama33BProxy, NVIDIA175B_FSDP, Llama2_7B,
Llama2_13B, Llama2_70B, MoELarge, GLaM64B64EProxy (unregistered, as in
Pax), GLaM64B64EProxy_EP, Grok, Grok_Proxy, Grok_Proxy_PP, Grok_PP,
NVIDIA_CIRCULAR_REPEAT; `shrunk` makes a CPU-sized variant.

Every recipe trains on synthetic tokens (`lm_cloud.SyntheticDataset`) with
Adam (or Adafactor, `USE_ADAFACTOR`), a linear-rampup cosine-decay learning
rate, bf16 activations and Gaussian initialisation; `NVIDIA1_3B` and its
children are data/FSDP-parallel over a repeated layer stack, `NVIDIA5B` and
its children pipelined (`NUM_STAGES` stages in microbatches). The Llama 2
recipes swap in grouped-query attention with RoPE, SwiGLU feed-forward layers
and RMSNorm. The meshes are those of the GPU clusters the recipes were
written for (e.g. 16 GPUs); on one machine override them, as NVIDIA's launch
scripts do:

  python -m paxml.main --fdl_config=paxml.tasks.lm.params.nvidia.Llama2_7B \\
      --fdl.ICI_MESH_SHAPE=[1,8,1] --job_log_dir=/tmp/llama2

`shrunk(Llama2_7B)` is the same recipe with 2 layers, width 64 and a
1-device mesh, for a CPU (`paxml/tasks/lm/params/nvidia_test.py` trains
each that way).
"""

from __future__ import annotations

from typing import Any

from jax import numpy as jnp
from paxml import experiment_registry
from paxml import tasks_lib
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import c4
from paxml.tasks.lm.params import lm_cloud
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import activations
from praxis.layers import checkpoint_policy
from praxis.layers import glam
from praxis.layers import grok
from praxis.layers import grouped_query_attention
from praxis.layers import normalizations

TaskConfig = pax_fiddle.Config[tasks_lib.SingleTask]
WeightInit = base_layer.WeightInit
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType


class _NvidiaRecipe:
  """The attributes that every NVIDIA recipe shares (a mixin)."""

  USE_FLASH_ATTENTION = False
  USE_TRITON_LAYER_NORM = False
  USE_CUDNN_FLASH_ATTENTION = False
  NUM_LAYERS = 24
  NUM_HEADS = 32
  MAX_SEQ_LEN = 2048
  VOCAB_SIZE = 51200
  ACTIVATION_CLS = activations.GELU
  USE_GATED_ACTIVATION = False
  PACKED_INPUT = True
  FPROP_DTYPE = jnp.bfloat16
  TRAINABLE_POSITION_EMB = True
  TRAINABLE_PE_MAX_SEQ_LEN = MAX_SEQ_LEN
  INIT_STD = 0.023
  SOFTMAX_INIT_STD = 0.023
  LEARNING_RATE = 6e-4
  ADAM_BETA1 = 0.9
  ADAM_BETA2 = 0.95
  ADAM_EPSILON = 1e-8
  ADAM_EPSILON_ROOT = 0.0
  CLIP_GRADIENT_NORM_TO_VALUE = 1.0
  CLIP_THRESHOLD = 1.0
  LR_SCHEDULE = 'linear_rampup_cosine_decay'
  LR_COS_WARMUP = 0
  LR_COS_DECAY_START = 1
  LR_COS_DECAY_END = 500000
  LR_COS_MIN_RATIO = 0.1
  LR_COS_MAX = 1.0
  USE_ADAFACTOR = False


def _fused(template: Any, class_name: str) -> Any:
  """`template`'s fields on the GPU-fused class `gpu_fast_attention.<name>`."""
  from praxis.layers import gpu_fast_attention  # pylint: disable=g-import-not-at-top
  fused = pax_fiddle.Config(getattr(gpu_fast_attention, class_name))
  fused.copy_fields_from(template)
  return fused


def _layer(task_p: TaskConfig) -> Any:
  """The transformer layer template inside the (repeated/pipelined) stack."""
  return model_params.inner_stack(
      task_p.model.lm_tpl.stacked_transformer_tpl).transformer_layer_params_tpl


def _nvidia_task(exp: Any, task_p: TaskConfig) -> TaskConfig:
  """The recipe's optimizer, schedule, init and fused-kernel switches."""
  task_p.train.save_interval_steps = 100000
  task_p.model.params_init = WeightInit.Gaussian(exp.INIT_STD)
  layer_p = _layer(task_p)
  if exp.USE_FLASH_ATTENTION:
    layer_p.tr_atten_tpl = _fused(layer_p.tr_atten_tpl,
                                  'GpuTritonFusedDotProductAttention')
  if exp.USE_TRITON_LAYER_NORM:
    layer_p.ln_tpl = _fused(layer_p.ln_tpl, 'GpuTritonFusedLayerNorm')
  # Pax's recipes compute a softmax init from SOFTMAX_INIT_STD but never
  # assign it: the softmax keeps the base's Gaussian(1 / sqrt(MODEL_DIMS)).
  learner = task_p.train.learner
  learner.loss_name = 'total_loss'
  if exp.USE_ADAFACTOR:
    learner.optimizer = pax_fiddle.Config(
        optimizers.ShardedAdafactor, decay_method='adam',
        beta1=exp.ADAM_BETA1, decay_adam=0.99, weight_decay=exp.WEIGHT_DECAY,
        clip_gradient_norm_to_value=exp.CLIP_GRADIENT_NORM_TO_VALUE)
  else:
    learner.optimizer = pax_fiddle.Config(
        optimizers.Adam, beta1=exp.ADAM_BETA1, beta2=exp.ADAM_BETA2,
        weight_decay=exp.WEIGHT_DECAY, epsilon=exp.ADAM_EPSILON,
        epsilon_root=exp.ADAM_EPSILON_ROOT,
        clip_gradient_norm_to_value=exp.CLIP_GRADIENT_NORM_TO_VALUE,
        clip_threshold=exp.CLIP_THRESHOLD)
  learner.optimizer.learning_rate = exp.LEARNING_RATE
  learner.optimizer.lr_schedule = pax_fiddle.Config(
      schedules.LinearRampupCosineDecay, warmup_steps=exp.LR_COS_WARMUP,
      decay_start=exp.LR_COS_DECAY_START, decay_end=exp.LR_COS_DECAY_END,
      min_ratio=exp.LR_COS_MIN_RATIO, max=exp.LR_COS_MAX)
  return task_p


@experiment_registry.register
class NVIDIA1_3B(_NvidiaRecipe, c4.TransformerLmSpmdAdam,
                 lm_cloud.SyntheticDataset):
  """GPT-3 1.3B: 24 layers, width 2048, data-parallel over 16 GPUs."""

  USE_REPEATED_LAYER = True
  DCN_MESH_SHAPE = [1, 1, 1]
  ICI_MESH_SHAPE = [16, 1, 1]
  PERCORE_BATCH_SIZE = 4
  DIMS_PER_HEAD = 64
  MODEL_DIMS = 2048
  HIDDEN_DIMS = 8192

  def task(self) -> TaskConfig:
    task_p = _nvidia_task(self, super().task())
    task_p.summary_verbosity = 0
    return task_p


@experiment_registry.register
class NVIDIA5B(_NvidiaRecipe, c4.TransformerLmSpmdPipelineAdam,
               lm_cloud.SyntheticDataset):
  """GPT-3 5B: 24 layers, width 4096, 4 pipeline stages."""

  USE_REPEATED_LAYER = False
  DCN_MESH_SHAPE = [1, 1, 1, 1]
  ICI_MESH_SHAPE = [4, 2, 1, 2]
  NUM_STAGES = 4
  MICROBATCH_SIZE = 2
  PERCORE_BATCH_SIZE = 1
  DIMS_PER_HEAD = 128
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 16384

  def task(self) -> TaskConfig:
    return _nvidia_task(self, super().task())


@experiment_registry.register
class NVIDIA8_3B(NVIDIA1_3B):
  """GPT-3 8.3B on a [4, 1, 4] mesh."""

  ICI_MESH_SHAPE = [4, 1, 4]
  NUM_LAYERS = 40
  NUM_HEADS = 64
  DIMS_PER_HEAD = 64
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 4 * 4096


@experiment_registry.register
class NVIDIA10B(NVIDIA1_3B):
  """GPT-3 10B on a [2, 1, 8] mesh."""

  ICI_MESH_SHAPE = [2, 1, 8]
  PERCORE_BATCH_SIZE = 0.25
  NUM_LAYERS = 32
  NUM_HEADS = 40
  DIMS_PER_HEAD = 128
  MODEL_DIMS = 5120
  HIDDEN_DIMS = 4 * 5120


@experiment_registry.register
class NVIDIA40BProxy(NVIDIA5B):
  """12 layers of a 40B model, 2 stages."""

  ICI_MESH_SHAPE = [2, 2, 1, 4]
  NUM_STAGES = 2
  MICROBATCH_SIZE = 4
  PERCORE_BATCH_SIZE = 16
  NUM_LAYERS = 12
  NUM_HEADS = 64
  MODEL_DIMS = 8192
  HIDDEN_DIMS = 4 * 8192


@experiment_registry.register
class NVIDIA70BProxy(NVIDIA40BProxy):
  """20 layers of a 70B model, 2 stages."""

  PERCORE_BATCH_SIZE = 8
  NUM_LAYERS = 20


@experiment_registry.register
class NVIDIA116BProxy(NVIDIA5B):
  """16 layers of a 116B model, 4 stages."""

  ICI_MESH_SHAPE = [4, 1, 1, 4]
  MICROBATCH_SIZE = 2
  PERCORE_BATCH_SIZE = 6
  NUM_LAYERS = 16
  NUM_HEADS = 96
  MODEL_DIMS = 12288
  HIDDEN_DIMS = 4 * 12288


@experiment_registry.register
class NVIDIA175BProxy(NVIDIA116BProxy):
  """24 layers of GPT-3 175B, for 4x16 A100-40G."""

  MICROBATCH_SIZE = 1
  NUM_LAYERS = 24


@experiment_registry.register
class NVIDIA175B(NVIDIA175BProxy):
  """GPT-3 175B, for 6x16 A100-40G, with Adafactor."""

  DCN_MESH_SHAPE = [6, 1, 1, 1]
  ICI_MESH_SHAPE = [1, 1, 1, 16]
  NUM_LAYERS = 96
  NUM_STAGES = 6
  PERCORE_BATCH_SIZE = 0.0625
  ENABLE_BFLOAT16 = True
  USE_ADAFACTOR = True


@experiment_registry.register
class TestSmallConfig(NVIDIA5B):
  """16 layers, width 4096, 2 stages (16 A100-40G)."""

  ICI_MESH_SHAPE = [2, 2, 1, 4]
  NUM_STAGES = 2
  PERCORE_BATCH_SIZE = 2
  NUM_LAYERS = 16
  HIDDEN_DIMS = 4 * 4096


@experiment_registry.register
class Llama33BProxy(NVIDIA1_3B):
  """Llama-33B-sized GPT (60 layers, width 6656), FSDP over 16 GPUs."""

  ICI_MESH_SHAPE = [1, 16, 1]
  PERCORE_BATCH_SIZE = 1
  NUM_LAYERS = 60
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = 52
  MODEL_DIMS = 6656
  HIDDEN_DIMS = 17920
  ENABLE_BFLOAT16 = True
  USE_ADAFACTOR = True


@experiment_registry.register
class NVIDIA175B_FSDP(NVIDIA1_3B):
  """GPT-3 175B fully-sharded data-parallel over 8x16 A100-40G."""

  ICI_MESH_SHAPE = [1, 16, 1]
  DCN_MESH_SHAPE = [1, 8, 1]
  PERCORE_BATCH_SIZE = 1
  USE_ADAFACTOR = True
  NUM_LAYERS = 96
  NUM_HEADS = 96
  DIMS_PER_HEAD = 128
  MODEL_DIMS = 12288
  HIDDEN_DIMS = 4 * 12288


def _llama_layers(exp: Any, task_p: TaskConfig) -> TaskConfig:
  """Llama's layer: GQA with RoPE, SwiGLU, RMSNorm (f32 statistics)."""
  layer_p = _layer(task_p)
  ff_p = layer_p.tr_fflayer_tpl
  ff_p.use_gated_activation = True
  ff_p.activation_tpl = pax_fiddle.Config(activations.Swish)
  atten_p = pax_fiddle.Config(grouped_query_attention.GroupedQueryAttention)
  if exp.USE_CUDNN_FLASH_ATTENTION:
    atten_p = _fused(atten_p, 'GpuCudnnFusedGroupedQueryAttention')
    atten_p.is_causal = True
  atten_p.num_kv_heads = exp.NUM_KV_HEADS
  atten_p.rope_min_max_timescales = (1, 10000)
  layer_p.tr_atten_tpl = atten_p
  lm_p = task_p.model.lm_tpl
  lm_p.position_emb_tpl = None  # RoPE instead.
  for owner in (layer_p, ff_p, lm_p):
    name = 'final_ln_tpl' if owner is lm_p else 'ln_tpl'
    setattr(owner, name, pax_fiddle.Config(normalizations.RmsNorm,
                                           intermediate_dtype=jnp.float32))
  task_p.train.eval_skip_train = True
  batch_axes = ('replica', 'data')
  atten_p.weight_split_dims_mapping.dnh = ['data', 'mdl', None]
  acts = atten_p.activation_split_dims_mapping
  acts.btd = [batch_axes, None, None]
  acts.btnh = [batch_axes, None, 'mdl', None]
  acts.bskh = [batch_axes, None, 'mdl', None]
  return task_p


@experiment_registry.register
class Llama2_7B(NVIDIA1_3B):
  """Llama 2 7B (32 layers, width 4096, 32 heads), FSDP over 16 GPUs."""

  NUM_LAYERS = 32
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 11008
  NUM_HEADS = 32
  DIMS_PER_HEAD = 128
  MAX_SEQ_LEN = 4096
  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = [1, 16, 1]
  NUM_KV_HEADS = 32
  MAX_STEPS = 100

  def task(self) -> TaskConfig:
    task_p = _llama_layers(self, super().task())
    task_p.train.num_train_steps = self.MAX_STEPS
    return task_p


@experiment_registry.register
class Llama2_13B(Llama2_7B):
  """Llama 2 13B (40 layers, width 5120, 40 heads)."""

  NUM_LAYERS = 40
  MODEL_DIMS = 5120
  HIDDEN_DIMS = 13824
  NUM_HEADS = 40
  NUM_KV_HEADS = 40


@experiment_registry.register
class Llama2_70B(Llama2_7B):
  """Llama 2 70B (80 layers, width 8192, 64 heads, 8 KV heads), 4x16 GPUs."""

  NUM_LAYERS = 80
  MODEL_DIMS = 8192
  HIDDEN_DIMS = 28672
  NUM_HEADS = 64
  NUM_KV_HEADS = 8
  DCN_MESH_SHAPE = [1, 4, 1]


@experiment_registry.register
class MoELarge(NVIDIA1_3B):
  """A 26.8B-parameter MoE: every layer's feed-forward is 16 experts."""

  NUM_LAYERS = 12
  NUM_HEADS = 32
  MODEL_DIMS = 4096
  HIDDEN_DIMS = 16384
  DIMS_PER_HEAD = 128
  NUM_EXPERTS = 16
  NUM_GROUPS = 16
  ICI_MESH_SHAPE = [1, 16, 1]
  DCN_MESH_SHAPE = [1, 2, 1]

  def task(self) -> TaskConfig:
    task_p = super().task()
    stack_p = model_params.inner_stack(
        task_p.model.lm_tpl.stacked_transformer_tpl)
    # A repeated stack repeats one layer: every layer is then an MoE layer.
    stack_p.moe_layers = list(range(stack_p.num_layers))
    stack_p.num_groups = self.NUM_GROUPS
    stack_p.num_experts = self.NUM_EXPERTS
    model_params.maybe_setup_moe_params(stack_p)
    return task_p


# The MoE recipes below (GLaM, Grok) replace the GPT layer stack by a
# praxis.layers.glam / grok TransformerLm; the `_EP` and Grok ones add a
# `data_expert` mesh axis (experts split over it, tokens over it too).
EP_AXES = ('replica', 'data', 'data_expert', 'mdl')


class _FoldedExpertMesh:
  """Within: the recipe's meshes without the `data_expert` axis (merged into
  `data`), so the dense base classes (3- or 4-axis meshes) can build."""

  def __init__(self, exp: Any, enabled: bool):
    self._exp = exp
    self._keys = ('ICI_MESH_SHAPE', 'DCN_MESH_SHAPE') if enabled else ()

  def __enter__(self):
    for key in self._keys:
      mesh = getattr(self._exp, key)
      if mesh is not None:  # [..., data, data_expert, mdl]
        setattr(self._exp, key, [*mesh[:-3], mesh[-3] * mesh[-2], mesh[-1]])

  def __exit__(self, *unused):
    for key in self._keys:
      self._exp.__dict__.pop(key, None)  # The class's value again.


def _moe_lm_kwargs(exp: Any) -> dict[str, Any]:
  """What the GLaM and Grok builders of NVIDIA's MoE recipes share."""
  return dict(
      vocab_size=exp.VOCAB_SIZE, num_transformer_layers=exp.NUM_LAYERS,
      moe=True, model_dim=exp.MODEL_DIMS, ff_dim=exp.HIDDEN_DIMS,
      moe_hidden_dim=exp.HIDDEN_DIMS, attention_num_heads=exp.NUM_HEADS,
      attention_key_value_dim=exp.MODEL_DIMS // exp.NUM_HEADS,
      attention_extra_logit=0.0, use_tgt_labels_size_as_loss_denominator=True,
      moe_load_balance_loss_weight=0.01, z_loss_weight=1e-4,
      moe_gating_func='top2', moe_gating_embedding_level='token',
      c_dim=None, capacity_factor=2.0, e_dim=exp.NUM_EXPERTS,
      num_groups=exp.NUM_GROUPS, use_gated_activation=True)


def _grok_lm(exp: Any, **pipeline: Any) -> Any:
  return grok.GrokUniTransformerLmHParams(
      name='grok_lm', attention_num_groups=exp.NUM_KV_HEADS,
      combine_qkv=exp.COMBINE_QKV, checkpoint_policy=exp.CHECKPOINT_POLICY,
      use_fp8=exp.USE_FP8, **_moe_lm_kwargs(exp), **pipeline)


def _expert_parallel_shardings(training_optimized: bool) -> dict[str, Any]:
  """Pax's `set_sharding_params_with_expert_parallelism` mappings: weights
  over data x data_expert (experts over data_expert), batch over all three
  data-like axes."""
  replica, data, expert, mdl = EP_AXES
  batch = (replica, data, expert)
  w_data = (data, expert)
  return {
      'w_df': [w_data, mdl], 'w_dnh': [w_data, mdl, None],
      'w_emh': [expert, data, mdl], 'w_vd': [mdl, w_data],
      'a_bld': [batch, None, mdl if training_optimized else None],
      'a_blf': [batch, None, mdl], 'a_blnh': [batch, None, mdl, None],
      'a_blv': [batch, None, mdl],
      'a_egch': [expert, data, None, mdl],
      'a_egcm': ([expert, (replica, data), None, mdl] if training_optimized
                 else [batch, None, None, None]),
  }


def _moe_task(exp: Any, task_p: TaskConfig, lm_p: Any, *,
              expert_parallel: bool, stage_axis: bool = False) -> TaskConfig:
  """Puts MoE TransformerLm `lm_p` in `task_p` and annotates its sharding.

  Without `expert_parallel`, Pax's v1 sharding on [replica, data, mdl];
  with it, the [replica, data, data_expert, mdl] mesh (a `stage` axis in
  front if `stage_axis`) and the expert-parallel mappings.
  """
  model_p = task_p.model
  model_p.ici_mesh_shape = list(exp.ICI_MESH_SHAPE)
  if exp.DCN_MESH_SHAPE is not None:
    model_p.dcn_mesh_shape = list(exp.DCN_MESH_SHAPE)
  names = list(EP_AXES if expert_parallel else ('replica', 'data', 'mdl'))
  if stage_axis:
    names.insert(0, 'stage')
  model_p.mesh_axis_names = names
  mesh = dict(ici_mesh_shape=model_p.ici_mesh_shape,
              dcn_mesh_shape=model_p.dcn_mesh_shape, mesh_axis_names=names)
  lm_cls = pax_fiddle.get_callable(lm_p)
  if expert_parallel:
    lm_p = lm_cls.set_custom_sharding_params(
        lm_p, **mesh,
        **_expert_parallel_shardings(exp.TRAINING_OPTIMIZED_SHARDING))
  else:
    lm_p = lm_cls.set_sharding_params_v1(
        lm_p, replica_axis='replica', data_axis='data', mdl_axis='mdl',
        training_optimized=exp.TRAINING_OPTIMIZED_SHARDING, **mesh)
  model_p.lm_tpl = lm_p
  batch = tuple(n for n in names if n != 'mdl')
  task_p.train.inputs_split_mapping = py_utils.NestedMap(
      map_1d=(batch,), map_2d=(batch, None))
  if getattr(exp, 'USE_ROPE', False):
    _layer(task_p).tr_atten_tpl.use_rotary_position_emb = True
    lm_p.position_emb_tpl = None
  return task_p


class GLaM64B64EProxy(NVIDIA1_3B):
  """8 layers of a 143B GLaM (64 experts every other layer), 8x16 A100-40G.

  Not registered, as in Pax.
  """

  NUM_GPUS = 128
  NUM_LAYERS = 8
  NUM_HEADS = 64
  DIMS_PER_HEAD = 128
  MODEL_DIMS = 8192
  HIDDEN_DIMS = 32768
  NUM_EXPERTS = 64
  NUM_GROUPS = NUM_GPUS
  ICI_MESH_SHAPE = [1, NUM_GPUS, 1]
  DCN_MESH_SHAPE = None
  EXPERT_PARALLEL = False

  def task(self) -> TaskConfig:
    with _FoldedExpertMesh(self, self.EXPERT_PARALLEL):
      task_p = super().task()
    lm_p = glam.GlamUniTransformerLmHParams(name='glam_lm',
                                            **_moe_lm_kwargs(self))
    return _moe_task(self, task_p, lm_p, expert_parallel=self.EXPERT_PARALLEL)


@experiment_registry.register
class GLaM64B64EProxy_EP(GLaM64B64EProxy):
  """GLaM64B64EProxy with 8 experts split over a `data_expert` mesh axis."""

  NUM_EXPERTS = 8
  ICI_MESH_SHAPE = [1, 16, 8, 1]
  EXPERT_PARALLEL = True


@experiment_registry.register
class Grok_Proxy(NVIDIA1_3B):
  """16 layers of Grok-1 (8 experts in every layer, GQA, RoPE), 8x8 GPUs."""

  NUM_GPUS = 64
  USE_REPEATED_LAYER = True
  NUM_LAYERS = 16
  NUM_HEADS = 48
  NUM_KV_HEADS = 8
  DIMS_PER_HEAD = 128
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_QKV_OUT_PROJ
  MODEL_DIMS = 6144
  HIDDEN_DIMS = 32768
  COMBINE_QKV = False
  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 8192
  VOCAB_SIZE = 131072
  USE_FP8 = False
  NUM_EXPERTS = 8
  NUM_GROUPS = 64
  MAX_STEPS = 10
  # Pax fixes the meshes by USE_EXPERT_PARALLEL at class creation: to turn
  # it off, give 3-axis meshes too (e.g. [1, 8, 1] and [1, 8, 1]).
  USE_EXPERT_PARALLEL = True
  ICI_MESH_SHAPE = [1, 1, 8, 1]  # replica, data, data_expert, mdl
  DCN_MESH_SHAPE = [1, 8, 1, 1]
  USE_ROPE = True

  def task(self) -> TaskConfig:
    with _FoldedExpertMesh(self, self.USE_EXPERT_PARALLEL):
      task_p = super().task()
    task_p.train.num_train_steps = self.MAX_STEPS
    return _moe_task(self, task_p, _grok_lm(self),
                     expert_parallel=self.USE_EXPERT_PARALLEL)


@experiment_registry.register
class Grok(Grok_Proxy):
  """Grok-1: 64 layers, 8 experts in each, over 32x8 GPUs."""

  NUM_GPUS = 256
  NUM_LAYERS = 64
  NUM_GROUPS = 256
  DCN_MESH_SHAPE = [1, 32, 1, 1]


@experiment_registry.register
class Grok_Proxy_PP(NVIDIA5B):
  """Grok_Proxy pipelined over 8 stages (one per node of 8 GPUs)."""

  NUM_STAGES = 8
  NUM_GPUS = 64
  USE_REPEATED_LAYER = False
  NUM_LAYERS = 16
  NUM_HEADS = 48
  NUM_KV_HEADS = 8
  DIMS_PER_HEAD = 128
  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_QKV_OUT_PROJ
  MODEL_DIMS = 6144
  HIDDEN_DIMS = 32768
  COMBINE_QKV = False
  MAX_SEQ_LEN = 8192
  USE_FP8 = False
  VOCAB_SIZE = 131072
  NUM_MICROBATCHES = 32
  MICROBATCH_SIZE = 8
  PERCORE_BATCH_SIZE = 1
  NUM_EXPERTS = 8
  NUM_GROUPS = 8
  MAX_STEPS = 10
  USE_EXPERT_PARALLEL = True
  # stage, replica, data, data_expert, mdl (without EP: no data_expert).
  ICI_MESH_SHAPE = [1, 1, 1, 8, 1]
  DCN_MESH_SHAPE = [NUM_STAGES, 1, 8, 1, 1]
  MESH_AXIS_NAMES = ['stage', *EP_AXES]
  USE_ROPE = True

  def task(self) -> TaskConfig:
    with _FoldedExpertMesh(self, self.USE_EXPERT_PARALLEL):
      task_p = super().task()  # Checks stages, microbatches, meshes.
    task_p.train.num_train_steps = self.MAX_STEPS
    lm_p = _grok_lm(self, num_pipeline_stages=self.NUM_STAGES,
                    num_pipeline_microbatches=self.NUM_MICROBATCHES)
    task_p = _moe_task(self, task_p, lm_p, stage_axis=True,
                       expert_parallel=self.USE_EXPERT_PARALLEL)
    # Embedding and softmax data-parallel over every axis but mdl.
    batch = task_p.train.inputs_split_mapping.map_1d[0]
    self._shard_embedding(lm_p, batch)
    pipeline_p = lm_p.stacked_transformer_tpl
    pipeline_p.weight_split_dims_mapping.stages = ['stage']
    pipeline_p.activation_split_dims_mapping.final_out = [batch, None, 'mdl']
    task_p.train.always_use_train_for_model_init = False
    task_p.model.report_strict_acc = True
    return task_p


@experiment_registry.register
class Grok_PP(Grok_Proxy_PP):
  """Grok-1 (64 layers) pipelined over 8 stages."""

  NUM_LAYERS = 64


@experiment_registry.register
class NVIDIA_CIRCULAR_REPEAT(c4.TransformerLmSpmdPipelineAdam,
                             lm_cloud.SyntheticDataset):
  """A 32-layer GPT in a circular pipeline: 8 stages, each run 4 times.

  Unlike the other recipes, Pax's plain pipelined-Adam settings (no NVIDIA
  optimizer, init or fused-kernel switches).
  """

  CHECKPOINT_POLICY = AutodiffCheckpointType.SAVE_DOT_ONLY
  USE_REPEATED_LAYER = False
  DCN_MESH_SHAPE = [1, 1, 1, 1]
  ICI_MESH_SHAPE = [8, 1, 1, 1]
  NUM_STAGES = 8
  NUM_MICROBATCHES = 8
  PERCORE_BATCH_SIZE = 1
  CIRCULAR_REPEAT = 4
  MAX_STEPS = 2000
  NUM_LAYERS = 32
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

  def task(self) -> TaskConfig:
    task_p = super().task()
    task_p.summary_verbosity = 0
    return task_p


# Sizes of a recipe on a CPU: `shrunk` sets these (and 1-device meshes).
TINY = dict(NUM_LAYERS=2, MODEL_DIMS=64, HIDDEN_DIMS=128, NUM_HEADS=4,
            DIMS_PER_HEAD=16, NUM_KV_HEADS=2, MAX_SEQ_LEN=32,
            TRAINABLE_PE_MAX_SEQ_LEN=32, VOCAB_SIZE=128,
            PERCORE_BATCH_SIZE=2, NUM_EXPERTS=2, NUM_GROUPS=1,
            FPROP_DTYPE=jnp.float32)


def shrunk(exp_cls: type[Any], **overrides: Any) -> type[Any]:
  """A subclass of recipe `exp_cls` small enough to train on a CPU.

  The layer count, widths, heads, sequence length, vocabulary and batch of
  `TINY` (then `overrides`); every mesh axis 1; a pipelined recipe keeps 2
  stages of 1 layer each (with 2 microbatches), so its mesh's stage axis is
  2.

  Args:
    exp_cls: A recipe of this module (or any class with its attributes).
    **overrides: More class attributes to set.

  Returns:
    The new class, named `<name>Tiny`.
  """
  attrs = {k: v for k, v in TINY.items() if hasattr(exp_cls, k)}
  pipelined = getattr(exp_cls, 'NUM_STAGES', None) is not None
  if pipelined:
    attrs.update(NUM_STAGES=2, MICROBATCH_SIZE=None, NUM_MICROBATCHES=2)
  attrs['ICI_MESH_SHAPE'] = [1] * len(exp_cls.ICI_MESH_SHAPE)
  if pipelined:
    attrs['ICI_MESH_SHAPE'][0] = 2
  if exp_cls.DCN_MESH_SHAPE is not None:
    attrs['DCN_MESH_SHAPE'] = [1] * len(exp_cls.DCN_MESH_SHAPE)
  attrs.update(overrides)
  return type(f'{exp_cls.__name__}Tiny', (exp_cls,), attrs)


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, _NvidiaRecipe)
           and value is not _NvidiaRecipe] + [
               'NVIDIA_CIRCULAR_REPEAT', 'shrunk', 'TINY']
