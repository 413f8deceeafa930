"""Writes core_layers_ref.npz: the real Pax 1.4's core layers on fixed data.

The upstream tests of linears, normalizations, embedding_softmax, poolings
and attentions compare Pax with Lingvo. This script records instead what the
real Pax 1.4 computes for the same layer classes and config variants, so our
test (core_layers_ref_test.py) can compare against it.

Run under the reference environment (the real Pax 1.4 venv), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_core_layers.py [OUT_DIR]

OUT_DIR defaults to this script's folder. The file holds one flat buffer
per dtype and a JSON index (see pack()); each case is a layer config and a
list of steps (`layer.apply(variables, method=..., **kwargs)`); the collections
a step makes mutable (decode caches, batch-norm statistics) are carried into
the next step. Stored per case: the variables used (Pax's initial variables
with every float parameter redrawn from a seeded RandomState, so biases and
scales are not trivially zero or one), each step's array inputs and outputs,
the non-trainable variables after each step, and (where a case asks) Pax's
own initial values of some deterministic variables.
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
from praxis.layers import activations  # pylint: disable=unused-import
from praxis.layers import attentions
from praxis.layers import convolutions  # pylint: disable=unused-import
from praxis.layers import embedding_softmax  # pylint: disable=unused-import
from praxis.layers import linears  # pylint: disable=unused-import
from praxis.layers import normalizations  # pylint: disable=unused-import
from praxis.layers import poolings  # pylint: disable=unused-import
from ref_configs import build  # pylint: disable=g-bad-import-order
from ref_configs import cfg  # pylint: disable=g-bad-import-order

assert 'site-packages' in praxis.__file__, praxis.__file__

PARAMS = base_layer.PARAMS
NON_TRAINABLE = base_layer.NON_TRAINABLE
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
_CARRIED = (NON_TRAINABLE, DECODE_CACHE, PREFIX_DECODE_CACHE)

RNG = np.random.RandomState(0)


def step(method='__call__', mutable=(), **kwargs):
  """kwargs: numpy arrays are inputs, anything else a JSON literal."""
  return dict(method=method, mutable=list(mutable), kwargs=kwargs)


def normal(*shape, loc=0.0, scale=1.0):
  return RNG.normal(loc, scale, shape).astype(np.float32)


def paddings(batch, time, valid):
  p = np.zeros((batch, time), np.float32)
  for b, v in enumerate(valid):
    p[b, v:] = 1.0
  return p


CASES = {}


def case(name, layer, steps, do_eval=True, random_nt=False, check_init=(),
         fixed=None):
  """Registers one case.

  Args:
    name: case name.
    layer: cfg() of the layer.
    steps: step() list; the first one is also used for init.
    do_eval: JaxContext do_eval for init and all steps.
    random_nt: also redraw float non-trainable variables.
    check_init: variable paths ('params/b') whose Pax initial values are
      recorded (deterministic initialisers only).
    fixed: {path: array} variables set to given values instead of redrawn.
  """
  assert name not in CASES, name
  CASES[name] = dict(layer=layer, steps=steps, do_eval=do_eval,
                     random_nt=random_nt, check_init=list(check_init),
                     fixed=fixed or {})


# ---------------------------------------------------------------- linears
X4 = normal(2, 3, 4)
case('linear', cfg('linears.Linear', input_dims=4, output_dims=6),
     [step(inputs=X4)])
case('bias', cfg('linears.Bias', dims=4), [step(inputs=X4)],
     check_init=['params/b'])
for act in ('ReLU', 'Tanh', 'ReLU6', 'Sigmoid', 'Identity', 'GELU', 'SiLU'):
  case(f'ffn_{act.lower()}',
       cfg('linears.FeedForward', input_dims=4, output_dims=6,
           activation_tpl=cfg(f'activations.{act}')),
       [step(inputs=X4)])
case('ffn_no_bias',
     cfg('linears.FeedForward', input_dims=4, output_dims=6, has_bias=False),
     [step(inputs=X4)])
case('ffn_bias_init',
     cfg('linears.FeedForward', input_dims=4, output_dims=6, bias_init=0.5),
     [step(inputs=X4)], check_init=['params/bias/b'])
for final in (True, False):
  case(f'mlp_activate_final_{final}',
       cfg('linears.MLPBlock', num_layers=3, hidden_dims=5,
           activate_final=final,
           ff_tpl=cfg('linears.FeedForward', input_dims=4, output_dims=6,
                      activation_tpl=cfg('activations.Tanh'))),
       [step(inputs=X4)])
SEQ = np.arange(2 * 6 * 2, dtype=np.float32).reshape(2, 6, 2)
SEQ_PAD = paddings(2, 6, [6, 4])[..., None]
for name, fields in {
    'stack_left2': dict(left_context=2, stride=2),
    'stack_left2_pad_left': dict(left_context=2, stride=2,
                                 pad_with_left_frame=True),
    'stack_right1': dict(right_context=1, stride=2),
    'stack_right1_pad_right': dict(right_context=1, stride=2,
                                   pad_with_right_frame=True),
    'stack_reduce_max': dict(left_context=2, stride=2,
                             padding_reduce_option='reduce_max'),
    'stack_both_stride3': dict(left_context=1, right_context=2, stride=3),
    'stack_identity': dict(stride=1),
}.items():
  width = 2 * (fields.get('left_context', 0) + fields.get('right_context', 0)
               + 1)
  case(name, cfg('linears.StackingOverTime', **fields),
       [step(inputs=SEQ, paddings=SEQ_PAD),
        step(method='unstack', stacked=normal(2, 3, width))])

# --------------------------------------------------------- normalizations
X8 = normal(2, 5, 4, loc=1.0, scale=0.5)
PAD8 = paddings(2, 5, [5, 3])
for direct in (False, True):
  case(f'layer_norm_direct_{direct}',
       cfg('normalizations.LayerNorm', dim=4, direct_scale=direct),
       [step(inputs=X8)])
case('layer_norm_no_scale_no_bias',
     cfg('normalizations.LayerNorm', dim=4, use_scale=False, use_bias=False,
         epsilon=1e-3),
     [step(inputs=X8)])
for direct in (False, True):
  case(f'rms_norm_direct_{direct}',
       cfg('normalizations.RmsNorm', dim=4, direct_scale=direct,
           epsilon=1e-3),
       [step(inputs=X8)])
case('rms_norm_no_scale', cfg('normalizations.RmsNormNoScale', dim=4),
     [step(inputs=X8)])
for do_eval in (True, False):
  case(f'batch_norm_eval_{do_eval}',
       cfg('normalizations.BatchNorm', dim=4, decay=0.8),
       [step(mutable=[NON_TRAINABLE], inputs=X8, paddings=PAD8),
        step(mutable=[NON_TRAINABLE], inputs=X8 * 2.0, paddings=PAD8)],
       do_eval=do_eval, random_nt=True)
case('batch_norm_moving_avg_in_training',
     cfg('normalizations.BatchNorm', dim=4, decay=0.8,
         use_moving_avg_in_training=True),
     [step(mutable=[NON_TRAINABLE], inputs=X8, paddings=PAD8)],
     do_eval=False, random_nt=True)
case('batch_norm_no_pad_zero',
     cfg('normalizations.BatchNorm', dim=4, decay=0.8,
         set_padded_output_to_zero=False),
     [step(mutable=[NON_TRAINABLE], inputs=X8, paddings=PAD8)],
     do_eval=False, random_nt=True)
for name, fields, shape, pad in [
    ('group_norm_4d', dict(dim=4, num_groups=2, input_rank=4),
     (2, 2, 2, 4), None),
    ('group_norm_4d_eps', dict(dim=4, num_groups=2, input_rank=4,
                               epsilon=1e-6), (2, 2, 2, 4), None),
    ('group_norm_4d_pad', dict(dim=4, num_groups=2, input_rank=4),
     (2, 3, 2, 4), [3, 2]),
    ('group_norm_3d_pad', dict(dim=4, num_groups=2, input_rank=3),
     (2, 3, 4), [3, 2]),
    ('group_norm_4d_cumulative', dict(dim=2, num_groups=2, input_rank=4,
                                      cumulative=True), (2, 4, 1, 2), [4, 3]),
    ('group_norm_3d_cumulative', dict(dim=2, num_groups=2, input_rank=3,
                                      cumulative=True), (2, 4, 2), [4, 4]),
    ('group_norm_5d_cumulative', dict(dim=4, num_groups=2, input_rank=5,
                                      cumulative=True), (2, 5, 2, 3, 4),
     [4, 5]),
    ('group_norm_no_scale_bias', dict(dim=4, num_groups=4, input_rank=4,
                                      use_scale=False, use_bias=False),
     (2, 3, 2, 4), [3, 1]),
]:
  kwargs = dict(inputs=normal(*shape, loc=1.0, scale=0.5))
  if pad is not None:
    kwargs['paddings'] = paddings(shape[0], shape[1], pad)
  case(name, cfg('normalizations.GroupNorm', **fields), [step(**kwargs)])
for stride in ((1, 1), (2, 2)):
  case(f'weight_norm_conv_{stride[0]}',
       cfg('convolutions.Conv2D', filter_shape=(3, 3, 2, 4),
           filter_stride=stride,
           weight_norm_tpl=cfg('normalizations.WeightNormL2')),
       [step(inputs=normal(2, 5, 6, 2))])
W3 = RNG.rand(3, 3).astype(np.float32)
for do_eval in (True, False):
  case(f'spectral_norm_eval_{do_eval}',
       cfg('normalizations.SpectralNorm', dim=1, n_power_iteration=3),
       [step(mutable=[NON_TRAINABLE], inputs=(W3 @ W3.T)[:, :, None, None]),
        step(mutable=[NON_TRAINABLE], inputs=W3[:, :, None, None])],
       do_eval=do_eval)
case('spectral_norm_conv',
     cfg('convolutions.Conv2D', filter_shape=(2, 2, 2, 3),
         filter_stride=(1, 1),
         weight_norm_tpl=cfg('normalizations.SpectralNorm')),
     [step(mutable=[NON_TRAINABLE], inputs=normal(2, 4, 4, 2))],
     do_eval=False)
# bfloat16: inputs and/or fprop_dtype (variables stay float32).
BF16 = jnp.bfloat16
GN_IN = normal(2, 3, 2, 4, loc=1.0, scale=0.5)
GN_PAD = paddings(2, 3, [3, 2])
for name, in_dtype, fprop in [('group_norm_bf16_in', BF16, 'float32'),
                              ('group_norm_bf16_fprop', np.float32,
                               'bfloat16'),
                              ('group_norm_bf16_both', BF16, 'bfloat16')]:
  case(name,
       cfg('normalizations.GroupNorm', dim=4, num_groups=2, input_rank=4,
           fprop_dtype=fprop),
       [step(inputs=GN_IN.astype(in_dtype), paddings=GN_PAD.astype(in_dtype))])
case('rms_norm_bf16_f32_intermediate',
     cfg('normalizations.RmsNorm', dim=4, direct_scale=False, epsilon=1e-6,
         fprop_dtype='bfloat16', intermediate_dtype='float32'),
     [step(inputs=(X8 * 1e-4).astype(BF16))])
case('layer_norm_bf16',
     cfg('normalizations.LayerNorm', dim=4, fprop_dtype='bfloat16'),
     [step(inputs=X8.astype(BF16))])
# (Conv2D + SpectralNorm with fprop_dtype bfloat16 fails in Pax 1.4 itself:
# conv_general_dilated gets bfloat16 and float32; not recorded.)

# ------------------------------------------------------ embedding_softmax
IDS = RNG.randint(0, 10, (2, 5)).astype(np.int32)
case('token_counter', cfg('embedding_softmax.TokenCounter'),
     [step(mutable=[NON_TRAINABLE], inputs=IDS,
           paddings=paddings(2, 5, [5, 3])),
      step(mutable=[NON_TRAINABLE], inputs=IDS,
           paddings=paddings(2, 5, [2, 1]))],
     do_eval=False)
for style in ('index', 'matmul'):
  for sqrt in (True, False):
    case(f'embedding_{style}_sqrt_{sqrt}',
         cfg('embedding_softmax.Embedding', num_classes=10, input_dims=6,
             lookup_style=style, scale_sqrt_depth=sqrt),
         [step(ids=IDS), step(method='emb_lookup', ids=IDS[:, :2])])
SM_IN = normal(2, 3, 8, loc=1.5, scale=2.0)
SM_W = np.abs(normal(2, 3, 1)) + 0.1
SM_IDS = RNG.randint(0, 12, (2, 3, 1)).astype(np.int32)
SM_PROBS = RNG.rand(2, 3, 12).astype(np.float32)
SM_PROBS /= SM_PROBS.sum(-1, keepdims=True)
for name, fields, do_eval in [
    ('softmax', dict(), True),
    ('softmax_cap', dict(soft_cap_logits=5.0), True),
    ('softmax_ls_train', dict(label_smoothing_prob=0.1), False),
    ('softmax_ls_eval', dict(label_smoothing_prob=0.1), True),
    ('softmax_ls_not_for_eval', dict(label_smoothing_prob=0.1,
                                     label_smoothing_apply_for_eval=False),
     True),
    ('softmax_z_loss', dict(z_loss_weight=0.1, bias_init=0.3), True),
    ('softmax_scale_before_logits', dict(scale_before_logits=True), True),
]:
  case(name,
       cfg('embedding_softmax.FullSoftmax', num_classes=12, input_dims=8,
           **fields),
       [step(inputs=SM_IN, class_weights=SM_W, class_ids=SM_IDS),
        step(inputs=SM_IN, class_weights=SM_W, class_probabilities=SM_PROBS)]
       + ([step(method='get_logits', inputs=SM_IN)] if not fields else []),
       do_eval=do_eval,
       check_init=['params/logits_ffn/bias/b'] if 'bias_init' in fields
       else ())
for name, fields in [
    ('shared_softmax_index_sqrt', dict(lookup_style='index',
                                       scale_sqrt_depth=True)),
    ('shared_softmax_matmul_cap', dict(lookup_style='matmul',
                                       soft_cap_logits=5.0)),
    ('shared_softmax_scale_before', dict(scale_before_logits=True,
                                         scale_sqrt_depth=True)),
]:
  case(name,
       cfg('embedding_softmax.SharedEmbeddingSoftmax', num_classes=12,
           input_dims=8, **fields),
       [step(inputs=SM_IN, class_weights=SM_W, class_ids=SM_IDS),
        step(method='emb_lookup', ids=SM_IDS[..., 0])])
for denom in (True, False):
  case(f'gshard_softmax_tgt_denominator_{denom}',
       cfg('embedding_softmax.GShardSharedEmbeddingSoftmax', num_classes=12,
           input_dims=8, soft_cap_logits=5.0,
           use_tgt_labels_size_as_loss_denominator=denom),
       [step(inputs=SM_IN, class_weights=SM_W, class_ids=SM_IDS),
        step(inputs=SM_IN, class_weights=SM_W, class_probabilities=SM_PROBS),
        step(method='emb_lookup', ids=SM_IDS[..., 0])])
case('gshard_softmax_z_loss_ls',
     cfg('embedding_softmax.GShardSharedEmbeddingSoftmax', num_classes=12,
         input_dims=8, z_loss_weight=0.1, label_smoothing_prob=0.1,
         logits_abs_max=3.0),
     [step(inputs=SM_IN, class_weights=SM_W, class_ids=SM_IDS)])
SIG_IN = normal(4, 8, loc=1.5, scale=2.0)
for classes in (5, 1):
  probs = RNG.rand(4, classes).astype(np.float32)
  steps = [step(inputs=SIG_IN, class_weights=np.abs(normal(4, 1)),
                class_probabilities=probs),
           step(inputs=SIG_IN, class_weights=np.abs(normal(4, classes)),
                class_probabilities=probs)]
  if classes > 1:  # Pax refuses class ids with one class.
    steps.append(step(inputs=SIG_IN, class_weights=np.abs(normal(4, 1)),
                      class_ids=RNG.randint(0, classes, (4, 1)).astype(
                          np.int32)))
  case(f'sigmoid_xent_{classes}',
       cfg('embedding_softmax.SigmoidCrossEntropy', num_classes=classes,
           input_dims=8), steps)
case('sigmoid_xent_no_ffn',
     cfg('embedding_softmax.SigmoidCrossEntropy', num_classes=5,
         input_dims=5, feed_forward_tpl=None, soft_cap_logits=2.0),
     [step(inputs=normal(4, 5), class_weights=np.abs(normal(4, 1)),
           class_probabilities=RNG.rand(4, 5).astype(np.float32))])
POS = np.array([[0, 1, 2, 3, 4, 0, 1], [0, 1, 2, 0, 1, 2, 3]], np.int32)
for lo, hi in ((1, 10), (1, 1e5), (10, 20)):
  case(f'pos_emb_{lo}_{int(hi)}',
       cfg('embedding_softmax.PositionalEmbedding', embedding_dims=6,
           min_timescale=lo, max_timescale=hi),
       [step(seq_length=7), step(position=POS)])
  case(f'rotary_{lo}_{int(hi)}',
       cfg('embedding_softmax.RotaryPositionalEmbedding', embedding_dims=8,
           min_timescale=lo, max_timescale=hi),
       [step(inputs=normal(2, 7, 2, 8)),
        step(inputs=normal(2, 7, 2, 8), position=POS),
        step(method='extend_step', inputs=normal(2, 2, 8), position=3),
        step(method='extend_step', inputs=normal(2, 2, 8),
             position=np.array([2, 5], np.int32))])
for style in ('index', 'matmul'):
  case(f'trainable_pos_emb_{style}',
       cfg('embedding_softmax.TrainablePositionalEmbedding', max_seq_length=10,
           embedding_dims=6, lookup_style=style),
       [step(seq_length=7), step(position=POS)])

# ------------------------------------------------------------ poolings
IMG = normal(2, 6, 6, 3, loc=1.0, scale=0.5)
IMG_INT = RNG.randint(0, 100, (2, 6, 6, 3)).astype(np.int32)
IMG_PAD = paddings(2, 6, [6, 3])
for shape, stride, pad, kind in [
    ((3, 3), (2, 2), 'SAME', 'MAX'),
    ((4, 4), (1, 1), 'SAME', 'AVG'),
    ((2, 2), (2, 2), 'SAME', 'AVG'),
    ((3, 3), (1, 1), 'VALID', 'AVG'),
    ((2, 2), (1, 1), 'VALID', 'MAX'),
    ((4, 4), (2, 2), 'VALID', 'MAX'),
]:
  name = f'pool_{kind}_{pad}_{shape[0]}_{stride[0]}'.lower()
  case(name,
       cfg('poolings.Pooling', window_shape=shape, window_stride=stride,
           padding=pad, pooling_type=kind),
       [step(inputs=IMG), step(inputs=IMG, paddings=IMG_PAD),
        step(inputs=IMG_INT, paddings=IMG_PAD),
        step(inputs=IMG, paddings=np.ones_like(IMG_PAD))])
G_IN = np.array([[1., 2., 3., 4., 5.], [5., 4., 3., 2., 1.]], np.float32)
G_PAD = np.array([[1., 1., 0., 0., 0.], [1., 0., 0., 0., 1.]], np.float32)
for kind in ('MAX', 'AVG'):
  case(f'global_pool_{kind.lower()}',
       cfg('poolings.GlobalPooling', pooling_type=kind, pooling_dims=[1]),
       [step(inputs=G_IN), step(inputs=G_IN, compatible_paddings=G_PAD),
        step(inputs=G_IN.astype(np.int32), compatible_paddings=G_PAD)])
  case(f'global_pool_{kind.lower()}_2d_keepdims',
       cfg('poolings.GlobalPooling', pooling_type=kind, pooling_dims=[1, 2],
           keepdims=True),
       [step(inputs=IMG)])
P1_IN = normal(2, 10, 2, loc=1.0, scale=0.5)
P1_PAD = paddings(2, 10, [10, 7])
for stride, window, kind in ((2, 2, 'MAX'), (2, 3, 'AVG'), (3, 4, 'MAX'),
                             (4, 5, 'AVG')):
  case(f'pool1d_{kind.lower()}_{stride}_{window}',
       cfg('poolings.Pooling1D', stride=stride, window=window,
           pooling_type=kind),
       [step(inputs=P1_IN), step(inputs=P1_IN, paddings=P1_PAD)])

# ----------------------------------------------------------- attentions
case('per_dim_scale', cfg('attentions.PerDimScale', dim=4),
     [step(inputs=normal(5, 4, loc=1.5, scale=2.0))])
for name, fields, shape in [
    ('proj', dict(), (2, 3, 8)),
    ('proj_no_bias', dict(use_bias=False), (2, 3, 8)),
    ('proj_combine_dims', dict(attention_combine_dims=True, use_bias=False),
     (2, 3, 8)),
    ('proj_out', dict(is_output_projection=True), (2, 3, 2, 3)),
    ('proj_out_nhd', dict(is_output_projection=True, use_nhd_shape=True),
     (2, 3, 2, 3)),
    ('proj_out_combine_dims', dict(is_output_projection=True, use_bias=False,
                                   attention_combine_dims=True),
     (2, 3, 2, 3)),
]:
  case(name,
       cfg('attentions.AttentionProjection', input_dim=8, num_heads=2,
           dim_per_head=3, **fields),
       [step(inputs=normal(*shape))])
for name, fields in [('combined_qkv', {}),
                     ('combined_qkv_combine_dims',
                      dict(attention_combine_dims=True)),
                     ('combined_qkv_no_bias', dict(use_bias=False))]:
  case(name,
       cfg('attentions.CombinedQKVProjectionLayer', input_dim=8, num_heads=2,
           dim_per_head=3, **fields),
       [step(inputs=normal(2, 3, 8)), step(inputs=normal(2, 8))])
for name, kernel, axis, hidden, shape in [
    ('dconv_axis1', 3, 1, 4, (2, 5, 4)),
    ('dconv_axis0', 2, 0, [2, 4], (5, 3, 2, 4)),
]:
  xs = normal(*shape)
  case(name,
       cfg('attentions.CausalDepthwiseConv1D', kernel_size=kernel,
           hidden_dims=hidden),
       [step(inputs=xs, axis=axis),
        step(inputs=xs, axis=axis,
             segment_pos=np.tile(np.array([0, 1, 0, 1, 2], np.int32),
                                 (shape[1 - axis], 1)) if axis == 1 else None)]
       + [step(method='extend_step', inputs=xs, axis=axis, step=t,
               segment_pos=None) for t in (0, 2, 4)])
SEG_POS = np.array([[0, 1, 2, 3, 4, 0, 1, 2],
                    [0, 1, 2, 0, 1, 2, 3, 4]], np.int32)
for name, fields in [('rel_bias', dict()),
                     ('rel_bias_raw', dict(use_length_as_position=False)),
                     ('rel_bias_bidirectional', dict(bidirectional=True)),
                     ('rel_bias_xavier', dict(use_xavier_init=True))]:
  case(name,
       cfg('attentions.RelativeBias', num_heads=2,
           relative_attention_num_buckets=6,
           relative_attention_max_distance=12, **fields),
       [step(query_segment_pos=SEG_POS, key_segment_pos=SEG_POS),
        step(query_segment_pos=SEG_POS),
        step(method='extend_step', seq_length=8, time_step=5)])

# DotProductAttention: a full forward pass, then decoding step by step from
# a cache first filled by a zero forward pass.
B, T, D = 2, 5, 8
Q = normal(B, T, D)
KV = normal(B, T, D)
NEG = -0.7 * np.finfo(np.float32).max  # py_utils.get_large_negative_number
CAUSAL = np.asarray(attentions.causal_mask(jnp.asarray(Q)))
PAD_MASK = np.asarray(attentions.convert_paddings_to_mask(
    jnp.asarray(paddings(B, T, [5, 3]))))
FULL_MASK = np.minimum(CAUSAL, PAD_MASK)
SEG_IDS = np.array([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]], np.int32)
SEG_MASK = np.asarray(attentions.causal_segment_mask(jnp.asarray(SEG_IDS),
                                                     jnp.float32))
POS5 = np.tile(np.arange(T, dtype=np.int32), (B, 1))


def dpa_steps(mask=FULL_MASK, segment_pos=None, decode=False, cross=False):
  zeros = np.zeros_like(Q)
  pos = dict(query_segment_pos=segment_pos, key_segment_pos=segment_pos)
  steps = [step(query_vec=Q, key_vec=Q, value_vec=Q, atten_mask=mask, **pos)]
  if decode:
    steps.insert(0, step(mutable=[DECODE_CACHE], query_vec=zeros,
                         key_vec=zeros, value_vec=zeros, atten_mask=mask,
                         **pos))
  if cross:
    steps.append(step(query_vec=Q, key_vec=KV, value_vec=KV[:, ::-1],
                      atten_mask=PAD_MASK, **pos))
  if decode:
    steps += [step(method='extend_step', mutable=[DECODE_CACHE],
                   query_vec=Q[:, t], atten_mask=mask[:, :, t], time_step=t,
                   segment_pos=None if segment_pos is None
                   else segment_pos[:, t])
              for t in range(T)]
  return steps


DPA = dict(input_dim=D, hidden_dim=8, num_heads=2)
for name, fields, kwargs in [
    ('dpa', dict(atten_logit_cap=20.0), dict(decode=True, cross=True)),
    ('dpa_segment_mask', dict(), dict(mask=SEG_MASK)),
    ('dpa_combine_qkv', dict(combine_qkv=True),
     dict(cross=False, decode=True)),
    ('dpa_dconv', dict(dconv_qkv=True, dconv_kernel_size=3),
     dict(decode=True)),
    ('dpa_rotary', dict(use_rotary_position_emb=True, dim_per_head=4),
     dict(segment_pos=POS5)),
    ('dpa_combine_dconv_rotary',
     dict(combine_qkv=True, dconv_qkv=True, dconv_kernel_size=2,
          use_rotary_position_emb=True, dim_per_head=4,
          atten_logit_cap=20.0),
     dict(segment_pos=POS5, cross=False, decode=True)),
    ('dpa_no_query_scale', dict(internal_enable_query_scale=False), {}),
    ('dpa_no_per_dim_scale', dict(internal_enable_per_dim_scale=False), {}),
    ('dpa_no_scales', dict(internal_enable_query_scale=False,
                           internal_enable_per_dim_scale=False),
     dict(cross=True)),
    ('dpa_scale_by_dim_per_head',
     dict(internal_enable_per_dim_scale=False,
          scale_query_by_dim_per_head=True, dim_per_head=3), {}),
    ('dpa_scale_logits_by_head_dims', dict(scale_logits_by_head_dims=True),
     {}),
    ('dpa_no_bias_nhd_extra_logit',
     dict(use_bias=False, output_proj_use_nhd_shape=True,
          attention_extra_logit=0.5), {}),
    ('dpa_zero_fully_masked', dict(zero_fully_masked=True),
     dict(mask=np.where(np.arange(T)[None, None, None] < 2, NEG,
                        FULL_MASK).astype(np.float32))),
    ('dpa_rel_bias',
     dict(relative_bias_tpl=cfg('attentions.RelativeBias',
                                relative_attention_num_buckets=6,
                                relative_attention_max_distance=12)),
     dict(segment_pos=POS5, decode=True)),
    ('dpa_rel_bias_raw',
     dict(relative_bias_tpl=cfg('attentions.RelativeBias',
                                relative_attention_num_buckets=6,
                                relative_attention_max_distance=12,
                                use_length_as_position=False)),
     dict(segment_pos=np.array([[0, 1, 2, 0, 1], [0, 1, 2, 3, 4]],
                               np.int32))),
]:
  case(name, cfg('attentions.DotProductAttention', **DPA, **fields),
       dpa_steps(**kwargs))

# DotProductAttentionWithLPB: prefix forward pass, lazy broadcast to 2
# samples, decode 2 steps, broadcast again to 3 samples, decode 1 step.
PREFIX = 2
for name, fields in [
    ('lpb', dict()),
    ('lpb_combine_rotary', dict(combine_qkv=True, use_rotary_position_emb=True,
                                dim_per_head=4)),
    ('lpb_dconv', dict(dconv_qkv=True, dconv_kernel_size=2)),
]:
  rep = lambda x, n: np.repeat(x, n, axis=0)
  pre = Q[:, :PREFIX].copy()
  steps = [step(query_vec=Q, key_vec=Q, value_vec=Q, atten_mask=CAUSAL),
           step(mutable=[DECODE_CACHE], query_vec=pre, key_vec=pre,
                value_vec=pre, atten_mask=CAUSAL[:, :, :PREFIX, :PREFIX]),
           step(method='lazy_broadcast_prefix',
                mutable=[DECODE_CACHE, PREFIX_DECODE_CACHE],
                num_suffix_samples=2, suffix_length=2)]
  for t in (PREFIX, PREFIX + 1):
    steps.append(step(method='extend_step', mutable=[DECODE_CACHE],
                      query_vec=rep(Q[:, t] + 0.1 * normal(B, D), 2),
                      atten_mask=CAUSAL[:, :, t], time_step=t,
                      segment_pos=None))
  steps += [step(method='lazy_broadcast_prefix',
                 mutable=[DECODE_CACHE, PREFIX_DECODE_CACHE],
                 num_suffix_samples=3, suffix_length=1),
            step(method='extend_step', mutable=[DECODE_CACHE],
                 query_vec=rep(normal(B, D), 6), atten_mask=CAUSAL[:, :, 4],
                 time_step=4, segment_pos=None)]
  case(name, cfg('attentions.DotProductAttentionWithLPB', **DPA, **fields),
       steps)


# ------------------------------------------------------------- recording
def _flatten(tree, prefix, out):
  if tree is None:
    return
  if isinstance(tree, dict):
    for k in sorted(tree):
      _flatten(tree[k], f'{prefix}/{k}', out)
  elif isinstance(tree, (tuple, list)):
    for i, v in enumerate(tree):
      _flatten(v, f'{prefix}/{i}', out)
  else:
    out[prefix] = np.array(tree)  # A copy: never a view of a jax buffer.


def _redraw(path, value, case_spec):
  if path in case_spec['fixed']:
    return np.asarray(case_spec['fixed'][path], value.dtype)
  if not jnp.issubdtype(value.dtype, jnp.floating):
    return np.asarray(value)
  collection = path.split('/')[0]
  if collection == NON_TRAINABLE and not case_spec['random_nt']:
    return np.asarray(value)
  draw = RNG.normal(0.0, 0.5, value.shape)
  if 'variance' in path:
    draw = 0.5 + np.abs(draw)
  return draw.astype(value.dtype)


def _split(kwargs):
  """Array inputs, JSON literals and aliases (the same array passed twice)."""
  arrays, literals, aliases = {}, {}, {}
  for k, v in kwargs.items():
    if not isinstance(v, np.ndarray):
      literals[k] = v
      continue
    same = [a for a, w in arrays.items() if w is v]
    if same:
      aliases[k] = same[0]
    else:
      arrays[k] = v
  return arrays, literals, aliases


def _fresh(kwargs):
  """The array inputs as jax arrays, one per distinct array (aliases stay).

  Jax arrays, not numpy: Pax 1.4 casts inputs with `.astype`, which keeps a
  numpy array numpy, and numpy's bfloat16 arithmetic then promotes to
  float32 where jax's (and any jitted Pax program's) does not.
  """
  copies = {}
  return {k: copies.setdefault(id(v), jnp.array(v))
          if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


def record(name, spec, arrays, meta):
  layer = base_layer.instantiate(
      build(dict(spec['layer'], name='layer'), globals()))
  context = base_layer.JaxContext.HParams(do_eval=spec['do_eval'])
  with base_layer.JaxContext.new_context(hparams=context):
    first = spec['steps'][0]
    init = layer.init(jax.random.PRNGKey(1234), **_fresh(first['kwargs']),
                      method=getattr(layer, first['method']))
    init = jax.device_get(init)
    flat = traverse_util.flatten_dict(
        {k: v for k, v in init.items() if k in (PARAMS, NON_TRAINABLE)},
        sep='/')
    for path in spec['check_init']:
      arrays[f'{name}/init/{path}'] = np.asarray(flat[path])
    flat = {k: _redraw(k, v, spec) for k, v in flat.items()}
    for k, v in flat.items():
      arrays[f'{name}/vars/{k}'] = v.copy()
    # Jax arrays (see _fresh) for the variables too.
    variables = jax.tree.map(jnp.array,
                             traverse_util.unflatten_dict(flat, sep='/'))
    step_meta = []
    for i, st in enumerate(spec['steps']):
      # Jax may share a numpy input's memory, and inputs are reused across
      # cases: the file records copies, each step gets fresh jax arrays.
      ins, literals, aliases = _split(st['kwargs'])
      for k, v in ins.items():
        arrays[f'{name}/s{i}/in/{k}'] = v.copy()
      kwargs = _fresh(st['kwargs'])
      method = getattr(layer, st['method'])
      if st['mutable']:
        out, state = layer.apply(variables, **kwargs, method=method,
                                 mutable=st['mutable'])
        state = jax.device_get(state)
        variables = dict(variables)
        for coll in st['mutable']:
          if coll in state:
            variables[coll] = state[coll]
        if NON_TRAINABLE in state:
          _flatten(state[NON_TRAINABLE], f'{name}/s{i}/nt', arrays)
      else:
        out = layer.apply(variables, **kwargs, method=method)
      _flatten(jax.device_get(out), f'{name}/s{i}/out', arrays)
      step_meta.append(dict(method=st['method'], mutable=st['mutable'],
                            arrays=sorted(ins), literals=literals,
                            aliases=aliases))
  meta[name] = dict(layer=spec['layer'], do_eval=spec['do_eval'],
                    steps=step_meta)


def pack(arrays):
  """One flat buffer per dtype (identical arrays stored once) and an index.

  Thousands of small npz entries would cost more than the data itself.
  bfloat16 arrays are stored as their uint16 bits (buffer data_bfloat16).
  """
  buffers, index, seen = {}, {}, {}
  for key, value in arrays.items():
    value = np.asarray(value)  # (not ascontiguousarray: it makes 0-d 1-d)
    dtype = value.dtype.name
    if dtype == 'bfloat16':  # npz cannot hold it: store the bits.
      value = value.view(np.uint16)
    fingerprint = (dtype, value.shape, value.tobytes())
    if fingerprint not in seen:
      chunks = buffers.setdefault(dtype, [])
      offset = sum(c.size for c in chunks)
      chunks.append(value.ravel())
      seen[fingerprint] = offset
    index[key] = [dtype, seen[fingerprint], list(value.shape)]
  packed = {f'data_{d}': np.concatenate(c) for d, c in buffers.items()}
  return packed, index


def main(out_dir):
  arrays, meta = {}, {}
  for name, spec in CASES.items():
    record(name, spec, arrays, meta)
  packed, index = pack(arrays)
  text = json.dumps(dict(cases=meta, index=index), sort_keys=True)
  packed['meta'] = np.frombuffer(text.encode(), np.uint8)
  np.savez_compressed(os.path.join(out_dir, 'core_layers_ref.npz'), **packed)
  print(len(CASES), 'cases,', len(arrays), 'arrays,',
        {k: v.size for k, v in packed.items()})


if __name__ == '__main__':
  main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
      os.path.abspath(__file__)))
