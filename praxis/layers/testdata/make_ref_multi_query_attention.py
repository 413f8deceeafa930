"""Writes multi_query_attention_ref.npz: the real Pax 1.4's MQA outputs.

Run under the reference environment (../shared/reference-pax), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_multi_query_attention.py OUT_DIR

For each case: the config (JSON), the variables (random, flattened with
'/'), the input and the outputs of the forward pass (encoded, probs) and of
greedy-style decoding (extend_step over every step after a forward pass of
zeros filled the cache).
"""

import json
import os
import sys

from flax import traverse_util
import jax
import numpy as np
import praxis
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import attentions
from praxis.layers import multi_query_attention as mqa

assert 'site-packages' in praxis.__file__, praxis.__file__

BASE = dict(input_dim=8, hidden_dim=8, num_heads=4)
CASES = {
    'mqa': dict(),
    'gqa2': dict(num_kv_heads=2),
    'rope_cap': dict(use_rotary_position_emb=True, atten_logit_cap=2.0),
    'gqa2_rope_extra': dict(num_kv_heads=2, use_rotary_position_emb=True,
                            attention_extra_logit=0.5),
    'dim_per_head': dict(dim_per_head=4, scale_query_by_dim_per_head=True),
}


def run_case(extra, x, rng):
  p = pax_fiddle.Config(mqa.MultiQueryDotProductAttention, name='mqa',
                        **BASE, **extra)
  layer = base_layer.instantiate(p)
  mask = attentions.causal_mask(x)
  with base_layer.JaxContext.new_context():
    variables = layer.init(jax.random.PRNGKey(0), x, x, x, mask)
    flat = traverse_util.flatten_dict(variables['params'], sep='/')
    flat = {k: rng.normal(size=v.shape).astype(np.float32) * 0.5
            for k, v in flat.items()}
    params = {'params': traverse_util.unflatten_dict(flat, sep='/')}
    encoded, probs = layer.apply(params, x, x, x, mask)
    zeros = np.zeros_like(x)
    _, cache = layer.apply(params, zeros, zeros, zeros, mask,
                           mutable=[base_layer.DECODE_CACHE])
    state = py_utils.merge_dict(cache, params)
    steps = []
    for t in range(x.shape[1]):
      out, cache = layer.apply(
          state, method=layer.extend_step, query_vec=x[:, t],
          atten_mask=mask[:, :, t], time_step=t, segment_pos=None,
          mutable=[base_layer.DECODE_CACHE])
      state = py_utils.merge_dict(cache, params)
      steps.append(np.asarray(out))
  return flat, np.asarray(encoded), np.asarray(probs), np.stack(steps, 1)


def main(out_dir):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  arrays = {'x': x}
  configs = {}
  for name, extra in CASES.items():
    flat, encoded, probs, decoded = run_case(extra, x, rng)
    configs[name] = dict(BASE, **extra)
    for k, v in flat.items():
      arrays[f'{name}:var:{k}'] = v
    arrays[f'{name}:encoded'] = encoded
    arrays[f'{name}:probs'] = probs
    arrays[f'{name}:decoded'] = decoded
  arrays['configs'] = np.array(json.dumps(configs))
  np.savez(os.path.join(out_dir, 'multi_query_attention_ref.npz'), **arrays)


if __name__ == '__main__':
  main(sys.argv[1])
