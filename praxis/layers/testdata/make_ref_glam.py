"""Writes glam_ref.npz: the real Pax 1.4's GLaM language models on fixed data.

Run under the reference environment (the real Pax 1.4 venv), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_glam.py OUT_DIR

For each case (keyword arguments of GlamUniTransformerLmHParams): the
variables (Pax's initial values plus noise), and the logits, per-token
cross-entropy and aux loss of an evaluation call on fixed ids and paddings,
and the logits and aux loss of a training call (and its aux loss without
paddings).
"""

import json
import os
import sys

from flax import traverse_util
import jax
import numpy as np
import praxis
from praxis import base_layer
from praxis import py_utils
from praxis.layers import glam

assert 'site-packages' in praxis.__file__, praxis.__file__

COMMON = dict(vocab_size=32, model_dim=8, ff_dim=16, attention_num_heads=2,
              attention_key_value_dim=4, num_transformer_layers=4,
              relative_attention_num_buckets=8,
              relative_attention_max_distance=16)
CASES = {
    'dense': dict(moe=False),
    'moe': dict(moe=True, e_dim=4, c_dim=32, moe_hidden_dim=12),
    # Appended cases (the noise of the ones above stays as recorded).
    'moe_dense_top2': dict(moe=True, e_dim=4, c_dim=32, moe_hidden_dim=12,
                           moe_gating_func='dense_top2'),
    'moe_sentence': dict(moe=True, e_dim=4, c_dim=32, moe_hidden_dim=12,
                         moe_gating_embedding_level='sentence'),
    'moe_sentence_dense_top2': dict(
        moe=True, e_dim=4, c_dim=32, moe_hidden_dim=12,
        moe_gating_func='dense_top2', moe_gating_embedding_level='sentence'),
    'moe_sentence_expert_choice': dict(
        moe=True, e_dim=4, c_dim=32, moe_hidden_dim=12,
        moe_gating_func='expert_choice',
        moe_gating_embedding_level='sentence'),
}


def main(out_dir):
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 32, size=(2, 6)).astype(np.int32)
  labels = rng.integers(0, 32, size=(2, 6)).astype(np.int32)
  paddings = np.zeros((2, 6), np.float32)
  paddings[1, 4:] = 1.0
  arrays = {'input/ids': ids, 'input/labels': labels,
            'input/paddings': paddings}
  for name, kw in CASES.items():
    lm = base_layer.instantiate(
        glam.GlamUniTransformerLmHParams(**COMMON, **kw))
    label_map = py_utils.NestedMap(class_ids=labels,
                                   class_weights=1.0 - paddings)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=True)):
      variables = lm.init(jax.random.PRNGKey(1), ids, paddings,
                          labels=label_map)
      params = jax.tree.map(
          lambda v: np.asarray(v) + rng.normal(
              scale=0.3, size=v.shape).astype(np.float32),
          variables['params'])
      out = lm.apply({'params': params}, ids, paddings, labels=label_map)
    with base_layer.JaxContext.new_context():  # Training: the aux loss.
      train_out, _ = lm.apply(
          {'params': params}, ids, paddings, labels=label_map,
          rngs={'random': jax.random.PRNGKey(2)},
          mutable=[base_layer.AUX_LOSS])
      nopad_out, _ = lm.apply(
          {'params': params}, ids, np.zeros_like(paddings),
          labels=py_utils.NestedMap(class_ids=labels,
                                    class_weights=np.ones_like(paddings)),
          rngs={'random': jax.random.PRNGKey(2)},
          mutable=[base_layer.AUX_LOSS])
    arrays[f'{name}/out/train_aux_loss'] = np.asarray(train_out['aux_loss'])
    arrays[f'{name}/out/train_nopad_aux_loss'] = np.asarray(
        nopad_out['aux_loss'])
    arrays[f'{name}/out/train_logits'] = np.asarray(train_out['logits'])
    for k, v in traverse_util.flatten_dict(params, sep='/').items():
      arrays[f'{name}/var/{k}'] = v
    for k in ('logits', 'per_example_xent', 'aux_loss', 'avg_xent'):
      arrays[f'{name}/out/{k}'] = np.asarray(out[k])
  arrays['configs'] = np.array(json.dumps(dict(common=COMMON, cases=CASES)))
  np.savez_compressed(os.path.join(out_dir, 'glam_ref.npz'), **arrays)
  print('wrote', len(arrays), 'arrays')


if __name__ == '__main__':
  main(sys.argv[1])
