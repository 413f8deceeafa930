"""Writes ngrammer_ref.npz: the real Pax 1.4's N-grammer layers on fixed data.

Run under the reference environment (the real Pax 1.4 venv), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_ngrammer.py OUT_DIR

For each case: the layer's config (JSON: class name, fields, the call's
keyword arguments, do_eval, method), its variables (Pax's initial values,
the trainable ones plus noise), the inputs, the output and the
non-trainable variables after the call (a training call updates the VQ
centroids and the cluster-id cache).
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
from praxis.layers import ngrammer

assert 'site-packages' in praxis.__file__, praxis.__file__

B, L, N, H = 2, 5, 2, 4

# name -> (class, fields, call keyword arguments, do_eval, method).
CASES = {
    'ngrammer_concat_2d': (
        'Ngrammer', dict(unigram_vocab_size=7, ngram_vocab_size=23,
                         ngram_emb_dim=2, concat_ngrams=True),
        dict(ids='ids2d', paddings=True), False, None),
    'ngrammer_add_3d_packed': (
        'Ngrammer', dict(unigram_vocab_size=7, ngram_vocab_size=23,
                         ngram_emb_dim=4, concat_ngrams=False),
        dict(ids='ids3d', segment_pos=True, merge_heads=False), False, None),
    'ngrammer_pair_ids': (
        'Ngrammer', dict(unigram_vocab_size=7, ngram_vocab_size=19,
                         ngram_emb_dim=2, concat_ngrams=True),
        dict(ids='ids2d', pair_ids=True), False, None),
    'vq_layer': (
        'VectorQuantization', dict(num_clusters=3), dict(paddings=True),
        False, None),
    'vq_layer_prenormalize_eval': (
        'VectorQuantization', dict(num_clusters=3, prenormalize=True), {},
        True, None),
    'vq_ngrammer_train_cache': (
        'VQNgrammer', dict(unigram_vocab_size=7, ngram_vocab_size=29,
                           ngram_emb_dim=4, num_clusters=3,
                           concat_ngrams=False),
        dict(ids='ids2d', paddings=True, segment_pos=True), False, None),
    'vq_ngrammer_causal_scores': (
        'VQNgrammer', dict(ngram_vocab_size=29, ngram_emb_dim=2,
                           num_clusters=3, concat_ngrams=True,
                           ngram_using_attention_scores=True),
        dict(scores=True), False, None),
    'vq_ngrammer_scores_eval': (
        'VQNgrammer', dict(ngram_vocab_size=29, ngram_emb_dim=2,
                           num_clusters=3, concat_ngrams=True,
                           ngram_using_attention_scores=True,
                           causal_attention=False),
        dict(scores=True, merge_heads=False), True, None),
    'vq_ngrammer_time_step_zero': (
        'VQNgrammer', dict(ngram_vocab_size=29, ngram_emb_dim=4,
                           num_clusters=3, concat_ngrams=False),
        dict(ids='ids2d_zeros', zero_embs=True, check_time_step_zero=True),
        True, None),
    'vq_ngrammer_full_cache_update': (
        'VQNgrammer', dict(unigram_vocab_size=7, ngram_vocab_size=29,
                           ngram_emb_dim=4, num_clusters=3,
                           concat_ngrams=False,
                           full_update_cache_frequency=2),
        dict(ids='ids2d', emb_var=True), False, None),
    'vq_ngrammer_cached_eval': (
        'VQNgrammer', dict(unigram_vocab_size=7, ngram_vocab_size=29,
                           ngram_emb_dim=4, num_clusters=3,
                           concat_ngrams=False,
                           use_cached_input_ids_to_cluster_ids=True),
        dict(ids='ids2d', random_cache=True), True, None),
    'vq_ngrammer_extend_step': (
        'VQNgrammer', dict(ngram_vocab_size=29, ngram_emb_dim=2,
                           num_clusters=3, concat_ngrams=True,
                           ngram_using_attention_scores=True),
        dict(step=3), True, 'extend_step'),
    'bregman_ngrammer_eval': (
        'BregmanNgrammer', dict(ngram_vocab_size=5, ngram_emb_dim=2,
                                num_components=2, concat_ngrams=True,
                                end_step=10),
        dict(paddings=True), True, None),
    'ngrammer_stub': (
        'NgrammerStub', {}, dict(paddings=True), False, None),
}


def _inputs(rng):
  ids2d = rng.integers(0, 7, size=(B, L)).astype(np.int32)
  ids2d_zeros = ids2d.copy()
  ids2d_zeros[:, 0] = 0
  embs = rng.normal(size=(B, L, N * H)).astype(np.float32)
  zero_embs = embs.copy()
  zero_embs[:, 0] = 0.0
  paddings = np.zeros((B, L), np.float32)
  paddings[1, 3:] = 1.0
  return dict(
      ids2d=ids2d, ids2d_zeros=ids2d_zeros,
      ids3d=rng.integers(0, 7, size=(B, L, N)).astype(np.int32),
      embs=embs, zero_embs=zero_embs, paddings=paddings,
      segment_pos=np.array([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]], np.int32),
      pair_ids=np.stack([rng.permutation(L + 1)[:L] for _ in range(B * N)])
      .reshape(B, N, L).astype(np.int32),
      scores=rng.normal(size=(B, N, L, L)).astype(np.float32),
      emb_var=rng.normal(size=(7, N * H)).astype(np.float32),
      cache=rng.integers(0, 3, size=(7, N)).astype(np.int32),
  )


def _call(layer, name, spec, x):
  cls_name, _, kw, _, method = spec
  if method == 'extend_step':
    return dict(input_embs=x['embs'], step=kw['step'],
                attention_score=x['scores'][:, :, kw['step'], :])
  if cls_name == 'VectorQuantization':
    return dict(inputs=x['embs'],
                paddings=x['paddings'] if kw.get('paddings') else None)
  args = dict(input_ids=x[kw['ids']] if 'ids' in kw else None,
              input_embs=x['zero_embs'] if kw.get('zero_embs') else x['embs'])
  for key in ('paddings', 'segment_pos', 'pair_ids', 'emb_var'):
    if kw.get(key):
      args[key] = x[key]
  if kw.get('scores'):
    args['attention_scores'] = x['scores']
  for key in ('merge_heads', 'check_time_step_zero'):
    if key in kw:
      args[key] = kw[key]
  del layer, name
  return args


def main(out_dir):
  rng = np.random.default_rng(0)
  x = _inputs(rng)
  arrays = {f'input/{k}': v for k, v in x.items()}
  configs = {}
  for name, spec in CASES.items():
    cls_name, fields, kw, do_eval, method = spec
    fields = dict(fields, num_heads=N, dim_per_head=H)
    p = pax_fiddle.Config(getattr(ngrammer, cls_name), name=name, **fields)
    layer = base_layer.instantiate(p)
    args = _call(layer, name, spec, x)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=do_eval)):
      variables = layer.init(jax.random.PRNGKey(1), **args,
                             **({'method': layer.extend_step}
                                if method else {}))
      variables = jax.tree.map(np.asarray, dict(variables))
      variables.pop('summaries', None)
      # Perturb the trainable variables (layer-norm scales start at 0 or 1).
      variables['params'] = jax.tree.map(
          lambda v: v + rng.normal(scale=0.5, size=v.shape).astype(v.dtype),
          variables.get('params', {}))
      if kw.get('random_cache'):
        variables['non_trainable'][
            'input_id_to_cluster_id_cache'] = x['cache']
      out, updated = layer.apply(
          jax.tree.map(jax.numpy.asarray, variables), **args, mutable=['non_trainable'],
          **({'method': layer.extend_step} if method else {}))
    if isinstance(out, tuple):
      for i, o in enumerate(out):
        arrays[f'{name}/out{i}'] = np.asarray(o)
    else:
      arrays[f'{name}/out0'] = np.asarray(out)
    for k, v in traverse_util.flatten_dict(variables, sep='/').items():
      arrays[f'{name}/var/{k}'] = np.asarray(v)
    for k, v in traverse_util.flatten_dict(
        jax.tree.map(np.asarray, dict(updated)), sep='/').items():
      arrays[f'{name}/updated/{k}'] = v
    configs[name] = dict(cls=cls_name, fields=fields, call=kw,
                         do_eval=do_eval, method=method)
  arrays['configs'] = np.array(json.dumps(configs))
  np.savez_compressed(os.path.join(out_dir, 'ngrammer_ref.npz'), **arrays)
  print('wrote', len(arrays), 'arrays for', len(configs), 'cases')


if __name__ == '__main__':
  main(sys.argv[1])
