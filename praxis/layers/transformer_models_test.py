"""Tests of TransformerLm and TransformerEncoderDecoder."""

import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import ngrammer
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
PartitionSpec = jax.sharding.PartitionSpec
DECODE_CACHE = base_layer.DECODE_CACHE
instantiate = base_layer.instantiate
VOCAB, D, HEADS, HIDDEN, B, T = 32, 16, 4, 32, 2, 8
MESH_NAMES = ('replica', 'data', 'mdl')


def lm_config(num_kv_heads=None, **kwargs):
  p = pax_fiddle.Config(transformer_models.TransformerLm, name='lm',
                        model_dims=D, vocab_size=VOCAB, **kwargs)
  p.stacked_transformer_tpl.set(num_layers=2, num_heads=HEADS,
                                hidden_dims=HIDDEN, dim_per_head=D // HEADS)
  layer_p = p.stacked_transformer_tpl.transformer_layer_params_tpl
  layer_p.tr_atten_tpl.num_kv_heads = num_kv_heads
  return p


def post_attention_ngrammers(using_scores):
  """VQ n-grammers after lm_config's two self-attentions."""
  return [pax_fiddle.Config(
      ngrammer.VQNgrammer, ngram_vocab_size=16, ngram_emb_dim=2,
      num_heads=HEADS, dim_per_head=D // HEADS, num_clusters=3,
      concat_ngrams=True, causal_attention=True,
      ngram_using_attention_scores=using_scores)] * 2


def random_variables(rng, layer, *args):
  """Random normal variables with the shapes `layer.init` would give."""
  shapes = jax.eval_shape(layer.init, jax.random.PRNGKey(0), *args)
  return jax.tree.map(
      lambda v: jnp.asarray(0.3 * rng.standard_normal(v.shape), jnp.float32),
      shapes)


def sharded_logits(config, variables, ids, paddings, mesh_shape):
  """(the variables split over a mesh of `mesh_shape` devices, the logits).

  `config` is sharded by Pax's `TransformerLm.set_sharding_params_v1` over
  the axes `MESH_NAMES`; the variables are placed by the partition specs of
  its weights and the forward pass runs under one `jax.jit` on that mesh.
  """
  p = transformer_models.TransformerLm.set_sharding_params_v1(
      config, replica_axis='replica', data_axis='data', mdl_axis='mdl',
      ici_mesh_shape=mesh_shape, mesh_axis_names=MESH_NAMES,
      training_optimized=True)
  lm = instantiate(p)
  specs = base_layer.var_partition_specs(
      lm.abstract_init_with_metadata(ids, paddings), mesh_shape, MESH_NAMES)
  mesh = jax.sharding.Mesh(
      np.array(jax.devices()[:math.prod(mesh_shape)]).reshape(mesh_shape),
      MESH_NAMES)
  sharded = jax.tree.map(
      lambda x, s: jax.device_put(x, jax.sharding.NamedSharding(mesh, s)),
      variables, specs)
  with jax.set_mesh(mesh):
    return sharded, jax.jit(lm.apply)(sharded, ids, paddings).logits


def np_log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


class ExtendStepTest(test_utils.TestCase):

  @parameterized.named_parameters(
      ('multi_head', {}),
      ('grouped_query', {'num_kv_heads': 2}),
      # Decoded under jit, attention-score pairing included (Pax: eager).
      ('post_attention_ngrammer', {
          'post_attention_ngrammer_tpls': post_attention_ngrammers(False)}),
      ('post_attention_ngrammer_by_scores', {
          'post_attention_ngrammer_tpls': post_attention_ngrammers(True)}),
  )
  def test_extend_step_matches_the_forward_pass(self, kwargs):
    lm = instantiate(lm_config(**kwargs))
    ids = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    paddings = jnp.zeros((B, T))
    variables = random_variables(self.np_rng, lm, ids, paddings)
    prefix = 3

    def fprop_keeping_prefix(m, ids, paddings):
      # The caches keep the first `prefix` steps, then room for the rest.
      out = m(ids, paddings, start_time_step=prefix)
      m.transform_decode_state(decoder_utils.slice_state_fn(0, prefix))
      m.transform_decode_state(decoder_utils.pad_state_fn(T - prefix))
      return out.logits

    full, cache = jax.jit(functools.partial(
        lm.apply, method=fprop_keeping_prefix, mutable=[DECODE_CACHE]))(
            variables, ids, paddings)
    self.assertEqual(cache[DECODE_CACHE]['transformer']['x_layers_0'][
        'self_attention']['key_state'].shape[1], T)

    @jax.jit
    def step(cache, ids_t):
      return lm.apply({**variables, **cache}, ids_t, method=lm.extend_step,
                      mutable=[DECODE_CACHE])

    for t in range(prefix, T):
      out, cache = step(cache, ids[:, t])
      self.assertAllClose(out.logits, full[:, t], atol=1e-5, rtol=1e-5)
      self.assertAllClose(out.log_probs, np_log_softmax(np.asarray(
          full[:, t])), atol=1e-5)
    self.assertEqual(int(cache[DECODE_CACHE]['time_step']), T)

  def test_extend_step_records_the_activations(self):
    lm = instantiate(lm_config(record_activations_in_xent_output=True))
    ids = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    variables = random_variables(self.np_rng, lm, ids, jnp.zeros((B, T)))
    full, cache = lm.apply(variables, ids, jnp.zeros((B, T)),
                           mutable=[DECODE_CACHE])
    cache = jax.tree.map(jnp.zeros_like, cache)  # An empty cache of T steps.
    for t in range(2):
      out, cache = lm.apply({**variables, **cache}, ids[:, t],
                            method=lm.extend_step, mutable=[DECODE_CACHE])
      self.assertAllClose(out.activations, full.activations[:, t],
                          atol=1e-5, rtol=1e-5)
      # The logits are the softmax's of those activations.
      self.assertAllClose(out.logits, full.logits[:, t], atol=1e-5,
                          rtol=1e-5)

  def test_extend_several_steps_matches_the_forward_pass(self):
    # L steps at once (Pax: suffix scoring), with the attention that
    # extends several steps, rotary positions and an n-grammer; then the
    # next step alone continues from them.
    p = lm_config(ngrammer_tpl=pax_fiddle.Config(
        ngrammer.VQNgrammer, ngram_vocab_size=16, ngram_emb_dim=2,
        num_heads=HEADS, dim_per_head=D // HEADS, num_clusters=3,
        concat_ngrams=True))
    p.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl = (
        pax_fiddle.Config(attentions.DotProductAttentionWithLPB,
                          use_rotary_position_emb=True, combine_qkv=True))
    lm = instantiate(p)
    ids = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    paddings = jnp.zeros((B, T))
    variables = random_variables(self.np_rng, lm, ids, paddings)
    full = jax.jit(lm.apply)(variables, ids, paddings).logits
    # An empty cache of T steps (the forward pass on padding fills it).
    _, cache = jax.jit(functools.partial(lm.apply, mutable=[DECODE_CACHE]))(
        variables, jnp.zeros_like(ids), jnp.ones((B, T)))
    mask = jnp.tile(attentions.causal_mask(jnp.zeros((B, T, D))),
                    (B, 1, 1, 1))

    @jax.jit
    def extend(cache, ids_t, mask_t, pos_t):
      return lm.apply({**variables, **cache}, ids_t, segment_pos=pos_t,
                      atten_mask=mask_t, method=lm.extend_step,
                      mutable=[DECODE_CACHE])

    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    for start, stop in ((0, 3), (3, 5)):
      out, cache = extend(cache, ids[:, start:stop], mask[:, :, start:stop],
                          pos[:, start:stop])
      self.assertEqual(out.logits.shape, (B, stop - start, VOCAB))
      self.assertAllClose(out.logits, full[:, start:stop], atol=1e-5,
                          rtol=1e-5)
    self.assertEqual(int(cache[DECODE_CACHE]['time_step']), 5)
    out, cache = extend(cache, ids[:, 5], mask[:, :, 5], pos[:, 5])
    self.assertAllClose(out.logits, full[:, 5], atol=1e-5, rtol=1e-5)
    with self.assertRaisesRegex(ValueError, 'needs their atten_mask'):
      lm.apply({**variables, **cache}, ids[:, :2], method=lm.extend_step,
               mutable=[DECODE_CACHE])


class ShardingTest(test_utils.TestCase):

  def _config(self):
    p = lm_config(position_emb_tpl=pax_fiddle.Config(
        embedding_softmax.TrainablePositionalEmbedding, max_seq_length=T))
    return p

  def test_partition_specs_follow_the_annotations(self):
    p = transformer_models.TransformerLm.set_sharding_params_v1(
        self._config(), replica_axis='replica', data_axis='data',
        mdl_axis='mdl', ici_mesh_shape=[1, 2, 4], mesh_axis_names=MESH_NAMES,
        training_optimized=True)
    ids = jnp.zeros((B, T), jnp.int32)
    meta = instantiate(p).abstract_init_with_metadata(ids, jnp.zeros((B, T)))
    specs = base_layer.var_partition_specs(meta, [1, 2, 4], MESH_NAMES)
    params = specs['params']
    layer = params['transformer']['x_layers_0']
    expected = [
        # [D, V]: the [V, D] table's [mdl, data], transposed.
        (params['softmax']['logits_ffn']['linear']['w'], ('data', 'mdl')),
        (layer['self_attention']['query']['w'], ('data', 'mdl', None)),
        (layer['self_attention']['post']['w'], ('data', 'mdl', None)),
        (layer['ff_layer']['ffn_layer1']['linear']['w'], ('data', 'mdl')),
        (layer['ff_layer']['ffn_layer2']['linear']['w'], ('mdl', 'data')),
        (params['position_emb']['emb_var'], ('data', 'mdl')),
        (params['final_ln']['scale'], (None,)),
    ]
    for spec, axes in expected:
      self.assertEqual(spec, PartitionSpec(*axes))
    self.assertEqual(p.softmax_tpl.lookup_style, 'matmul')
    ff_act = (p.stacked_transformer_tpl.transformer_layer_params_tpl
              .tr_fflayer_tpl.activation_split_dims_mapping)
    self.assertEqual(ff_act.ffn0, [('replica', 'data'), None, 'mdl'])
    # The MoE template's routed activations, as Pax annotates them (expert
    # dim over data, model dim over mdl; the dispatch tensors replicated).
    moe_act = (p.stacked_transformer_tpl.moe_layer_tpl
               .activation_split_dims_mapping)
    self.assertEqual(
        {k: getattr(moe_act, k) for k in
         ('gs', 'gsec', 'gecs', 'gec', 'gsm', 'egch', 'egcm', 'gecm')},
        {'gs': ['data', None], 'gsec': ['data', None, None, None],
         'gecs': ['data', None, None, None], 'gec': ['data', None, None],
         'gsm': ['data', None, 'mdl'], 'egch': ['data', None, None, 'mdl'],
         'egcm': ['data', None, None, 'mdl'],
         'gecm': ['data', None, None, 'mdl']})

  def test_sharded_forward_equals_single_device(self):
    ids = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    paddings = jnp.zeros((B, T))
    plain = instantiate(self._config())
    variables = random_variables(self.np_rng, plain, ids, paddings)
    expected = jax.jit(plain.apply)(variables, ids, paddings).logits
    sharded, logits = sharded_logits(self._config(), variables, ids,
                                     paddings, [1, 2, 4])
    self.assertAllClose(logits, expected, atol=1e-5, rtol=1e-5)
    query_w = sharded['params']['transformer']['x_layers_0'][
        'self_attention']['query']['w']
    self.assertEqual(query_w.addressable_shards[0].data.shape,
                     (D // 2, HEADS // 4, D // HEADS))

  def test_unknown_custom_sharding_is_rejected(self):
    with self.assertRaisesRegex(ValueError, 'unknown shardings'):
      transformer_models.TransformerLm.set_custom_sharding_params(
          lm_config(), ici_mesh_shape=[1, 2, 4], mesh_axis_names=MESH_NAMES,
          w_xyz=['data'])


class LossTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.lm = instantiate(lm_config(softmax_tpl=pax_fiddle.Config(
        embedding_softmax.SharedEmbeddingSoftmax, z_loss_weight=0.1)))
    ids = jnp.zeros((B, T), jnp.int32)
    self.variables = random_variables(self.np_rng, self.lm, ids,
                                      jnp.zeros((B, T)))
    self.acts = self.np_rng.standard_normal((B, T, D)).astype(np.float32)
    self.labels = NestedMap(
        class_ids=jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T))),
        class_weights=jnp.asarray(self.np_rng.integers(0, 2, (B, T)),
                                  jnp.float32))

  def test_loss_adds_the_aux_loss_collection(self):
    out, _ = self.lm.apply(
        self.variables, jnp.asarray(self.acts), self.labels,
        method=self.lm.compute_loss,
        mutable=[base_layer.AUX_LOSS, base_layer.SUMMARIES])
    softmax = self.variables['params']['softmax']['logits_ffn']
    logits = self.acts @ np.asarray(softmax['linear']['w']) + np.asarray(
        softmax['bias']['b'])
    logp = np_log_softmax(logits)
    ids, w = np.asarray(self.labels.class_ids), np.asarray(
        self.labels.class_weights)
    xent = -np.take_along_axis(logp, ids[..., None], -1)[..., 0]
    avg_xent = (xent * w).sum() / w.sum()
    lse = np.log(np.exp(logits).sum(-1))
    z_loss = 0.1 * (lse**2 * w).sum() / w.sum()
    self.assertAllClose(out.avg_xent, avg_xent, atol=1e-5, rtol=1e-5)
    self.assertAllClose(out.per_sequence_xent, (xent * w).sum(-1), atol=1e-4,
                        rtol=1e-5)
    self.assertAllClose(out.aux_loss, z_loss, atol=1e-4, rtol=1e-5)
    self.assertAllClose(out.total_loss, avg_xent + z_loss, atol=1e-4,
                        rtol=1e-5)

  def test_without_labels_returns_normalized_logits(self):
    out = self.lm.apply(self.variables, jnp.asarray(self.acts),
                        method=self.lm.compute_loss)
    self.assertAllClose(out.log_probs, np_log_softmax(np.asarray(out.logits)),
                        atol=1e-5)
    self.assertAllClose(np.asarray(out.probs).sum(-1), np.ones((B, T)),
                        atol=1e-5)


