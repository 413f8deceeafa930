"""Functional RNNs: against a numpy LSTM loop and the real Pax 1.4."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import frnn
from praxis.layers import rnn_cell

NestedMap = py_utils.NestedMap

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))
_RNN_CASES = ['frnn_lstm', 'lstmfrnn_packed_reverse', 'frnn_ln_packed',
              'frnn_zoneout_train', 'stack_bi']


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _np_lstm(wm, b, x, padding, reset=None, reverse=False):
  """LSTM over time in numpy: x [B, T, D], padding [B, T, 1]."""
  bsz, t, _ = x.shape
  h = wm.shape[1] // 4
  m, c = np.zeros((bsz, h)), np.zeros((bsz, h))
  out = np.zeros((bsz, t, h))
  steps = range(t - 1, -1, -1) if reverse else range(t)
  for i in steps:
    if reset is not None:
      m, c = m * reset[:, i], c * reset[:, i]
    z = np.concatenate([x[:, i], m], 1) @ wm + b
    i_i, i_g, f_g, o_g = np.split(z, 4, axis=1)
    c1 = np.clip(_sigmoid(f_g) * c + _sigmoid(i_g) * np.tanh(i_i), -10, 10)
    m1 = _sigmoid(o_g) * np.tanh(c1)
    keep = padding[:, i] > 0
    m, c = np.where(keep, m, m1), np.where(keep, c, c1)
    out[:, i] = m
  return out, m, c


def _lstm_frnn(cls=frnn.LstmFrnn, **fields):
  return base_layer.instantiate(pax_fiddle.Config(
      cls, name='rnn', cell_tpl=pax_fiddle.Config(
          rnn_cell.LstmCellSimple, num_input_nodes=3, num_output_nodes=4,
          **fields.pop('cell', {})), **fields))


class ResetMaskTest(test_utils.TestCase):

  def test_by_hand(self):
    ids = np.array([[1, 1, 2, 2, 0], [1, 2, 3, 3, 3]], np.int32)
    pad = np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], np.float32)
    self.assertArraysEqual(
        frnn.reset_mask(ids), np.array([[0, 1, 0, 1, 0], [0, 0, 0, 1, 1]],
                                       np.float32))
    self.assertArraysEqual(
        frnn.reset_mask(ids[..., None], pad[..., None], dtype=jnp.int32),
        np.array([[0, 1, 0, 1, 1], [0, 0, 0, 1, 1]], np.int32)[..., None])


class NumpyTest(test_utils.TestCase):

  def _inputs(self):
    r = self.np_rng
    x = r.normal(size=(2, 5, 3)).astype(np.float32)
    padding = np.zeros((2, 5, 1), np.float32)
    padding[1, 3:] = 1.0
    wm = r.normal(size=(7, 16)).astype(np.float32) * 0.5
    b = r.normal(size=(16,)).astype(np.float32) * 0.5
    return x, padding, wm, b

  @parameterized.product(cls=[frnn.FRnn, frnn.LstmFrnn],
                         reverse=[False, True])
  def test_matches_numpy_loop(self, cls, reverse):
    x, padding, wm, b = self._inputs()
    layer = _lstm_frnn(cls, reverse=reverse)
    act, state = layer.apply({'params': {'cell': {'wm': wm, 'b': b}}},
                             NestedMap(act=x, padding=padding))
    want, m, c = _np_lstm(wm, b, x, padding, reverse=reverse)
    self.assertAllClose(act, want, atol=1e-5)
    self.assertAllClose(state.m, m, atol=1e-5)
    self.assertAllClose(state.c, c, atol=1e-5)

  def test_packed_inputs_reset_at_segment_starts(self):
    x, padding, wm, b = self._inputs()
    ids = np.array([[1, 1, 2, 2, 3], [1, 2, 2, 0, 0]], np.int32)[..., None]
    layer = _lstm_frnn(cell=dict(reset_cell_state=True))
    act, _ = layer.apply({'params': {'cell': {'wm': wm, 'b': b}}},
                         NestedMap(act=x, padding=padding, segment_ids=ids))
    reset = np.array([[0, 1, 0, 1, 0], [0, 0, 1, 1, 1]],
                     np.float32)[..., None]
    want, _, _ = _np_lstm(wm, b, x, padding, reset=reset)
    self.assertAllClose(act, want, atol=1e-5)

  def test_extend_step_equals_full_sequence(self):
    x, padding, wm, b = self._inputs()
    layer = base_layer.instantiate(pax_fiddle.Config(
        frnn.StackFrnn, name='rnn', num_layers=2, num_input_nodes=3,
        num_output_nodes=4, frnn_tpl=pax_fiddle.Config(
            frnn.FRnn, cell_tpl=pax_fiddle.Config(rnn_cell.LstmCellSimple))))
    inputs = NestedMap(act=x, padding=padding)
    variables = layer.init(jax.random.PRNGKey(0), inputs)
    self.assertEqual(jax.tree.map(jnp.shape, variables['params']), {
        'frnn_0': {'cell': {'wm': (7, 16), 'b': (16,)}},
        'frnn_1': {'cell': {'wm': (8, 16), 'b': (16,)}}})
    act, _ = layer.apply(variables, inputs)
    state = layer.apply(variables, 2, method=layer.init_states)
    for t in range(5):
      state, out = layer.apply(
          variables, NestedMap(act=x[:, t], padding=padding[:, t]), state,
          method=layer.extend_step)
      self.assertAllClose(out, act[:, t], atol=1e-5)

  def test_missing_input_is_named(self):
    layer = _lstm_frnn()
    with self.assertRaisesRegex(ValueError, 'padding'):
      layer.init(jax.random.PRNGKey(0), NestedMap(act=np.ones((1, 2, 3))))


class RealPaxTest(test_utils.TestCase):
  """Same config, weights and inputs as the real Pax 1.4: same outputs."""

  def _layer(self, case):
    spec = _CONFIGS[case]
    if spec['cls'] == 'StackBiFrnn':
      return base_layer.instantiate(pax_fiddle.Config(
          frnn.StackBiFrnn, name='rnn', frnn_tpl=pax_fiddle.Config(
              frnn.LstmFrnn,
              cell_tpl=pax_fiddle.Config(rnn_cell.LstmCellSimple)),
          **spec['fields']))
    return base_layer.instantiate(pax_fiddle.Config(
        getattr(frnn, spec['cls']), name='rnn',
        cell_tpl=pax_fiddle.Config(getattr(rnn_cell, spec['cell_cls']),
                                   **spec['cell_fields']),
        **spec['fields']))

  @parameterized.parameters(*_RNN_CASES)
  def test_matches_real_pax(self, case):
    layer = self._layer(case)
    inputs = NestedMap(act=_REF['frnn/x'], padding=_REF['frnn/padding'])
    if _CONFIGS[case].get('packed'):
      inputs.segment_ids = _REF['frnn/segment_ids']
    prefix = f'{case}/vars/'
    variables = traverse_util.unflatten_dict(
        {k[len(prefix):]: _REF[k] for k in _REF.files
         if k.startswith(prefix)}, sep='/')
    ours = layer.init(jax.random.PRNGKey(0), inputs)
    self.assertEqual(jax.tree.map(jnp.shape, ours),
                     jax.tree.map(jnp.shape, variables))
    # Training mode; ZoneOut draws as Pax 1.4's JAX (threefry not
    # partitionable).
    with jax.threefry_partitionable(False), base_layer.JaxContext.new_context():
      act, _ = layer.apply(variables, inputs,
                           rngs={'random': jax.random.PRNGKey(5)})
    self.assertAllClose(act, _REF[f'{case}/act'], atol=1e-5)


if __name__ == '__main__':
  absltest.main()
