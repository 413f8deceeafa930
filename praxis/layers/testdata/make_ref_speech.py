"""Writes speech_ref.npz: outputs of the real Pax 1.4's speech layers.

Run under the reference environment, from a folder where this project's
praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_speech.py OUT_DIR

Cases (keys '<case>/...'): LSTM cells (rnn_cell), FRnn / LstmFrnn /
StackBiFrnn (frnn), ctc_loss_with_alignments and forced_alignment
(ctc_objectives), Conformer and SelfAttentionWithNormAndResidual (conformers),
SpectrumAugmenter and TemporalShifting with a fixed `random` key. For layers
with variables: the variables (random values, not the initial ones) under
'<case>/vars/<path>', the inputs and the outputs. 'configs' is a JSON map
case -> {cls, fields}.
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
from praxis import py_utils
from praxis.layers import augmentations
from praxis.layers import conformers
from praxis.layers import ctc_objectives
from praxis.layers import frnn
from praxis.layers import rnn_cell
from praxis.layers import spectrum_augmenter

assert 'site-packages' in praxis.__file__, praxis.__file__
NestedMap = py_utils.NestedMap

CELL = dict(num_input_nodes=3, num_output_nodes=4)
CELL_CASES = {
    'lstm': ('LstmCellSimple', {}),
    'lstm_proj': ('LstmCellSimple', dict(num_hidden_nodes=5)),
    'lstm_fbias_nocap_linear': ('LstmCellSimple',
                                dict(forget_gate_bias=1.5,
                                     cell_value_cap=None,
                                     output_nonlinearity=False)),
    'lstm_cap_small': ('LstmCellSimple', dict(cell_value_cap=0.3)),
    'lstm_reset': ('LstmCellSimple', dict(reset_cell_state=True)),
    'lstm_zoneout_eval': ('LstmCellSimple', dict(zo_prob=0.3)),
    'lstm_zoneout_train': ('LstmCellSimple', dict(zo_prob=0.3)),
    'ln_lstm': ('LayerNormalizedLstmCellSimple',
                dict(forget_gate_bias=0.5, num_hidden_nodes=6)),
    'cifg': ('CifgLstmCellSimple', {}),
    'cifg_proj': ('CifgLstmCellSimple', dict(num_hidden_nodes=5)),
}
CONFORMER = dict(input_dims=8, model_dims=8, kernel_size=3,
                 atten_num_heads=2)
CONFORMER_CASES = {
    'conformer': CONFORMER,
    'conformer_proj_in': dict(CONFORMER, input_dims=6),
    'conformer_conv_first': dict(CONFORMER, layer_order='conv_before_mhsa'),
    'conformer_mhsa_only': dict(CONFORMER, layer_order='mhsa',
                                fflayer_weight_sharing=True),
}


def randomize(variables, rng):
  """Random values for the trainable variables, others kept."""
  flat = traverse_util.flatten_dict(jax.device_get(variables), sep='/')
  out = {}
  for k, v in flat.items():
    if k.startswith('params/'):
      v = np.asarray(rng.normal(size=v.shape) * 0.5, v.dtype)
    out[k] = np.asarray(v)
  return out


def store_vars(arrays, case, flat):
  for k, v in flat.items():
    arrays[f'{case}/vars/{k}'] = v


def cell_cases(arrays, configs, rng):
  b = 3
  act = rng.normal(size=(b, 3)).astype(np.float32)
  act2 = rng.normal(size=(b, 2)).astype(np.float32)
  padding = np.array([[0.0], [1.0], [0.0]], np.float32)
  reset = np.array([[1.0], [1.0], [0.0]], np.float32)
  arrays.update({'cells/act': act, 'cells/act2': act2,
                 'cells/padding': padding, 'cells/reset_mask': reset})
  cases = dict(CELL_CASES)
  cases['lstm_arity2'] = ('LstmCellSimple',
                          dict(inputs_arity=2, num_input_nodes=5))
  for name, (cls_name, extra) in cases.items():
    fields = dict(CELL, **extra)
    cfg = pax_fiddle.Config(getattr(rnn_cell, cls_name), name='cell',
                            **fields)
    layer = base_layer.instantiate(cfg)
    hidden = fields.get('num_hidden_nodes') or fields['num_output_nodes']
    m0 = rng.normal(size=(b, 4)).astype(np.float32)
    c0 = rng.normal(size=(b, hidden)).astype(np.float32)
    acts = [act, act2] if fields.get('inputs_arity') == 2 else [act]
    inputs = NestedMap(act=acts, padding=padding, reset_mask=reset)
    state0 = NestedMap(m=m0, c=c0)
    train = name.endswith('_train')
    context = base_layer.JaxContext.HParams(do_eval=not train)
    with base_layer.JaxContext.new_context(hparams=context):
      init = layer.init(jax.random.PRNGKey(1), state0, inputs)
      flat = randomize(init, rng)
      variables = traverse_util.unflatten_dict(flat, sep='/')
      state1 = layer.apply(variables, state0, inputs,
                           rngs={'random': jax.random.PRNGKey(4)})
    store_vars(arrays, name, flat)
    arrays.update({f'{name}/m0': m0, f'{name}/c0': c0,
                   f'{name}/m1': np.asarray(state1.m),
                   f'{name}/c1': np.asarray(state1.c)})
    configs[name] = {'cls': cls_name, 'fields': fields, 'train': train}


def frnn_cases(arrays, configs, rng):
  b, t = 3, 5
  x = rng.normal(size=(b, t, 3)).astype(np.float32)
  padding = np.zeros((b, t, 1), np.float32)
  padding[1, 3:] = 1.0
  segment_ids = np.array([[1, 1, 2, 2, 2], [1, 2, 2, 0, 0], [1, 1, 1, 1, 1]],
                         np.int32)[..., None]
  arrays.update({'frnn/x': x, 'frnn/padding': padding,
                 'frnn/segment_ids': segment_ids})
  cell = dict(num_input_nodes=3, num_output_nodes=4)
  cases = {
      'frnn_lstm': ('FRnn', 'LstmCellSimple', dict(cell), {}, False),
      'lstmfrnn_packed_reverse': ('LstmFrnn', 'LstmCellSimple',
                                  dict(cell, reset_cell_state=True),
                                  dict(reverse=True), True),
      'frnn_ln_packed': ('FRnn', 'LayerNormalizedLstmCellSimple',
                         dict(cell, reset_cell_state=True), {}, True),
      'frnn_zoneout_train': ('FRnn', 'LstmCellSimple',
                             dict(cell, zo_prob=0.5), {}, False),
  }
  for name, (cls_name, cell_cls, cell_fields, fields, packed) in cases.items():
    cfg = pax_fiddle.Config(
        getattr(frnn, cls_name), name='rnn',
        cell_tpl=pax_fiddle.Config(getattr(rnn_cell, cell_cls),
                                   **cell_fields), **fields)
    inputs = NestedMap(act=x, padding=padding)
    if packed:
      inputs.segment_ids = segment_ids
    _run_rnn(arrays, configs, rng, name, cfg, inputs,
             {'cls': cls_name, 'cell_cls': cell_cls,
              'cell_fields': cell_fields, 'fields': fields,
              'packed': packed})
  cfg = pax_fiddle.Config(
      frnn.StackBiFrnn, name='rnn', num_layers=2, num_input_nodes=3,
      num_output_nodes=6,
      frnn_tpl=pax_fiddle.Config(
          frnn.LstmFrnn, cell_tpl=pax_fiddle.Config(rnn_cell.LstmCellSimple)))
  _run_rnn(arrays, configs, rng, 'stack_bi', cfg,
           NestedMap(act=x, padding=padding),
           {'cls': 'StackBiFrnn', 'fields': dict(
               num_layers=2, num_input_nodes=3, num_output_nodes=6)})


def _run_rnn(arrays, configs, rng, name, cfg, inputs, config):
  layer = base_layer.instantiate(cfg)
  init = layer.init(jax.random.PRNGKey(2), inputs)
  flat = randomize(init, rng)
  # Training mode: ZoneOut (if any) draws one key per step.
  with base_layer.JaxContext.new_context():
    act, _ = layer.apply(traverse_util.unflatten_dict(flat, sep='/'), inputs,
                         rngs={'random': jax.random.PRNGKey(5)})
  store_vars(arrays, name, flat)
  arrays[f'{name}/act'] = np.asarray(act)
  configs[name] = config


def ctc_cases(arrays, rng):
  b, t, k, n = 3, 8, 5, 4
  logits = rng.normal(size=(b, t, k)).astype(np.float32) * 2.0
  logitpaddings = np.zeros((b, t), np.float32)
  logitpaddings[1, 6:] = 1.0
  logitpaddings[2, 3:] = 1.0   # too short for its labels
  labels = np.array([[1, 2, 2, 3], [4, 1, 0, 0], [1, 1, 2, 0]], np.int32)
  labelpaddings = np.array([[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1]],
                           np.float32)
  loss, aux = ctc_objectives.ctc_loss_with_alignments(
      logits, logitpaddings, labels, labelpaddings)
  forced = ctc_objectives.forced_alignment(logits, logitpaddings, labels,
                                           labelpaddings)
  arrays.update({
      'ctc/logits': logits, 'ctc/logitpaddings': logitpaddings,
      'ctc/labels': labels, 'ctc/labelpaddings': labelpaddings,
      'ctc/loss': np.asarray(loss), 'ctc/forced': np.asarray(forced),
  })
  for field in ('alignment', 'logalpha_phi', 'logalpha_emit', 'logbeta_phi',
                'logbeta_emit', 'state_logprobs'):
    arrays[f'ctc/{field}'] = np.asarray(getattr(aux, field))


def conformer_cases(arrays, configs, rng):
  b, t = 2, 6
  x8 = rng.normal(size=(b, t, 8)).astype(np.float32)
  x6 = rng.normal(size=(b, t, 6)).astype(np.float32)
  paddings = np.zeros((b, t), np.float32)
  paddings[1, 4:] = 1.0
  arrays.update({'conformer/x8': x8, 'conformer/x6': x6,
                 'conformer/paddings': paddings})
  cases = {name: (conformers.Conformer, fields)
           for name, fields in CONFORMER_CASES.items()}
  ctx_atten = pax_fiddle.Config(conformers.DotProductAttentionWithContext,
                                input_dim=8, hidden_dim=8, num_heads=2,
                                left_context=2, right_context=1)
  cases['sa_context_primer'] = (conformers.SelfAttentionWithNormAndResidual,
                                dict(norm_policy='primer_hybrid',
                                     pre_layer_norm=None,
                                     residual_weight=0.7, input_weight=0.9))
  cases['sa_context_post_skip'] = (
      conformers.SelfAttentionWithNormAndResidual,
      dict(pre_layer_norm=False))
  for name, (cls, fields) in cases.items():
    cfg = pax_fiddle.Config(cls, name='layer', **fields)
    if cls is conformers.SelfAttentionWithNormAndResidual:
      cfg.self_atten_tpl = ctx_atten.clone()
      cfg.norm_tpl.dim = 8
    if fields.get('input_dims') == 6:   # Pax: no skip when dims differ
      cfg.fflayer_start_tpl.add_skip_connection = False
    layer = base_layer.instantiate(cfg)
    x = x6 if fields.get('input_dims') == 6 else x8
    context = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=context):
      init = layer.init(jax.random.PRNGKey(3), x, paddings)
      flat = randomize(init, rng)
      y = layer.apply(traverse_util.unflatten_dict(flat, sep='/'), x,
                      paddings)
    store_vars(arrays, name, flat)
    arrays[f'{name}/y'] = np.asarray(y)
    configs[name] = {'cls': cls.__name__, 'fields': fields}


def random_cases(arrays, configs):
  feats = jnp.ones((3, 12, 6), jnp.float32)
  paddings = np.zeros((3, 12), np.float32)
  paddings[1, 8:] = 1.0
  paddings[2, 10:] = 1.0
  key = jax.random.PRNGKey(7)
  arrays.update({'random/feats': np.asarray(feats),
                 'random/paddings': paddings,
                 'random/key': np.asarray(key)})
  specaug = {
      'specaug_default': {},
      'specaug_per_frame': dict(time_masks_per_frame=0.2, time_mask_count=4,
                                time_mask_max_ratio=0.3,
                                freq_mask_max_bins=3),
      'specaug_static': dict(use_dynamic_time_mask_max_frames=False,
                             time_mask_max_frames=3, time_mask_count=2,
                             time_mask_max_ratio=0.5, freq_mask_count=1,
                             freq_mask_max_bins=2),
  }
  for name, fields in specaug.items():
    layer = base_layer.instantiate(pax_fiddle.Config(
        spectrum_augmenter.SpectrumAugmenter, name='aug', **fields))
    with base_layer.JaxContext.new_context():
      out, _ = layer.apply({}, feats, paddings, rngs={'random': key})
    arrays[f'{name}/out'] = np.asarray(out)
    configs[name] = {'cls': 'SpectrumAugmenter', 'fields': fields}
  signal = jnp.arange(1.0, 3 * 40 + 1).reshape(3, 40)
  sig_pad = np.zeros((3, 40), np.float32)
  layer = base_layer.instantiate(pax_fiddle.Config(
      augmentations.TemporalShifting, name='shift', shift_range_ms=0.5,
      sample_rate=16000.0))
  with base_layer.JaxContext.new_context():
    shifted, shifted_pad = layer.apply({}, signal, sig_pad,
                                       rngs={'random': key})
  arrays.update({'shift/signal': np.asarray(signal),
                 'shift/out': np.asarray(shifted),
                 'shift/out_paddings': np.asarray(shifted_pad)})
  ids = jnp.arange(40, dtype=jnp.int32).reshape(4, 10) % 17
  ids_pad = np.zeros((4, 10), np.float32)
  ids_pad[3, 6:] = 1.0
  layer = base_layer.instantiate(pax_fiddle.Config(
      augmentations.MaskedLmDataAugmenter, name='mlm', vocab_size=17,
      mask_token_id=16, mask_prob=0.3, random_prob=0.2, same_prob=0.1))
  with base_layer.JaxContext.new_context():
    new_ids, picked = layer.apply({}, ids, ids_pad, rngs={'random': key})
  arrays.update({'mlm/ids': np.asarray(ids), 'mlm/paddings': ids_pad,
                 'mlm/out': np.asarray(new_ids),
                 'mlm/picked': np.asarray(picked)})


def main(out_dir):
  rng = np.random.default_rng(0)
  arrays, configs = {}, {}
  cell_cases(arrays, configs, rng)
  frnn_cases(arrays, configs, rng)
  ctc_cases(arrays, rng)
  conformer_cases(arrays, configs, rng)
  random_cases(arrays, configs)
  arrays['configs'] = np.asarray(json.dumps(configs))
  np.savez_compressed(os.path.join(out_dir, 'speech_ref.npz'), **arrays)
  print(len(arrays), 'arrays written')


if __name__ == '__main__':
  main(sys.argv[1])
