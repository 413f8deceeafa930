"""LSTM cells: against an LSTM step in numpy and the real Pax 1.4."""

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
from praxis.layers import rnn_cell

NestedMap = py_utils.NestedMap

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))
_CELL_CASES = sorted(k for k, v in _CONFIGS.items()
                     if v['cls'].endswith('CellSimple'))


def _ref_vars(case):
  prefix = f'{case}/vars/'
  flat = {k[len(prefix):]: _REF[k] for k in _REF.files
          if k.startswith(prefix)}
  return traverse_util.unflatten_dict(flat, sep='/')


def _sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def _np_lstm_step(wm, b, m0, c0, act, forget_bias=0.0, cap=10.0,
                  w_proj=None):
  """Textbook LSTM: gates [input, input gate, forget gate, output gate]."""
  z = np.concatenate([act, m0], axis=1) @ wm + b
  i_i, i_g, f_g, o_g = np.split(z, 4, axis=1)
  c1 = _sigmoid(f_g + forget_bias) * c0 + _sigmoid(i_g) * np.tanh(i_i)
  if cap is not None:
    c1 = np.clip(c1, -cap, cap)
  m1 = _sigmoid(o_g) * np.tanh(c1)
  if w_proj is not None:
    m1 = m1 @ w_proj
  return m1, c1


def _cell(cls=rnn_cell.LstmCellSimple, **fields):
  fields.setdefault('num_input_nodes', 3)
  fields.setdefault('num_output_nodes', 4)
  return base_layer.instantiate(pax_fiddle.Config(cls, name='cell', **fields))


def _run(layer, variables, state0, inputs, do_eval=False, seed=0):
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    return layer.apply(variables, state0, inputs,
                       rngs={'random': jax.random.PRNGKey(seed)})


