"""The sharded-transformation machinery behind `praxis.optimizers`.

Private: `praxis.optimizers` re-exports the public names
(ShardedGradientTransformation, GeneralGradientTransformation,
partition_params, partition_spec_like_state, sharded_chain, sharded_masked,
count_init_fn, count_init_partition_spec_fn, apply_lp_regularizer,
apply_decoupled_weight_decay, apply_ewc_regularization, apply_ema_weights,
extract_ema, to_quantized, to_float).

Pax's `init_partition_spec` trees do not always have the state's structure:
a chain's specs are wrapped in `optax.MaskedState`, a masked
transformation's are its inner transformation's (without the wrapper), and
they name every variable where the state holds `optax.MaskedNode`s.
`partition_spec_like_state` gives the specs in the state's exact structure,
which is what sharding a train state needs.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import inspect
from typing import Any
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from praxis import base_layer
from praxis import py_utils

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams
NestedWeightHParams = Any  # A tree of WeightHParams.
InitPartitionSpecFn = Callable[[NestedWeightHParams], Any]
Schedule = Callable[[Any], Any]  # An optax schedule: step -> value.


class ShardedGradientTransformation(NamedTuple):
  """An optax transformation that also says how to shard its state.

  Attributes:
    init: As in `optax.GradientTransformation`.
    update: As in `optax.GradientTransformation`.
    init_partition_spec: Maps the variables' `WeightHParams` tree to a tree of
      the state's structure with `WeightHParams` leaves (see module doc).
  """

  init: optax.TransformInitFn
  update: optax.TransformUpdateFn
  init_partition_spec: InitPartitionSpecFn


GeneralGradientTransformation = (
    optax.GradientTransformation | ShardedGradientTransformation
)


# --- Sharding of optimizer states ---


def _is_weight_hparams(x: Any) -> bool:
  return isinstance(x, WeightHParams)


def _is_masked(x: Any) -> bool:
  return isinstance(x, optax.MaskedNode)


def _is_array_leaf(node: Any) -> bool:
  leaves = jax.tree.leaves(node)
  return len(leaves) == 1 and leaves[0] is node


def _children(node: Any) -> tuple[list[Any], Any]:
  """The direct children of a pytree node, and how to rebuild it."""
  return jax.tree.flatten(node, is_leaf=lambda x: x is not node)


def _abstract_params(var_weight_hparams: NestedWeightHParams) -> Any:
  return jax.tree.map(
      lambda hp: jax.ShapeDtypeStruct(
          tuple(hp.full_shape), hp.dtype or jnp.float32
      ),
      var_weight_hparams,
      is_leaf=_is_weight_hparams,
  )


def _spec(shape, dtype, mapping, mesh_shape) -> WeightHParams:
  return WeightHParams(shape=list(shape), dtype=dtype, mesh_shape=mesh_shape,
                       tensor_split_dims_mapping=tuple(mapping))


def _state_leaf_spec(leaf: Any, hp: WeightHParams) -> Any:
  """The sharding of a state leaf kept for the variable declared by `hp`."""
  if _is_masked(leaf):
    return None  # As Pax: no spec for a variable another transform owns.
  if not _is_weight_hparams(hp):
    return hp
  shape, full = tuple(leaf.shape), tuple(hp.full_shape)
  if shape == full:
    return dataclasses.replace(hp, init=None, dtype=leaf.dtype)
  mapping = hp.full_split_dims_mapping
  mapping = tuple(mapping) if mapping else (-1,) * len(full)
  # A factored statistic: the variable's shape with one axis dropped. Keep the
  # other axes' sharding if the dropped axis is unambiguous.
  candidates = []
  for axis in range(len(full)):
    kept = mapping[:axis] + mapping[axis + 1:]
    if full[:axis] + full[axis + 1:] == shape and kept not in candidates:
      candidates.append(kept)
  if len(candidates) == 1:
    return _spec(shape, leaf.dtype, candidates[0], hp.mesh_shape)
  return _spec(shape, leaf.dtype, (-1,) * len(shape), hp.mesh_shape)


def partition_params(
    grad_tx: Any,
    var_weight_hparams: NestedWeightHParams,
    opt_states: Any = None,
) -> Any:
  """The sharding (`WeightHParams` leaves) of an optimizer state.

  Every subtree of `opt_states` with the structure of the variables is
  matched leaf by leaf with `var_weight_hparams` (see module doc); all other
  leaves are replicated.

  Args:
    grad_tx: The transformation; its `init` gives the state when `opt_states`
      is None.
    var_weight_hparams: `WeightHParams` of the variables.
    opt_states: The state (arrays or `jax.ShapeDtypeStruct`s), or None.

  Returns:
    A tree of `opt_states`' structure with `WeightHParams` leaves, and None
    where the state has an `optax.MaskedNode` (as Pax).
  """
  if opt_states is None:
    opt_states = jax.eval_shape(
        grad_tx.init, _abstract_params(var_weight_hparams)
    )
  params_def = jax.tree.structure(var_weight_hparams)
  first = jax.tree.leaves(var_weight_hparams)
  mesh_shape = getattr(first[0], 'mesh_shape', None) if first else None

  def visit(node: Any) -> Any:
    if jax.tree.structure(node, is_leaf=_is_masked) == params_def:
      return jax.tree.map(_state_leaf_spec, node, var_weight_hparams,
                          is_leaf=_is_masked)
    if _is_array_leaf(node):
      shape = tuple(getattr(node, 'shape', ()))
      dtype = getattr(node, 'dtype', None) or jnp.result_type(node)
      return _spec(shape, dtype, (-1,) * len(shape), mesh_shape)
    children, treedef = _children(node)
    return treedef.unflatten([visit(c) for c in children])

  return visit(opt_states)


def _partition_spec_fn(tx: Any) -> InitPartitionSpecFn:
  fn = getattr(tx, 'init_partition_spec', None)
  return fn if callable(fn) else functools.partial(partition_params, tx)


def _sharded(
    tx: Any, init_partition_spec: InitPartitionSpecFn | None = None
) -> ShardedGradientTransformation:
  """`tx` with an `init_partition_spec` (derived from its init by default)."""
  return ShardedGradientTransformation(
      init=tx.init, update=tx.update,
      init_partition_spec=init_partition_spec or _partition_spec_fn(tx),
  )


# --- Combinators ---


def sharded_chain(
    *args: GeneralGradientTransformation,
) -> ShardedGradientTransformation:
  """`optax.chain` of (sharded or plain optax) transformations.

  Args:
    *args: The transformations, applied in order.

  Returns:
    The chain; its state is the tuple of the states of `args`, its
    `init_partition_spec` that tuple of specs wrapped in `optax.MaskedState`
    (as in Pax; see `partition_spec_like_state`).
  """
  chained = optax.chain(*args)

  def init_partition_spec(var_weight_hparams):
    return optax.MaskedState(inner_state=tuple(
        _partition_spec_fn(t)(var_weight_hparams) for t in args))

  return _sharded(chained, init_partition_spec)


def sharded_masked(
    inner: GeneralGradientTransformation, mask: Any,
    use_custom_masked: bool = False,
) -> ShardedGradientTransformation:
  """`optax.masked`: transform only the variables where `mask` is True.

  Args:
    inner: The transformation.
    mask: A tree of bools shaped like (a prefix of) the variables, or a
      function of the variables returning one.
    use_custom_masked: Kept for Pax's signature (unused there too).

  Returns:
    The masked transformation; its `init_partition_spec` is the inner
    transformation's (as in Pax; see `partition_spec_like_state`).
  """
  del use_custom_masked
  return _sharded(optax.masked(inner, mask), _partition_spec_fn(inner))


def _align(spec: Any, state: Any) -> Any:
  """`spec` (an `init_partition_spec` tree) in the structure of `state`."""
  if _is_masked(state) or _is_weight_hparams(spec) or spec is None:
    return state if _is_masked(state) else spec
  spec_wrapped = isinstance(spec, optax.MaskedState)
  state_wrapped = isinstance(state, optax.MaskedState)
  if state_wrapped and not spec_wrapped:
    return optax.MaskedState(inner_state=_align(spec, state.inner_state))
  if spec_wrapped and not state_wrapped:
    return _align(spec.inner_state, state)
  if isinstance(state, dict) and isinstance(spec, dict):
    aligned = {k: _align(spec[k], v) for k, v in state.items()}
    return type(state)(aligned) if isinstance(state, NestedMap) else aligned
  spec_children, _ = _children(spec)
  state_children, state_def = _children(state)
  if _is_array_leaf(state) or len(spec_children) != len(state_children):
    raise ValueError(
        'init_partition_spec returned a tree that does not match the '
        f'optimizer state: {type(spec).__name__} with {len(spec_children)} '
        f'children for a {type(state).__name__} with {len(state_children)}.')
  return state_def.unflatten(
      [_align(a, b) for a, b in zip(spec_children, state_children)])


def partition_spec_like_state(
    tx: Any, var_weight_hparams: NestedWeightHParams, opt_states: Any = None
) -> Any:
  """The sharding of `tx`'s state, in exactly the state's tree structure.

  Args:
    tx: The transformation (sharded or plain optax).
    var_weight_hparams: `WeightHParams` of the variables.
    opt_states: The state (or its shapes); None: from `tx.init`.

  Returns:
    A tree of the state's structure with `WeightHParams` leaves (and the
    state's `optax.MaskedNode`s).
  """
  if opt_states is None:
    opt_states = jax.eval_shape(tx.init, _abstract_params(var_weight_hparams))
  spec_fn = getattr(tx, 'init_partition_spec', None)
  if not callable(spec_fn):
    spec_fn = functools.partial(partition_params, tx, opt_states=opt_states)
  return _align(spec_fn(var_weight_hparams), opt_states)


# --- Small transforms ---


def _inf_to_nan() -> optax.GradientTransformation:
  """Turns infinities into NaNs, which later ops (1 / x, ...) cannot hide."""
  return optax.stateless_with_tree_map(
      lambda g, _: jnp.where(jnp.isinf(g), jnp.nan, g)
  )


def count_init_fn(_: Any) -> NestedMap:
  """The state of a transformation that only counts updates (of any
  variables)."""
  return NestedMap(count=jnp.zeros([], jnp.int32))


def count_init_partition_spec_fn(var_hparams: NestedWeightHParams) -> Any:
  """The sharding of `count_init_fn`'s state: one replicated int32."""
  del var_hparams
  return NestedMap(count=WeightHParams(
      shape=[], init=None, dtype=jnp.int32, collections=None,
      tensor_split_dims_mapping=()))


