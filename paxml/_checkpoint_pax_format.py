"""Pax 1.4's `state` item: one TensorStore array per variable, by name.

Private to checkpoints.py and checkpoint_managers.py.

Pax names every leaf of a `TrainState` by its path: dict keys and attributes
joined with '.', sequence indices appended with '_' (`step`,
`mdl_vars.params.lm.final_ln.scale`, `opt_states_0.no_prefix_2.m.params...`).
`optax.MaskedNode`s have no array and no name. Version 1.1 (Pax's default)
stores each leaf as a zarr array in `state/<name>/`; version 1.2 stores them
in one OCDBT database in `state/` under Orbax's names (every key joined with
'.', `opt_states.0.no_prefix.2.m...`). Orbax writes version 1.1 here
(`PyTreeCheckpointHandler(use_ocdbt=False)` on the flat `{name: array}`
dict); reads go straight to TensorStore, one shard per device, so any
checkpoint restores onto any mesh.
"""

from __future__ import annotations

import re
from typing import Any

from etils import epath
import jax
import numpy as np
from paxml import _checkpoint_safety
from paxml import _zarr_metadata_key
from praxis import py_utils
import tensorstore as ts

_FIELDS = ('step', 'mdl_vars', 'opt_states', 'extra_state')
_MAX_REPORTED = 5
# optax's Adam/Lion slots (mu, nu), which this project's optimizers stored
# before they took Pax's layout (m, v).
_OPTAX_SLOT = re.compile(r'^opt_states.*[._](mu|nu)\.')
_PAX_SLOT = re.compile(r'^opt_states.*[._](m|v)\.')
_OLD_LAYOUT_HINT = (
    "its optimizer slots are optax's (mu, nu) where the model's optimizer "
    "keeps Pax's (m, v): e.g. written by this project before its Adam and "
    'Lion states took Pax\'s layout; restore only its model variables '
    '(e.g. with init_from_checkpoint_rules)')


def _key_part(key: Any, pax_style: bool) -> str:
  if isinstance(key, jax.tree_util.SequenceKey):
    return f'_{key.idx}' if pax_style else f'.{key.idx}'
  for attr in ('key', 'name'):
    if hasattr(key, attr):
      return f'.{getattr(key, attr)}'
  return f'.{key}'


def named_leaves(state: Any, pax_style: bool = True) -> list[tuple[str, Any]]:
  """(name, leaf) of every array of a TrainState, masked nodes left out.

  Args:
    state: A `TrainState` (of arrays, ShapeDtypeStructs or specs).
    pax_style: Pax 1.1 names (`opt_states_0`); else Orbax/OCDBT names
      (`opt_states.0`).

  Returns:
    The leaves in `jax.tree.flatten` order of the state, masked nodes
    excluded.
  """
  out = []
  for field in _FIELDS:
    value = getattr(state, field, None)
    if value is None:
      continue
    leaves = jax.tree_util.tree_flatten_with_path(
        value, is_leaf=py_utils.is_optax_masked_node)[0]
    for path, leaf in leaves:
      if py_utils.is_optax_masked_node(leaf):
        continue
      name = field + ''.join(_key_part(k, pax_style) for k in path)
      out.append((name, leaf))
  return out


def flat_state(state: Any) -> dict[str, Any]:
  """`{pax_name: leaf}` of a TrainState (what version 1.1 writes)."""
  return dict(named_leaves(state))


def is_ocdbt(state_dir: epath.Path) -> bool:
  """Whether the state item is one OCDBT database (version 1.2)."""
  return (state_dir / 'manifest.ocdbt').exists()


def _spec(state_dir: epath.Path, name: str, ocdbt: bool) -> dict[str, Any]:
  if ocdbt:
    kvstore = {'driver': 'ocdbt', 'base': f'file://{state_dir}',
               'path': name}
  else:
    kvstore = {'driver': 'file', 'path': str(state_dir / name)}
  return _zarr_metadata_key.tensorstore_spec(kvstore)


def _open(state_dir: epath.Path, name: str, ocdbt: bool) -> ts.TensorStore:
  try:
    return ts.open(_spec(state_dir, name, ocdbt), open=True).result()
  except ValueError as e:
    raise _checkpoint_safety.CheckpointDamagedError(
        state_dir / name, f'cannot read variable {name!r}: {e}') from e


