"""Small JAX utilities shared by praxis and paxml, and the `NestedMap` class.

Public API:

* `NestedMap` (defined in `praxis._nested_map`), registered here as a JAX
  pytree with keys (children in sorted key order, `jax.tree_util.DictKey`
  keys), a flax serialization state and a fiddle daglish node;
  `HParams`, `InstantiableParams` (legacy aliases of `typing.Any`), `JTensor`.
* Trees and dicts: `merge_dict`, `extract_prefixed_keys_from_nested_map`,
  `match_variable_names`, `update_matched_variables`,
  `select_nodes_by_indices`, `total_num_vars`, `tree_unstack`,
  `concat_nested_maps`, `filter_by_matching_keys`, `get_enumeration_id`
  (with `PROVENANCE_PREFIX`, `INDEX_WITHIN_SHARD_KEY`, `SHARD_INDEX_KEY`,
  `NUM_SHARDS_KEY`, `ENUM_PROVENANCE_KEYS`), `BpropMaskedNode`,
  `is_bprop_masked_node`, `is_optax_masked_node`.
* Sequences and masks: `sequence_mask`, `sequence_paddings`, `apply_padding`,
  `get_large_negative_number`, `apply_mask_to_logits`, `flip_sequence`,
  `concat_sequences_with_padding`, `pad_or_trim_to`, `append_eos`,
  `l2_normalize`.
* Devices and sharding: `create_device_mesh`, `global_mesh_defined`,
  `with_sharding_constraint`, `get_uneven_sharding_paddings`,
  `maybe_pad_uneven_sharding`, `maybe_slice_uneven_sharding`,
  `put_to_devices`, `make_array`, `sync_global_devices`, `reshard`,
  `unshard`, `maybe_unreplicate_for_fully_replicated`,
  `maybe_unreplicate_for_first_shard`, `get_global_input_shape_dtype`,
  `set_globally_use_rbg_prng_key`, `is_tpu`, `pmap_use_tensorstore`.
* Misc: `ThreadLocalStack`, `timeit` / `RunningPeriod`, `benchmark`,
  `logging_verbosity_level`, `sharded_file_pattern_to_glob`.

Why this file passes 800 lines: it is praxis's grab-bag of small, independent
helpers (about 45 of them, most under 20 lines), and upstream code expects all
of them at this one import path; `NestedMap` itself lives in the private
sibling `praxis._nested_map`.
"""

import contextlib
import dataclasses
import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple
import warnings

from absl import logging
from fiddle import daglish
import flax.serialization
import jax
from jax.experimental import mesh_utils
from jax.experimental import multihost_utils
from jax.interpreters import pxla
import jax.numpy as jnp
import numpy as np

from praxis import _nested_map

NestedMap = _nested_map.NestedMap
# Pickles and reprs name the public path, whose import also registers the
# class with JAX, flax and fiddle.
NestedMap.__module__ = __name__
JTensor = jax.Array
HParams = Any  # Legacy lingvo `Params`; Pax configs are fiddle Configs now.
InstantiableParams = Any
Patterns = str | re.Pattern | Iterable[str | re.Pattern]

# Keys that SeqIO inputs add to examples to identify them.
PROVENANCE_PREFIX = '_seqio_provenance'
INDEX_WITHIN_SHARD_KEY = f'{PROVENANCE_PREFIX}/index_within_shard'
SHARD_INDEX_KEY = f'{PROVENANCE_PREFIX}/shard_index'
NUM_SHARDS_KEY = f'{PROVENANCE_PREFIX}/num_shards'
ENUM_PROVENANCE_KEYS = (INDEX_WITHIN_SHARD_KEY, SHARD_INDEX_KEY, NUM_SHARDS_KEY)


# ----------------------------------------------------------------------------
# NestedMap registrations: JAX pytree, flax state dict, fiddle daglish.
# ----------------------------------------------------------------------------


def _flatten_nested_map(nmap: NestedMap):
  keys = tuple(sorted(nmap))
  return [nmap[k] for k in keys], keys


def _flatten_nested_map_with_keys(nmap: NestedMap):
  keys = tuple(sorted(nmap))
  return [(jax.tree_util.DictKey(k), nmap[k]) for k in keys], keys


def _nested_map_to_state_dict(nmap: NestedMap) -> dict[str, Any]:
  return flax.serialization.to_state_dict(dict(nmap))


def _nested_map_from_state_dict(
    target: NestedMap, state: dict[str, Any]
) -> NestedMap:
  return NestedMap(flax.serialization.from_state_dict(dict(target), state))