def _counted(
    update_fn: Callable[[Any, Any, jax.Array], Any],
) -> ShardedGradientTransformation:
  """A transformation whose state is Pax's `NestedMap(count=...)`.

  Args:
    update_fn: (updates, params, count) -> new updates.

  Returns:
    The transformation; `count` is the number of updates so far.
  """

  def update(updates, state, params=None):
    return update_fn(updates, params, state.count), NestedMap(
        count=state.count + 1)

  return ShardedGradientTransformation(
      count_init_fn, update, count_init_partition_spec_fn)


_QUANTIZED_LEVELS = {jnp.dtype(jnp.int8): 127, jnp.dtype(jnp.int16): 32767}


def to_quantized(fvalue: jax.Array, quantized_dtype: Any
                 ) -> tuple[jax.Array, jax.Array]:
  """Rounds `fvalue` onto a symmetric integer grid, one step per column.

  The step (bucket size) of each slice along axis 0 is max|fvalue| / 127
  (int8) or / 32767 (int16); 0 maps to 0 and quantizing `to_float`'s output
  again gives the same integers.

  Args:
    fvalue: Floats of rank >= 1.
    quantized_dtype: jnp.int8 or jnp.int16.

  Returns:
    (integers of quantized_dtype, bucket sizes of shape fvalue.shape[1:]).
  """
  levels = _QUANTIZED_LEVELS.get(jnp.dtype(quantized_dtype))
  if levels is None:
    raise ValueError(f'to_quantized: quantized_dtype must be int8 or int16, '
                     f'got {quantized_dtype}.')
  if fvalue.ndim < 1:
    raise ValueError('to_quantized: fvalue must have rank >= 1, got a '
                     'scalar.')
  bucket = jnp.max(jnp.abs(fvalue), axis=0) / jnp.asarray(levels, fvalue.dtype)
  safe = jnp.where(bucket > 0, bucket, jnp.ones_like(bucket))
  return jnp.round(fvalue / safe[None]).astype(quantized_dtype), bucket