class MaskTest(test_utils.TestCase):

  def test_prefix_tokens_see_the_whole_prefix(self):
    p = lm_config(model_type=transformer_models.LanguageModelType.PREFIX)
    lm = instantiate(p)
    ids = self.np_rng.integers(0, VOCAB, (1, T))
    paddings = jnp.zeros((1, T))
    variables = random_variables(self.np_rng, lm, jnp.asarray(ids), paddings)
    run = jax.jit(lambda ids, causal: lm.apply(
        variables, ids, paddings, causal_attention_mask=causal).logits)
    prefix = (np.arange(T) >= 3).astype(np.int32)[None]  # 3 prefix tokens
    causal = np.ones((1, T), np.int32)
    changed_2 = ids.copy()
    changed_2[0, 2] = (ids[0, 2] + 1) % VOCAB
    changed_5 = ids.copy()
    changed_5[0, 5] = (ids[0, 5] + 1) % VOCAB
    base = run(ids, prefix)
    # Token 0 sees token 2 of its prefix, never token 5.
    self.assertNotAllClose(run(changed_2, prefix)[0, 0], base[0, 0])
    self.assertAllClose(run(changed_5, prefix)[0, :5], base[0, :5])
    # Causal everywhere: token 0 does not see token 2.
    self.assertAllClose(run(changed_2, causal)[0, :2], run(ids, causal)[0, :2])