def _register_nested_map() -> None:
  """Registers NestedMap with JAX, flax and fiddle (once per process)."""
  try:
    jax.tree_util.register_pytree_with_keys(
        NestedMap,
        _flatten_nested_map_with_keys,
        _nested_map.from_valid_pairs,  # The keys the flattening took.
        _flatten_nested_map,
    )
  except ValueError:
    logging.warning('NestedMap is already registered as a JAX pytree.')
  flax.serialization.register_serialization_state(
      NestedMap,
      _nested_map_to_state_dict,
      _nested_map_from_state_dict,
      override=True,
  )
  try:
    daglish.register_node_traverser(
        NestedMap,
        flatten_fn=lambda x: (tuple(x.values()), tuple(x.keys())),
        unflatten_fn=lambda values, keys: _nested_map.from_valid_pairs(
            keys, values),
        path_elements_fn=lambda x: tuple(daglish.Key(k) for k in x),
    )
  except ValueError:
    logging.warning('NestedMap is already registered with fiddle daglish.')


_register_nested_map()


# ----------------------------------------------------------------------------
# Generic helpers.
# ----------------------------------------------------------------------------


def pmap_use_tensorstore() -> bool:
  """Always False: pmap checkpoints use the flax (not tensorstore) format."""
  return False


def merge_dict(dict1: Mapping[str, Any], dict2: Mapping[str, Any]) -> dict:
  """Merges two dicts; a key in both must map to the very same object."""
  for key in set(dict1) & set(dict2):
    if dict1[key] is not dict2[key]:
      raise ValueError(
          f'merge_dict: key {key!r} maps to different values: '
          f'{dict1[key]!r} vs {dict2[key]!r}.'
      )
  return {**dict1, **dict2}


class ThreadLocalStack(threading.local):
  """A per-thread list, available as `.stack`."""

  def __init__(self):
    super().__init__()
    self.stack = []


def sharded_file_pattern_to_glob(file_pattern: str) -> str:
  """Turns `path@N` into `path-?????-of-0000N` (and `path@*` into a glob)."""
  if ',' in file_pattern:
    raise ValueError(
        f'sharded_file_pattern_to_glob takes one pattern, got {file_pattern!r}.'
    )
  if '@' not in file_pattern:
    return file_pattern
  path, shards = file_pattern.split('@')
  if shards == '*':
    return f'{path}-?????-of-*'
  return f'{path}-?????-of-{int(shards):05}'


@contextlib.contextmanager
def logging_verbosity_level(level: str) -> Iterator[None]:
  """Sets the absl logging verbosity inside the `with` block."""
  previous = logging.get_verbosity()
  try:
    logging.set_verbosity(level)
    yield
  finally:
    logging.set_verbosity(previous)


@dataclasses.dataclass
class RunningPeriod:
  """Start/end wall-clock times of a timed block (see `timeit`)."""

  start: float
  end: float | None = None
  min_elapsed: float = 0.0

  @property
  def elapsed(self) -> float:
    """Seconds from start to end (or to now, while still running)."""
    end = time.time() if self.end is None else self.end
    return max(end - self.start, self.min_elapsed)


@contextlib.contextmanager
def timeit(min_elapsed: float = 1e-6) -> Iterator[RunningPeriod]:
  """Times the `with` block: `with timeit() as p: ...; p.elapsed`."""
  period = RunningPeriod(start=time.time(), min_elapsed=min_elapsed)
  try:
    yield period
  finally:
    period.end = time.time()


def benchmark(prefix: str = '', first_n: int | None = None):
  """Decorator that logs (absl INFO) the wall time of each call.

  Args:
    prefix: text put in front of each log message.
    first_n: if set, only the first `first_n` calls are timed and logged.

  Returns:
    The decorator.
  """

  def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
    calls = 0
    name = getattr(func, '__qualname__', repr(func))

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
      nonlocal calls
      calls += 1
      if first_n is not None and calls > first_n:
        return func(*args, **kwargs)
      logging.info('%sStarting timer for <%s>', prefix, name)
      start = time.time()
      result = func(*args, **kwargs)
      logging.info(
          '%sElapsed time for <%s>: %.02f seconds',
          prefix,
          name,
          time.time() - start,
      )
      return result

    return wrapper

  return decorator


def get_enumeration_id(
    example: dict[str, Any], pop: bool = False
) -> str | None:
  """Returns the SeqIO provenance id of `example`, or None if it has none.

  Args:
    example: a mapping that may hold the `ENUM_PROVENANCE_KEYS`.
    pop: if True, remove those keys from `example`.

  Returns:
    A string like `'<index key>=3/<shard key>=0/<num shards key>=2'`.
  """
  if not all(k in example for k in ENUM_PROVENANCE_KEYS):
    return None
  get = example.pop if pop else example.__getitem__
  # .item(): a size-1 array too (a batch of 1), which int() refuses in
  # NumPy >= 2.
  return '/'.join(f'{k}={int(np.asarray(get(k)).item())}'
                  for k in ENUM_PROVENANCE_KEYS)


# ----------------------------------------------------------------------------
# Trees.
# ----------------------------------------------------------------------------


def _is_registered_dataclass(node: Any) -> bool:
  """True for dataclass instances that JAX treats as pytree nodes."""
  return (
      dataclasses.is_dataclass(node)
      and not isinstance(node, type)
      and not jax.tree_util.all_leaves([node])
  )


