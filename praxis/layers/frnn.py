"""Functional RNNs: an RNN cell scanned over time with `nn.scan`.

Public: `reset_mask`, `FRnn` (any `rnn_cell.BaseRnnCell`), `LstmFrnn` (an LSTM
cell with the input projection done for all steps at once), `StackFrnn`,
`StackBiFrnn`. Inputs are a NestedMap with `act` [B, T, D] (or a list of such)
and `padding` [B, T, 1], optionally `segment_ids` [B, T, 1] for packed inputs
(the state is reset at each new segment). Variables live under `cell` (one
copy shared by all steps), as in Pax.

  rnn = pax_fiddle.Config(frnn.LstmFrnn, name='rnn', cell_tpl=pax_fiddle.Config(
      rnn_cell.LstmCellSimple, num_input_nodes=4, num_output_nodes=8))
  layer = base_layer.instantiate(rnn)
  inputs = NestedMap(act=x, padding=jnp.zeros([2, 5, 1]))   # x: [2, 5, 4]
  variables = layer.init(prng_key, inputs)
  act, final_state = layer.apply(variables, inputs)       # act: [2, 5, 8]
"""

from __future__ import annotations

from typing import Callable

from flax import linen as nn
import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import rnn_cell

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field

PARAMS = base_layer.PARAMS
AUX_LOSS = base_layer.AUX_LOSS
HYPER_PARAMS = base_layer.HYPER_PARAMS
SUMMARIES = base_layer.SUMMARIES
NON_TRAINABLE = base_layer.NON_TRAINABLE
RANDOM = base_layer.RANDOM

# The weights are shared by all time steps; each step draws its own randomness.
SCAN_SPLIT_RNGS = {PARAMS: False, RANDOM: True}


def reset_mask(segment_ids: JTensor, paddings: JTensor | None = None,
               dtype: jnp.dtype = jnp.float32) -> JTensor:
  """0 where a new segment starts (the state resets there), else 1.

  Args:
    segment_ids: [B, S] or [B, S, 1] segment of each step.
    paddings: Same shape, 1 at padded steps, which never reset.
    dtype: The result's dtype.

  Returns:
    The mask, shaped like `segment_ids`.
  """
  first = jnp.full((segment_ids.shape[0],) + (1,) * (segment_ids.ndim - 1), -1,
                   dtype=segment_ids.dtype)
  previous = jnp.concatenate([first, segment_ids[:, :-1]], axis=1)
  same = previous == segment_ids
  if paddings is not None:
    same = jnp.logical_or(same, paddings)
  return same.astype(dtype)


def _sum_aux_loss(tree):
  return jax.tree.map(jnp.sum, tree)


def _prepare_inputs(layer: base_layer.BaseLayer,
                    inputs: NestedMap) -> NestedMap:
  """A copy of `inputs` with `act` a list and `reset_mask`, time-reversed if
  the layer runs backwards."""
  for key in ('act', 'padding'):
    if key not in inputs:
      raise ValueError(f'{type(layer).__name__}: inputs need `{key}`, got '
                       f'keys {sorted(inputs.keys())}.')
  inputs = jax.tree.map(lambda x: x, inputs)
  if not isinstance(inputs.act, (list, tuple)):
    inputs.act = [inputs.act]
  if 'segment_ids' in inputs:
    inputs.reset_mask = reset_mask(inputs.segment_ids, inputs.padding,
                                   dtype=layer.fprop_dtype)
  else:
    inputs.reset_mask = jnp.ones_like(inputs.padding, dtype=layer.fprop_dtype)
  if layer.reverse:
    inputs = jax.tree.map(lambda x: jnp.flip(x, axis=1), inputs)
  return inputs


