"""The train state: step, model variables and optimizer states.

Public names: TrainState, TensorProvenance, TrainStateProvenance,
build_train_state_provenance.

`TrainState` is a pytree, so one structure holds the arrays, their
`jax.ShapeDtypeStruct`s or their `PartitionSpec`s:

  state = train_states.TrainState(step=jnp.array(0, jnp.uint32),
                                  mdl_vars=variables, opt_states=[opt_state])
  state = state.new_state(new_variables, [new_opt_state])  # step + 1
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import struct
import jax
from praxis import py_utils
from praxis import pytypes

Nested = pytypes.Nested
NestedMap = py_utils.NestedMap
JTensorProvenance = tuple[str, int | None]
ExtraStateType = Any


class TrainState(struct.PyTreeNode):
  """Step, variables (`{'params': ..., 'non_trainable': ...}`), opt states.

  Attributes:
    step: The number of steps taken (a scalar).
    mdl_vars: The model's variables, by collection.
    opt_states: One optimizer state per learner.
    extra_state: Anything else a trainer carries.
  """

  step: Any
  mdl_vars: Any
  opt_states: list[Any]
  extra_state: Any = ()

  def new_state(
      self, mdl_vars: Any, opt_states: list[Any], extra_state: Any = ()
  ) -> TrainState:
    """The state one step later, with the given variables and states."""
    return TrainState(step=self.step + 1, mdl_vars=mdl_vars,
                      opt_states=opt_states, extra_state=extra_state)

  def to_eval_state(self) -> TrainState:
    """This state without optimizer states (what eval and decode need)."""
    return TrainState(step=self.step, mdl_vars=self.mdl_vars, opt_states=[],
                      extra_state=())


@dataclasses.dataclass
class TensorProvenance:
  """Where a tensor's value came from: random init or a checkpoint."""

  checkpoint_path: str = 'random_init'
  checkpoint_step: int | None = None

  def __repr__(self) -> str:
    if self.checkpoint_path == 'random_init':
      return '"(random_init)"'
    step = 'latest' if self.checkpoint_step is None else self.checkpoint_step
    return f'"({self.checkpoint_path}:{step})"'


@dataclasses.dataclass
class TrainStateProvenance:
  """A `TensorProvenance` for every tensor of a `TrainState` (not a pytree)."""

  step: TensorProvenance
  mdl_vars: Nested[TensorProvenance]
  opt_states: Nested[TensorProvenance]
  extra_state: Nested[TensorProvenance] = ()

  def replace(self, **changes: Any) -> TrainStateProvenance:
    return dataclasses.replace(self, **changes)


def build_train_state_provenance(
    train_state: TrainState,
    checkpoint_path: str | None = None,
    step: int | None = None,
) -> TrainStateProvenance:
  """The same provenance for every tensor of `train_state`.

  Args:
    train_state: Arrays, tracers or shapes (not partition specs).
    checkpoint_path: The checkpoint they come from (None: random init).
    step: That checkpoint's step.

  Returns:
    The provenance.
  """
  prov = TensorProvenance()
  if checkpoint_path:
    prov = TensorProvenance(checkpoint_path, step)

  def each(tree: Any) -> Any:
    return jax.tree.map(lambda _: prov, tree)

  return TrainStateProvenance(
      step=prov, mdl_vars=each(train_state.mdl_vars),
      opt_states=each(train_state.opt_states),
      extra_state=each(train_state.extra_state))
