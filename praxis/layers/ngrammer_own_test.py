"""Tests of praxis.layers.ngrammer against numpy and the real Pax 1.4.

The numpy references are written here; the recorded outputs of the real Pax
come from testdata/make_ref_ngrammer.py (testdata/ngrammer_ref.npz).
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'ngrammer_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))


def _np_bigrams(ids, vocab, segment_pos=None, pair_ids=None):
  """Bi-gram ids by hand: each position with its partner (or 0)."""
  b, l = ids.shape
  out = np.zeros_like(ids, dtype=np.int64)
  for i in range(b):
    for t in range(l):
      if pair_ids is not None:
        j = pair_ids[i, t]
        partner = ids[i, j] if j < l else 0
      else:
        partner = ids[i, t - 1] if t > 0 else 0
      if segment_pos is not None and segment_pos[i, t] == 0:
        partner = 0
      out[i, t] = ids[i, t] + partner * vocab
  return out


class BigramIdsTest(parameterized.TestCase):

  @parameterized.parameters(2, 10, 1000)
  def test_consecutive(self, vocab):
    ids = np.random.default_rng(vocab).integers(0, vocab, size=(3, 6))
    got = ngrammer.get_bigram_ids(jnp.asarray(ids), vocab)
    np.testing.assert_array_equal(got, _np_bigrams(ids, vocab))

  def test_hand_values_with_packing(self):
    ids = np.array([[3, 1, 4, 1, 5]])
    segment_pos = np.array([[0, 1, 2, 0, 1]])
    got = ngrammer.get_bigram_ids(jnp.asarray(ids), 10, segment_pos)
    np.testing.assert_array_equal(got, [[3, 31, 14, 1, 15]])

  def test_pair_ids_and_packing(self):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 8, size=(2, 5))
    pair_ids = rng.integers(0, 6, size=(2, 5))  # 5 is the pad.
    segment_pos = np.array([[0, 1, 2, 3, 4], [0, 1, 0, 1, 2]])
    got = ngrammer.get_bigram_ids(
        jnp.asarray(ids), 8, jnp.asarray(segment_pos), jnp.asarray(pair_ids))
    np.testing.assert_array_equal(
        got, _np_bigrams(ids, 8, segment_pos, pair_ids))

  def test_bad_vocab_size(self):
    with self.assertRaisesRegex(ValueError, 'vocab_size must be > 0'):
      ngrammer.get_bigram_ids(jnp.zeros((1, 2), jnp.int32), 0)


def _build(cls_name, **fields):
  p = pax_fiddle.Config(getattr(ngrammer, cls_name), name='layer', **fields)
  return base_layer.instantiate(p)


def _context(do_eval=False):
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=do_eval))


class VectorQuantizationNumpyTest(absltest.TestCase):

  def test_assignment_and_update(self):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 2, 4)).astype(np.float32)
    paddings = np.array([[0, 0, 1], [0, 0, 0]], np.float32)
    means = rng.normal(size=(2, 5, 4)).astype(np.float32)
    layer = _build('VectorQuantization', num_clusters=5, num_heads=2,
                   dim_per_head=4, decay=0.9)
    with _context():
      variables = layer.init(jax.random.PRNGKey(0), x, paddings)
      variables = {'non_trainable': {'means': jnp.asarray(means)}}
      (dists, nearest), upd = layer.apply(
          variables, x, paddings, mutable=['non_trainable'])
    ref_d = np.sum((x[:, :, :, None, :] - means[None, None]) ** 2, -1)
    np.testing.assert_allclose(dists, ref_d, rtol=1e-5, atol=1e-5)
    ids = np.argmin(ref_d, -1)
    keep = (1 - paddings)[:, :, None, None]
    ref_nearest = means[np.arange(2)[None, None], ids] * keep
    np.testing.assert_allclose(nearest, ref_nearest, rtol=1e-6)
    ref_means = 0.9 * means
    for n in range(2):
      for k in range(5):
        sel = (ids[:, :, n] == k) & (paddings == 0)
        if sel.any():
          ref_means[n, k] += 0.1 * x[:, :, n][sel].sum(0) / (sel.sum() + 1e-6)
    np.testing.assert_allclose(
        upd['non_trainable']['means'], ref_means, rtol=1e-5, atol=1e-6)

  def test_eval_does_not_update(self):
    layer = _build('VectorQuantization', num_clusters=2, num_heads=1,
                   dim_per_head=2)
    x = np.ones((1, 2, 2), np.float32)
    with _context(do_eval=True):
      variables = layer.init(jax.random.PRNGKey(0), x)
      _, upd = layer.apply(variables, x, mutable=['non_trainable'])
    np.testing.assert_array_equal(
        upd['non_trainable']['means'], variables['non_trainable']['means'])

  def test_requires_num_clusters(self):
    layer = _build('VectorQuantization', num_heads=1, dim_per_head=2)
    with self.assertRaisesRegex(ValueError, 'num_clusters must be positive'):
      layer.init(jax.random.PRNGKey(0), np.ones((1, 2, 2), np.float32))


class NgrammerNumpyTest(absltest.TestCase):

  def test_hashing_and_lookup(self):
    # ngram_vocab_size=16: primes 17 and 19; head i hashes with a = b = i + 1.
    vocab, buckets = 4, 16
    ids = np.array([[1, 3, 2], [0, 2, 3]])
    embs = np.random.default_rng(2).normal(size=(2, 3, 2, 4)).astype(
        np.float32)
    layer = _build('Ngrammer', unigram_vocab_size=vocab,
                   ngram_vocab_size=buckets, ngram_emb_dim=4, num_heads=2,
                   dim_per_head=4, concat_ngrams=False)
    with _context():
      variables = layer.init(jax.random.PRNGKey(0), ids, embs)
      out = layer.apply(variables, ids, embs, merge_heads=False)
    params = variables['params']

    def layer_norm(v, p):
      mean = v.mean(-1, keepdims=True)
      var = ((v - mean) ** 2).mean(-1, keepdims=True)
      return (v - mean) / np.sqrt(var + 1e-6) * (1 + p['scale']) + p['bias']

    bigrams = _np_bigrams(ids, vocab)
    for i, prime in enumerate((17, 19)):
      hashed = ((bigrams * (i + 1) + (i + 1)) % prime) % buckets
      table = np.asarray(params[f'ngram_table_{i}']['emb_var'])
      ngram = layer_norm(table[hashed], params[f'ngram_layer_norm_{i}'])
      unigram = layer_norm(embs[:, :, i], params[f'emb_layer_norm_{i}'])
      np.testing.assert_allclose(out[:, :, i], unigram + ngram, rtol=1e-4,
                                 atol=1e-5)

  def test_dims_checked(self):
    layer = _build('Ngrammer', unigram_vocab_size=4, ngram_vocab_size=16,
                   ngram_emb_dim=3, num_heads=1, dim_per_head=4,
                   concat_ngrams=False)
    with self.assertRaisesRegex(ValueError, 'ngram_emb_dim=3 must equal'):
      layer.init(jax.random.PRNGKey(0), np.zeros((1, 2), np.int32),
                 np.zeros((1, 2, 4), np.float32))

  def test_too_few_primes(self):
    with self.assertRaisesRegex(ValueError, 'ngram_vocab_size=2 is too small'):
      ngrammer.ops.hash_primes(2, 2)


def _case_inputs(name):
  """The call's arguments of a recorded case (see make_ref_ngrammer.py)."""
  cfg = _CONFIGS[name]
  x = {k[len('input/'):]: _REF[k] for k in _REF if k.startswith('input/')}
  kw = cfg['call']
  if cfg['method'] == 'extend_step':
    return dict(input_embs=x['embs'], step=kw['step'],
                attention_score=x['scores'][:, :, kw['step'], :])
  if cfg['cls'] == 'VectorQuantization':
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
  return args