def _scan_cell(layer: base_layer.BaseLayer, body_fn: Callable,
               state0: NestedMap, inputs: NestedMap):
  """Runs `body_fn(cell, state, inputs_t) -> (state, out_t)` over axis 1."""
  if layer.is_initializing():
    # nn.scan cannot create variables: make them with one step first.
    body_fn(layer.cell, state0, jax.tree.map(lambda x: x[:, 0], inputs))
  scan_fn = nn.scan(
      body_fn,
      variable_axes={AUX_LOSS: 0, SUMMARIES: 0, HYPER_PARAMS: 0},
      variable_broadcast=[PARAMS],
      variable_carry=[NON_TRAINABLE],
      split_rngs=SCAN_SPLIT_RNGS,
      in_axes=1,
      out_axes=1,
      unroll=layer.unroll,
  )
  scan_fn = nn.map_variables(
      scan_fn, AUX_LOSS, mutable=layer.is_mutable_collection(AUX_LOSS),
      trans_out_fn=_sum_aux_loss)
  final_state, act = scan_fn(layer.cell, state0, inputs)
  if layer.reverse:
    act = jnp.flip(act, axis=1)
  return act, final_state


class FRnn(base_layer.BaseLayer):
  """Scans an RNN cell over the time axis.

  Attributes:
    cell_tpl: The cell (a `rnn_cell.BaseRnnCell`).
    reverse: Run from the last step to the first.
    unroll: Steps unrolled per scan iteration (> 0).
  """

  cell_tpl: LayerTpl | None = template_field(None)
  reverse: bool = False
  unroll: int = 1

  def setup(self) -> None:
    if self.unroll <= 0:
      raise ValueError(f'{type(self).__name__}.unroll must be > 0, got '
                       f'{self.unroll}.')
    if self.cell_tpl is None:
      raise ValueError(f'{type(self).__name__}.cell_tpl must be set.')
    self.create_child('cell', self.cell_tpl)

  def init_states(self, batch_size: int) -> NestedMap:
    return self.cell.init_states(batch_size)

  def get_output(self, state: NestedMap) -> JTensor:
    return self.cell.get_output(state)

  def extend_step(self, inputs: NestedMap,
                  state0: NestedMap) -> tuple[NestedMap, JTensor]:
    """One step: `inputs.act` [B, D] (or a list), `inputs.padding` [B, 1].

    Returns `(state1, output)`. Packed inputs are not supported here.
    """
    inputs = jax.tree.map(lambda x: x, inputs)
    inputs.reset_mask = jnp.ones_like(inputs.padding)
    state1 = self.cell(state0, inputs)
    return state1, self.get_output(state1)

  def __call__(self, inputs: NestedMap,
               state0: NestedMap | None = None) -> tuple[JTensor, NestedMap]:
    """Runs the cell over `inputs.act` [B, T, D]: `(act [B, T, O], state)`."""
    inputs = _prepare_inputs(self, inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])

    def body_fn(cell, state, inputs_t):
      state = cell(state, inputs_t)
      return state, cell.get_output(state)

    return _scan_cell(self, body_fn, state0, inputs)


