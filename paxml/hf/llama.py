"""Llama and Mistral (`LlamaForCausalLM`, `MistralForCausalLM`) <-> Pax.

Public: ARCHITECTURES, spec_from_config, config_from_spec, rules, ignore.

Grouped-query attention (`num_key_value_heads`), `rope_theta` and the
'linear' and 'llama3' `rope_scaling` types, tied or untied embeddings,
`attention_bias`/`mlp_bias`, and Mistral's `sliding_window` (query i sees
keys i - W < j <= i; null: the whole context, as Mistral 7B v0.2+).
"""

from __future__ import annotations

from typing import Any

from paxml.hf import _model
from paxml.hf import _weights

ARCHITECTURES = ('LlamaForCausalLM', 'MistralForCausalLM')
_FAMILY = {'LlamaForCausalLM': 'llama', 'MistralForCausalLM': 'mistral'}
_MODEL_TYPE = {'llama': 'llama', 'mistral': 'mistral'}
_ACTIVATIONS = {'silu': 'silu', 'gelu_pytorch_tanh': 'gelu_tanh',
                'gelu': 'gelu'}


def _rope(config: dict[str, Any], source: str) -> tuple[float, Any]:
  """(theta, scaling items or None) of `rope_parameters` (transformers 5)
  or of the older `rope_theta` and `rope_scaling` fields."""
  params = dict(config.get('rope_scaling') or {})
  params.update(config.get('rope_parameters') or {})
  theta = float(params.pop('rope_theta', config.get('rope_theta', 10_000.0)))
  kind = params.pop('rope_type', params.pop('type', 'default'))
  if kind == 'default':
    return theta, None
  if kind not in ('linear', 'llama3'):
    raise ValueError(f'{source}: rope type {kind!r} (field rope_scaling or '
                     "rope_parameters) is not supported (supported: "
                     "'default', 'linear', 'llama3').")
  return theta, tuple(sorted(dict(params, rope_type=kind).items()))


def common_spec(config: dict[str, Any], source: str, family: str,
                **overrides: Any) -> _model.ModelSpec:
  """The fields Llama-like configs share (Llama, Mistral, Gemma)."""
  field = lambda name, *d: _weights.config_field(config, name, source, *d)
  d, n = field('hidden_size'), field('num_attention_heads')
  act = field('hidden_act', 'silu')
  if act not in _ACTIVATIONS:
    raise ValueError(f'{source}: hidden_act {act!r} is not supported '
                     f'(supported: {sorted(_ACTIVATIONS)}).')
  head_dim = config.get('head_dim') or d // n
  rope_theta, rope_scaling = _rope(config, source)
  kwargs = dict(
      family=family, vocab_size=field('vocab_size'), model_dims=d,
      num_layers=field('num_hidden_layers'), num_heads=n,
      num_kv_heads=config.get('num_key_value_heads') or n,
      dim_per_head=head_dim, hidden_dims=field('intermediate_size'),
      norm='rms', norm_eps=float(field('rms_norm_eps', 1e-6)),
      activation=_ACTIVATIONS[act], gated=True,
      tied=bool(config.get('tie_word_embeddings', False)),
      rope_theta=rope_theta, rope_scaling=rope_scaling,
      max_positions=int(field('max_position_embeddings', 2048)),
      attention_bias=bool(config.get('attention_bias', False)),
      mlp_bias=bool(config.get('mlp_bias', False)),
  )
  kwargs.update(overrides)
  return _model.ModelSpec(**kwargs)


def spec_from_config(config: dict[str, Any],
                     source: str) -> _model.ModelSpec:
  """The ModelSpec of a Llama or Mistral config.json."""
  family = _FAMILY[config['architectures'][0]]
  window = None
  if family == 'mistral':
    window = config.get('sliding_window')
    if window is not None and (isinstance(window, bool)
                               or not isinstance(window, int) or window < 1):
      raise ValueError(f'{source}: sliding_window must be a positive integer '
                       f'or null, got {window!r}.')
  return common_spec(config, source, family, sliding_window=window)


