"""Tests of TransformerLm with an n-grammer on its embeddings."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import ngrammer
from praxis.layers import transformer_models

DECODE_CACHE = base_layer.DECODE_CACHE
instantiate = base_layer.instantiate
VOCAB, HEADS, DIM_PER_HEAD, B, T = 8, 2, 8, 2, 6
D = HEADS * DIM_PER_HEAD


def ngrammer_config(vq):
  if vq:
    return pax_fiddle.Config(
        ngrammer.VQNgrammer, ngram_vocab_size=64, ngram_emb_dim=4,
        num_heads=HEADS, concat_ngrams=True, num_clusters=2,
        dim_per_head=DIM_PER_HEAD)
  return pax_fiddle.Config(
      ngrammer.Ngrammer, ngram_vocab_size=64, unigram_vocab_size=VOCAB,
      ngram_emb_dim=4, num_heads=HEADS, concat_ngrams=True,
      dim_per_head=DIM_PER_HEAD)


def lm_config(vq=False, shared=True, **kwargs):
  p = pax_fiddle.Config(
      transformer_models.TransformerLm, name='lm', model_dims=D,
      vocab_size=VOCAB, ngrammer_tpl=ngrammer_config(vq), **kwargs)
  p.stacked_transformer_tpl.set(num_layers=1, num_heads=HEADS,
                                hidden_dims=2 * D)
  if not shared:
    p.separate_embedding_tpl = pax_fiddle.Config(embedding_softmax.Embedding)
    p.softmax_tpl = pax_fiddle.Config(embedding_softmax.FullSoftmax)
  return p


def eval_context():
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=True))


class NgrammerLmTest(test_utils.TestCase):

  def _ids(self):
    return jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)

  def test_stack_input_is_the_ngrammer_of_the_table_rows(self):
    # No position embedding: the stack sees the n-grammer's output for the
    # table rows of the ids, computed here by the n-grammer alone.
    lm = instantiate(lm_config(shared=False, position_emb_tpl=None))
    ids, paddings = self._ids(), jnp.zeros((B, T))
    variables = lm.init(jax.random.PRNGKey(1), ids, paddings)
    seen = []

    def capture(next_fun, args, kwargs, context):
      if (context.method_name == '__call__'
          and context.module.name == 'transformer'):
        seen.append(args[0])
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(capture):
      lm.apply(variables, ids, paddings)
    table = np.asarray(
        variables['params']['embedding_lookup']['emb_var'])
    layer = instantiate(ngrammer_config(vq=False).set(name='ngrammer'))
    want = layer.apply(
        {'params': variables['params']['ngrammer']}, ids,
        jnp.asarray(table[np.asarray(ids)]))
    self.assertLen(seen, 1)
    self.assertAllClose(seen[0], want, atol=1e-6)
    # The bi-grams reach the stack: a new first id changes position 1.
    with nn.intercept_methods(capture):
      lm.apply(variables, ids.at[:, 0].set((ids[:, 0] + 1) % VOCAB),
               paddings)
    self.assertNotAllClose(seen[1][:, 1], seen[0][:, 1])
    self.assertAllClose(seen[1][:, 2:], seen[0][:, 2:], atol=1e-6)

  @parameterized.named_parameters(
      ('ngrammer_shared_table', False, True),
      ('vq_ngrammer_separate_table', True, False),
  )
  def test_extend_step_from_scratch_matches_the_forward_pass(self, vq,
                                                             shared):
    lm = instantiate(lm_config(vq=vq, shared=shared))
    ids, paddings = self._ids(), jnp.zeros((B, T))
    with eval_context():
      variables = lm.init(jax.random.PRNGKey(2), ids, paddings)
      full = jax.jit(lm.apply)(variables, ids, paddings).logits
      # A fully padded pass makes the caches (T steps) and zero prefixes.
      _, cache = jax.jit(functools.partial(lm.apply, mutable=[DECODE_CACHE]))(
          variables, jnp.zeros_like(ids), jnp.ones((B, T)))
      self.assertEqual(
          cache[DECODE_CACHE]['ngrammer_prefix_emb'].shape, (B, 1, D))

      @jax.jit
      def step(cache, ids_t):
        return lm.apply({**variables, **cache}, ids_t, method=lm.extend_step,
                        mutable=[DECODE_CACHE])

      for t in range(T):
        out, cache = step(cache, ids[:, t])
        self.assertAllClose(out.logits, full[:, t], atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal(
            cache[DECODE_CACHE]['ngrammer_prefix'][:, 0], ids[:, t])

  def test_extend_step_with_segment_pos_restarts_the_bigram(self):
    # A step at segment_pos 0 starts a new sequence: it sees only itself and
    # pairs with the pad id, so it gives the logits of a first step.
    lm = instantiate(lm_config())
    ids = self._ids()
    with eval_context():
      variables = lm.init(jax.random.PRNGKey(3), ids, jnp.zeros((B, T)))
      _, cache0 = jax.jit(functools.partial(lm.apply, mutable=[DECODE_CACHE]))(
          variables, jnp.zeros_like(ids), jnp.ones((B, T)))
      step = jax.jit(functools.partial(lm.apply, method=lm.extend_step,
                                       mutable=[DECODE_CACHE]))
      _, cache1 = step({**variables, **cache0}, ids[:, 0])
      restarted, _ = step({**variables, **cache1}, ids[:, 1],
                          segment_pos=jnp.zeros((B,), jnp.int32))
      first, _ = step({**variables, **cache0}, ids[:, 1])
      continued, _ = step({**variables, **cache1}, ids[:, 1])
    self.assertAllClose(restarted.logits, first.logits, atol=1e-5)
    self.assertNotAllClose(continued.logits, restarted.logits)

  def test_decode_state_transforms_keep_the_batch(self):
    p = lm_config()
    p.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl = (
        pax_fiddle.Config(attentions.DotProductAttentionWithLPB))
    lm = instantiate(p)
    ids = self._ids()
    with eval_context():
      variables = lm.init(jax.random.PRNGKey(4), ids, jnp.zeros((B, T)))

      def fprop_then(m, ids):
        m(ids, jnp.zeros(ids.shape))
        m.transform_decode_state(decoder_utils.pad_state_fn(3))
        m.transform_decode_state(decoder_utils.batch_broadcast_state_fn(2))
        m.extend_step(ids[:, 0].repeat(2))
        m.lazy_broadcast_prefix(3, 4)

      _, cache = jax.jit(functools.partial(
          lm.apply, method=fprop_then,
          mutable=[DECODE_CACHE, base_layer.PREFIX_DECODE_CACHE]))(
              variables, ids)
    states = cache[DECODE_CACHE]
    self.assertEqual(states['ngrammer_prefix'].shape, (3 * 2 * B, 1))
    self.assertEqual(states['ngrammer_prefix_emb'].shape, (3 * 2 * B, 1, D))
    np.testing.assert_array_equal(
        states['ngrammer_prefix'][:, 0],
        np.tile(np.repeat(np.asarray(ids[:, 0]), 2), 3))

  @parameterized.parameters(True, False)
  def test_full_cache_update_reads_the_vocab_table(self, shared):
    # The VQ n-grammer's full cache update needs the [V, D] table.
    p = lm_config(vq=True, shared=shared)
    p.ngrammer_tpl.set(unigram_vocab_size=VOCAB, full_update_cache_frequency=1)
    lm = instantiate(p)
    ids = self._ids()
    variables = lm.init(jax.random.PRNGKey(5), ids, jnp.zeros((B, T)))
    _, updated = lm.apply(variables, ids, jnp.zeros((B, T)),
                          mutable=[base_layer.NON_TRAINABLE])
    cache = updated[base_layer.NON_TRAINABLE]['ngrammer'][
        'input_id_to_cluster_id_cache']
    self.assertEqual(cache.shape, (VOCAB, HEADS))

  def test_sharding_annotates_the_ngram_tables(self):
    p = transformer_models.TransformerLm.set_sharding_params_v1(
        lm_config(), replica_axis='replica', data_axis='data',
        mdl_axis='mdl', ici_mesh_shape=[1, 1, 1],
        mesh_axis_names=('replica', 'data', 'mdl'), training_optimized=True)
    # Pax's w_vd: the [V, D] table split as [mdl, data].
    self.assertEqual(list(p.ngrammer_tpl.weight_split_dims_mapping.wt),
                     ['mdl', 'data'])


if __name__ == '__main__':
  absltest.main()