def _prefixed_keys_of_mapping(node, prefix, node_type, **options) -> Any:
  """`extract_prefixed_keys_from_nested_map` for dicts and dataclasses."""
  separator = options['key_separator']
  if node_type is not None:
    items = {
        f.name: getattr(node, f.name)
        for f in dataclasses.fields(node)
        if f.init
    }
  else:
    items = node
  result = {
      key: extract_prefixed_keys_from_nested_map(
          value, f'{prefix}{separator}{key}' if prefix else key, **options
      )
      for key, value in items.items()
  }
  return node_type(**result) if node_type is not None else type(node)(result)


def extract_prefixed_keys_from_nested_map(
    node: Any,
    prefix: str = '',
    key_separator: str = '/',
    left_separator: str = '[',
    right_separator: str = ']',
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
  """Returns `node` with every leaf replaced by its path string.

  Dict keys are joined with `key_separator`, list/tuple indices are wrapped in
  `left_separator`/`right_separator`, namedtuple and pytree-dataclass fields
  are joined like dict keys. Nodes for which `is_leaf` is true become None,
  and so does a bare leaf at the root (it has no path).

  Example:
    `{'a': [x, y], 'b': {'c': z}}` -> `{'a': ['a[0]', 'a[1]'], 'b': {'c':
    'b/c'}}`.

  Args:
    node: the tree.
    prefix: path prepended to every key.
    key_separator: between a parent path and a key.
    left_separator: before a sequence index.
    right_separator: after a sequence index.
    is_leaf: optional predicate; matching subtrees are replaced by None.

  Returns:
    A tree of the same structure holding path strings.
  """
  options = {
      'key_separator': key_separator,
      'left_separator': left_separator,
      'right_separator': right_separator,
      'is_leaf': is_leaf,
  }
  if is_leaf is not None and is_leaf(node):
    return None
  if isinstance(node, dict):
    return _prefixed_keys_of_mapping(node, prefix, None, **options)
  if isinstance(node, jax.sharding.PartitionSpec):
    return prefix
  if isinstance(node, (list, tuple)):
    if hasattr(node, '_fields'):  # A namedtuple: fields behave like keys.
      head = f'{prefix}{key_separator}' if prefix else ''
      return type(node)(**{
          field: extract_prefixed_keys_from_nested_map(
              getattr(node, field), f'{head}{field}', **options
          )
          for field in node._fields
      })
    return type(node)(
        extract_prefixed_keys_from_nested_map(
            value, f'{prefix}{left_separator}{i}{right_separator}', **options
        )
        for i, value in enumerate(node)
    )
  if _is_registered_dataclass(node):
    return _prefixed_keys_of_mapping(node, prefix, type(node), **options)
  return prefix or None



def extract_keys(n: Any, p: str, key_separator: str, left_separator: str,
                 right_separator: str,
                 is_leaf: Callable[[Any], bool] | None) -> Any:
  """`extract_prefixed_keys_from_nested_map` with every option positional."""
  return extract_prefixed_keys_from_nested_map(
      n, p, key_separator=key_separator, left_separator=left_separator,
      right_separator=right_separator, is_leaf=is_leaf)

def select_nodes_by_indices(indices: Any, *trees: Any) -> Any:
  """Builds a tree whose leaf at each path is `trees[indices[path]][path]`."""
  return jax.tree.map(lambda idx, *leaves: leaves[idx], indices, *trees)


def match_variable_names(
    tree: NestedMap,
    patterns: Patterns,
    is_leaf: Callable[..., bool] | None = None,
) -> NestedMap:
  """Returns a bool tree: does each leaf's path fully match a pattern?"""
  from praxis import trees  # pylint: disable=g-import-not-at-top  # (cycle)

  return trees.fullmatch_path(tree, patterns, is_leaf=is_leaf)


def update_matched_variables(
    old_tree: NestedMap,
    new_tree: NestedMap,
    patterns: Patterns,
    invert: bool = False,
) -> NestedMap:
  """Takes leaves whose paths match `patterns` from `new_tree`, rest from old.

  Args:
    old_tree: the tree to update.
    new_tree: same structure as `old_tree`, holding the new values.
    patterns: regexes (`str`, `re.Pattern` or an iterable of them) fully
      matched against `/`-joined leaf paths.
    invert: if True, update the leaves that do NOT match instead.

  Returns:
    The merged tree.
  """
  mask = match_variable_names(old_tree, patterns)
  if invert:
    mask = jax.tree.map(lambda x: not x, mask)
  paths = jax.tree.leaves(extract_prefixed_keys_from_nested_map(old_tree))
  for path, updated in zip(paths, jax.tree.leaves(mask)):
    logging.info(
        'Bprop %s var: %s', 'included' if updated else 'excluded', path
    )
  indices = jax.tree.map(lambda x: 1 if x else 0, mask)
  return select_nodes_by_indices(indices, old_tree, new_tree)


def total_num_vars(variables: Any) -> int:
  """Returns the total number of scalars in all leaves of `variables`."""
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(variables)))