def _stored_names(state_dir: epath.Path, ocdbt: bool) -> set[str]:
  header = _zarr_metadata_key.get()
  if not ocdbt:
    return {p.name for p in state_dir.iterdir() if (p / header).exists()}
  kv = ts.KvStore.open(
      {'driver': 'ocdbt', 'base': f'file://{state_dir}'}).result()
  keys = kv.list().result()
  return {k.decode().rsplit('/', 1)[0] for k in keys
          if k.decode().endswith('/' + header)}


def _header_hint(array_dir: epath.Path) -> str:
  """Why an array's directory was not read: its header's name differs."""
  files = sorted(p.name for p in array_dir.iterdir()
                 if not p.name[:1].isdigit())
  return (f'{array_dir.name} has no zarr header named '
          f'{_zarr_metadata_key.get()!r} (its files: {files}); set '
          'task.train.tensorstore_metadata_key to the name it was written with')


def _shape(leaf: Any) -> tuple[int, ...]:
  return tuple(np.shape(leaf))


def _to_array(store: ts.TensorStore, want: Any, path: Any) -> jax.Array:
  dtype = np.dtype(getattr(want, 'dtype', store.dtype.numpy_dtype))

  def read(index):
    try:
      return np.asarray(store[index].read().result()).astype(dtype)
    except Exception as e:  # pylint: disable=broad-except
      # TensorStore's DATA_LOSS, OUT_OF_RANGE (truncated or garbled chunks).
      raise _checkpoint_safety.CheckpointDamagedError(
          path, f'array data unreadable ({type(e).__name__}: '
          f'{str(e).splitlines()[0] if str(e) else e!r})') from e

  sharding = getattr(want, 'sharding', None)
  if sharding is None:
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return jax.make_array_from_callback(_shape(want), sharding, read)


def restore_state(state_dir: epath.PathLike, abstract_state: Any,
                  strict: bool = True) -> Any:
  """Reads a Pax state item into the shapes and shardings of a TrainState.

  Args:
    state_dir: `checkpoint_<step>/state`.
    abstract_state: `TrainState` of ShapeDtypeStructs (with `sharding`;
      without one a leaf goes to the first device); masked nodes stay.
    strict: Also refuse variables that are only in the checkpoint (False to
      read a part, e.g. the model variables of a full train state).

  Returns:
    The TrainState of `jax.Array`s.

  Raises:
    ValueError: A variable is missing, extra or of another shape; the error
      names them.
  """
  state_dir = epath.Path(state_dir)
  ocdbt = is_ocdbt(state_dir)
  wanted = named_leaves(abstract_state, pax_style=not ocdbt)
  stored = _stored_names(state_dir, ocdbt)
  stores = {n: _open(state_dir, n, ocdbt) for n, _ in wanted if n in stored}
  errors = [
      f'{n!r} has shape {tuple(stores[n].shape)} in the checkpoint but '
      f'{_shape(w)} in the model'
      for n, w in wanted
      if n in stores and tuple(stores[n].shape) != _shape(w)]
  errors = errors[:_MAX_REPORTED]
  if missing := sorted({n for n, _ in wanted} - stored):
    errors.append(f'not in the checkpoint: {missing[:_MAX_REPORTED]} '
                  f'({len(missing)} in all)')
    if not ocdbt and (state_dir / missing[0]).is_dir():
      errors.append(_header_hint(state_dir / missing[0]))
  if strict and (extra := sorted(stored - {n for n, _ in wanted})):
    errors.append(f'not in the model: {extra[:_MAX_REPORTED]} '
                  f'({len(extra)} in all)')
    if (any(_OPTAX_SLOT.search(n) for n in extra)
        and any(_PAX_SLOT.search(n) for n in missing)):
      errors.append(_OLD_LAYOUT_HINT)
  if errors:
    raise ValueError(f'Checkpoint {state_dir} does not fit the model: '
                     + '; '.join(errors) + '.')
  arrays = iter(_to_array(stores[n], w, state_dir / n) for n, w in wanted)
  return jax.tree.map(
      lambda x: x if py_utils.is_optax_masked_node(x) else next(arrays),
      abstract_state, is_leaf=py_utils.is_optax_masked_node)


def stored_shapes(state_dir: epath.PathLike) -> dict[str, tuple[int, ...]]:
  """`{name: shape}` of every array of a state item."""
  state_dir = epath.Path(state_dir)
  ocdbt = is_ocdbt(state_dir)
  return {n: tuple(_open(state_dir, n, ocdbt).shape)
          for n in sorted(_stored_names(state_dir, ocdbt))}