def _recorded(name, part):
  prefix = f'{name}/{part}/'
  flat = {k[len(prefix):]: _REF[k] for k in _REF if k.startswith(prefix)}
  return traverse_util.unflatten_dict(flat, sep='/')


class NgrammerMatchesPaxTest(parameterized.TestCase):

  @parameterized.named_parameters((name, name) for name in _CONFIGS)
  def test_case(self, name):
    cfg = _CONFIGS[name]
    layer = _build(cfg['cls'], **cfg['fields'])
    args = _case_inputs(name)
    method = {'method': layer.extend_step} if cfg['method'] else {}
    with _context(cfg['do_eval']):
      ours = layer.init(jax.random.PRNGKey(0), **args, **method)
      ours = {k: v for k, v in ours.items() if k != 'summaries'}
      ref_vars = _recorded(name, 'var')
      # Same variables (names, shapes, dtypes) as the real Pax.
      self.assertEqual(
          jax.tree.map(lambda v: (v.shape, v.dtype), ours),
          jax.tree.map(lambda v: (v.shape, v.dtype), ref_vars))
      out, updated = layer.apply(
          jax.tree.map(jnp.asarray, ref_vars), **args,
          mutable=['non_trainable'], **method)
    outs = out if isinstance(out, tuple) else (out,)
    for i, o in enumerate(outs):
      np.testing.assert_allclose(o, _REF[f'{name}/out{i}'], rtol=1e-4,
                                 atol=1e-5, err_msg=f'{name} out{i}')
    ref_updated = _recorded(name, 'updated')
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
        jax.tree.map(np.asarray, dict(updated)), ref_updated)


if __name__ == '__main__':
  absltest.main()