def config_from_spec(spec: _model.ModelSpec) -> dict[str, Any]:
  """A config.json for `spec` (when the original one is not at hand)."""
  arch = {v: k for k, v in _FAMILY.items()}[spec.family]
  act = {v: k for k, v in _ACTIVATIONS.items()}[spec.activation]
  config = {
      'architectures': [arch], 'model_type': _MODEL_TYPE[spec.family],
      'vocab_size': spec.vocab_size, 'hidden_size': spec.model_dims,
      'num_hidden_layers': spec.num_layers,
      'num_attention_heads': spec.num_heads,
      'num_key_value_heads': spec.num_kv_heads, 'head_dim': spec.dim_per_head,
      'intermediate_size': spec.hidden_dims, 'rms_norm_eps': spec.norm_eps,
      'hidden_act': act, 'tie_word_embeddings': spec.tied,
      'rope_theta': spec.rope_theta,
      'rope_scaling': dict(spec.rope_scaling) if spec.rope_scaling else None,
      'max_position_embeddings': spec.max_positions,
      'attention_bias': spec.attention_bias, 'mlp_bias': spec.mlp_bias,
      'torch_dtype': 'float32',
  }
  if spec.family == 'mistral':
    config['sliding_window'] = spec.sliding_window
  elif spec.sliding_window is not None:
    raise ValueError(f'ModelSpec: sliding_window={spec.sliding_window} has '
                     f'no field in a {spec.family!r} config.json.')
  return config


def block_rules(spec: _model.ModelSpec, i: int) -> list[_weights.Rule]:
  """The rules of decoder layer i (shared with Gemma)."""
  hf, pax = f'model.layers.{i}', _model.layer_prefix(i)
  d, n, k, h = (spec.model_dims, spec.num_heads, spec.num_kv_heads,
                spec.dim_per_head)
  kv_shape = (d, h) if k == 1 else (d, k, h)
  att = f'{pax}/self_attention'
  out = [
      _weights.same(f'{hf}.input_layernorm.weight', f'{pax}/layer_norm/scale'),
      _weights.linear_in_out(f'{hf}.self_attn.q_proj.weight',
                             f'{att}/query/w', (d, n, h)),
      _weights.linear_in_out(f'{hf}.self_attn.k_proj.weight',
                             f'{att}/key/w', kv_shape),
      _weights.linear_in_out(f'{hf}.self_attn.v_proj.weight',
                             f'{att}/value/w', kv_shape),
      _weights.heads_in(f'{hf}.self_attn.o_proj.weight', f'{att}/post/w',
                        (d, n, h)),
      _weights.same(f'{hf}.post_attention_layernorm.weight',
                    f'{pax}/ff_layer/layer_norm/scale'),
  ]
  ffn = {'gate_proj': 'ffn_layer1_gate', 'up_proj': 'ffn_layer1',
         'down_proj': 'ffn_layer2'}
  for hf_name, pax_name in ffn.items():
    out.append(_weights.transposed(f'{hf}.mlp.{hf_name}.weight',
                                   f'{pax}/ff_layer/{pax_name}/linear/w'))
    if spec.mlp_bias:
      out.append(_weights.same(f'{hf}.mlp.{hf_name}.bias',
                               f'{pax}/ff_layer/{pax_name}/bias/b'))
  if spec.attention_bias:
    for proj, name, shape in (('q_proj', 'query', (n, h)),
                              ('k_proj', 'key', kv_shape[1:]),
                              ('v_proj', 'value', kv_shape[1:])):
      out.append(_weights.heads_out(f'{hf}.self_attn.{proj}.bias',
                                    f'{att}/{name}/b', shape))
    out.append(_weights.same(f'{hf}.self_attn.o_proj.bias', f'{att}/post/b'))
  return out


def embedding_rules(spec: _model.ModelSpec) -> list[_weights.Rule]:
  """Token embedding, final norm and the softmax (tied or not)."""
  out = [_weights.same('model.norm.weight', 'final_ln/scale')]
  if spec.tied:
    out.append(_weights.transposed('model.embed_tokens.weight',
                                   'softmax/logits_ffn/linear/w'))
  else:
    out += [
        _weights.same('model.embed_tokens.weight', 'embedding_lookup/emb_var'),
        _weights.transposed('lm_head.weight', 'softmax/logits_ffn/linear/w'),
    ]
  return out


def rules(spec: _model.ModelSpec) -> list[_weights.Rule]:
  out = embedding_rules(spec)
  for i in range(spec.num_layers):
    out += block_rules(spec, i)
  return out


def ignore(name: str) -> bool:
  """Tensors of a checkpoint that hold nothing learned."""
  return name.endswith('rotary_emb.inv_freq') or name == 'lm_head.weight'