def to_float(quantized: jax.Array, bucket_size: jax.Array) -> jax.Array:
  """The floats `to_quantized` rounded to: quantized * bucket_size."""
  return quantized.astype(bucket_size.dtype) * bucket_size[None]


def _per_variable(fn: Callable[..., Any], updates: Any, params: Any,
                  mask: Any, owner: str) -> Any:
  """fn(update, variable, mask) on every variable that is not masked out."""
  if params is None:
    raise ValueError(f'{owner}: update() needs params (the variables).')
  if mask is None:
    mask = jax.tree.map(lambda _: 1.0, updates, is_leaf=_is_masked)
  return jax.tree.map(
      lambda g, v, m: g if _is_masked(g) else fn(g, v, m),
      updates, params, mask, is_leaf=_is_masked)



def _optax_option(fn):
  """Adds Pax's `use_optax_gradient_transformations` argument to a function
  returning a ShardedGradientTransformation: True returns a plain
  `optax.GradientTransformationExtraArgs` (no partition-spec function)."""

  @functools.wraps(fn)
  def wrapper(*args: Any, use_optax_gradient_transformations: bool = False,
              **kwargs: Any) -> Any:
    tx = fn(*args, **kwargs)
    if not use_optax_gradient_transformations:
      return tx
    return optax.GradientTransformationExtraArgs(
        tx.init, lambda u, s, params=None, **_: tx.update(u, s, params))

  sig = inspect.signature(fn)
  wrapper.__signature__ = sig.replace(parameters=[
      *sig.parameters.values(),
      inspect.Parameter('use_optax_gradient_transformations',
                        inspect.Parameter.POSITIONAL_OR_KEYWORD,
                        default=False, annotation=bool)])
  return wrapper


