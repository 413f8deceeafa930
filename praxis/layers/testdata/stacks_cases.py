"""Cases shared by make_ref_stacks.py and stacks_ref_test.py.

Convolutions, transformer blocks and stacks, and transformer language models:
the layer classes that Pax 1.4's convolutions_test, transformers_test and
transformer_models_test check against Lingvo. This file imports whichever
`praxis` comes first on the path: the real Pax 1.4 when make_ref_stacks.py
runs it, this project when the test does. Both sides build each case's
config here and drive it with the same calls (always in eval mode, so that
dropout and batch statistics play no part); only the recorded variables,
inputs and outputs travel between them, in stacks_ref.npz.
"""

import copy
import json
import math

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import bregman
from praxis.layers import conformers
from praxis.layers import convolutions
from praxis.layers import embedding_softmax
from praxis.layers import ngrammer
from praxis.layers import transformer_models
from praxis.layers import transformers

Config = pax_fiddle.Config
DECODE_CACHE = base_layer.DECODE_CACHE
B, T, S, D, V = 2, 5, 6, 8, 16  # batch, time, cross time, model dim, vocab


def make_inputs():
  """The inputs every case draws from (fixed seed; stored in the .npz)."""
  rng = np.random.default_rng(20)
  f32 = lambda *s: rng.normal(1.0, 0.5, size=s).astype(np.float32)
  paddings = np.zeros((B, T), np.float32)
  paddings[1, 3:] = 1.0
  cross_paddings = np.zeros((B, S), np.float32)
  cross_paddings[0, 4:] = 1.0
  img_paddings = np.zeros((B, 6), np.float32)
  img_paddings[1, 4:] = 1.0
  pad1d = np.zeros((B, 7), np.float32)
  pad1d[0, 5:] = 1.0
  pad1d[1, 2] = 1.0
  return {
      'x': f32(B, T, D),
      'paddings': paddings,
      'segment_ids': np.array([[1, 1, 2, 2, 2], [1, 1, 1, 2, 2]], np.int32),
      'segment_pos': np.array([[0, 1, 0, 1, 2], [0, 1, 2, 0, 1]], np.int32),
      'cross_x': f32(B, S, D),
      'cross_paddings': cross_paddings,
      'cross_segment_ids': np.array([[1, 1, 1, 2, 2, 2], [1, 1, 2, 2, 2, 2]],
                                    np.int32),
      'img': f32(B, 6, 6, 3),
      'img_paddings': img_paddings,
      'vol': f32(B, 4, 5, 5, 2),
      'x1d': f32(B, 7, 4),
      'pad1d': pad1d,
      'ids': rng.integers(0, V, size=(B, T)).astype(np.int32),
      'labels': rng.integers(0, V, size=(B, T)).astype(np.int32),
      'targets': rng.integers(0, V, size=(B, T)).astype(np.int32),
      'prefix_mask': np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]], np.int32),
  }


# --- Configs -----------------------------------------------------------------


def _conv2d(**kw):
  fields = dict(filter_stride=(1, 1), dilations=(1, 1))
  fields.update(kw)
  return Config(convolutions.Conv2D, name='conv', **fields)


def _ffn(act, gated=False):
  return Config(transformers.TransformerFeedForward, name='ffn',
                input_dims=D, hidden_dims=16, activation_tpl=Config(act),
                use_gated_activation=gated)


def _xformer(**kw):
  return Config(transformers.Transformer, name='xformer', input_dims=D,
                hidden_dims=16, num_heads=2, **kw)


def _stack(**kw):
  fields = dict(name='stack', model_dims=D, hidden_dims=16, num_heads=2,
                num_layers=2)
  fields.update(kw)
  return Config(transformers.StackedTransformer, **fields)


