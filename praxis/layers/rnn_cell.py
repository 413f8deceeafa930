"""LSTM cells: one recurrent step, `(state0, inputs) -> state1`.

Public: `BaseRnnCell`, `LstmCellSimple`, `LayerNormalizedLstmCellSimple`,
`CifgLstmCellSimple`. A cell's state is a NestedMap `m` (output, [B, O]) and
`c` (cell, [B, H]); its inputs carry `act` (one tensor or a list of
`inputs_arity` tensors [B, D]) and `padding` [B, 1], and `reset_mask` [B, 1]
when `reset_cell_state` is set. Variables, as in Pax: `wm` [D + O, G * H] (the
gates i_i, i_g, f_g, o_g side by side; CIFG drops i_g), `b` [G * H], `w_proj`
[H, O] when `num_hidden_nodes` is set, `ln_scale` [G * H] for the layer
normalized cell.

  cell = pax_fiddle.Config(LstmCellSimple, name='lstm', num_input_nodes=4,
                           num_output_nodes=8)
  layer = base_layer.instantiate(cell)
  state = layer.init_states(batch_size=2)
  inputs = NestedMap(act=[x], padding=jnp.zeros([2, 1]))
  variables = layer.init(prng_key, state, inputs)
  state1 = layer.apply(variables, state, inputs)
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams


def zoneout(prev: JTensor, cur: JTensor, padding: JTensor, zo_prob: float,
            is_eval: bool, random_uniform: JTensor | None) -> JTensor:
  """Mixes `cur` with `prev` (ZoneOut, arXiv:1606.01305); padded rows keep prev.

  Training keeps each unit of `prev` with probability `zo_prob` (drawn from
  `random_uniform`); eval takes the expectation `zo_prob * prev + (1 - zo_prob)
  * cur`. With `zo_prob == 0` only the padding matters.
  """
  padding = jnp.asarray(padding)
  if zo_prob == 0.0:
    return jnp.where(padding, prev, cur)
  if is_eval:
    return jnp.where(padding, prev, zo_prob * prev + (1.0 - zo_prob) * cur)
  if random_uniform is None:
    raise ValueError('zoneout: random_uniform is required when zo_prob > 0 '
                     'in training.')
  keep = jnp.minimum((random_uniform < zo_prob).astype(padding.dtype)
                     + padding, 1.0)
  return jnp.where(jax.lax.stop_gradient(keep), prev, cur)


def lstm_gates_to_state(c0: JTensor, i_i: JTensor, i_g: JTensor | None,
                        f_g: JTensor, o_g: JTensor,
                        cell_value_cap: float | None,
                        output_nonlinearity: bool,
                        w_proj: JTensor | None) -> NestedMap:
  """The LSTM update from pre-activation gates; `i_g=None` couples it (CIFG).

  c1 = sigmoid(f_g) * c0 + gate_in * tanh(i_i), with gate_in = sigmoid(i_g),
  or 1 - sigmoid(f_g) when coupled; c1 is clipped to +-cell_value_cap;
  m1 = sigmoid(o_g) * tanh(c1) (or * c1), then projected by `w_proj`.
  """
  forget = jax.nn.sigmoid(f_g)
  gate_in = 1.0 - forget if i_g is None else jax.nn.sigmoid(i_g)
  c1 = forget * c0 + gate_in * jnp.tanh(i_i)
  if cell_value_cap is not None:
    c1 = jnp.clip(c1, -cell_value_cap, cell_value_cap)
  m1 = jax.nn.sigmoid(o_g) * (jnp.tanh(c1) if output_nonlinearity else c1)
  if w_proj is not None:
    m1 = jnp.einsum('bd,dc->bc', m1, w_proj)
  return NestedMap(c=c1, m=m1)


def _as_list(act) -> list[JTensor]:
  return list(act) if isinstance(act, (list, tuple)) else [act]


class BaseRnnCell(base_layer.BaseLayer):
  """One step of an RNN: `__call__(state0, inputs) -> state1`.

  Subclasses define `init_states(batch_size)` (the zero state, a NestedMap)
  and `get_output(state)` (the step's output tensor).
  """

  def init_states(self, batch_size: int) -> NestedMap:
    """The initial (zero) state for `batch_size` rows."""
    raise NotImplementedError(f'{type(self).__name__}.init_states')

  def get_output(self, state: NestedMap) -> JTensor:
    """The output of a step given its state."""
    raise NotImplementedError(f'{type(self).__name__}.get_output')

  def __call__(self, state0: NestedMap, inputs: NestedMap) -> NestedMap:
    raise NotImplementedError(f'{type(self).__name__}.__call__')


class LstmCellSimple(BaseRnnCell):
  """LSTM cell with all gates in one matrix `wm` (Pax's LstmCellSimple).

  Attributes:
    inputs_arity: How many tensors `inputs.act` holds.
    num_input_nodes: D, the total input depth.
    num_output_nodes: O, the output depth (and cell size unless projected).
    num_hidden_nodes: H, the cell size when > 0; `m` is then projected from H
      to O by `w_proj` (arXiv:1603.08042). 0: no projection.
    reset_cell_state: Zero the state where `inputs.reset_mask` is 0 before the
      step (packed inputs).
    cell_value_cap: Clip `c` to [-cap, cap]; None: no clipping.
    forget_gate_bias: Added to the forget gate's bias.
    output_nonlinearity: Apply tanh to `c` in the output.
    zo_prob: ZoneOut probability (0: off).
    bias_init: Initializer of `b`.
  """

  inputs_arity: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0
  num_hidden_nodes: int = 0
  reset_cell_state: bool = False
  cell_value_cap: float | None = 10.0
  forget_gate_bias: float = 0.0
  output_nonlinearity: bool = True
  zo_prob: float = 0.0
  bias_init: WeightInit = dataclasses.field(
      default_factory=lambda: WeightInit.Constant(0.0))

  @property
  def num_gates(self) -> int:
    return 4

  @property
  def output_size(self) -> int:
    return self.num_output_nodes

  @property
  def hidden_size(self) -> int:
    return self.num_hidden_nodes or self.num_output_nodes

  def setup(self) -> None:
    name = type(self).__name__
    if self.cell_value_cap is not None and not isinstance(
        self.cell_value_cap, (int, float)):
      raise ValueError(f'{name}.cell_value_cap must be a number or None, got '
                       f'{self.cell_value_cap!r}.')
    if self.num_output_nodes <= 0:
      raise ValueError(f'{name}.num_output_nodes must be > 0, got '
                       f'{self.num_output_nodes}.')
    gates = self.num_gates * self.hidden_size
    self.create_variable('wm', WeightHParams(
        shape=[self.num_input_nodes + self.output_size, gates]))
    if self.num_hidden_nodes:
      self.create_variable('w_proj', WeightHParams(
          shape=[self.hidden_size, self.output_size]))
    self.create_variable('b', WeightHParams(shape=[gates],
                                            init=self.bias_init))

  def init_states(self, batch_size: int) -> NestedMap:
    dtype = self.fprop_dtype
    return NestedMap(
        m=jnp.zeros((batch_size, self.output_size), dtype=dtype),
        c=jnp.zeros((batch_size, self.hidden_size), dtype=dtype))

  def get_output(self, state: NestedMap) -> JTensor:
    return state.m

  def _reset_state(self, state: NestedMap, inputs: NestedMap) -> NestedMap:
    return NestedMap(m=inputs.reset_mask * state.m,
                     c=inputs.reset_mask * state.c)

  def __call__(self, state0: NestedMap, inputs: NestedMap) -> NestedMap:
    """One step; `inputs.act` [B, D] (or a list), `inputs.padding` [B, 1]."""
    act = _as_list(inputs.act)
    if len(act) != self.inputs_arity:
      raise ValueError(f'{type(self).__name__}: inputs.act has {len(act)} '
                       f'tensors, inputs_arity is {self.inputs_arity}.')
    if self.reset_cell_state:
      state0 = self._reset_state(state0, inputs)
    xm = jnp.concatenate(act + [state0.m], axis=1)
    xmw = jnp.einsum('bd,dc->bc', xm, self.theta.wm)
    return self._step(state0, inputs, xmw)

  def _step(self, state0: NestedMap, inputs: NestedMap,
            xmw: JTensor) -> NestedMap:
    state1 = self._gates_internal(state0, *self._gates_preprocess(xmw))
    return self._apply_zoneout(state0, inputs, state1)

  def _gates_unpack(self, x: JTensor, axis: int = -1) -> Sequence[JTensor]:
    """Splits `x` into the `num_gates` gates along `axis`."""
    want = self.num_gates * self.hidden_size
    if x.shape[axis] != want:
      raise ValueError(f'{type(self).__name__}: shape {x.shape} at axis '
                       f'{axis} must be num_gates * hidden_size = {want}.')
    return jnp.split(x, self.num_gates, axis=axis)

  def _bias_unpack(self) -> Sequence[JTensor]:
    i_i, i_g, f_g, o_g = self._gates_unpack(self.theta.b)
    return i_i, i_g, f_g + self.forget_gate_bias, o_g

  def _gates_preprocess(self, x: JTensor) -> Sequence[JTensor]:
    """Pre-activation gates: `x` [B, G * H] plus the bias, split by gate."""
    if self.forget_gate_bias == 0.0:
      return self._gates_unpack(x + self.theta.b, axis=1)
    return [g + b for g, b in zip(self._gates_unpack(x, axis=1),
                                  self._bias_unpack())]

  def _w_proj(self) -> JTensor | None:
    return self.theta.w_proj if self.num_hidden_nodes else None

  def _gates_internal(self, state0: NestedMap, i_i: JTensor, i_g: JTensor,
                      f_g: JTensor, o_g: JTensor) -> NestedMap:
    return lstm_gates_to_state(state0.c, i_i, i_g, f_g, o_g,
                               self.cell_value_cap, self.output_nonlinearity,
                               self._w_proj())

  def _apply_zoneout(self, state0: NestedMap, inputs: NestedMap,
                     state1: NestedMap) -> NestedMap:
    c_rand = m_rand = None
    if self.zo_prob > 0.0:
      c_rand = jax.random.uniform(self.next_prng_key(), state0.c.shape)
      m_rand = jax.random.uniform(self.next_prng_key(), state0.m.shape)
    is_eval = self.do_eval
    return NestedMap(
        m=zoneout(state0.m, state1.m, inputs.padding, self.zo_prob, is_eval,
                  m_rand),
        c=zoneout(state0.c, state1.c, inputs.padding, self.zo_prob, is_eval,
                  c_rand))

  def project_input(self, inputs: NestedMap) -> JTensor:
    """`inputs.act` [B, T, D] (or a list) times the input rows of `wm`."""
    act = _as_list(inputs.act)
    x = act[0] if len(act) == 1 else jnp.concatenate(act, axis=-1)
    if x.shape[-1] != self.num_input_nodes:
      raise ValueError(f'{type(self).__name__}: inputs.act depth '
                       f'{x.shape[-1]} != num_input_nodes '
                       f'{self.num_input_nodes}.')
    wm_i = self.theta.wm[:self.num_input_nodes, :]
    return jnp.einsum('...d,dh->...h', x, wm_i)

  def fprop_with_projected_inputs(self, state0: NestedMap,
                                  inputs: NestedMap) -> NestedMap:
    """A step from `inputs.proj_inputs` [B, G * H] (see `project_input`)."""
    if self.reset_cell_state:
      state0 = self._reset_state(state0, inputs)
    wm_h = self.theta.wm[self.num_input_nodes:, :]
    xmw = inputs.proj_inputs + jnp.einsum('bd,dc->bc', state0.m, wm_h)
    return self._step(state0, inputs, xmw)


def _layer_norm(x: JTensor, epsilon: float) -> JTensor:
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + epsilon)


class LayerNormalizedLstmCellSimple(LstmCellSimple):
  """LstmCellSimple with each gate layer-normalized (arXiv:1607.06450).

  Each gate's pre-activation is normalized over its H units, scaled by its
  slice of `ln_scale` and shifted by its bias.

  Attributes:
    layer_norm_epsilon: Added to the variance.
  """

  layer_norm_epsilon: float = 1e-8

  def setup(self) -> None:
    super().setup()
    self.create_variable('ln_scale', WeightHParams(
        shape=[self.num_gates * self.hidden_size],
        init=WeightInit.Constant(1.0)))

  def _gates_preprocess(self, x: JTensor) -> Sequence[JTensor]:
    gates = self._gates_unpack(x, axis=1)
    scales = self._gates_unpack(self.theta.ln_scale)
    return tuple(
        _layer_norm(g, self.layer_norm_epsilon) * s + b
        for g, s, b in zip(gates, scales, self._bias_unpack()))


class CifgLstmCellSimple(LstmCellSimple):
  """LSTM with the input gate coupled to the forget gate (3 gates: i_i, f_g,
  o_g); no `forget_gate_bias`."""

  @property
  def num_gates(self) -> int:
    return 3

  def setup(self) -> None:
    if self.forget_gate_bias != 0.0:
      raise ValueError('CifgLstmCellSimple.forget_gate_bias must be 0, got '
                       f'{self.forget_gate_bias}.')
    super().setup()

  def _bias_unpack(self) -> Sequence[JTensor]:
    return self._gates_unpack(self.theta.b)

  def _gates_internal(self, state0: NestedMap, i_i: JTensor, f_g: JTensor,
                      o_g: JTensor) -> NestedMap:
    return lstm_gates_to_state(state0.c, i_i, None, f_g, o_g,
                               self.cell_value_cap, self.output_nonlinearity,
                               self._w_proj())


# Names Pax 1.4's module also has (aliases of other modules' names).
Params = py_utils.HParams