@_optax_option
def apply_lp_regularizer(
    var_lp_mask: Any,
    regularizer_weight: float | None = 0.0,
    p: float = 2.0,
    skip_lp_1d_vectors: bool = False,
) -> ShardedGradientTransformation:
  """Adds the gradient of an L1 or L2 penalty: g + w * sign(v), g + w * v.

  Always present in an optimizer's chain (Pax's state layout), with a
  `NestedMap(count=...)` state; a zero weight leaves the updates alone.

  Args:
    var_lp_mask: Tree of bools, False for variables to leave alone (those in
      the SKIP_LP_REGULARIZATION collection), or None.
    regularizer_weight: The weight w; 0 or None disables the penalty.
    p: 1 (L1) or 2 (L2, i.e. the gradient of w / 2 * ||v||^2).
    skip_lp_1d_vectors: Also leave alone variables of rank <= 1.

  Returns:
    The transformation.
  """
  if p not in (1.0, 2.0):
    raise ValueError(f'apply_lp_regularizer: p must be 1 or 2, got {p}.')

  def penalty(g, v, m):
    keep = 0.0 if skip_lp_1d_vectors and v.ndim <= 1 else 1.0
    grad = jnp.sign(v) if p == 1.0 else v
    return (g + regularizer_weight * grad * m * keep).astype(g.dtype)

  def update_fn(updates, params, count):
    del count
    if not regularizer_weight:
      return updates
    return _per_variable(penalty, updates, params, var_lp_mask,
                         'apply_lp_regularizer')

  return _counted(update_fn)


@_optax_option
def apply_decoupled_weight_decay(
    learning_rate_fn: Schedule,
    var_wd_mask: Any,
    regularizer_weight: float | None = 0.0,
) -> ShardedGradientTransformation:
  """Adds -lr(count) * w * v to the update of each variable v (AdamW-style).

  Always present in an optimizer's chain, like `apply_lp_regularizer`.

  Args:
    learning_rate_fn: The learning rate schedule.
    var_wd_mask: Tree of bools, False for variables to leave alone, or None.
    regularizer_weight: The weight w; 0 or None disables the decay.

  Returns:
    The transformation.
  """

  def update_fn(updates, params, count):
    if not regularizer_weight:
      return updates
    lr = learning_rate_fn(count)
    return _per_variable(
        lambda g, v, m: (g - lr * regularizer_weight * v * m).astype(g.dtype),
        updates, params, var_wd_mask, 'apply_decoupled_weight_decay')

  return _counted(update_fn)


