"""Optimizing stacked (repeated) variables layer by layer.

Public names: NO_PREFIX_KEY, has_no_prefix, partition_params,
get_transformations_with_vectorized_repeat_prefix.

A variable whose `WeightHParams` has a `repeat_prefix` (say [2]) holds the
weights of several layers stacked on leading dimensions. An optimizer should
treat it as that many separate variables: factored optimizers factor each
layer's matrix, a reduction sums each layer alone.
`get_transformations_with_vectorized_repeat_prefix(tx, var_hparams)` wraps
`tx` so that `init` and `update` run `jax.vmap`ped over the prefix
dimensions of each group of variables with the same prefix:

  tx = get_transformations_with_vectorized_repeat_prefix(
      optax.adafactor(1e-3), var_weight_hparams)
  state = tx.init(params)  # {NO_PREFIX_KEY: ..., 'p#2#i-1': ...}

The state is a `NestedMap` keyed by group, as Pax names them: NO_PREFIX_KEY
for the plain variables, else 'p' SEP shape SEP sharding [SEP optimizer
dims], with the dimensions joined by '.' and each sharding entry encoded as
'' (None), 'i<int>', 's<axis name>' or 't<entries joined by ','>' (a tuple);
e.g. 'p#2.2#tsdata,smdl.' for prefix [2, 2] sharded [('data', 'mdl'),
None]. Without stacked variables the state is `tx`'s own (unless
`force_prefix_structure`). Summaries added inside `tx.update` are re-added
outside with the group's prefix shape appended to their names ('u.[2]').
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import optax

from praxis import base_layer
from praxis import optimizers
from praxis import py_utils

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams

NO_PREFIX_KEY = 'no_prefix'
_SEP = '#'


def has_no_prefix(dct: Any) -> bool:
  """Whether a grouped state holds the plain variables' group only."""
  return set(dct.keys()) == {NO_PREFIX_KEY}


def _is_hp(x: Any) -> bool:
  return isinstance(x, WeightHParams)


def _encode_dim(d: Any) -> str:
  if d is None:
    return ''
  if isinstance(d, int):
    return f'i{d}'
  if isinstance(d, (list, tuple)):
    return 't' + ','.join(_encode_dim(e) for e in d)
  return f's{d}'


def _decode_dim(d: str) -> Any:
  if not d:
    return None
  if d[0] == 'i':
    return int(d[1:])
  if d[0] == 's':
    return d[1:]
  return tuple(_decode_dim(e) for e in d[1:].split(',')) if d[1:] else ()


def _prefix_key(hp: WeightHParams, sep: str) -> str:
  """The group of a variable: its prefix shape and shardings."""
  if not hp.repeat_prefix:
    return NO_PREFIX_KEY
  n = len(hp.repeat_prefix)
  sharding = hp.repeat_prefix_split_dims_mapping or [-1] * n
  opt = hp.repeat_optimizer_dims_mapping
  if len(sharding) != n or (opt is not None and len(opt) != n):
    raise ValueError(
        f'WeightHParams: repeat_prefix {hp.repeat_prefix} needs '
        f'repeat_prefix_split_dims_mapping {sharding} and '
        f'repeat_optimizer_dims_mapping {opt} of the same length.')
  key = (f'p{sep}' + '.'.join(str(d) for d in hp.repeat_prefix) + sep +
         '.'.join(_encode_dim(d) for d in sharding))
  if opt is not None and any(d != -1 for d in opt):
    key += sep + '.'.join(_encode_dim(d) for d in opt)
  return key


def _parse_key(key: str, sep: str) -> tuple[list[int], list[Any], Any]:
  """(prefix shape, prefix sharding, optimizer dims or None) of a group."""
  if key == NO_PREFIX_KEY:
    return [], [], None
  parts = key.split(sep)
  shape = [int(d) for d in parts[1].split('.')]
  sharding = [_decode_dim(d) for d in parts[2].split('.')]
  opt = None
  if len(parts) > 3:
    opt = [_decode_dim(d) for d in parts[3].split('.')]
  return shape, sharding, opt


def _group_keys(var_hparams: Any, sep: str) -> list[str]:
  """The groups, sorted (a stable order gives the same program each run)."""
  keys = {_prefix_key(hp, sep)
          for hp in jax.tree.leaves(var_hparams, is_leaf=_is_hp)}
  return sorted(keys | {NO_PREFIX_KEY})


def _is_hp_or_masked(x: Any) -> bool:
  return _is_hp(x) or isinstance(x, optax.MaskedNode)


def _select(tree: Any, var_hparams: Any, key: str, sep: str) -> Any:
  """`tree` with the variables of other groups replaced by MaskedNodes."""
  return jax.tree.map(
      lambda x, hp: x if _prefix_key(hp, sep) == key else optax.MaskedNode(),
      tree, var_hparams, is_leaf=_is_hp_or_masked)


def _vmap_prefix(fn: Callable[..., Any], key: str, sep: str
                 ) -> Callable[..., Any]:
  """`fn` vmapped over the group's prefix dims (outermost first)."""
  shape, _, opt = _parse_key(key, sep)
  for i in reversed(range(len(shape))):
    axis = opt[i] if opt is not None and opt[i] != -1 else None
    fn = jax.vmap(fn, spmd_axis_name=axis)
  return fn