def _lm(model_type='CAUSAL', separate=False, rotary=False, dconv=False,
        position_emb=None):
  p = Config(transformer_models.TransformerLm, name='lm', model_dims=D,
             vocab_size=V,
             model_type=getattr(transformer_models.LanguageModelType,
                                model_type))
  st = p.stacked_transformer_tpl
  st.model_dims, st.hidden_dims, st.num_heads, st.num_layers = D, 16, 2, 2
  if separate:
    p.separate_embedding_tpl = Config(embedding_softmax.Embedding)
    p.softmax_tpl = Config(embedding_softmax.FullSoftmax)
  if position_emb is not None:
    p.position_emb_tpl = Config(position_emb, max_seq_length=T)
  atten = st.transformer_layer_params_tpl.tr_atten_tpl
  atten.use_rotary_position_emb = rotary
  if dconv:
    atten.dconv_qkv = True
    atten.dconv_kernel_size = 3
  return p


def _with_atten(p, **kw):
  p = copy.deepcopy(p)
  for k, v in kw.items():
    setattr(p.tr_atten_tpl, k, v)
  return p


def _xformer_extend():
  p = _xformer(use_cross_attention=True)
  p.tr_atten_tpl.dconv_qkv = True
  p.tr_atten_tpl.use_rotary_position_emb = True
  p.cross_atten_tpl = copy.deepcopy(p.tr_atten_tpl)
  p.cross_atten_tpl.dconv_qkv = False
  p.cross_atten_tpl.use_rotary_position_emb = False
  p.tr_atten_tpl.dconv_kernel_size = 2
  return p


def _stack_extend(combine_qkv):
  p = _stack(mask_self_attention=True, use_cross_attention=not combine_qkv)
  p.transformer_layer_params_tpl.tr_atten_tpl.combine_qkv = combine_qkv
  p.transformer_layer_params_tpl.tr_atten_tpl.use_rotary_position_emb = (
      combine_qkv)
  return p


def _repeated(**kw):
  block = _stack(num_layers=1, **kw)
  return Config(transformers.StackedTransformerRepeated, name='repeated',
                block=block, x_times=2)


def _moe(gating):
  return _stack(mask_self_attention=True, num_experts=4, num_groups=1,
                moe_layers=[0], gating_func=gating)


def _lpb_lm(rotary):
  p = _lm(separate=True, rotary=rotary)
  p.stacked_transformer_tpl.transformer_layer_params_tpl.tr_atten_tpl = (
      Config(attentions.DotProductAttentionWithLPB, input_dim=D,
             hidden_dim=16, num_heads=2, dim_per_head=4 if rotary else None,
             atten_logit_cap=20.0, combine_qkv=True,
             use_rotary_position_emb=rotary))
  return p


def _encdec():
  p = Config(transformer_models.TransformerEncoderDecoder, name='encdec',
             model_dims=D)
  for name in ('encoder_stacked_transformer_tpl',
               'decoder_stacked_transformer_tpl'):
    setattr(p, name, _stack(name=name))
  p.decoder_stacked_transformer_tpl.mask_self_attention = True
  p.decoder_stacked_transformer_tpl.use_cross_attention = True
  p.softmax_tpl.num_classes = V
  p.encoder_embedding_tpl = Config(embedding_softmax.Embedding,
                                   num_classes=V, input_dims=D)
  p.decoder_embedding_tpl = Config(embedding_softmax.Embedding,
                                   num_classes=V, input_dims=D)
  p.position_emb_tpl = Config(embedding_softmax.PositionalEmbedding)
  return p