class ConfigErrorTest(test_utils.TestCase):

  def _init(self, p, ids=None):
    ids = jnp.zeros((1, 4), jnp.int32) if ids is None else ids
    jax.eval_shape(instantiate(p).init, jax.random.PRNGKey(0), ids,
                   jnp.zeros(ids.shape))

  def test_bad_configs_name_the_field(self):
    with self.assertRaisesRegex(ValueError, r'TransformerLm \(lm\).*vocab'):
      self._init(lm_config().set(vocab_size=0))
    with self.assertRaisesRegex(
        ValueError, 'post_attention_ngrammer_tpls has 1 entries; the stack '
        'has 2 layers'):
      self._init(lm_config().set(
          post_attention_ngrammer_tpls=post_attention_ngrammers(False)[:1]))
    hashed = pax_fiddle.Config(ngrammer.Ngrammer, ngram_vocab_size=16,
                               unigram_vocab_size=VOCAB, ngram_emb_dim=2,
                               num_heads=HEADS, dim_per_head=D // HEADS)
    with self.assertRaisesRegex(ValueError, 'ngrammer_tpl must be .*'
                                'VQNgrammer.*got Ngrammer'):
      self._init(lm_config().set(post_attention_ngrammer_tpls=[hashed] * 2))
    p = lm_config(post_attention_ngrammer_tpls=post_attention_ngrammers(False))
    p.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl = (
        pax_fiddle.Config(attentions.LocalSelfAttention, left_context=2,
                          right_context=0))
    with self.assertRaisesRegex(ValueError, 'ngrammer_tpl is not supported '
                                'by LocalSelfAttention'):
      self._init(p)
    p = lm_config()
    p.stacked_transformer_tpl.model_dims = 8
    with self.assertRaisesRegex(ValueError, 'model_dims 8'):
      self._init(p)
    p = lm_config()
    p.stacked_transformer_tpl = pax_fiddle.Config(
        transformers.TransformerFeedForward)
    with self.assertRaisesRegex(TypeError, 'StackedTransformer'):
      self._init(p)

  def test_lpb_post_attention_ngrammer_decodes_one_step_at_a_time(self):
    # The LPB attention takes the n-grammer (the real Pax's numbers: the
    # stacks_ref case lm_post_attention_ngrammer_lpb); several steps at once
    # (or after a broadcast prefix) are refused.
    atten = instantiate(pax_fiddle.Config(
        attentions.DotProductAttentionWithLPB, name='atten', input_dim=D,
        hidden_dim=D, num_heads=HEADS,
        ngrammer_tpl=post_attention_ngrammers(False)[0]))
    x = jnp.ones((B, 3, D))
    mask = jnp.zeros((1, 1, 3, 3))
    variables = atten.init(jax.random.PRNGKey(0), x, x, x, mask)
    _, cache = atten.apply(variables, x, x, x, mask,
                           mutable=[base_layer.DECODE_CACHE])
    state = {**variables, **cache}
    out, _ = atten.apply(state, x[:, 0], atten_mask=mask[:, :, 0],
                         time_step=0, segment_pos=None,
                         method=atten.extend_step,
                         mutable=[base_layer.DECODE_CACHE])
    self.assertEqual(out.shape, (B, D))
    with self.assertRaisesRegex(NotImplementedError,
                                'n-grammer decodes one step at a time'):
      atten.apply(state, x[:, :2], atten_mask=mask[:, :, :2], time_step=0,
                  segment_pos=None, method=atten.extend_step,
                  mutable=[base_layer.DECODE_CACHE])

  def test_bidirectional_model_cannot_extend(self):
    lm = instantiate(lm_config(
        model_type=transformer_models.LanguageModelType.BIDIRECTIONAL))
    with self.assertRaisesRegex(ValueError, 'CAUSAL or PREFIX'):
      jax.eval_shape(functools.partial(lm.init, method=lm.extend_step),
                     jax.random.PRNGKey(0), jnp.zeros((2,), jnp.int32))

  def test_segment_pos_needs_segment_ids(self):
    lm = instantiate(lm_config())
    ids = jnp.zeros((1, 4), jnp.int32)
    with self.assertRaisesRegex(ValueError, 'segment_pos needs segment_ids'):
      jax.eval_shape(functools.partial(lm.init, segment_pos=ids),
                     jax.random.PRNGKey(0), ids, jnp.zeros((1, 4)))


def enc_dec_config():
  p = pax_fiddle.Config(transformer_models.TransformerEncoderDecoder,
                        name='encdec', model_dims=D)
  p.softmax_tpl.num_classes = VOCAB
  common = {'num_layers': 1, 'num_heads': HEADS, 'hidden_dims': HIDDEN}
  p.encoder_stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, mask_self_attention=False, **common)
  p.decoder_stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, mask_self_attention=True,
      use_cross_attention=True, **common)
  return p


