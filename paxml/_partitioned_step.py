"""A step function compiled over a mesh, once per input signature.

Private to `paxml.partitioning`, whose `partition` returns `CompiledStep`s.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from paxml import mfu


class CompiledStep:
  """A step compiled ahead of time, once per input signature.

  Each new structure or shape of the inputs (e.g. a smaller last eval batch)
  or new static arguments is lowered and compiled once; later calls go
  straight to the executable.

  Attributes:
    flops: XLA's FLOP count of one call of the first executable (None if
      unknown or not compiled yet).
  """

  def __init__(self, jit_for: Callable[[Any, Any], Any],
               mesh: jax.sharding.Mesh,
               check_inputs: Callable[[Any], None]):
    """Constructor.

    Args:
      jit_for: `(inputs, static_args) -> jax.jit-ed fn(state, key, inputs)`.
      mesh: The mesh it is compiled under.
      check_inputs: Raises a clear error for inputs the mesh cannot split.
    """
    self._jit_for = jit_for
    self._mesh = mesh
    self._check_inputs = check_inputs
    self._executables: dict[Any, Any] = {}
    self.flops = None

  def __call__(self, state: Any, prng_key: jax.Array, inputs: Any,
               static_args: Any = None) -> Any:
    leaves, treedef = jax.tree.flatten(inputs)
    signature = (treedef, tuple((x.shape, x.dtype) for x in leaves),
                 static_args)
    executable = self._executables.get(signature)
    if executable is None:
      executable = self._compile(signature, state, prng_key, inputs)
    return executable(state, prng_key, inputs)

  def _compile(self, signature: Any, state: Any, prng_key: jax.Array,
               inputs: Any) -> Any:
    self._check_inputs(inputs)
    with jax.set_mesh(self._mesh):
      executable = self._jit_for(inputs, signature[-1]).lower(
          state, prng_key, inputs).compile()
    if not self._executables:
      self.flops = mfu.compiled_flops(executable)
    self._executables[signature] = executable
    return executable
