"""The `metadata` item of a checkpoint: version and per-variable metadata.

Public names: PAX_METADATA_ITEM_NAME, METADATA_ITEM_NAME, ARRAY_METADATA_TAG,
IS_OPTAX_MASKED_NODE, UNPADDED_SHAPE, DTYPE, TRAIN_STATE_METADATA,
ArrayMetadata, PaxMetadata, make_metadata, metadata_exists, save_metadata,
restore_metadata, get_version, get_version_key.

From version 1.1 on, `checkpoint_<step>/metadata/metadata` is JSON:

  {"version": 1.1, "train_state_metadata": {"mdl_vars": {"params": {"w":
    {"_array_metadata_tag": true, "dtype": "float32",
     "is_optax_masked_node": false, "unpadded_shape": [8, 16]}}}}}

Only the model variables are described (optimizer states are often not
JSON-able). A restore compares the saved description with the model's:

  saved = checkpoint_metadata.PaxMetadata.from_dict(
      checkpoint_metadata.restore_metadata(step_dir))
  wanted = checkpoint_metadata.PaxMetadata.from_padded_and_unpadded(
      padded_state, unpadded_shapes, version=1.1)
  assert wanted.is_compatible(saved)
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping

from absl import logging
from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp
from paxml import checkpoint_version
from praxis import py_utils

PAX_METADATA_ITEM_NAME = 'pax_metadata'
METADATA_ITEM_NAME = 'metadata'

ARRAY_METADATA_TAG = '_array_metadata_tag'
IS_OPTAX_MASKED_NODE = 'is_optax_masked_node'
UNPADDED_SHAPE = 'unpadded_shape'
DTYPE = 'dtype'
TRAIN_STATE_METADATA = 'train_state_metadata'

get_version = checkpoint_version.get_version
get_version_key = checkpoint_version.get_version_key


def _trees_are_equal(
    a_tree: Any,
    b_tree: Any,
    equal_fn: Callable[[Any, Any], bool] | None = None,
    treedef: bool = False,
) -> bool:
  """Whether the leaves of two trees are pairwise equal under `equal_fn`.

  Args:
    a_tree: A pytree.
    b_tree: Another pytree.
    equal_fn: Compares two leaves (default `==`).
    treedef: Also require the same tree structure.

  Returns:
    True when every pair of leaves (in flattening order) compares equal.
  """
  a_leaves, a_def = jax.tree_util.tree_flatten(a_tree)
  b_leaves, b_def = jax.tree_util.tree_flatten(b_tree)
  if treedef and a_def != b_def:
    return False
  if len(a_leaves) != len(b_leaves):
    return False
  equal_fn = equal_fn or (lambda a, b: a == b)
  return all(equal_fn(a, b) for a, b in zip(a_leaves, b_leaves))


@dataclasses.dataclass
class ArrayMetadata:
  """What the metadata says about one variable.

  Attributes:
    unpadded_shape_dtype_struct: Its shape (before any padding) and dtype, or
      None when unknown (e.g. a masked node).
    is_optax_masked_node: Whether the variable is an `optax.MaskedNode`.
  """

  unpadded_shape_dtype_struct: jax.ShapeDtypeStruct | None
  is_optax_masked_node: bool

  def to_dict(self) -> dict[str, Any]:
    """The JSON-able form (keys sorted as written on disk)."""
    d = {ARRAY_METADATA_TAG: True,
         IS_OPTAX_MASKED_NODE: bool(self.is_optax_masked_node)}
    sds = self.unpadded_shape_dtype_struct
    if sds is not None:
      d[DTYPE] = str(np.dtype(sds.dtype))
      d[UNPADDED_SHAPE] = [int(n) for n in sds.shape]
    return dict(sorted(d.items()))

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> ArrayMetadata:
    """Reads `to_dict`'s form back."""
    if IS_OPTAX_MASKED_NODE not in d:
      raise ValueError(
          f'Array metadata {dict(d)!r} lacks {IS_OPTAX_MASKED_NODE!r}.')
    sds = None
    if UNPADDED_SHAPE in d and DTYPE in d:
      sds = jax.ShapeDtypeStruct(tuple(d[UNPADDED_SHAPE]), np.dtype(d[DTYPE]))
    return cls(unpadded_shape_dtype_struct=sds,
               is_optax_masked_node=bool(d[IS_OPTAX_MASKED_NODE]))

  def equals(self, other: ArrayMetadata) -> bool:
    """Same masked-ness, shape and dtype."""
    return (self.is_optax_masked_node == other.is_optax_masked_node
            and self.unpadded_shape_dtype_struct
            == other.unpadded_shape_dtype_struct)

  def is_compatible(self, other: ArrayMetadata) -> bool:
    """Both masked, or `equals`."""
    if self.is_optax_masked_node and other.is_optax_masked_node:
      return True
    return self.equals(other)


