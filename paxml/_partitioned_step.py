"""A step function compiled over a mesh, once per input signature.

Private to `paxml.partitioning`, whose `partition` returns `CompiledStep`s.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable

from absl import logging
import jax
from jax.extend import core as jax_core
from paxml import mfu


class CompiledStep:
  """A step compiled ahead of time, once per input signature.

  Each new structure or shape of the inputs (e.g. a smaller last eval batch)
  or new static arguments is lowered and compiled once; later calls go
  straight to the executable.

  Variants of one step share a trace: static arguments with a `trace_from`
  attribute (other static arguments of the same step, whose outputs include
  all of this variant's) are compiled from the jaxpr of that variant's trace,
  their outputs chosen by `static_args.select_outputs((state, outputs))`.
  The model is traced once and XLA drops the work of the outputs left out
  (tracing a small LM's train step takes a second or more of start-up).
  Only traces of static arguments that have `select_outputs` (the kind a
  variant names) are kept; eval and decode steps keep none.

  `compile_ahead` compiles for a signature on a background thread (XLA
  releases the GIL), e.g. while the state is being initialised or restored,
  or a variant needed later while the first steps run; the first call of
  that signature waits for it.

  Attributes:
    flops: XLA's FLOP count of one call of the first executable, on all
      devices together, each scan iteration counted (`mfu.step_flops`; None
      if unknown or not compiled yet).
  """

  def __init__(self, jit_for: Callable[..., Any],
               mesh: jax.sharding.Mesh,
               check_inputs: Callable[[Any], None]):
    """Constructor.

    Args:
      jit_for: `(inputs, static_args, fn=None) -> jax.jit-ed fn(state, key,
        inputs)`: the step for `static_args`, or `fn` in its place with the
        same shardings and donation.
      mesh: The mesh it is compiled under.
      check_inputs: Raises a clear error for inputs the mesh cannot split.
    """
    self._jit_for = jit_for
    self._mesh = mesh
    self._check_inputs = check_inputs
    self._executables: dict[Any, Any] = {}
    self._traces: dict[Any, jax.stages.Traced] = {}
    self._ahead: dict[Any, concurrent.futures.Future[Any]] = {}
    self._first: tuple[jax.stages.Traced, jax.stages.Lowered] | None = None
    self._flops: float | None = None
    # Held while tracing a shared trace: a variant compiled ahead on another
    # thread waits for the trace its base is making instead of tracing the
    # model a second time.
    self._trace_lock = threading.Lock()

  @property
  def flops(self) -> float | None:
    # Counted on first use (the runner asks only where it knows the peak):
    # XLA's analysis of a lowered module costs 0.08 s for a tiny LM on CPU.
    if self._first is not None:
      try:
        with jax.set_mesh(self._mesh):
          self._flops = mfu.step_flops(*self._first)
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('No FLOP count of the step (for MFU): %s', e)
      self._first = None
    return self._flops

  def __call__(self, state: Any, prng_key: jax.Array, inputs: Any,
               static_args: Any = None) -> Any:
    signature = _signature(inputs, static_args)
    executable = self._executables.get(signature)
    if executable is None:
      ahead = self._ahead.pop(signature, None)
      if ahead is not None:
        executable = ahead.result()  # Raises what compiling raised.
      else:
        executable = self._compile(signature, state, prng_key, inputs)
    return executable(state, prng_key, inputs)

  def compile_ahead(self, state: Any, prng_key: Any, inputs: Any,
                    static_args: Any = None) -> None:
    """Starts compiling for these arguments on a background thread.

    Args:
      state: The state, or its `jax.ShapeDtypeStruct`s: the same shapes and
        dtypes as the state the call will get.
      prng_key: The key (or its `ShapeDtypeStruct`).
      inputs: The inputs (or their `ShapeDtypeStruct`s).
      static_args: The static arguments of the call.
    """
    signature = _signature(inputs, static_args)
    if signature in self._executables or signature in self._ahead:
      return
    future = concurrent.futures.Future()

    def work():
      try:
        future.set_result(self._compile(signature, state, prng_key, inputs))
      except BaseException as e:  # pylint: disable=broad-except
        # Raised by the call of this signature, if one comes.
        logging.debug('Compiling ahead failed: %s', e)
        future.set_exception(e)

    self._ahead[signature] = future
    # Not a daemon: a process that ends (e.g. on an error) while XLA
    # compiles waits for it, then exits with its own status; a daemon
    # thread returning from XLA during the interpreter's shutdown aborts
    # the process instead (exit status 134, "terminate called ...").
    threading.Thread(target=work, name='compile_ahead').start()

  def _trace(self, signature: Any, state: Any, prng_key: jax.Array,
             inputs: Any) -> jax.stages.Traced:
    with self._trace_lock:
      traced = self._traces.get(signature)
      if traced is None:
        traced = self._jit_for(inputs, signature[-1]).trace(
            state, prng_key, inputs)
        self._traces[signature] = traced
    return traced

  def _trace_for(self, signature: Any, state: Any, prng_key: jax.Array,
                 inputs: Any) -> jax.stages.Traced:
    """The trace to lower for `signature` (a variant's replays its base's)."""
    static_args = signature[-1]
    base = getattr(static_args, 'trace_from', None)
    if base is None:
      if not hasattr(static_args, 'select_outputs'):  # Nothing shares it.
        return self._jit_for(inputs, static_args).trace(
            state, prng_key, inputs)
      return self._trace(signature, state, prng_key, inputs)
    traced = self._trace(signature[:-1] + (base,), state, prng_key, inputs)
    run = jax_core.jaxpr_as_fun(traced.jaxpr)

    def variant(*args):
      outputs = run(*jax.tree.leaves(args))
      return static_args.select_outputs(
          jax.tree.unflatten(traced.out_tree, outputs))

    return self._jit_for(inputs, static_args, variant).trace(
        state, prng_key, inputs)

  def _compile(self, signature: Any, state: Any, prng_key: jax.Array,
               inputs: Any) -> Any:
    self._check_inputs(inputs)
    with jax.set_mesh(self._mesh):
      traced = self._trace_for(signature, state, prng_key, inputs)
      lowered = traced.lower()
      executable = lowered.compile()
    if not self._executables:
      self._first = traced, lowered
    self._executables[signature] = executable
    return executable


def _signature(inputs: Any, static_args: Any) -> Any:
  leaves, treedef = jax.tree.flatten(inputs)
  return treedef, tuple((x.shape, x.dtype) for x in leaves), static_args