class EncoderDecoderTest(test_utils.TestCase):

  def _model_and_batch(self):
    """The model, random variables, and source/target ids and paddings."""
    model = instantiate(enc_dec_config())
    src = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, 5)), jnp.int32)
    src_paddings = jnp.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], jnp.float32)
    tgt = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    tgt_paddings = jnp.zeros((B, T))
    variables = random_variables(self.np_rng, model, src, src_paddings, tgt,
                                 tgt_paddings)
    return model, variables, (src, src_paddings, tgt, tgt_paddings)

  def test_extend_step_matches_the_forward_pass(self):
    model, variables, batch = self._model_and_batch()
    src, src_paddings, tgt, tgt_paddings = batch

    def fprop_keeping_first_step(m):
      out = m(src, src_paddings, tgt, tgt_paddings)
      m.transform_decode_state(decoder_utils.slice_state_fn(0, 1))
      m.transform_decode_state(decoder_utils.pad_state_fn(T - 1))
      return out.logits

    full, cache = jax.jit(functools.partial(
        model.apply, method=fprop_keeping_first_step,
        mutable=[DECODE_CACHE]))(variables)

    @jax.jit
    def step(cache, ids_t):
      return model.apply({**variables, **cache}, ids_t,
                         method=model.extend_step, mutable=[DECODE_CACHE])

    for t in range(T):
      out, cache = step(cache, tgt[:, t])
      self.assertAllClose(out.logits, full[:, t], atol=1e-5, rtol=1e-5)

  def test_fprop_with_encoder_output_and_init_states(self):
    model, variables, batch = self._model_and_batch()
    src, src_paddings, tgt, tgt_paddings = batch
    whole = model.apply(variables, src, src_paddings, tgt, tgt_paddings)
    # The decoder half on the encoder's output gives the same logits.
    halves = model.apply(
        variables, method=lambda m: m.fprop_with_encoder_output(
            m.encode(src, src_paddings), src_paddings, tgt, tgt_paddings))
    self.assertAllClose(halves.logits, whole.logits, atol=1e-6, rtol=1e-6)
    with self.assertRaises(NotImplementedError):  # As Pax: no init_states.
      model.apply(variables, src, src_paddings, method=model.init_states)

  def test_stacks_must_be_set_and_masked_right(self):
    p = enc_dec_config()
    p.encoder_stacked_transformer_tpl.mask_self_attention = True
    ids = jnp.zeros((1, 3), jnp.int32)
    pads = jnp.zeros((1, 3))
    with self.assertRaisesRegex(ValueError, 'encoder stack must have'):
      jax.eval_shape(instantiate(p).init, jax.random.PRNGKey(0), ids, pads,
                     ids, pads)
    p = enc_dec_config().set(decoder_stacked_transformer_tpl=None)
    with self.assertRaisesRegex(ValueError, 'decoder_stacked_transformer_tpl'):
      jax.eval_shape(instantiate(p).init, jax.random.PRNGKey(0), ids, pads,
                     ids, pads)

  def test_post_attention_ngrammers_are_ignored_as_in_pax(self):
    # Pax 1.4 sets them on the stack's template after building the stack
    # from a copy: same variables and logits as without them, and a warning.
    src = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, 5)), jnp.int32)
    tgt = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    args = (src, jnp.zeros((B, 5)), tgt, jnp.zeros((B, T)))
    plain = instantiate(enc_dec_config())
    variables = random_variables(self.np_rng, plain, *args)
    p = enc_dec_config().set(name='ignoring')  # Its own warnings.
    ngram_p = pax_fiddle.Config(
        ngrammer.VQNgrammer, ngram_vocab_size=8, ngram_emb_dim=2,
        num_heads=HEADS, dim_per_head=D // HEADS, num_clusters=2)
    p.encoder_post_attention_ngrammer_tpls = [ngram_p]
    p.decoder_post_attention_ngrammer_tpls = [ngram_p]
    ignoring = instantiate(p)
    with self.assertLogs(level='WARNING') as logs:
      shapes = jax.eval_shape(ignoring.init, jax.random.PRNGKey(0), *args)
    self.assertEqual(
        jax.tree.map(lambda v: v.shape, shapes),
        jax.tree.map(lambda v: v.shape, dict(variables)))
    self.assertLen([m for m in logs.output
                    if 'post_attention_ngrammer_tpls has no effect' in m], 2)
    self.assertAllClose(ignoring.apply(variables, *args).logits,
                        plain.apply(variables, *args).logits)
    p.decoder_post_attention_ngrammer_tpls = [ngram_p, ngram_p]
    with self.assertRaisesRegex(
        ValueError, 'decoder_post_attention_ngrammer_tpls has 2 entries; '
        'the decoder stack has 1 layers'):
      jax.eval_shape(instantiate(p).init, jax.random.PRNGKey(0), *args)


if __name__ == '__main__':
  absltest.main()