def _is_array_metadata_dict(x: Any) -> bool:
  return isinstance(x, Mapping) and bool(x.get(ARRAY_METADATA_TAG))


def _to_nested_dict(node: Any) -> Any:
  """Dicts, lists and dataclasses (flax structs) of leaves as JSON-able dicts.

  Empty containers stay (as `{}` or `[]`); tuples become lists.
  """
  if isinstance(node, ArrayMetadata):
    return node.to_dict()
  if isinstance(node, Mapping):
    return {str(k): _to_nested_dict(v) for k, v in node.items()}
  if isinstance(node, (list, tuple)):
    return [_to_nested_dict(v) for v in node]
  if dataclasses.is_dataclass(node) and not isinstance(node, type):
    return {f.name: _to_nested_dict(getattr(node, f.name))
            for f in dataclasses.fields(node)}
  return node


def _from_nested_dict(node: Any) -> Any:
  if _is_array_metadata_dict(node):
    return ArrayMetadata.from_dict(node)
  if isinstance(node, Mapping):
    return {k: _from_nested_dict(v) for k, v in node.items()}
  if isinstance(node, list):
    return [_from_nested_dict(v) for v in node]
  return node


def _state_fields(train_state: Any, mdl_vars_only: bool) -> dict[str, Any]:
  fields = {'mdl_vars': train_state.mdl_vars}
  if not mdl_vars_only:
    fields.update(step=train_state.step, opt_states=train_state.opt_states,
                  extra_state=train_state.extra_state)
  return fields


def _array_metadata(padded: Any, unpadded: Any) -> ArrayMetadata:
  sds = None
  if unpadded is not None and not py_utils.is_optax_masked_node(unpadded):
    sds = jax.ShapeDtypeStruct(tuple(unpadded.shape), unpadded.dtype)
  return ArrayMetadata(
      unpadded_shape_dtype_struct=sds,
      is_optax_masked_node=py_utils.is_optax_masked_node(padded))