def tree_unstack(tree: Any, axis: int) -> list[Any]:
  """Splits every array leaf along `axis`, giving a list of trees.

  Args:
    tree: a pytree of numpy/JAX arrays that all have the same size on `axis`.
    axis: the axis to unstack.

  Returns:
    A list of `tree.shape[axis]` trees.
  """
  leaves = jax.tree.leaves(tree)
  if not leaves:
    return []
  if not all(isinstance(x, (np.ndarray, jax.Array)) for x in leaves):
    raise ValueError('tree_unstack: every leaf must be a numpy or JAX array.')
  size = leaves[0].shape[axis]
  if not all(x.ndim > axis and x.shape[axis] == size for x in leaves):
    raise ValueError(
        f'tree_unstack: every leaf needs ndim > {axis} and shape[{axis}] == '
        f'{size}.'
    )
  return [
      jax.tree.map(lambda x, i=i: x.take(i, axis), tree) for i in range(size)
  ]


def concat_nested_maps(map_list: list[NestedMap], axis: int) -> NestedMap:
  """Concatenates the JAX arrays of several NestedMaps along `axis`.

  Keys come from `map_list[0]`. A JAX array of rank > `axis` whose key is also
  in `map_list[1]` is concatenated across all maps; nested dicts recurse;
  anything else is copied from the first map.

  Args:
    map_list: NestedMaps with matching keys.
    axis: the axis to concatenate along.

  Returns:
    A NestedMap.
  """
  if len(map_list) < 2:
    return map_list[0]
  first, second = map_list[0], map_list[1]
  result = NestedMap()
  for key, value in first.items():
    if isinstance(value, jax.Array) and key in second and value.ndim > axis:
      value = jnp.concatenate([m[key] for m in map_list], axis=axis)
    elif isinstance(value, dict) and key in second:
      value = concat_nested_maps([m[key] for m in map_list], axis=axis)
    result[key] = value
  return result


def filter_by_matching_keys(
    batch: dict[str, Any], prefixes: Sequence[str] = ()
) -> tuple[NestedMap, NestedMap]:
  """Splits the top-level keys of `batch` by whether they start with a prefix.

  Args:
    batch: a dict or NestedMap.
    prefixes: key prefixes.

  Returns:
    `(matching, non_matching)` NestedMaps.
  """
  matching, non_matching = NestedMap(), NestedMap()
  for key, value in batch.items():
    target = matching if key.startswith(tuple(prefixes)) else non_matching
    target[key] = value
  return matching, non_matching


class BpropMaskedNode(NamedTuple):
  """Placeholder for a variable excluded from back-propagation."""


def is_bprop_masked_node(x: Any) -> bool:
  """True if `x` is a `BpropMaskedNode`."""
  return isinstance(x, BpropMaskedNode)


def is_optax_masked_node(x: Any) -> bool:
  """True if `x` is an `optax.MaskedNode`."""
  import optax  # pylint: disable=g-import-not-at-top  # Heavy, rarely needed.

  return isinstance(x, optax.MaskedNode)


# ----------------------------------------------------------------------------
# Sequences, paddings and masks.
# ----------------------------------------------------------------------------


def get_large_negative_number(dtype: Any) -> JTensor:
  """Returns `-0.7 * max(dtype)` as a scalar of `dtype` (a safe "-inf").

  The dtype is canonicalised first: without x64, int64 gives an int32
  number (0.7 times the int32 maximum).
  """
  dtype = jax.dtypes.canonicalize_dtype(dtype)
  if jnp.issubdtype(dtype, jnp.inexact):
    dtype_max = jnp.finfo(dtype).max
  elif jnp.issubdtype(dtype, jnp.integer):
    dtype_max = jnp.iinfo(dtype).max
  else:
    raise ValueError(f'get_large_negative_number: unsupported dtype {dtype}.')
  return jnp.asarray(-0.7 * dtype_max, dtype=dtype)


def apply_mask_to_logits(logits: JTensor, mask: JTensor) -> JTensor:
  """Masks logits with an additive-style float mask.

  Args:
    logits: the logits.
    mask: 0 where allowed; at most `get_large_negative_number(...) / 2` where
      masked.

  Returns:
    `logits` where allowed and the large negative number elsewhere.
  """
  min_value = get_large_negative_number(logits.dtype)
  return jnp.where(mask >= min_value * 0.5, logits, min_value)


def sequence_mask(
    lengths: JTensor | Sequence[int], maxlen: int, dtype: Any = jnp.bool_
) -> JTensor:
  """Returns `[..., maxlen]`: 1 where `position < length`, else 0."""
  lengths = jnp.asarray(lengths)
  return (jnp.arange(maxlen) < lengths[..., jnp.newaxis]).astype(dtype)


def sequence_paddings(
    lengths: JTensor | Sequence[int], maxlen: int, dtype: Any = jnp.float32
) -> JTensor:
  """Returns `[..., maxlen]`: 1 where `position >= length` (padding)."""
  lengths = jnp.asarray(lengths)
  return (jnp.arange(maxlen) >= lengths[..., jnp.newaxis]).astype(dtype)


