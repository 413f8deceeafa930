"""A Hugging Face decoder-only architecture as a Pax `TransformerLm` config.

Public: `ModelSpec`, `lm_config`, `layer_prefix`.

`ModelSpec` holds what the architecture families (llama.py, gemma.py,
gpt2.py) read from `config.json`; `lm_config` turns it into a
`praxis.layers.transformer_models.TransformerLm` config with per-layer
variables (`transformer/x_layers_<i>/...`), the attention being
`_layers.HfRopeAttention` (grouped-query, HF's rotary embedding).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import transformer_models
from praxis.layers import transformers

from paxml.hf import _layers

NORMS = ('rms', 'rms_plus_one', 'layer')
ACTIVATIONS = ('silu', 'gelu_tanh', 'gelu')


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The shape and the variants of a decoder-only model.

  Attributes:
    family: 'llama', 'mistral', 'gemma' or 'gpt2'.
    vocab_size: Rows of the token embedding.
    model_dims: Width of the residual stream.
    num_layers: Transformer blocks.
    num_heads: Query heads.
    num_kv_heads: Key/value heads (divides num_heads).
    dim_per_head: Features per head.
    hidden_dims: Width of the feed-forward hidden layer.
    norm: 'rms' (x * w), 'rms_plus_one' (x * (1 + w), Gemma) or 'layer'.
    norm_eps: Epsilon of the normalizations.
    activation: One of ACTIVATIONS.
    gated: Gated feed-forward (act(x W_gate) * x W_up).
    tied: The softmax reuses the token embedding.
    scale_embedding: Multiply embeddings by sqrt(model_dims) (Gemma).
    rope_theta: Rotary base; None for learned absolute positions.
    rope_scaling: HF's rope_scaling as sorted items, or None.
    max_positions: Positions of the learned position table (GPT-2), else
      informational.
    attention_bias: Biases in the attention projections.
    mlp_bias: Biases in the feed-forward projections.
    sliding_window: Mistral's attention window W (query i sees keys
      i - W < j <= i), or None for the whole context.
  """

  family: str
  vocab_size: int
  model_dims: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  dim_per_head: int
  hidden_dims: int
  norm: str = 'rms'
  norm_eps: float = 1e-6
  activation: str = 'silu'
  gated: bool = True
  tied: bool = False
  scale_embedding: bool = False
  rope_theta: float | None = 10_000.0
  rope_scaling: tuple[tuple[str, Any], ...] | None = None
  max_positions: int = 2048
  attention_bias: bool = False
  mlp_bias: bool = False
  sliding_window: int | None = None


def _norm(spec: ModelSpec) -> pax_fiddle.Config:
  if spec.norm == 'layer':
    return pax_fiddle.Config(normalizations.LayerNorm, epsilon=spec.norm_eps,
                             direct_scale=True)
  return pax_fiddle.Config(normalizations.RmsNorm, epsilon=spec.norm_eps,
                           direct_scale=spec.norm == 'rms')


def _activation(spec: ModelSpec) -> pax_fiddle.Config:
  if spec.activation == 'silu':
    return pax_fiddle.Config(activations.SiLU)
  return pax_fiddle.Config(activations.GELU,
                           approximate=spec.activation == 'gelu_tanh')


def _layer(spec: ModelSpec) -> pax_fiddle.Config:
  """One Transformer block."""
  atten = pax_fiddle.Config(
      _layers.HfRopeAttention, num_kv_heads=spec.num_kv_heads,
      use_bias=spec.attention_bias, rope_theta=spec.rope_theta,
      rope_scaling=spec.rope_scaling, sliding_window=spec.sliding_window)
  ff = pax_fiddle.Config(
      transformers.TransformerFeedForward, has_bias=spec.mlp_bias,
      activation_tpl=_activation(spec), use_gated_activation=spec.gated,
      ln_tpl=_norm(spec))
  return pax_fiddle.Config(
      transformers.Transformer, ln_tpl=_norm(spec), tr_atten_tpl=atten,
      tr_fflayer_tpl=ff)


def lm_config(spec: ModelSpec) -> pax_fiddle.Config:
  """The `TransformerLm` config of `spec` (causal, packed input)."""
  if spec.norm not in NORMS or spec.activation not in ACTIVATIONS:
    raise ValueError(f'ModelSpec: norm must be one of {NORMS} and activation '
                     f'one of {ACTIVATIONS}, got {spec.norm!r}, '
                     f'{spec.activation!r}.')
  stack = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=spec.num_layers,
      model_dims=spec.model_dims, hidden_dims=spec.hidden_dims,
      num_heads=spec.num_heads, dim_per_head=spec.dim_per_head,
      mask_self_attention=True, packed_input=True,
      transformer_layer_params_tpl=_layer(spec))
  no_bias = pax_fiddle.Config(linears.FeedForward, has_bias=False)
  lm = pax_fiddle.Config(
      transformer_models.TransformerLm, model_dims=spec.model_dims,
      vocab_size=spec.vocab_size, packed_input=True,
      stacked_transformer_tpl=stack, final_ln_tpl=_norm(spec),
      position_emb_tpl=None)
  if spec.tied:
    lm.softmax_tpl = pax_fiddle.Config(
        embedding_softmax.SharedEmbeddingSoftmax,
        scale_sqrt_depth=spec.scale_embedding, feed_forward_tpl=no_bias)
  else:
    if spec.scale_embedding:
      raise ValueError('ModelSpec: scale_embedding needs tied embeddings.')
    lm.softmax_tpl = pax_fiddle.Config(embedding_softmax.FullSoftmax,
                                       feed_forward_tpl=no_bias)
    lm.separate_embedding_tpl = pax_fiddle.Config(embedding_softmax.Embedding)
  if spec.rope_theta is None:
    lm.position_emb_tpl = pax_fiddle.Config(
        embedding_softmax.TrainablePositionalEmbedding,
        max_seq_length=spec.max_positions, lookup_style='index')
  return lm


def layer_prefix(i: int) -> str:
  """The variable path of block i."""
  return f'transformer/x_layers_{i}'
