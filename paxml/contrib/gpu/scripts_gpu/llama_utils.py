"""Pax's `BaseLLaMA`: a LLaMA decoder built on the GPT experiment classes.

Pre-norm layers with bias-free RMSNorms (direct scale, float32 statistics),
bias-free attention with rotary position embeddings (fused QKV, or
multi-query attention with NUM_KV_HEADS when USE_MQA), a gated SiLU
feed-forward block without biases, a separate token embedding and an
unbiased output softmax, all in bfloat16; no position embedding.
"""

from __future__ import annotations

from typing import Any

from jax import numpy as jnp
from paxml import experiment_registry
from paxml.contrib.gpu.scripts_gpu import tasks
from paxml.tasks.lm.params import c4
from praxis import pax_fiddle
from praxis.contrib.gpu.scripts_gpu.models import CustomMetricsLM
from praxis.layers import activations
from praxis.layers import embedding_softmax
from praxis.layers import multi_query_attention
from praxis.layers import normalizations
from praxis.layers import transformers

MESH_AXES = ['replica', 'data', 'mdl']


def _rms_norm(exp: Any, name: str) -> Any:
  return pax_fiddle.Config(normalizations.RmsNorm, name=name,
                           direct_scale=True, epsilon=exp.RMS_NORM_EPSILON,
                           intermediate_dtype=jnp.float32)


def _attention(exp: Any, atten_p: Any) -> Any:
  """Bias-free rotary attention: fused QKV, or MQA with NUM_KV_HEADS."""
  if exp.USE_MQA:
    atten_p = pax_fiddle.Config(
        multi_query_attention.MultiQueryDotProductAttention,
        num_kv_heads=exp.NUM_KV_HEADS, combine_qkv=False)
    atten_p.proj_tpl.use_bias = False
  else:
    atten_p.internal_enable_per_dim_scale = False
    atten_p.combine_qkv = True
    atten_p.combined_qkv_proj_tpl.use_bias = False
  atten_p.internal_enable_query_scale = True
  atten_p.use_bias = False
  atten_p.use_rotary_position_emb = True
  return atten_p


def _stack(exp: Any) -> Any:
  """The LLaMA layers: a StackedTransformer, repeated if asked."""
  stack_p = pax_fiddle.Config(
      transformers.StackedTransformer, model_dims=exp.MODEL_DIMS,
      hidden_dims=exp.HIDDEN_DIMS, num_layers=exp.NUM_LAYERS,
      num_heads=exp.NUM_HEADS, dim_per_head=exp.DIMS_PER_HEAD)
  layer_p = stack_p.transformer_layer_params_tpl
  layer_p.norm_policy = 'pre'
  layer_p.ln_tpl = _rms_norm(exp, 'norm')
  layer_p.tr_atten_tpl = _attention(exp, layer_p.tr_atten_tpl)
  ff_p = layer_p.tr_fflayer_tpl
  ff_p.has_bias = False
  ff_p.fflayer_tpl.has_bias = False
  ff_p.ln_tpl = _rms_norm(exp, 'norm')
  ff_p.activation_tpl = pax_fiddle.Config(exp.ACTIVATION_CLS)
  ff_p.fflayer_tpl.activation_tpl = pax_fiddle.Config(exp.ACTIVATION_CLS)
  ff_p.use_gated_activation = exp.USE_GATED_ACTIVATION
  if not exp.USE_REPEATED_LAYER:
    return stack_p
  stack_p.num_layers = 1
  return pax_fiddle.Config(
      transformers.StackedTransformerRepeated, block=stack_p,
      x_times=exp.NUM_LAYERS, checkpoint_policy=exp.CHECKPOINT_POLICY)


@experiment_registry.register
class BaseLLaMA(c4.TransformerLmSpmdAdam):
  """LLaMA-7B-sized defaults; the sized models change the attributes."""

  MODEL_CLASS = CustomMetricsLM
  BOS_ID = 1
  EOS_ID = 2
  MAX_STEPS = 0
  NUM_LAYERS = 32
  VOCAB_SIZE = 32000
  DIMS_PER_HEAD = 128
  NUM_HEADS = 32
  MODEL_DIMS = 4096
  HIDDEN_DIMS = MODEL_DIMS * 4
  FPROP_DTYPE = jnp.bfloat16
  MODEL_DTYPE = jnp.bfloat16
  USE_MQA = False
  NUM_KV_HEADS = None
  ACTIVATION_CLS = activations.SiLU
  USE_GATED_ACTIVATION = True
  RMS_NORM_EPSILON = 1.0e-05
  ICI_MESH_SHAPE = [1, 1, 1]
  DCN_MESH_SHAPE = None
  TRAINING_OPTIMIZED_SHARDING = True

  def get_input_specs_provider_params(self) -> Any:
    return tasks.batch_specs_provider(self)

  def task(self) -> Any:
    task_p = super().task()
    task_p.train.num_train_steps = self.MAX_STEPS
    model_p = task_p.model
    model_p.ici_mesh_shape = self.ICI_MESH_SHAPE
    model_p.dcn_mesh_shape = self.DCN_MESH_SHAPE
    model_p.mesh_axis_names = MESH_AXES
    model_p.fprop_dtype = self.FPROP_DTYPE
    lm_p = model_p.lm_tpl
    lm_p.packed_input = False
    lm_p.model_dims = self.MODEL_DIMS
    lm_p.vocab_size = self.VOCAB_SIZE
    lm_p.position_emb_tpl = None
    lm_p.softmax_tpl = pax_fiddle.Config(
        embedding_softmax.FullSoftmax, name='output',
        input_dims=self.MODEL_DIMS, num_classes=self.VOCAB_SIZE)
    lm_p.softmax_tpl.feed_forward_tpl.has_bias = False
    lm_p.softmax_tpl.feed_forward_tpl.activation_tpl = pax_fiddle.Config(
        self.ACTIVATION_CLS)
    lm_p.separate_embedding_tpl = pax_fiddle.Config(
        embedding_softmax.Embedding, name='tok_embeddings',
        input_dims=self.MODEL_DIMS, num_classes=self.VOCAB_SIZE)
    lm_p.final_ln_tpl = _rms_norm(self, 'norm')
    lm_p.stacked_transformer_tpl = _stack(self)
    model_p.lm_tpl = pax_fiddle.get_callable(lm_p).set_sharding_params_v1(
        lm_p, replica_axis='replica', data_axis='data', mdl_axis='mdl',
        ici_mesh_shape=model_p.ici_mesh_shape,
        dcn_mesh_shape=model_p.dcn_mesh_shape, mesh_axis_names=MESH_AXES,
        training_optimized=self.TRAINING_OPTIMIZED_SHARDING)
    return task_p