def apply_padding(
    inputs: JTensor,
    padding: JTensor,
    pad_value: JTensor | None = None,
    use_select: bool = True,
    axis: int | None = None,
) -> JTensor:
  """Replaces padded positions (`padding` 1/True) of `inputs` by `pad_value`.

  Args:
    inputs: the tensor to pad.
    padding: 0 = keep, 1 = pad; must broadcast against `inputs`.
    pad_value: value for padded positions (default 0); broadcastable.
    use_select: use `jnp.where` (True) or arithmetic masking (False).
    axis: if set, `padding`'s dims from `axis` on are aligned with `inputs`'
      dims from `axis` on (trailing size-1 dims are added or dropped), so a
      `[b, t]` padding works for `[b, t, d]` inputs with `axis=0`.

  Returns:
    A tensor shaped like `inputs`.
  """
  if axis is not None:
    head, tail = list(padding.shape[:axis]), list(padding.shape[axis:])
    inputs_tail = inputs.ndim - axis
    ones = [1] * max(inputs_tail - len(tail), 0)
    padding = jnp.reshape(padding, head + tail[:inputs_tail] + ones)
  if use_select:
    if pad_value is None:
      pad_value = jnp.zeros([], inputs.dtype)
    if padding.dtype != jnp.bool_:
      padding = padding > jnp.zeros([], padding.dtype)
    return jnp.where(padding, pad_value, inputs)
  result = inputs * (1.0 - padding.astype(jnp.float32)).astype(inputs.dtype)
  if pad_value is not None:
    result += pad_value * padding.astype(pad_value.dtype)
  return result


def _flip_one_sequence(inputs: JTensor, length: JTensor) -> JTensor:
  shift = inputs.shape[0] - jnp.asarray(length).astype(jnp.int32)
  return jnp.flip(jnp.roll(inputs, shift, axis=0), axis=0)


_flip_sequences = jax.jit(jax.vmap(_flip_one_sequence))


def flip_sequence(inputs: JTensor, lengths: JTensor) -> JTensor:
  """Reverses the first `lengths[b]` steps of each row `inputs[b]`.

  E.g. row `[1, 2, 3, 0]` with length 3 becomes `[3, 2, 1, 0]`.

  Args:
    inputs: `[batch, time, ...]`.
    lengths: `[batch]` valid lengths.

  Returns:
    The flipped `[batch, time, ...]` tensor.
  """
  return _flip_sequences(inputs, lengths)


def concat_sequences_with_padding(
    input0: JTensor, paddings0: JTensor, input1: JTensor, paddings1: JTensor
) -> tuple[JTensor, JTensor]:
  """Appends each row of `input1` right after the valid part of `input0`.

  Rows must have no leading padding. The whole of `input1` (padded steps
  included) follows the valid part of `input0`.

  Args:
    input0: `[batch, time0, ...]`.
    paddings0: `[batch, time0]`.
    input1: `[batch, time1, ...]`.
    paddings1: `[batch, time1]`.

  Returns:
    `([batch, time0 + time1, ...], [batch, time0 + time1])`.
  """
  if (input0.shape[0], input0.shape[2:]) != (input1.shape[0], input1.shape[2:]):
    raise ValueError(
        f'input0 {input0.shape} and input1 {input1.shape} must agree on all '
        'dims but the time dim (1).'
    )
  for x, p in ((input0, paddings0), (input1, paddings1)):
    if x.shape[:2] != p.shape[:2]:
      raise ValueError(f'input {x.shape} and paddings {p.shape} disagree.')
  return _concat_sequences(input0, paddings0, input1, paddings1)


@jax.jit
def _concat_sequences(input0, paddings0, input1, paddings1):
  """The computation of `concat_sequences_with_padding`."""
  batch, time0, time1 = input0.shape[0], input0.shape[1], input1.shape[1]
  len0 = jnp.sum(1 - paddings0, axis=-1).astype(jnp.int32)
  len1 = jnp.sum(1 - paddings1, axis=-1).astype(jnp.int32)
  full0 = jnp.full([batch], time0, jnp.int32)
  full1 = jnp.full([batch], time1, jnp.int32)
  reversed_concat = jnp.concatenate(
      [flip_sequence(input1, full1), flip_sequence(input0, len0)], axis=1
  )
  outputs = flip_sequence(reversed_concat, len0 + full1)
  reversed_paddings = jnp.concatenate(
      [flip_sequence(paddings0, full0), paddings1], axis=1
  )
  paddings = flip_sequence(reversed_paddings, full0 + len1)
  return outputs, paddings


def pad_or_trim_to(
    x: JTensor | None, shape: Sequence[int], pad_val: Any = 0
) -> JTensor | None:
  """Pads (with `pad_val`, at the end) and slices `x` to exactly `shape`."""
  if x is None:
    return None
  if x.ndim != len(shape):
    raise ValueError(f'pad_or_trim_to: rank of {x.shape} != rank of {shape}.')
  pads = [(0, max(want - have, 0)) for have, want in zip(x.shape, shape)]
  x = jnp.pad(x, pads, constant_values=pad_val)
  return jax.lax.slice(x, [0] * len(shape), list(shape))