class NumpyTest(test_utils.TestCase):

  def _random_case(self, hidden=4):
    r = self.np_rng
    act = r.normal(size=(2, 3)).astype(np.float32)
    m0 = r.normal(size=(2, 4)).astype(np.float32)
    c0 = r.normal(size=(2, hidden)).astype(np.float32)
    wm = r.normal(size=(7, 4 * hidden)).astype(np.float32) * 0.5
    b = r.normal(size=(4 * hidden,)).astype(np.float32) * 0.5
    return act, m0, c0, wm, b

  @parameterized.parameters((0.0, 10.0), (1.5, 10.0), (0.0, 0.2),
                            (0.0, None))
  def test_step_matches_numpy(self, forget_bias, cap):
    act, m0, c0, wm, b = self._random_case()
    layer = _cell(forget_gate_bias=forget_bias, cell_value_cap=cap)
    inputs = NestedMap(act=[act], padding=np.zeros((2, 1), np.float32))
    out = _run(layer, {'params': {'wm': wm, 'b': b}},
               NestedMap(m=m0, c=c0), inputs)
    m1, c1 = _np_lstm_step(wm, b, m0, c0, act, forget_bias, cap)
    self.assertAllClose(out.m, m1, atol=1e-5)
    self.assertAllClose(out.c, c1, atol=1e-5)

  def test_projection(self):
    act, m0, c0, wm, b = self._random_case(hidden=6)
    w_proj = self.np_rng.normal(size=(6, 4)).astype(np.float32)
    layer = _cell(num_hidden_nodes=6)
    inputs = NestedMap(act=act, padding=np.zeros((2, 1), np.float32))
    out = _run(layer, {'params': {'wm': wm, 'b': b, 'w_proj': w_proj}},
               NestedMap(m=m0, c=c0), inputs)
    m1, c1 = _np_lstm_step(wm, b, m0, c0, act, w_proj=w_proj)
    self.assertAllClose(out.m, m1, atol=1e-5)
    self.assertAllClose(out.c, c1, atol=1e-5)

  def test_padded_rows_keep_state_and_reset_zeroes_it(self):
    act, m0, c0, wm, b = self._random_case()
    layer = _cell(reset_cell_state=True)
    inputs = NestedMap(act=[act], padding=np.array([[1.0], [0.0]], np.float32),
                       reset_mask=np.array([[1.0], [0.0]], np.float32))
    out = _run(layer, {'params': {'wm': wm, 'b': b}},
               NestedMap(m=m0, c=c0), inputs)
    self.assertAllClose(out.m[0], m0[0])
    self.assertAllClose(out.c[0], c0[0])
    m1, c1 = _np_lstm_step(wm, b, np.zeros_like(m0[1:]),
                           np.zeros_like(c0[1:]), act[1:])
    self.assertAllClose(out.m[1:], m1, atol=1e-5)
    self.assertAllClose(out.c[1:], c1, atol=1e-5)

  def test_cifg_couples_input_and_forget(self):
    r = self.np_rng
    act, m0, c0 = (r.normal(size=s).astype(np.float32)
                   for s in [(2, 3), (2, 4), (2, 4)])
    wm = r.normal(size=(7, 12)).astype(np.float32)
    b = r.normal(size=(12,)).astype(np.float32)
    out = _run(_cell(rnn_cell.CifgLstmCellSimple),
               {'params': {'wm': wm, 'b': b}}, NestedMap(m=m0, c=c0),
               NestedMap(act=[act], padding=np.zeros((2, 1), np.float32)))
    i_i, f_g, o_g = np.split(np.concatenate([act, m0], 1) @ wm + b, 3, 1)
    f = _sigmoid(f_g)
    c1 = f * c0 + (1 - f) * np.tanh(i_i)
    self.assertAllClose(out.c, c1, atol=1e-5)
    self.assertAllClose(out.m, _sigmoid(o_g) * np.tanh(c1), atol=1e-5)

  def test_zoneout_eval_is_the_expectation(self):
    act, m0, c0, wm, b = self._random_case()
    layer = _cell(zo_prob=0.25)
    inputs = NestedMap(act=[act], padding=np.zeros((2, 1), np.float32))
    out = _run(layer, {'params': {'wm': wm, 'b': b}},
               NestedMap(m=m0, c=c0), inputs, do_eval=True)
    m1, c1 = _np_lstm_step(wm, b, m0, c0, act)
    self.assertAllClose(out.m, 0.25 * m0 + 0.75 * m1, atol=1e-5)
    self.assertAllClose(out.c, 0.25 * c0 + 0.75 * c1, atol=1e-5)

  def test_zoneout_train_keeps_old_units_at_the_rate(self):
    r = self.np_rng
    b_size = 400
    act = r.normal(size=(b_size, 3)).astype(np.float32)
    m0 = np.full((b_size, 4), 7.0, np.float32)  # tanh output never reaches 7
    layer = _cell(zo_prob=0.3, cell_value_cap=None)
    inputs = NestedMap(act=[act], padding=np.zeros((b_size, 1), np.float32))
    wm = r.normal(size=(7, 16)).astype(np.float32)
    out = _run(layer, {'params': {'wm': wm, 'b': np.zeros(16, np.float32)}},
               NestedMap(m=m0, c=np.zeros((b_size, 4), np.float32)), inputs)
    # 1,600 Bernoulli(0.3) draws: standard deviation of the mean ~0.011.
    self.assertAlmostEqual(float(np.mean(np.asarray(out.m) == 7.0)), 0.3,
                           delta=0.05)

  def test_projected_inputs_match_plain_step(self):
    act, m0, c0, wm, b = self._random_case()
    layer = _cell(forget_gate_bias=0.5)
    variables = {'params': {'wm': wm, 'b': b}}
    padding = np.zeros((2, 1), np.float32)
    proj = layer.apply(variables, NestedMap(act=act[None]),
                       method=layer.project_input)[0]
    self.assertAllClose(proj, act @ wm[:3], atol=1e-5)
    out = _run(layer, variables, NestedMap(m=m0, c=c0),
               NestedMap(act=[act], padding=padding))
    context = base_layer.JaxContext.HParams(do_eval=False)
    with base_layer.JaxContext.new_context(hparams=context):
      out2 = layer.apply(variables, NestedMap(m=m0, c=c0),
                         NestedMap(proj_inputs=proj, padding=padding),
                         method=layer.fprop_with_projected_inputs)
    self.assertAllClose(out.m, out2.m, atol=1e-5)
    self.assertAllClose(out.c, out2.c, atol=1e-5)

  def test_variables_and_zero_state(self):
    layer = _cell(rnn_cell.LayerNormalizedLstmCellSimple, num_hidden_nodes=5)
    state0 = layer.init_states(2)
    self.assertEqual(state0.m.shape, (2, 4))
    self.assertEqual(state0.c.shape, (2, 5))
    inputs = NestedMap(act=[np.ones((2, 3), np.float32)],
                       padding=np.zeros((2, 1), np.float32))
    variables = layer.init(jax.random.PRNGKey(0), state0, inputs)
    shapes = jax.tree.map(jnp.shape, variables['params'])
    self.assertEqual(shapes, {'wm': (7, 20), 'b': (20,), 'w_proj': (5, 4),
                              'ln_scale': (20,)})
    self.assertAllClose(variables['params']['ln_scale'], np.ones(20))
    self.assertAllClose(variables['params']['b'], np.zeros(20))

  def test_bad_config_and_inputs_are_named(self):
    with self.assertRaisesRegex(ValueError, 'forget_gate_bias'):
      _cell(rnn_cell.CifgLstmCellSimple, forget_gate_bias=1.0).init(
          jax.random.PRNGKey(0), _cell().init_states(1),
          NestedMap(act=[np.ones((1, 3))], padding=np.zeros((1, 1))))
    layer = _cell(inputs_arity=2, num_input_nodes=5)
    with self.assertRaisesRegex(ValueError, 'inputs_arity'):
      layer.init(jax.random.PRNGKey(0), layer.init_states(1),
                 NestedMap(act=[np.ones((1, 5))], padding=np.zeros((1, 1))))


class RealPaxTest(test_utils.TestCase):
  """Same config, weights and inputs as the real Pax 1.4: same state."""

  @parameterized.parameters(*_CELL_CASES)
  def test_matches_real_pax(self, case):
    spec = _CONFIGS[case]
    layer = base_layer.instantiate(pax_fiddle.Config(
        getattr(rnn_cell, spec['cls']), name='cell', **spec['fields']))
    acts = [_REF['cells/act']]
    if spec['fields'].get('inputs_arity') == 2:
      acts.append(_REF['cells/act2'])
    inputs = NestedMap(act=acts, padding=_REF['cells/padding'],
                       reset_mask=_REF['cells/reset_mask'])
    state0 = NestedMap(m=_REF[f'{case}/m0'], c=_REF[f'{case}/c0'])
    variables = _ref_vars(case)
    ours = layer.init(jax.random.PRNGKey(0), state0, inputs)
    self.assertEqual(jax.tree.map(jnp.shape, ours),
                     jax.tree.map(jnp.shape, variables))
    # Training cases draw ZoneOut masks: Pax 1.4's JAX drew random bits with
    # jax_threefry_partitionable off.
    with jax.threefry_partitionable(False):
      out = _run(layer, variables, state0, inputs,
                 do_eval=not spec.get('train'), seed=4)
    self.assertAllClose(out.m, _REF[f'{case}/m1'], atol=1e-5)
    self.assertAllClose(out.c, _REF[f'{case}/c1'], atol=1e-5)


if __name__ == '__main__':
  absltest.main()
