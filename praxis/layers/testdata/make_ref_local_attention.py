"""Writes local_attention_ref.npz: the real Pax 1.4's local and XL attentions.

Run under the reference environment (../shared/reference-pax), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_local_attention.py OUT_DIR

For each case: the config (JSON), the variables, the inputs and the outputs
(encoded, probs) of `layer(x, x, x, atten_mask)`; for DotProductAttentionXL
also each `extend_step` output [B, D] (`<case>/steps`), decoding x step by
step over the cache that the forward pass filled, under full_mask's rows.
"""

import json
import os
import sys

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import praxis
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import attentions

assert 'site-packages' in praxis.__file__, praxis.__file__

BASE = dict(input_dim=8, hidden_dim=8, num_heads=2)
CASES = {
    'local_l3_r1_w2': ('LocalSelfAttention',
                       dict(block_size=2, left_context=3, right_context=1)),
    'local_causal_w3': ('LocalSelfAttention',
                        dict(block_size=3, left_context=3, right_context=0)),
    'local_default_block': ('LocalSelfAttention',
                            dict(left_context=2, right_context=2)),
    'local_relative_bias': ('LocalSelfAttentionRelativeBias',
                            dict(block_size=2, left_context=3,
                                 right_context=1)),
    'local_alibi': ('LocalSelfAttentionAlibi',
                    dict(block_size=2, left_context=3, right_context=1)),
    'xl': ('DotProductAttentionXL', dict(rel_pos_emb_dim=6)),
    'xl_no_bias': ('DotProductAttentionXL',
                   dict(rel_pos_emb_dim=4, use_bias=False)),
    'local_xl': ('LocalSelfAttentionXL',
                 dict(block_size=2, left_context=3, right_context=1,
                      rel_pos_emb_dim=6)),
}


def _decode(layer, variables, x, mask):
  """extend_step at each step t of x, the mask's row t over the cache."""
  _, cache = layer.apply(variables, x, x, x, mask,
                         mutable=[base_layer.DECODE_CACHE])
  steps = []
  for t in range(x.shape[1]):
    out, cache = layer.apply(
        {**variables, **cache}, x[:, t], atten_mask=mask[:, :, t, :],
        time_step=t, segment_pos=None, method=layer.extend_step,
        mutable=[base_layer.DECODE_CACHE])
    steps.append(np.asarray(out))
  return np.stack(steps, axis=1)


def main(out_dir):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  paddings = np.zeros((2, 5), np.float32)
  paddings[1, 3:] = 1.0
  pad_mask = np.asarray(attentions.convert_paddings_to_mask(paddings))
  full_mask = np.asarray(jnp.minimum(
      attentions.causal_mask(jnp.asarray(x)), pad_mask))
  arrays = {'x': x, 'pad_mask': pad_mask, 'full_mask': full_mask}
  configs = {}
  for name, (cls_name, extra) in CASES.items():
    fields = dict(BASE, **extra)
    cfg = pax_fiddle.Config(getattr(attentions, cls_name), name='atten',
                            **fields)
    # Random (not default-zero) per-dim scale and biases.
    layer = base_layer.instantiate(cfg)
    init = layer.init(jax.random.PRNGKey(1), x, x, x, pad_mask)
    flat = traverse_util.flatten_dict(jax.device_get(init), sep='/')
    flat = {k: np.asarray(rng.normal(size=v.shape) * 0.5, v.dtype)
            for k, v in flat.items()}
    variables = traverse_util.unflatten_dict(flat, sep='/')
    for mask_name in ('pad_mask', 'full_mask'):
      (enc, probs), _ = layer.apply(variables, x, x, x,
                                    arrays[mask_name], mutable=True)
      arrays[f'{name}/{mask_name}/encoded'] = np.asarray(enc)
      arrays[f'{name}/{mask_name}/probs'] = np.asarray(probs)
    if cls_name == 'DotProductAttentionXL':
      arrays[f'{name}/steps'] = _decode(layer, variables, x, full_mask)
    for k, v in flat.items():
      arrays[f'{name}/vars/{k}'] = v
    configs[name] = {'cls': cls_name, 'fields': fields}
  arrays['configs'] = np.asarray(json.dumps(configs))
  np.savez_compressed(os.path.join(out_dir, 'local_attention_ref.npz'),
                      **arrays)


if __name__ == '__main__':
  main(sys.argv[1])