def append_eos(
    x: JTensor, paddings: JTensor, eos_id: int, extend_if_overflow: bool = True
) -> tuple[JTensor, JTensor]:
  """Makes every sequence end with `eos_id`.

  A sequence that already ends with `eos_id` is left as is; otherwise eos is
  written at its first padded step. Padded steps of the output hold `eos_id`.

  Args:
    x: `[b, t]` ids.
    paddings: `[b, t]` paddings.
    eos_id: the end-of-sequence id.
    extend_if_overflow: if a full-length sequence needs an eos, widen the
      output to `t + 1` steps (True) or leave that sequence without eos.

  Returns:
    `(ids, paddings)` of shape `[b, t]` or `[b, t + 1]`; the added eos counts
    as a valid (non-padded) step.
  """
  out, out_paddings, out_lengths = _append_eos_padded(x, paddings, eos_id)
  overflow = bool(jnp.any(out_lengths > x.shape[1]))
  width = x.shape[1] + (1 if overflow and extend_if_overflow else 0)
  return out[:, :width], out_paddings.astype(paddings.dtype)[:, :width]


@jax.jit
def _append_eos_padded(x: JTensor, paddings: JTensor, eos_id: Any):
  """`append_eos` on a `[b, t + 1]` canvas; also returns the new lengths."""
  batch, steps = x.shape
  lengths = jnp.sum(1 - paddings, axis=-1).astype(jnp.int32)
  reversed_x = flip_sequence(x, lengths)
  eos_column = jnp.full([batch, 1], eos_id, x.dtype)
  out = flip_sequence(
      jnp.concatenate([eos_column, reversed_x], axis=1), lengths + 1
  )
  needs_eos = jnp.logical_or(lengths == 0, reversed_x[:, 0] != eos_id)
  out_lengths = lengths + needs_eos.astype(jnp.int32)
  out_paddings = sequence_paddings(out_lengths, steps + 1, x.dtype)
  out = out * (1 - out_paddings) + eos_id * out_paddings
  return out, out_paddings, out_lengths


def l2_normalize(
    x: JTensor, axis: int | Sequence[int] = -1, epsilon: float = 1e-12
) -> JTensor:
  """Returns `x / sqrt(sum(x**2, axis) + epsilon)`."""
  norm = jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True) + epsilon)
  return x / norm


# ----------------------------------------------------------------------------
# Devices, meshes and sharding.
# ----------------------------------------------------------------------------


def is_tpu() -> bool:
  """True if the local devices are TPUs."""
  return jax.local_devices()[0].platform == 'tpu'


def create_device_mesh(
    ici_mesh_shape: Sequence[int],
    dcn_mesh_shape: Sequence[int] | None = None,
    contiguous_submeshes: bool | None = False,
) -> np.ndarray:
  """Returns a numpy array of devices shaped `ici_mesh_shape * dcn_mesh_shape`.

  Args:
    ici_mesh_shape: mesh shape within a slice.
    dcn_mesh_shape: mesh shape across slices (multi-slice), or None.
    contiguous_submeshes: ask `mesh_utils` for per-process contiguous
      submeshes (single-slice meshes only).

  Returns:
    The device mesh. On CPU it is simply `jax.devices()` reshaped.
  """
  shape = np.array(ici_mesh_shape)
  multi_slice = dcn_mesh_shape is not None and any(
      d > 1 for d in dcn_mesh_shape
  )
  if multi_slice:
    shape = shape * np.array(dcn_mesh_shape)
  devices = jax.devices()
  if int(np.prod(shape)) != len(devices):
    raise ValueError(
        f'Mesh ici_mesh_shape={list(ici_mesh_shape)} dcn_mesh_shape='
        f'{dcn_mesh_shape} needs {int(np.prod(shape))} devices, but '
        f'{len(devices)} are available.'
    )
  if devices[0].platform == 'cpu':
    mesh = np.array(devices).reshape(tuple(shape))
  elif multi_slice:
    try:
      mesh = mesh_utils.create_hybrid_device_mesh(
          ici_mesh_shape, dcn_mesh_shape, devices=devices
      )
    except AssertionError as e:
      raise ValueError(
          f'dcn_mesh_shape={dcn_mesh_shape} needs multiple slices.'
      ) from e
  else:
    mesh = mesh_utils.create_device_mesh(
        ici_mesh_shape, contiguous_submeshes=bool(contiguous_submeshes)
    )
  logging.info('device_mesh: %s', mesh)
  return mesh