@_optax_option
def apply_ewc_regularization(
    learning_rate_fn: Schedule,
    ewc_regularizer_weight: float = 0.0,
    ewc_weight_per_var: Any = None,
) -> ShardedGradientTransformation:
  """Elastic weight consolidation: pulls variables to their first values.

  Adds -lr * w * (v - v0) to each update, with w = ewc_regularizer_weight / 2
  (times `ewc_weight_per_var` if given) and v0 the variables at the first
  update (https://arxiv.org/abs/1612.00796).

  Args:
    learning_rate_fn: The learning rate schedule.
    ewc_regularizer_weight: The weight; <= 0 disables EWC.
    ewc_weight_per_var: Optional tree of per-variable weights.

  Returns:
    The transformation.
  """
  if ewc_regularizer_weight <= 0.0:
    return _sharded(optax.identity())

  def init_fn(params):
    weights = jax.tree.map(
        lambda v: jnp.asarray(ewc_regularizer_weight / 2, v.dtype), params)
    if ewc_weight_per_var is not None:
      weights = jax.tree.map(lambda w, s: (w * s).astype(w.dtype), weights,
                             ewc_weight_per_var)
    return NestedMap(count=jnp.zeros([], jnp.int32),
                     pretrain_vars=jax.tree.map(jnp.copy, params),
                     var_weights=weights)

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError('apply_ewc_regularization needs params in update().')
    lr = learning_rate_fn(state.count)
    first = state.count == 0
    anchor = jax.tree.map(lambda v, v0: jnp.where(first, v, v0), params,
                          state.pretrain_vars)
    updates = jax.tree.map(lambda g, v, w, v0: g - lr * w * (v - v0),
                           updates, params, state.var_weights, anchor)
    return updates, NestedMap(count=state.count + 1, pretrain_vars=anchor,
                              var_weights=state.var_weights)

  return _sharded(optax.GradientTransformation(init_fn, update_fn))


@_optax_option
def apply_ema_weights(decay: float) -> ShardedGradientTransformation:
  """Keeps an exponential moving average of the variables in the state.

  Unlike `optax.ema` (which averages updates and changes training), this
  averages the weights and leaves updates alone: at each update
  ema = d * ema + (1 - d) * v, with d = min(decay, (1 + n) / (10 + n)) after
  n updates and v the variables before the update. Integer variables are
  copied. Read the average with `extract_ema(opt_state)`.

  Args:
    decay: The decay, in (0, 1).

  Returns:
    The transformation; its state is NestedMap(count=..., ema=...).
  """

  def init_fn(params):
    return NestedMap(count=jnp.zeros([], jnp.int32),
                     ema=jax.tree.map(jnp.copy, params))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError('apply_ema_weights needs params in update().')
    d = jnp.minimum(decay, (1.0 + state.count) / (10.0 + state.count))

    def average(old, new):
      if not jnp.issubdtype(old.dtype, jnp.inexact):
        return new
      return (d * old + (1.0 - d) * new).astype(old.dtype)

    ema = jax.tree.map(average, state.ema, params)
    return updates, NestedMap(count=state.count + 1, ema=ema)

  return _sharded(optax.GradientTransformation(init_fn, update_fn))


def _find_ema(node: Any) -> Any:
  if isinstance(node, dict) and set(node) == {'count', 'ema'}:
    return node['ema']
  if _is_array_leaf(node):
    return None
  for child in _children(node)[0]:
    found = _find_ema(child)
    if found is not None:
      return found
  return None


def extract_ema(opt_state: Any) -> Any:
  """The moving average of the variables kept by `apply_ema_weights`.

  Args:
    opt_state: The state of a transformation with EMA (`ema_decay > 0`).

  Returns:
    The averaged variables.
  """
  found = _find_ema(opt_state)
  if found is None:
    raise ValueError(
        'No EMA in the optimizer state: set ema_decay > 0 on the optimizer.'
    )
  return found
