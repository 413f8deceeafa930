"""One trace of a model's `init` for its variables' declarations and values.

Private to `paxml.trainer_lib`. The runner first needs the declarations of
the model's variables (`WeightHParams`: shapes, dtypes, shardings) to know
how the initialisation's outputs are sharded, then compiles that sharded
initialisation. Both traced `init` (a small LM takes about half a second
each). Here the first is a `jax.jit(...).trace` whose outputs give the
declarations and whose jaxpr the second replays: the model is traced once.

Models that override how they initialise (`init` or the abstract
initialisation of `BaseLayer`) are traced as before, twice.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from flax import core as flax_core
from flax import linen as nn
import jax
from jax.extend import core as jax_core
from praxis import base_layer

# (model, input signature, do_eval) -> jax.stages.Traced, newest last. The
# model is compared by identity; a few entries cover a train and an eval
# partitioner of one task.
_TRACES: collections.OrderedDict[Any, tuple[Any, jax.stages.Traced]] = (
    collections.OrderedDict())
_MAX_TRACES = 4


def _shares_trace(model: Any) -> bool:
  # pylint: disable=protected-access
  cls, base = type(model), base_layer.BaseLayer
  return (isinstance(model, base) and cls.init is base.init and
          cls.abstract_init_with_metadata is base.abstract_init_with_metadata
          and cls._abstract_init is base._abstract_init)


def _signature(tree: Any) -> Any:
  leaves, treedef = jax.tree.flatten(tree)
  return treedef, tuple((tuple(x.shape), jax.numpy.dtype(x.dtype))
                        for x in leaves)


def _init_fn(model: Any, do_eval: bool) -> Callable[[Any, Any], Any]:
  """`(rngs, inputs) -> boxed variables`, as `BaseLayer.init` computes them."""

  def init(rngs, inputs):
    context = base_layer.JaxContext.HParams(do_eval=do_eval)
    with base_layer.JaxContext.new_context(hparams=context):
      return nn.Module.init(model, rngs, inputs,
                            mutable=base_layer.DEFAULT_INIT_MUTABLE_LIST)

  return init


def declarations(model: Any, rngs: Any, inputs: Any, do_eval: bool) -> Any:
  """The model's `WeightHParams`, as `model.abstract_init_with_metadata`.

  Args:
    model: The model.
    rngs: Shapes of the `{collection: key}` the initialisation will get.
    inputs: Shapes of its inputs (float32 ones are traced as bfloat16 for a
      bfloat16 `fprop_dtype`, as `BaseLayer` initialises).
    do_eval: Initialise in eval mode.

  Returns:
    `{'params': ..., 'non_trainable': ...}` of `WeightHParams`.
  """
  if not _shares_trace(model):
    return model.abstract_init_with_metadata(inputs, do_eval=do_eval)
  if model.fprop_dtype == jax.numpy.bfloat16:
    # pylint: disable-next=protected-access
    inputs = jax.tree.map(base_layer._to_bfloat16_shape, inputs)
  traced = jax.jit(_init_fn(model, do_eval)).trace(rngs, inputs)
  key = (id(model), _signature((rngs, inputs)), do_eval)
  _TRACES[key] = (model, traced)
  _TRACES.move_to_end(key)
  while len(_TRACES) > _MAX_TRACES:
    _TRACES.popitem(last=False)
  shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype)
            for a in traced.jaxpr.out_avals]
  variables = flax_core.unfreeze(jax.tree.unflatten(traced.out_tree, shapes))
  variables.pop('params_axes', None)
  return base_layer.unbox_meta(variables)


def init_variables(model: Any, rngs: Any, inputs: Any, do_eval: bool) -> Any:
  """`model.init(rngs, inputs)` under `do_eval`, from the declarations' trace.

  The trace `declarations` kept for this model, inputs and mode is replayed
  (and forgotten) when this runs inside a trace (the sharded
  initialisation's `jax.jit`); otherwise, or without a matching trace, the
  model is traced again.

  Args:
    model: The model.
    rngs: `{collection: key}`.
    inputs: The inputs (arrays).
    do_eval: Initialise in eval mode.

  Returns:
    The variables, unboxed, as `BaseLayer.init` returns them.
  """
  key = (id(model), _signature((rngs, inputs)), do_eval)
  in_trace = any(isinstance(x, jax.core.Tracer)
                 for x in jax.tree.leaves((rngs, inputs)))
  # Used once: the trace (and the constants it holds) is not kept after.
  entry = _TRACES.pop(key, None) if in_trace else None
  if entry is None or entry[0] is not model:
    context = base_layer.JaxContext.HParams(do_eval=do_eval)
    with base_layer.JaxContext.new_context(hparams=context):
      return model.init(rngs, inputs)
  traced = entry[1]
  outputs = jax_core.jaxpr_as_fun(traced.jaxpr)(
      *jax.tree.leaves((rngs, inputs)))
  variables = jax.tree.unflatten(traced.out_tree, outputs)
  return flax_core.unfreeze(base_layer.maybe_unbox_value(variables))