@dataclasses.dataclass
class PaxMetadata:
  """The metadata of a checkpoint of version > 1.0.

  Attributes:
    version: The checkpoint version.
    train_state_metadata: A tree of `ArrayMetadata` (the model variables).
  """

  version: float
  train_state_metadata: Any

  def to_dict(self) -> dict[str, Any]:
    """The JSON-able form written to `metadata/metadata`."""
    return {
        checkpoint_version.get_version_key(): self.version,
        TRAIN_STATE_METADATA: _to_nested_dict(self.train_state_metadata),
    }

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> PaxMetadata:
    """Reads `to_dict`'s form (or the JSON file's content) back."""
    tree = d.get(TRAIN_STATE_METADATA)
    if tree is None:
      raise ValueError(
          f'{TRAIN_STATE_METADATA!r} is required for version > 1.0, got the '
          f'keys {sorted(d)}.')
    return cls(version=d[checkpoint_version.get_version_key()],
               train_state_metadata=_from_nested_dict(tree))

  @classmethod
  def from_padded_and_unpadded(
      cls,
      padded: Any,
      unpadded: Any | None,
      version: float,
      mdl_vars_only: bool = True,
  ) -> PaxMetadata:
    """Describes a train state from its padded and unpadded shapes.

    Args:
      padded: The `TrainState` as stored (arrays or ShapeDtypeStructs).
      unpadded: The `TrainState` of unpadded ShapeDtypeStructs, or None.
      version: The checkpoint version.
      mdl_vars_only: Describe only `mdl_vars` (as Pax writes).

    Returns:
      The metadata.
    """
    padded_d = _state_fields(padded, mdl_vars_only)
    is_leaf = py_utils.is_optax_masked_node
    if unpadded is None:
      tree = jax.tree.map(lambda p: _array_metadata(p, None), padded_d,
                          is_leaf=is_leaf)
    else:
      tree = jax.tree.map(_array_metadata, padded_d,
                          _state_fields(unpadded, mdl_vars_only),
                          is_leaf=is_leaf)
    return cls(version=version, train_state_metadata=tree)

  def equals(self, other: PaxMetadata) -> bool:
    """Same version and the same metadata for every variable."""
    return self.version == other.version and _trees_are_equal(
        self.train_state_metadata, other.train_state_metadata,
        equal_fn=lambda a, b: a.equals(b))

  def is_compatible(self, other: PaxMetadata) -> bool:
    """Every variable compatible (the version may differ)."""
    return _trees_are_equal(
        self.train_state_metadata, other.train_state_metadata,
        equal_fn=lambda a, b: a.is_compatible(b))


def make_metadata(
    version: float | None = None,
    train_state: Any | None = None,
    train_state_unpadded_shape_dtype_struct: Any | None = None,
    tensorstore_use_ocdbt: bool | None = None,
) -> dict[str, Any]:
  """The metadata dict of a checkpoint of `train_state`.

  Args:
    version: The version (default: `get_version(tensorstore_use_ocdbt)`).
    train_state: The (padded) state saved; required for version > 1.
    train_state_unpadded_shape_dtype_struct: Its unpadded shapes (default:
      the state's own shapes).
    tensorstore_use_ocdbt: Picks the default version.

  Returns:
    `{'version': v}` for version <= 1, else `PaxMetadata.to_dict()`.
  """
  if version is None:
    version = get_version(tensorstore_use_ocdbt=tensorstore_use_ocdbt)
  if version <= 1:
    return {get_version_key(): version}
  if train_state is None:
    raise ValueError('make_metadata: `train_state` is required for version '
                     f'{version} (> 1), to describe the variables.')
  unpadded = train_state_unpadded_shape_dtype_struct
  if unpadded is None:
    logging.info('No unpadded shapes given: the train state is taken to '
                    'be unpadded.')
    unpadded = train_state
  return PaxMetadata.from_padded_and_unpadded(
      train_state, unpadded, version=version).to_dict()


def _metadata_file(directory: epath.PathLike) -> epath.Path:
  return epath.Path(directory) / METADATA_ITEM_NAME / METADATA_ITEM_NAME


def metadata_exists(directory: epath.PathLike) -> bool:
  """Whether the step directory has a `metadata` item."""
  return (epath.Path(directory) / METADATA_ITEM_NAME).is_dir()


def save_metadata(directory: epath.PathLike,
                  metadata: Mapping[str, Any]) -> None:
  """Writes `metadata/metadata` (JSON) under the step directory."""
  path = _metadata_file(directory)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(metadata))


def restore_metadata(directory: epath.PathLike) -> dict[str, Any]:
  """Reads `metadata/metadata` of the step directory."""
  path = _metadata_file(directory)
  if not path.exists():
    raise FileNotFoundError(f'No checkpoint metadata file {path}.')
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f'Checkpoint metadata {path} is not JSON: {e}') from e


# Names Pax 1.4's module also has (aliases of other modules' names).
Checkpointer = ocp.Checkpointer
