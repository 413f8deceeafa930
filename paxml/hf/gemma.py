"""Gemma (`GemmaForCausalLM`, Gemma 1) <-> Pax.

Public: ARCHITECTURES, spec_from_config, config_from_spec, rules, ignore.

Gemma is Llama-shaped with: RMSNorm scales stored as w and applied as
(1 + w) (Pax `RmsNorm(direct_scale=False)`), embeddings multiplied by
sqrt(hidden_size) (`SharedEmbeddingSoftmax(scale_sqrt_depth=True)`), tied
embeddings, tanh-GELU gating and a `head_dim` of its own. Gemma 2 and 3
(soft-capping, extra norms) are not supported.
"""

from __future__ import annotations

from typing import Any

from paxml.hf import _model
from paxml.hf import llama

ARCHITECTURES = ('GemmaForCausalLM',)
_ACTIVATIONS = {'gelu_pytorch_tanh': 'gelu_tanh', 'gelu': 'gelu_tanh'}


def spec_from_config(config: dict[str, Any],
                     source: str) -> _model.ModelSpec:
  act = config.get('hidden_activation') or 'gelu_pytorch_tanh'
  if act not in _ACTIVATIONS:
    raise ValueError(f'{source}: hidden_activation {act!r} is not supported '
                     f'(supported: {sorted(_ACTIVATIONS)}).')
  if config.get('tie_word_embeddings', True) is False:
    raise ValueError(f'{source}: tie_word_embeddings false is not '
                     'supported for Gemma.')
  plain = dict(config, hidden_act='silu')
  return llama.common_spec(
      plain, source, 'gemma', norm='rms_plus_one', tied=True,
      scale_embedding=True, activation=_ACTIVATIONS[act])


def config_from_spec(spec: _model.ModelSpec) -> dict[str, Any]:
  config = llama.config_from_spec(spec.__class__(**dict(
      spec.__dict__, family='llama', activation='silu')))
  config.update(architectures=list(ARCHITECTURES), model_type='gemma',
                hidden_activation='gelu_pytorch_tanh', hidden_act=None,
                tie_word_embeddings=True)
  del config['hidden_act']
  return config


def rules(spec: _model.ModelSpec) -> list[Any]:
  return llama.rules(spec)


ignore = llama.ignore
