"""Pax 1.4's Flax `state` item (pmap models): one msgpack file.

Private to checkpoint_managers.py.

`state/checkpoint` is a msgpack map `{'flattened_state': [leaf, ...],
'str_pytree_state': str(treedef)}`, the leaves of the TrainState in
`jax.tree.flatten` order (praxis' `BpropMaskedNode`s count as leaves,
`optax.MaskedNode`s have none). Old Pax also wrote the file itself as
`checkpoints/checkpoint_<step>`.

A pmap state saved with its device axis (Pax's tests save replicated
states) restores into the unreplicated shapes when its copies are equal; if
they differ, the leaf is restored as stored, with the extra axis, as Pax's
Flax restore keeps every leaf.
"""

from __future__ import annotations

from typing import Any

from absl import logging
from etils import epath
import flax.serialization
import jax
import numpy as np
from paxml import _checkpoint_safety
from paxml import _zarr_metadata_key
from praxis import py_utils

FILE_NAME = 'checkpoint'


def is_flax_state(state_dir: epath.Path) -> bool:
  """Whether the state item (or legacy file) is a Flax msgpack."""
  return state_dir.is_file() or (
      (state_dir / FILE_NAME).is_file()
      and not (state_dir / 'manifest.ocdbt').exists()
      and not any((p / _zarr_metadata_key.get()).exists()
                  for p in state_dir.iterdir()))


def _flatten(state: Any) -> tuple[list[Any], Any]:
  return jax.tree_util.tree_flatten(
      state, is_leaf=py_utils.is_bprop_masked_node)


def save_state(directory: epath.PathLike, state: Any) -> None:
  """Writes `state/checkpoint` (arrays fetched to the host first)."""
  directory = epath.Path(directory)
  leaves, treedef = _flatten(jax.device_get(state))
  target = {'flattened_state': [np.asarray(x) for x in leaves],
            'str_pytree_state': str(treedef)}
  if jax.process_index() != 0:
    return
  directory.mkdir(parents=True, exist_ok=True)
  (directory / FILE_NAME).write_bytes(flax.serialization.msgpack_serialize(
      target))


def _leaf_name(path: Any) -> str:
  return jax.tree_util.keystr(path)


def restore_state(state_dir: epath.PathLike, abstract_state: Any,
                  strict: bool = True) -> Any:
  """Reads a Flax state item into the shapes/shardings of `abstract_state`.

  Args:
    state_dir: `checkpoint_<step>/state` (or a legacy msgpack file).
    abstract_state: TrainState of ShapeDtypeStructs (or arrays).
    strict: False to read the leading part of the stored leaves, e.g. step
      and model variables into a state without optimizer states (the fields
      flatten in the order step, mdl_vars, opt_states, extra_state).

  Returns:
    The TrainState of jax.Arrays.
  """
  state_dir = epath.Path(state_dir)
  path = state_dir if state_dir.is_file() else state_dir / FILE_NAME
  try:
    target = flax.serialization.msgpack_restore(path.read_bytes())
    stored = list(target['flattened_state'])
  except (ValueError, KeyError, TypeError) as e:
    raise _checkpoint_safety.CheckpointDamagedError(
        path, f'not a Pax Flax checkpoint (truncated or another format): '
        f'{e}') from e
  wanted = jax.tree_util.tree_flatten_with_path(
      abstract_state, is_leaf=py_utils.is_bprop_masked_node)[0]
  if not strict and len(stored) > len(wanted):
    stored = stored[:len(wanted)]
  if len(stored) != len(wanted):
    raise ValueError(
        f'Checkpoint {path} holds {len(stored)} arrays but the model state '
        f'has {len(wanted)}: it was written for another model or optimizer.')
  out = []
  for (key, want), value in zip(wanted, stored):
    if py_utils.is_bprop_masked_node(want):
      out.append(want)
      continue
    out.append(_to_array(np.asarray(value), want, _leaf_name(key), path))
  treedef = _flatten(abstract_state)[1]
  return jax.tree_util.tree_unflatten(treedef, out)


def _is_device_copies(value: np.ndarray, want: Any) -> bool:
  """Whether `value` is `want`'s shape with a leading per-device axis."""
  return value.ndim == len(np.shape(want)) + 1 and (
      tuple(value.shape[1:]) == tuple(np.shape(want)))


def _to_array(value: np.ndarray, want: Any, name: str,
              path: epath.Path) -> jax.Array:
  if _is_device_copies(value, want):
    if np.array_equal(value, np.broadcast_to(value[:1], value.shape),
                      equal_nan=value.dtype.kind in 'fc'):
      # A pmap state saved replicated (one copy per device): one copy.
      value = value[0]
    else:
      # Copies that differ: not a replicated state. Pax's Flax restore keeps
      # every leaf as stored; so do we (the caller sees the extra axis).
      logging.warning('Checkpoint %s: %s is stored with %d different '
                      'per-device copies %s; restored as stored.', path,
                      name, value.shape[0], value.shape)
      return jax.device_put(value.astype(np.dtype(
          getattr(want, 'dtype', value.dtype))))
  if tuple(value.shape) != tuple(np.shape(want)):
    raise ValueError(
        f'Checkpoint {path}: {name} has shape {tuple(value.shape)} in the '
        f'checkpoint but {tuple(np.shape(want))} in the model.')
  value = value.astype(np.dtype(getattr(want, 'dtype', value.dtype)))
  sharding = getattr(want, 'sharding', None)
  if sharding is None:
    return jax.device_put(value)
  return jax.make_array_from_callback(value.shape, sharding,
                                      lambda index: value[index])
