"""GPT-2 (`GPT2LMHeadModel`) <-> Pax.

Public: ARCHITECTURES, spec_from_config, config_from_spec, rules, ignore.

Pre-LayerNorm blocks with biases, learned absolute positions
(`TrainablePositionalEmbedding`), tanh-GELU, tied embeddings. GPT-2's
`Conv1D` weights are stored [in, out]; `c_attn` holds q, k and v side by
side and is split into the three projections (and joined back on export).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from paxml.hf import _model
from paxml.hf import _weights

ARCHITECTURES = ('GPT2LMHeadModel',)
_ACTIVATIONS = {'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh',
                'gelu': 'gelu'}
_UNSUPPORTED_TRUE = ('scale_attn_by_inverse_layer_idx',
                     'reorder_and_upcast_attn')


def spec_from_config(config: dict[str, Any],
                     source: str) -> _model.ModelSpec:
  field = lambda name, *d: _weights.config_field(config, name, source, *d)
  d, n = field('n_embd'), field('n_head')
  act = field('activation_function', 'gelu_new')
  if act not in _ACTIVATIONS:
    raise ValueError(f'{source}: activation_function {act!r} is not '
                     f'supported (supported: {sorted(_ACTIVATIONS)}).')
  for name in _UNSUPPORTED_TRUE:
    if config.get(name):
      raise ValueError(f'{source}: {name}=true is not supported.')
  if config.get('scale_attn_weights', True) is False:
    raise ValueError(f'{source}: scale_attn_weights=false is not supported.')
  return _model.ModelSpec(
      family='gpt2', vocab_size=field('vocab_size'), model_dims=d,
      num_layers=field('n_layer'), num_heads=n, num_kv_heads=n,
      dim_per_head=d // n, hidden_dims=config.get('n_inner') or 4 * d,
      norm='layer', norm_eps=float(field('layer_norm_epsilon', 1e-5)),
      activation=_ACTIVATIONS[act], gated=False, tied=True,
      rope_theta=None, max_positions=field('n_positions'),
      attention_bias=True, mlp_bias=True)


def config_from_spec(spec: _model.ModelSpec) -> dict[str, Any]:
  act = {'gelu_tanh': 'gelu_new', 'gelu': 'gelu'}[spec.activation]
  return {
      'architectures': list(ARCHITECTURES), 'model_type': 'gpt2',
      'vocab_size': spec.vocab_size, 'n_embd': spec.model_dims,
      'n_layer': spec.num_layers, 'n_head': spec.num_heads,
      'n_inner': spec.hidden_dims, 'layer_norm_epsilon': spec.norm_eps,
      'activation_function': act, 'n_positions': spec.max_positions,
      'tie_word_embeddings': True, 'torch_dtype': 'float32',
  }


def _qkv_rule(hf: str, att: str, d: int, n: int, h: int) -> _weights.Rule:
  """c_attn [D, 3D] weight and [3D] bias <-> query/key/value w and b."""
  names = ('query', 'key', 'value')
  pax = tuple(f'{att}/{x}/w' for x in names) + tuple(
      f'{att}/{x}/b' for x in names)

  def to_pax(xs):
    w, b = xs
    ws = [x.reshape(d, n, h) for x in np.split(w, 3, axis=1)]
    bs = [x.reshape(n, h) for x in np.split(b, 3)]
    return ws + bs

  def to_hf(xs):
    w = np.concatenate([x.reshape(d, n * h) for x in xs[:3]], axis=1)
    b = np.concatenate([x.reshape(-1) for x in xs[3:]])
    return [w, b]

  return _weights.Rule((f'{hf}.c_attn.weight', f'{hf}.c_attn.bias'), pax,
                       to_pax, to_hf)


def _block_rules(spec: _model.ModelSpec, i: int,
                 prefix: str) -> list[_weights.Rule]:
  hf, pax = f'{prefix}h.{i}', _model.layer_prefix(i)
  d, n, h = spec.model_dims, spec.num_heads, spec.dim_per_head
  att, ff = f'{pax}/self_attention', f'{pax}/ff_layer'
  same = _weights.same
  return [
      same(f'{hf}.ln_1.weight', f'{pax}/layer_norm/scale'),
      same(f'{hf}.ln_1.bias', f'{pax}/layer_norm/bias'),
      _qkv_rule(f'{hf}.attn', att, d, n, h),
      # post[d, n, h] = c_proj[n * H + h, d].
      _weights.linear_in_out(f'{hf}.attn.c_proj.weight', f'{att}/post/w',
                             (d, n, h)),
      same(f'{hf}.attn.c_proj.bias', f'{att}/post/b'),
      same(f'{hf}.ln_2.weight', f'{ff}/layer_norm/scale'),
      same(f'{hf}.ln_2.bias', f'{ff}/layer_norm/bias'),
      same(f'{hf}.mlp.c_fc.weight', f'{ff}/ffn_layer1/linear/w'),
      same(f'{hf}.mlp.c_fc.bias', f'{ff}/ffn_layer1/bias/b'),
      same(f'{hf}.mlp.c_proj.weight', f'{ff}/ffn_layer2/linear/w'),
      same(f'{hf}.mlp.c_proj.bias', f'{ff}/ffn_layer2/bias/b'),
  ]


def rules(spec: _model.ModelSpec, prefix: str = 'transformer.'
          ) -> list[_weights.Rule]:
  """The rules; `prefix` is '' for checkpoints of the bare GPT2Model."""
  out = [
      _weights.transposed(f'{prefix}wte.weight',
                          'softmax/logits_ffn/linear/w'),
      _weights.same(f'{prefix}wpe.weight', 'position_emb/emb_var'),
      _weights.same(f'{prefix}ln_f.weight', 'final_ln/scale'),
      _weights.same(f'{prefix}ln_f.bias', 'final_ln/bias'),
  ]
  for i in range(spec.num_layers):
    out += _block_rules(spec, i, prefix)
  return out


def ignore(name: str) -> bool:
  """Causal-mask buffers and the tied lm_head copy."""
  return (name.endswith('.attn.bias') or name.endswith('.attn.masked_bias')
          or name == 'lm_head.weight')