def _legacy_context_mesh() -> jax.sharding.Mesh | None:
  """The mesh of a (deprecated) `with mesh:` block, if one is active."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    resources = getattr(pxla, 'thread_resources', None)
  if resources is None:
    return None
  mesh = resources.env.physical_mesh
  return None if mesh.empty else mesh


def global_mesh_defined() -> bool:
  """True inside `jax.set_mesh(...)` (or a legacy `with mesh:` block)."""
  if not jax.sharding.get_abstract_mesh().empty:
    return True
  return _legacy_context_mesh() is not None


def with_sharding_constraint(x: JTensor, axis_resources: Any) -> JTensor:
  """`jax.lax.with_sharding_constraint`, but a no-op when no mesh is active.

  Args:
    x: the array (traced or concrete).
    axis_resources: a `PartitionSpec` or `Sharding`; None means no constraint.

  Returns:
    `x`, constrained when a mesh is active.
  """
  if axis_resources is None or not global_mesh_defined():
    return x
  if isinstance(axis_resources, jax.sharding.PartitionSpec):
    mesh = _legacy_context_mesh()
    if mesh is None:
      try:
        mesh = jax.sharding.get_mesh()  # Concrete mesh; only outside jit.
      except ValueError:
        mesh = None  # Inside jit the abstract mesh resolves the spec.
    if mesh is not None and not mesh.empty:
      axis_resources = jax.sharding.NamedSharding(mesh, axis_resources)
  return jax.lax.with_sharding_constraint(x, axis_resources)


def get_uneven_sharding_paddings(
    partition_spec: jax.sharding.PartitionSpec,
    shape: Sequence[int],
    mesh_shape: Sequence[int],
    mesh_axis_names: Sequence[str],
) -> list[int]:
  """Per-dim padding that makes `shape` divisible by its shard counts."""
  axis_sizes = dict(zip(mesh_axis_names, mesh_shape))
  paddings = []
  for axes, size in zip(partition_spec, shape):
    axes = [axes] if isinstance(axes, str) else (axes or ())
    shards = int(np.prod([axis_sizes[a] for a in axes]))
    paddings.append((shards - size % shards) % shards)
  return paddings


def maybe_pad_uneven_sharding(
    xs: Any,
    partition_specs: Any,
    unpadded_shapes: Any,
    mesh_shape: Sequence[int],
    mesh_axis_names: Sequence[str],
) -> Any:
  """Zero-pads each leaf at the end of each dim to make it evenly shardable."""

  def pad(x, spec, shape):
    if is_optax_masked_node(x):
      return x
    pads = get_uneven_sharding_paddings(
        spec, shape, mesh_shape, mesh_axis_names
    )
    if not any(pads):
      return x
    x = with_sharding_constraint(x, spec)
    return jnp.pad(x, [(0, p) for p in pads])

  return jax.tree.map(
      pad, xs, partition_specs, unpadded_shapes, is_leaf=is_optax_masked_node
  )


def maybe_slice_uneven_sharding(
    xs: Any, partition_spec: Any, unpadded_shapes: Any, is_leaf: Any = None
) -> Any:
  """Undoes `maybe_pad_uneven_sharding` by slicing back to the given shapes."""

  def unpad(x, spec, shape):
    if is_optax_masked_node(x) or list(shape) == list(x.shape):
      return x
    if x.shape == (0,):
      return x
    x = jax.lax.slice(x, [0] * x.ndim, list(shape))
    return with_sharding_constraint(x, spec)

  return jax.tree.map(
      unpad, xs, partition_spec, unpadded_shapes, is_leaf=is_leaf
  )


def put_to_devices(
    host_array: np.ndarray, local_devices: Sequence[Any]
) -> list[jax.Array]:
  """Splits `host_array` on axis 0 into one piece per device and puts it."""
  try:
    pieces = np.split(host_array, len(local_devices), axis=0)
  except ValueError as e:
    raise ValueError(
        f'Cannot split an array of shape {host_array.shape} over '
        f'{len(local_devices)} local devices.'
    ) from e
  return [jax.device_put(p, d) for p, d in zip(pieces, local_devices)]


def make_array(
    host_arrays: Any,
    global_shapes: Any,
    global_mesh: jax.sharding.Mesh,
    pspecs: Any | None = None,
    sharding: Any | None = None,
) -> Any:
  """Builds global `jax.Array`s from host-local arrays split on axis 0.

  Args:
    host_arrays: tree of host-local numpy arrays.
    global_shapes: matching tree of `jax.ShapeDtypeStruct` (global shapes).
    global_mesh: the mesh.
    pspecs: tree of `PartitionSpec`s; give this or `sharding`.
    sharding: tree of `jax.sharding.Sharding`s; give this or `pspecs`.

  Returns:
    A tree of global arrays.
  """
  if (pspecs is None) == (sharding is None):
    raise ValueError('make_array: pass exactly one of pspecs and sharding.')
  if sharding is None:
    sharding = jax.tree.map(
        lambda p: jax.sharding.NamedSharding(global_mesh, p), pspecs
    )
  buffers = jax.tree.map(
      lambda x: put_to_devices(x, global_mesh.local_devices), host_arrays
  )
  return jax.tree.map(
      lambda shape, bufs, s: jax.make_array_from_single_device_arrays(
          shape.shape, s, bufs
      ),
      global_shapes,
      buffers,
      sharding,
  )


def sync_global_devices(name: str) -> None:
  """Blocks until every process reaches the barrier called `name`."""
  count = jax.device_count()
  logging.info('Starting sync_global_devices %s across %d devices', name, count)
  multihost_utils.sync_global_devices(name)
  logging.info('Finished sync_global_devices %s across %d devices', name, count)


def reshard(array: np.ndarray) -> np.ndarray:
  """Reshapes `[batch, ...]` to `[num_local_devices, -1, ...]`."""
  num_devices = jax.local_device_count()
  return np.reshape(
      array, (num_devices, array.shape[0] // num_devices) + array.shape[1:]
  )


def unshard(array: np.ndarray) -> np.ndarray:
  """Merges the two leading dims (undoes `reshard`)."""
  return np.reshape(array, (-1,) + array.shape[2:])


def reshape_with_outer_batch_size(array: np.ndarray,
                                  outer_bs: int) -> np.ndarray:
  """Reshapes `[batch, ...]` to `[outer_bs, batch // outer_bs, ...]`."""
  batch = array.shape[0]
  if outer_bs < 1 or batch % outer_bs or batch < outer_bs:
    raise ValueError(f'reshape_with_outer_batch_size: outer_bs={outer_bs} '
                     f'must divide the batch size {batch}.')
  return np.reshape(array, (outer_bs, batch // outer_bs) + array.shape[1:])


def combine_inner_and_outer_batches(array: np.ndarray) -> np.ndarray:
  """Merges the two leading dims (undoes `reshape_with_outer_batch_size`)."""
  return unshard(array)


def assert_same_shape_and_dtype(x: Any, y: Any) -> None:
  """Raises AssertionError unless x and y have the same shape and dtype."""
  if x.shape != y.shape or x.dtype != y.dtype:
    raise AssertionError(f'shape/dtype mismatch: {x.shape} {x.dtype} vs '
                         f'{y.shape} {y.dtype}')


def is_mock_tpu_backend() -> bool:
  """Whether JAX runs on a mock TPU backend (never, outside Google)."""
  return False


def convert_host_local_array_to_global_array(arr: jax.Array) -> jax.Array:
  """A value held once per device as one global array replicated over all
  devices, built from the device copies in place.

  `arr` is fully replicated, or a pmap output [devices, ...] whose rows are
  equal (each device holds its row); the result has the value's shape.
  """
  shards = sorted((s.data for s in arr.addressable_shards),
                  key=lambda d: min(dev.id for dev in d.devices()))
  if not arr.sharding.is_fully_replicated and shards[0].shape[:1] == (1,):
    shards = [d[0] for d in shards]  # One pmap row per device.
  shape = shards[0].shape
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ('x',))
  spec = jax.sharding.PartitionSpec(None) if shape else (
      jax.sharding.PartitionSpec())
  return jax.make_array_from_single_device_arrays(
      shape, jax.sharding.NamedSharding(mesh, spec), shards)


def convert_fully_replicated_array_to_pmap_array(arr: jax.Array) -> jax.Array:
  """A fully replicated array as a pmap input: [local devices, *arr.shape],
  row i on the i-th of its devices (current JAX's pmap takes an array split
  on axis 0 over a 1-D mesh; Pax's used the PmapSharding JAX dropped)."""
  shards = list(arr.addressable_shards)
  devices = np.array([s.device for s in shards])
  sharding = jax.sharding.NamedSharding(
      jax.sharding.Mesh(devices, ('pmap',)), jax.sharding.PartitionSpec(
          'pmap'))
  rows = [jnp.expand_dims(s.data, 0) for s in shards]
  return jax.make_array_from_single_device_arrays(
      (len(shards),) + arr.shape, sharding, rows)


def _first_shard(x: Any) -> Any:
  if not isinstance(x, jax.Array):
    return x
  shard = x.addressable_data(0)
  if (
      not x.sharding.is_fully_replicated
      and shard.ndim == x.ndim
      and shard.shape[0] == 1
  ):
    return np.asarray(shard)[0]  # Pmap-style leading axis of size 1.
  return shard


def maybe_unreplicate_for_fully_replicated(data: Any) -> Any:
  """Takes the first addressable shard of each (replicated) array in `data`."""
  return jax.tree.map(_first_shard, data)


def maybe_unreplicate_for_first_shard(data: Any) -> Any:
  """Takes the first addressable shard of each array (replicated or not)."""
  return jax.tree.map(_first_shard, data)


def get_global_input_shape_dtype(x: Any) -> jax.ShapeDtypeStruct:
  """Global shape/dtype of a per-process batch sharded on axis 0."""
  if x.ndim < 1:
    raise ValueError('get_global_input_shape_dtype needs a batch dimension.')
  shape = (x.shape[0] * jax.process_count(),) + tuple(x.shape[1:])
  return jax.ShapeDtypeStruct(shape, x.dtype)


def set_globally_use_rbg_prng_key() -> None:
  """Switches JAX's default PRNG to 'rbg'; call before any computation."""
  jax.config.update('jax_default_prng_impl', 'rbg')