def _with_prefix(spec: Any, shape: list[int], sharding: list[Any]) -> Any:
  """Every WeightHParams of `spec` with this repeat prefix."""
  return jax.tree.map(
      lambda s: dataclasses.replace(
          s, repeat_prefix=list(shape),
          repeat_prefix_split_dims_mapping=list(sharding)),
      spec, is_leaf=_is_hp)


def _ungroup(per_group: dict[str, Any], var_hparams: Any, sep: str) -> Any:
  """One tree in the variables' structure from the groups' trees."""
  keys = list(per_group)
  return jax.tree.map(
      lambda hp, *vals: vals[keys.index(_prefix_key(hp, sep))],
      var_hparams, *per_group.values(), is_leaf=_is_hp)


def _update_collecting_summaries(update_fn, *args):
  with base_layer.JaxContext.new_context():
    updates, state = update_fn(*args)
    return updates, state, base_layer.all_global_summaries()


def _readd_summaries(summaries: dict[str, Any], shape: list[int]) -> None:
  if not summaries or not base_layer.JaxContext.has_context():
    return
  for key, value in summaries.items():
    base_layer.add_global_summary(
        f'{base_layer.trim_summary_type_from_key(key)}.{shape}', value,
        base_layer.get_summary_type_from_key(key))


class _PrefixVectorizationTransform(optax.GradientTransformationExtraArgs):
  """A vectorized plain optax transformation; keeps the original."""

  def __new__(cls, init, update, original_grad_tx):
    self = super().__new__(cls, init, update)
    self.original_grad_tx = original_grad_tx
    return self


def get_transformations_with_vectorized_repeat_prefix(
    tx: Any,
    var_hparams: Any,
    repeat_prefix_sep: str = _SEP,
    force_prefix_structure: bool = False,
) -> Any:
  """`tx` applied separately to each layer of stacked variables.

  Args:
    tx: An optax or `optimizers.ShardedGradientTransformation`.
    var_hparams: `WeightHParams` of the variables `tx` will see.
    repeat_prefix_sep: Separator in the group names.
    force_prefix_structure: Keep the grouped state even without stacked
      variables (for old checkpoints).

  Returns:
    A transformation of the same kind (see the module doc).
  """
  sep = repeat_prefix_sep
  keys = _group_keys(var_hparams, sep)
  flat = keys == [NO_PREFIX_KEY] and not force_prefix_structure

  def grouped(per_group: dict[str, Any]) -> Any:
    return per_group[NO_PREFIX_KEY] if flat else NestedMap(per_group)

  def init(params):
    return grouped({k: _vmap_prefix(tx.init, k, sep)(
        _select(params, var_hparams, k, sep)) for k in keys})

  def update(updates, state, params=None):
    state = {NO_PREFIX_KEY: state} if flat else state
    new_updates, new_state = {}, {}
    for k in keys:
      group_params = (None if params is None
                      else _select(params, var_hparams, k, sep))
      new_updates[k], new_state[k], summaries = _vmap_prefix(
          lambda *a: _update_collecting_summaries(tx.update, *a), k, sep)(
              _select(updates, var_hparams, k, sep), state[k], group_params)
      _readd_summaries(summaries, _parse_key(k, sep)[0])
    return _ungroup(new_updates, var_hparams, sep), grouped(new_state)

  spec_fn = getattr(tx, 'init_partition_spec', None)
  if not callable(spec_fn):
    spec_fn = functools.partial(optimizers.partition_params, tx)

  def init_partition_spec(hparams):
    specs = {}
    for k in keys:
      shape, sharding, _ = _parse_key(k, sep)
      group = jax.tree.map(
          lambda s: dataclasses.replace(
              s, repeat_prefix=None, repeat_prefix_split_dims_mapping=None),
          _select(hparams, hparams, k, sep), is_leaf=_is_hp)
      specs[k] = _with_prefix(spec_fn(group), shape, sharding)
    return grouped(specs)

  if isinstance(tx, optimizers.ShardedGradientTransformation):
    return optimizers.ShardedGradientTransformation(
        init=init, update=update, init_partition_spec=init_partition_spec)
  return _PrefixVectorizationTransform(init, update, tx)


def partition_params(
    grad_tx: Any,
    var_weight_hparams: Any,
    opt_states: Any,
    repeat_prefix_sep: str = _SEP,
) -> Any:
  """The sharding of an optimizer state, vectorized or not.

  Args:
    grad_tx: The transformation that made `opt_states`.
    var_weight_hparams: `WeightHParams` of the variables.
    opt_states: The state (arrays or shapes).
    repeat_prefix_sep: Separator in the group names (for Pax compatibility;
      the groups are read from the state).

  Returns:
    A tree of the state's structure with `WeightHParams` leaves.
  """
  del repeat_prefix_sep
  return optimizers.partition_params(grad_tx, var_weight_hparams, opt_states)


# Names Pax 1.4's module also has (aliases of other modules' names).
GeneralGradientTransformation = optimizers.GeneralGradientTransformation
ShardedGradientTransformation = optimizers.ShardedGradientTransformation