def _encdec_ngrammer():
  """_encdec with a VQ n-grammer on the source, a hashed one on the target."""
  p = _encdec()
  p.encoder_ngrammer_tpl = Config(
      ngrammer.VQNgrammer, ngram_vocab_size=8, ngram_emb_dim=2, num_heads=2,
      dim_per_head=D // 2, num_clusters=2, concat_ngrams=True)
  p.decoder_ngrammer_tpl = Config(
      ngrammer.Ngrammer, ngram_vocab_size=16, unigram_vocab_size=V,
      ngram_emb_dim=2, num_heads=2, dim_per_head=D // 2, concat_ngrams=True)
  return p


def _lm_post_attention_ngrammer(scores):
  """_lm with a VQ n-grammer after each self-attention (pairing tokens by
  the attention probabilities with `scores`)."""
  p = _lm()
  p.post_attention_ngrammer_tpls = [Config(
      ngrammer.VQNgrammer, ngram_vocab_size=8, ngram_emb_dim=2, num_heads=2,
      dim_per_head=D // 2, num_clusters=2, concat_ngrams=True,
      causal_attention=True, ngram_using_attention_scores=scores)] * 2
  return p


def _lm_post_attention_ngrammer_lpb():
  """_lpb_lm with a VQ n-grammer after each self-attention."""
  p = _lpb_lm(False)
  p.post_attention_ngrammer_tpls = _lm_post_attention_ngrammer(
      False).post_attention_ngrammer_tpls
  return p


NORM_POLICIES = ('pre', 'primer_hybrid', 'post', 'post_skip')

# name -> (config builder, runner name)
CASES = {
    # convolutions_test
    'conv2d_same': (lambda: _conv2d(filter_shape=(3, 3, 3, 4)), 'conv'),
    'conv2d_stride_dilation': (
        lambda: _conv2d(filter_shape=(3, 3, 3, 4), filter_stride=(2, 2),
                        dilations=(2, 1)), 'conv'),
    'conv2d_tf_padding': (
        lambda: _conv2d(filter_shape=(2, 3, 3, 4), filter_stride=(2, 2),
                        dilations=(2, 1), tf_equivalent_padding=True),
        'conv'),
    'conv2d_causal': (
        lambda: _conv2d(filter_shape=(3, 3, 3, 2), filter_stride=(2, 2),
                        dilations=(2, 2), is_causal=True,
                        tf_equivalent_padding=True), 'conv'),
    'conv2d_valid_bias': (
        lambda: _conv2d(filter_shape=(3, 2, 3, 4), filter_stride=(2, 1),
                        padding='VALID', bias=True), 'conv'),
    'conv3d': (lambda: Config(convolutions.Conv3D, name='conv',
                              filter_shape=(2, 3, 3, 2, 3),
                              filter_stride=(1, 2, 2),
                              dilations=(1, 1, 1)), 'conv3d'),
    'conv3d_depthwise': (
        lambda: convolutions.Conv3D.HParamsDepthwise(
            name='conv', kernel_shape=(3, 3, 3), in_channels=2,
            channel_multipliers=2, filter_stride=(1, 1, 1), bias=True,
            tf_equivalent_padding=True), 'conv3d'),
    'depthwise_conv1d': (
        lambda: Config(convolutions.DepthwiseConv1D, name='conv',
                       filter_shape=(3, 4, 1), bias=True), 'conv1d'),
    'depthwise_conv1d_causal_dilated': (
        lambda: Config(convolutions.DepthwiseConv1D, name='conv',
                       filter_shape=(3, 4, 2), rhs_dilation_rate=2,
                       is_causal=True), 'conv1d'),
    'light_conv1d': (
        lambda: Config(convolutions.LightConv1D, name='lconv', input_dims=4,
                       kernel_size=3), 'conv1d'),
    'light_conv1d_causal': (
        lambda: Config(convolutions.LightConv1D, name='lconv', input_dims=4,
                       kernel_size=3, is_causal=True), 'conv1d'),
    'conv_bn_act': (
        lambda: Config(convolutions.ConvBNAct, name='cba',
                       filter_shape=(3, 3, 3, 4), filter_stride=(2, 2)),
        'conv'),
    'conv_bn_act_padding_same': (
        lambda: Config(convolutions.ConvBNActWithPadding, name='cba',
                       filter_shape=(3, 3, 3, 4), filter_stride=(2, 2)),
        'conv_pad'),
    'conv_bn_act_padding_valid': (
        lambda: Config(convolutions.ConvBNActWithPadding, name='cba',
                       filter_shape=(3, 3, 3, 4), filter_stride=(1, 1),
                       padding='VALID', bias=True,
                       batch_norm_tpl=None), 'conv_pad'),
    'conv_bn_act_padding_depthwise': (
        lambda: convolutions.ConvBNActWithPadding.HParamsDepthwise(
            name='cba', kernel_shape=(3, 3), in_channels=3,
            channel_multipliers=2, filter_stride=(1, 1), dilations=(1, 2),
            bias=True, tf_equivalent_padding=True, batch_norm_tpl=None,
            activation_tpl=Config(activations.Identity)), 'conv_pad'),
    # transformers_test
    'ffn_relu': (lambda: _ffn(activations.ReLU), 'ffn'),
    'ffn_silu': (lambda: _ffn(activations.SiLU), 'ffn'),
    'ffn_gated_silu': (lambda: _ffn(activations.SiLU, True), 'ffn'),
    'transformer_bidirectional': (lambda: _xformer(), 'xformer'),
    'transformer_causal_packed_cross': (
        lambda: _xformer(packed_input=True, use_cross_attention=True),
        'xformer_causal'),
    'transformer_relative_bias': (
        lambda: _with_atten(_xformer(packed_input=True), relative_bias_tpl=(
            Config(attentions.RelativeBias, relative_attention_num_buckets=2,
                   relative_attention_max_distance=8))), 'xformer_causal'),
    **{f'transformer_cross_norm_{policy}': (
        lambda policy=policy: _xformer(use_cross_attention=True,
                                       norm_policy=policy),
        'xformer_causal') for policy in NORM_POLICIES},
    'transformer_extend_dconv_rotary_cross': (_xformer_extend,
                                              'xformer_extend'),
    'stack_bidirectional_cross': (lambda: _stack(use_cross_attention=True),
                                  'stack'),
    'stack_causal_packed_cross': (
        lambda: _stack(mask_self_attention=True, packed_input=True,
                       use_cross_attention=True), 'stack'),
    'stack_extend_cross': (lambda: _stack_extend(False), 'stack_extend'),
    'stack_extend_combined_qkv_rotary': (lambda: _stack_extend(True),
                                         'stack_extend'),
    'repeated_causal_packed': (
        lambda: _repeated(mask_self_attention=True, packed_input=True),
        'stack'),
    'repeated_extend_cross': (
        lambda: _repeated(mask_self_attention=True, use_cross_attention=True),
        'stack_extend'),
    'stack_moe_top2': (lambda: _moe('top2'), 'stack'),
    'stack_moe_expert_choice': (lambda: _moe('expert_choice'), 'stack'),
    # transformer_models_test
    'lm_causal': (lambda: _lm(), 'lm_extend'),
    'lm_causal_separate_rotary_lpb': (lambda: _lpb_lm(True), 'lm_extend'),
    'lm_primer_dconv': (lambda: _lm(dconv=True, separate=True), 'lm_extend'),
    'lm_prefix': (lambda: _lm('PREFIX'), 'lm_prefix'),
    'lm_bidirectional_trainable_pos': (
        lambda: _lm(
            'BIDIRECTIONAL',
            position_emb=embedding_softmax.TrainablePositionalEmbedding),
        'lm'),
    'encoder_decoder': (_encdec, 'encdec_extend'),
    # conformers_test and ngrammer_test classes without other fixtures
    'context_xl_attention': (
        lambda: Config(conformers.DotProductAttentionWithContextXL,
                       name='atten', input_dim=D, hidden_dim=D, num_heads=2,
                       rel_pos_emb_dim=4, left_context=3, right_context=1),
        'atten'),
    'bregman_compression': (
        lambda: Config(ngrammer.BregmanCompression, name='bregman',
                       num_heads=2, dim_per_head=4, num_components=2,
                       activation_type=bregman.ActivationType.LEAKY_RELU,
                       negative_slope=0.1, start_step=0, end_step=10,
                       constant_lr_schedule=True), 'heads'),
    # transformer_models_encoder_decoder_test's n-grammers (here on: the
    # cases before them keep their recorded noise)
    'encoder_decoder_ngrammer': (_encdec_ngrammer, 'encdec_ngram_extend'),
    # transformer_models_test's post-attention n-grammers
    'lm_post_attention_ngrammer': (
        lambda: _lm_post_attention_ngrammer(False), 'lm_extend'),
    'lm_post_attention_ngrammer_scores': (
        lambda: _lm_post_attention_ngrammer(True), 'lm_extend_eager'),
    'lm_post_attention_ngrammer_lpb': (_lm_post_attention_ngrammer_lpb,
                                       'lm_extend'),
}


# The language models are slower to build and compile: their own test file.
MODEL_CASES = tuple(n for n in CASES if n.startswith(('lm_', 'encoder_')))
LAYER_CASES = tuple(n for n in CASES if n not in MODEL_CASES)


# --- Runners -----------------------------------------------------------------


def _masks(a, causal, packed=True, cross=True):
  x = jnp.asarray(a['x'])
  mask = attentions.convert_paddings_to_mask(a['paddings'])
  if causal:
    mask = jnp.minimum(mask, attentions.causal_mask(x))
  if packed:
    mask = jnp.minimum(mask, attentions.segment_mask(a['segment_ids'],
                                                     dtype=jnp.float32))
  cross_mask = None
  if cross:
    cross_mask = attentions.convert_paddings_to_mask(a['cross_paddings'])
    if packed:
      cross_mask = jnp.minimum(cross_mask, attentions.segment_mask(
          a['segment_ids'], a['cross_segment_ids'], dtype=jnp.float32))
  return mask, cross_mask


def _has_cross(layer):
  return bool(getattr(layer, 'use_cross_attention', False) or getattr(
      getattr(layer, 'block', None), 'use_cross_attention', False))


def _call(layer, kind, a):
  """(args, kwargs) of the forward call, per runner kind."""
  a = {k: jnp.asarray(v) for k, v in a.items()}
  if kind == 'conv':
    return (a['img'],), {}
  if kind == 'conv_pad':
    return (a['img'], a['img_paddings']), {}
  if kind == 'conv3d':
    return (a['vol'],), {}
  if kind == 'conv1d':
    return (a['x1d'], a['pad1d']), {}
  if kind == 'ffn':
    return (a['x'], a['paddings']), {}
  if kind == 'atten':
    mask = attentions.convert_paddings_to_mask(a['paddings'])
    mask = jnp.minimum(mask, jnp.swapaxes(mask, 2, 3))
    return (a['x'], a['x'], a['x'], mask), {}
  if kind == 'heads':
    return (a['x'].reshape(B, T, 2, D // 2),), {}
  if kind.startswith('xformer'):
    packed = layer.packed_input
    cross = layer.use_cross_attention
    mask, cross_mask = _masks(a, kind != 'xformer', packed, cross)
    kw = dict(attention_mask=mask, cross_attention_mask=cross_mask,
              cross_inputs=a['cross_x'] if cross else None)
    if layer.tr_atten_tpl.relative_bias_tpl is not None:
      kw['segment_pos'] = a['segment_pos']
    return (a['x'], a['paddings']), kw
  if kind.startswith('stack'):
    packed = (layer.block if hasattr(layer, 'block') else layer).packed_input
    cross = _has_cross(layer)
    kw = {}
    if packed:
      kw['segment_mask'] = attentions.segment_mask(a['segment_ids'],
                                                   dtype=jnp.float32)
      kw['segment_pos'] = a['segment_pos']
    if cross:
      kw['cross_inputs'] = a['cross_x']
      kw['cross_paddings'] = a['cross_paddings']
      if packed:
        kw['cross_segment_mask'] = attentions.segment_mask(
            a['segment_ids'], a['cross_segment_ids'], dtype=jnp.float32)
    return (a['x'], a['paddings']), kw
  if kind.startswith('lm'):
    labels = py_utils.NestedMap(
        class_ids=a['labels'],
        class_weights=(1.0 - a['paddings']).astype(np.float32))
    kw = dict(labels=labels)
    if kind == 'lm_prefix':
      kw['segment_ids'] = np.ones((B, T), np.int32)
      kw['segment_pos'] = np.tile(np.arange(T, dtype=np.int32), (B, 1))
      kw['causal_attention_mask'] = a['prefix_mask']
    return (a['ids'], a['paddings']), kw
  if kind in ('encdec_extend', 'encdec_ngram_extend'):
    labels = py_utils.NestedMap(
        class_ids=a['labels'],
        class_weights=np.ones((B, T), np.float32))
    return (a['ids'], a['paddings'], a['targets'],
            np.zeros((B, T), np.float32)), dict(labels=labels)
  raise ValueError(kind)


RUNNER = {name: kind for name, (_, kind) in CASES.items()}


def build(name):
  """The layer of case `name` (instantiated)."""
  return base_layer.instantiate(CASES[name][0]())


# Fast compilation: these graphs are tiny and run once or a few times.
_COMPILER_OPTIONS = {'xla_backend_optimization_level': 0,
                     'xla_llvm_disable_expensive_passes': True}


def _jit(fn):
  """jax.jit(fn), compiled with _COMPILER_OPTIONS on first call."""
  compiled = []

  def call(*args):
    if not compiled:
      lowered = jax.jit(fn).lower(*args)
      compiled.append(lowered.compile(compiler_options=_COMPILER_OPTIONS))
    return compiled[0](*args)

  return call


def _eval_context():
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=True))


def init(name, a):
  """Freshly initialised variables of case `name`."""
  layer = build(name)
  args, kw = _call(layer, RUNNER[name], a)
  with _eval_context():
    return layer.init(jax.random.PRNGKey(1), *args, **kw)


def init_shapes(name, a):
  """{flattened variable name: shape} of case `name` (nothing computed)."""
  layer = build(name)
  args, kw = _call(layer, RUNNER[name], a)
  with _eval_context():
    shapes = jax.eval_shape(
        lambda: layer.init(jax.random.PRNGKey(1), *args, **kw))
  return {'/'.join(k): v.shape
          for k, v in traverse_util.flatten_dict(shapes).items()}


def run(name, variables, a):
  """Outputs (name -> np array) of case `name` with the given variables.

  Each call is jitted (one compilation instead of one per op: much faster).
  """
  layer = build(name)
  kind = RUNNER[name]
  args, kw = _call(layer, RUNNER[name], a)
  out = {}
  with _eval_context():
    forward = _jit(lambda v: layer.apply(v, *args, **kw, mutable=True))
    res, state = forward(variables)
    if isinstance(res, tuple):
      for i, r in enumerate(res):
        if isinstance(r, dict):  # attention probs by attention layer
          out.update({f'out{i}_{k}': v for k, v in r.items()})
        elif r is not None:
          out[f'out{i}'] = r
    elif isinstance(res, dict):
      for k in ('logits', 'log_probs', 'per_example_xent', 'total_loss',
                'avg_xent', 'aux_loss'):
        if k in res:
          out[k] = res[k]
    else:
      out['out'] = res
    if kind.endswith(('extend', 'extend_eager')):
      # The forward pass filled the decode cache (prefix of T steps); each
      # step t overwrites slot t and masks the later ones.
      cache = {DECODE_CACHE: state[DECODE_CACHE]}
      out['steps'] = _extend(layer, variables, cache, args, kw, kind)
  return {k: np.asarray(v) for k, v in out.items()}


def _extend(layer, variables, cache, args, kw, kind):
  """Outputs of extend_step at each time step, stacked on axis 1."""

  def step(merged, x_t, mask_t, t):
    if kind in ('lm_extend', 'lm_extend_eager', 'encdec_extend',
                'encdec_ngram_extend'):
      res, new_cache = layer.apply(merged, x_t, method=layer.extend_step,
                                   mutable=[DECODE_CACHE])
      return res.logits, new_cache
    if kind == 'xformer_extend':
      return layer.apply(
          merged, x_t, time_step=t, attention_mask=mask_t,
          cross_attention_mask=kw['cross_attention_mask'],
          method=layer.extend_step, mutable=[DECODE_CACHE])
    return layer.apply(
        merged, x_t, time_step=t, cross_paddings=kw.get('cross_paddings'),
        method=layer.extend_step, mutable=[DECODE_CACHE])

  # One compilation per shape of x_t: the n-gram runner passes the previous
  # target ids with the current one ([B, 2]) after the first step ([B, 1]).
  compiled = {}
  ids = args[2] if kind.startswith('encdec') else args[0]
  steps = []
  for t in range(T):
    mask_t = None
    if kind == 'xformer_extend':
      mask_t = kw['attention_mask'][:, :, t, :]
    x_t = ids[:, t]
    if kind == 'encdec_ngram_extend':
      x_t = ids[:, max(t - 1, 0):t + 1]
    # Pax's VQNgrammer.extend_step slices the attention scores by the step:
    # with `ngram_using_attention_scores` it runs eagerly only.
    run_step = step if kind == 'lm_extend_eager' else compiled.setdefault(
        x_t.shape, _jit(step))
    res, cache = run_step(py_utils.merge_dict(cache, variables), x_t,
                          mask_t, jnp.asarray(t, jnp.int32))
    steps.append(res)
  return jnp.stack(steps, axis=1)


# --- Storage -----------------------------------------------------------------
# A thousand small arrays cost more in .npz entry headers than in data, so
# the fixture holds one flat array per dtype plus a JSON index.


def pack(arrays):
  """{name: array} -> {blob_<dtype>: 1-D array, index: JSON string}."""
  blobs, index = {}, {}
  for name in sorted(arrays):
    v = np.asarray(arrays[name])
    parts = blobs.setdefault(v.dtype.str, [])
    offset = sum(p.size for p in parts)
    parts.append(v.ravel())
    index[name] = [v.dtype.str, offset, list(v.shape)]
  out = {f'blob_{k}': np.concatenate(v) for k, v in blobs.items()}
  out['index'] = np.asarray(json.dumps(index))
  return out


def unpack(npz):
  """The inverse of `pack` (given the loaded .npz)."""
  index = json.loads(str(npz['index']))
  blobs = {k[len('blob_'):]: npz[k] for k in npz.files if k.startswith('blob_')}
  return {name: blobs[dt][off:off + math.prod(shape)].reshape(shape)
          for name, (dt, off, shape) in index.items()}


# --- Checking ----------------------------------------------------------------


def load_reference(path):
  """{'inputs': {...}, case: {'vars': {...}, 'out': {...}}} from the .npz."""
  ref = {}
  for key, value in unpack(np.load(path)).items():
    case, rest = key.split('/', 1)
    if case == 'inputs':
      ref.setdefault('inputs', {})[rest] = value
    else:
      part, name = rest.split('/', 1)
      ref.setdefault(case, {}).setdefault(part, {})[name] = value
  return ref


def check_case(test, name, ref):
  """Asserts (on unittest case `test`) that case `name` matches `ref`."""
  inputs, ref_vars = ref['inputs'], ref[name]['vars']
  test.assertEqual(init_shapes(name, inputs),
                   {k: v.shape for k, v in ref_vars.items()})
  got = run(name, traverse_util.unflatten_dict(ref_vars, sep='/'), inputs)
  want = ref[name]['out']
  test.assertEqual(sorted(got), sorted(want))
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5,
                               err_msg=f'{name}: {k}')