class LstmFrnn(FRnn):
  """FRnn of an LstmCellSimple that projects the inputs of all steps at once
  (`cell.project_input`) and runs only the recurrent part step by step."""

  @property
  def num_input_nodes(self) -> int:
    return self.cell.num_input_nodes

  @property
  def num_output_nodes(self) -> int:
    return self.cell.num_output_nodes

  def __call__(self, inputs: NestedMap,
               state0: NestedMap | None = None) -> tuple[JTensor, NestedMap]:
    inputs = _prepare_inputs(self, inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    inputs.proj_inputs = self.cell.project_input(inputs)

    def body_fn(cell, state, inputs_t):
      state = cell.fprop_with_projected_inputs(state, inputs_t)
      return state, cell.get_output(state)

    return _scan_cell(self, body_fn, state0, inputs)


def _check_stack(layer: base_layer.BaseLayer) -> None:
  name = type(layer).__name__
  if layer.num_layers <= 0:
    raise ValueError(f'{name}.num_layers must be > 0, got {layer.num_layers}.')
  if layer.frnn_tpl is None:
    raise ValueError(f'{name}.frnn_tpl must be set.')


def _frnn_config(tpl: LayerTpl, num_input_nodes: int, num_output_nodes: int,
                 **fields) -> LayerTpl:
  p = tpl.clone()
  p.cell_tpl.set(num_input_nodes=num_input_nodes,
                 num_output_nodes=num_output_nodes)
  return p.set(**fields) if fields else p


class StackFrnn(base_layer.BaseLayer):
  """`num_layers` FRnns, each fed the previous one's output.

  Children `frnn_0` ... `frnn_{n-1}` (cell sizes set from the fields below).

  Attributes:
    frnn_tpl: The FRnn of each layer.
    num_layers: How many layers.
    num_input_nodes: Input depth of the first layer.
    num_output_nodes: Output depth of every layer.
  """

  frnn_tpl: LayerTpl | None = template_field(None)
  num_layers: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0

  def setup(self) -> None:
    _check_stack(self)
    dims = [self.num_input_nodes] + [self.num_output_nodes] * self.num_layers
    self.create_children('frnn', [
        _frnn_config(self.frnn_tpl, dims[i], self.num_output_nodes)
        for i in range(self.num_layers)
    ])

  def init_states(self, batch_size: int) -> list[NestedMap]:
    return [f.init_states(batch_size) for f in self.frnn]

  def get_output(self, state: list[NestedMap]) -> JTensor:
    return self.frnn[-1].get_output(state[-1])

  def extend_step(self, inputs: NestedMap, state: list[NestedMap]
                  ) -> tuple[list[NestedMap], JTensor]:
    """One step through all layers: `(new states, output)`."""
    inputs = jax.tree.map(lambda x: x, inputs)
    states = []
    for i in range(self.num_layers):
      state_i, inputs.act = self.frnn[i].extend_step(inputs, state[i])
      states.append(state_i)
    return states, inputs.act

  def __call__(self, inputs: NestedMap, state0: list[NestedMap] | None = None
               ) -> tuple[JTensor, list[NestedMap]]:
    """`(act [B, T, O], final states, one per layer)`."""
    inputs = jax.tree.map(lambda x: x, inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    states = []
    for i in range(self.num_layers):
      inputs.act, state_i = self.frnn[i](inputs=inputs, state0=state0[i])
      states.append(state_i)
    return inputs.act, states


class StackBiFrnn(base_layer.BaseLayer):
  """`num_layers` bidirectional layers: a forward and a reversed FRnn, each of
  `num_output_nodes // 2` outputs, concatenated and fed to the next layer.

  Children `fwd_frnn_i` and `bwd_frnn_i`.

  Attributes:
    frnn_tpl: The FRnn of each direction (its `reverse` is set here).
    num_layers: How many layers.
    num_input_nodes: Input depth of the first layer.
    num_output_nodes: Output depth of every layer (both directions together).
  """

  frnn_tpl: LayerTpl | None = template_field(None)
  num_layers: int = 1
  num_input_nodes: int = 0
  num_output_nodes: int = 0

  def setup(self) -> None:
    _check_stack(self)
    dims = [self.num_input_nodes] + [self.num_output_nodes] * self.num_layers
    half = self.num_output_nodes // 2
    self.create_children('fwd_frnn', [
        _frnn_config(self.frnn_tpl, dims[i], half, reverse=False)
        for i in range(self.num_layers)
    ])
    self.create_children('bwd_frnn', [
        _frnn_config(self.frnn_tpl, dims[i], half, reverse=True)
        for i in range(self.num_layers)
    ])

  def fwd_init_states(self, batch_size: int) -> list[NestedMap]:
    return [f.init_states(batch_size) for f in self.fwd_frnn]

  def bwd_init_states(self, batch_size: int) -> list[NestedMap]:
    return [f.init_states(batch_size) for f in self.bwd_frnn]

  def init_states(self, batch_size: int) -> NestedMap:
    return NestedMap(fwd=self.fwd_init_states(batch_size),
                     bwd=self.bwd_init_states(batch_size))

  def __call__(self, inputs: NestedMap, state0: NestedMap | None = None
               ) -> tuple[JTensor, list[NestedMap]]:
    """`(act [B, T, O], [NestedMap(fwd=..., bwd=...) per layer])`."""
    inputs = jax.tree.map(lambda x: x, inputs)
    if not state0:
      state0 = self.init_states(inputs.padding.shape[0])
    states = []
    for i in range(self.num_layers):
      fwd, fwd_state = self.fwd_frnn[i](inputs=inputs, state0=state0.fwd[i])
      bwd, bwd_state = self.bwd_frnn[i](inputs=inputs, state0=state0.bwd[i])
      inputs.act = jnp.concatenate([fwd, bwd], axis=-1)
      states.append(NestedMap(fwd=fwd_state, bwd=bwd_state))
    return inputs.act, states
