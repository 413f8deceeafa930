"""Inputs: the per-host data iterators that feed Pax train, eval and decode.

Public names:
  BaseInput, InMemoryInput, MultiInput, BaseInputSpecsProvider,
  DatasetInputSpecsProvider, EVAL_SAMPLE_WEIGHTS, host_example_indices,
  eval_num_batches, eval_batch_indices, pad_batch.

Every JAX process builds its own input, with `infeed_host_index` = process
index and `num_infeed_hosts` = process count. `get_next()` returns a NestedMap
of host-local numpy arrays whose leading dimension is `batch_size`; the global
batch is `batch_size * num_infeed_hosts`.

The eval contract (seed 003):

  | reset_for_eval | eval_loop_num_batches N     | behaviour                  |
  |----------------|-----------------------------|----------------------------|
  | False          | N >= 1 (static)             | each eval takes the next N |
  |                |                             | batches (rolling); the     |
  |                |                             | data repeats forever       |
  | False          | -1 or None (dynamic)        | rejected                   |
  | True           | 1 (default), -1 or None     | one epoch per eval, ended  |
  |                |                             | by StopIteration after the |
  |                |                             | same number of batches on  |
  |                |                             | every host; reset() first  |
  | True           | N > 1 (first N batches)     | rejected (not supported)   |

Training inputs (`is_training=True`) must not set `reset_for_eval`. Finite eval
data ends on every host after the same number of batches: `eval_batch_indices`
plans each host's batches from the global number of examples, and `pad_batch`
fills short or empty batches with zero rows whose `eval_sample_weights` are 0.

Example:

  p = InMemoryInput.config(batch_size=2, data={'x': np.arange(10)})
  inp = base_hyperparams.instantiate(p)
  batch = inp.get_next()  # NestedMap(x=[0, 1], eval_sample_weights=[1, 1])
"""

from __future__ import annotations

import abc
import base64
from collections.abc import Mapping
from collections.abc import Sequence
import copy
import dataclasses
import json
import math
import re
from typing import Any

from absl import logging
from etils import epath
import jax
import numpy as np

from praxis import _nested_map
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
NestedJTensor = pytypes.NestedJTensor
NestedPartitionSpec = pytypes.NestedPartitionSpec
NestedShapeDtypeStruct = pytypes.NestedShapeDtypeStruct
instantiate = base_hyperparams.instantiate

EVAL_SAMPLE_WEIGHTS = 'eval_sample_weights'
_NAME_REGEX = r'[a-zA-Z0-9.:_+-]+'
_DYNAMIC = (None, -1)


# ----------------------------------------------------------------------------
# Sharding and padding of finite eval data.
# ----------------------------------------------------------------------------


def host_example_indices(
    num_examples: int, num_infeed_hosts: int, infeed_host_index: int
) -> np.ndarray:
  """Global indices of the examples one host owns: every `num_hosts`-th one."""
  return np.arange(infeed_host_index, num_examples, num_infeed_hosts)


def eval_num_batches(
    num_examples: int, batch_size: int, num_infeed_hosts: int
) -> int:
  """Batches every host emits for one epoch of `num_examples` examples."""
  return -(-num_examples // (batch_size * num_infeed_hosts))


def eval_batch_indices(
    num_examples: int,
    batch_size: int,
    num_infeed_hosts: int,
    infeed_host_index: int,
) -> list[np.ndarray]:
  """One host's batches for one epoch, as global example indices.

  Every host gets `eval_num_batches(...)` entries; the last ones may hold
  fewer than `batch_size` indices, or none: pad them with `pad_batch`.

  Args:
    num_examples: Examples in the whole (global) data set.
    batch_size: Per-host batch size.
    num_infeed_hosts: Number of hosts.
    infeed_host_index: This host.

  Returns:
    A list of int arrays, one per batch.
  """
  own = host_example_indices(num_examples, num_infeed_hosts, infeed_host_index)
  num_batches = eval_num_batches(num_examples, batch_size, num_infeed_hosts)
  return [
      own[k * batch_size:(k + 1) * batch_size] for k in range(num_batches)
  ]


def pad_batch(
    batch: NestedMap, batch_size: int, weight_key: str = EVAL_SAMPLE_WEIGHTS
) -> NestedMap:
  """Pads a batch of `n <= batch_size` examples with zero rows.

  `batch[weight_key]` (float32 ones of shape [n] when absent) marks the real
  examples; padded rows are all zeros, so their weight (and any per-example
  `weights` field) is 0.

  Args:
    batch: A NestedMap of arrays sharing a leading dimension n.
    batch_size: The size to pad to.
    weight_key: Name of the per-example weight field.

  Returns:
    A new NestedMap whose leaves have `batch_size` rows.
  """
  flat = _flat_arrays(batch)  # The usual batch: one level of arrays.
  leaves = batch.values() if flat else jax.tree.leaves(batch)
  sizes = {x.shape[0] for x in leaves}
  if len(sizes) != 1 or next(iter(sizes)) > batch_size:
    raise ValueError(
        f'pad_batch: leading dimensions {sorted(sizes)} must agree and be at '
        f'most batch_size={batch_size}.'
    )
  num_valid = sizes.pop()
  batch = batch.copy() if type(batch) is NestedMap else NestedMap(batch)
  if weight_key not in batch:
    batch[weight_key] = np.ones([num_valid], np.float32)
  pad = batch_size - num_valid
  if not pad:
    return batch
  return jax.tree.map(
      lambda x: np.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)), batch
  )


def _flat_arrays(tree: Any) -> bool:
  """Whether `tree` is a dict of numpy arrays (no nesting)."""
  return isinstance(tree, dict) and all(
      type(x) is np.ndarray for x in tree.values())


def _take_rows(data: NestedMap, indices: np.ndarray, flat: bool) -> NestedMap:
  """The rows `indices` of every array of `data` (`flat`: one level)."""
  if not flat:
    return jax.tree.map(lambda x: x[indices], data)
  keys = sorted(data)  # tree_map's order; valid keys: they are `data`'s.
  return _nested_map.from_valid_pairs(
      keys, [data[k][indices] for k in keys])


# ----------------------------------------------------------------------------
# BaseInput.
# ----------------------------------------------------------------------------


class BaseInput(base_hyperparams.FiddleBaseParameterizable,
                metaclass=abc.ABCMeta):
  """A per-host input: an iterator of host-local batches.

  Subclasses implement `get_next()` and, when they can restart, `reset()`;
  checkpointable inputs implement `_get_state_internal()` and
  `_set_state_internal()`. See the module docstring for the eval contract.

  Attributes:
    batch_size: Per-host batch size: each `get_next()` returns this many rows.
    num_infeed_hosts: Number of hosts sharing the data; 0 means
      `jax.process_count()`.
    infeed_host_index: This host, in [0, num_infeed_hosts); set to
      `jax.process_index()` when `num_infeed_hosts` is 0.
    input_random_seed: Seed of any randomness (e.g. shuffling); None lets the
      input pick one.
    reset_for_eval: Eval reads exactly one epoch, calling `reset()` first and
      stopping at `StopIteration`; every host must stop after the same number
      of batches. When False, `get_next()` must never raise.
    eval_loop_num_batches: Batches per eval when `reset_for_eval` is False
      (>= 1). With `reset_for_eval` it is ignored and must be 1, -1 or None.
    is_training: Whether this input feeds training.
    experimental_remote_input: Process inputs on remote hosts (single
      controller only).
    batch_padding_size: Zero rows appended by `get_next_padded()`.
    custom_device_order: Logical device ids (offsets in the global mesh's flat
      device list) holding consecutive slices of the global batch.
    input_checkpointing_enabled: Whether the trainer checkpoints this input.
    tf_data_service_address: Address of a tf.data service dispatcher (unused
      here; kept for configs).
    dataset: An underlying dataset object, if any (not configurable).
  """

  _VALIDATE_BATCH_SIZE_NOT_NONE = True
  # A batch read ahead by `peek_padded()`, and the state before it.
  _peek = None
  _state_before_peek = None

  batch_size: int | None = None
  num_infeed_hosts: int = 0
  infeed_host_index: int = 0
  input_random_seed: int | None = None
  reset_for_eval: bool = False
  eval_loop_num_batches: int | None = 1
  is_training: bool = False
  experimental_remote_input: bool = False
  batch_padding_size: int = 0
  custom_device_order: Sequence[int] | None = None
  input_checkpointing_enabled: bool = False
  tf_data_service_address: str | None = None
  dataset: Any = dataclasses.field(default=None, init=False, repr=False)

  def __post_init__(self):
    if not self.name:
      self.name = 'train' if self.is_training else 'input'
    if re.fullmatch(_NAME_REGEX, self.name) is None:
      raise self._error('name', f'must fully match {_NAME_REGEX!r}')
    if self._VALIDATE_BATCH_SIZE_NOT_NONE and self.batch_size is None:
      raise self._error(
          'batch_size', 'must be set: specify self.batch_size, the per-host '
          'batch size'
      )
    if self.batch_size is not None and self.batch_size < 1:
      raise self._error('batch_size', 'must be positive')
    if self.num_infeed_hosts < 0:
      raise self._error('num_infeed_hosts', 'must be >= 0')
    if self.num_infeed_hosts == 0:
      self.num_infeed_hosts = jax.process_count()
      self.infeed_host_index = jax.process_index()
    if not 0 <= self.infeed_host_index < self.num_infeed_hosts:
      raise self._error(
          'infeed_host_index',
          f'must be in [0, num_infeed_hosts={self.num_infeed_hosts})',
      )
    self._check_eval_contract()
    if self.experimental_remote_input and jax.process_count() > 1:
      raise self._error(
          'experimental_remote_input', 'needs a single controller process'
      )
    self._peek = None
    self._state_before_peek = None

  def _error(self, field: str, problem: str) -> ValueError:
    """A config error naming this input and one of its fields."""
    value = repr(getattr(self, field))
    value = value if len(value) <= 60 else value[:57] + '...'
    return base_hyperparams.ConfigError(
        f'{type(self).__name__} {self.name!r}: {field}={value} {problem}.'
    )

  def _check_eval_contract(self) -> None:
    """Rejects the combinations the seed 003 eval table does not support."""
    n = self.eval_loop_num_batches
    if n is not None and n < 1 and n != -1:
      raise self._error('eval_loop_num_batches', 'must be >= 1, -1 or None')
    if self.is_training and self.reset_for_eval:
      raise self._error(
          'reset_for_eval',
          'is for finite eval/decode data; a training input (is_training='
          'True) repeats forever and must not set it',
      )
    if self.is_training:
      return
    if not self.reset_for_eval and n in _DYNAMIC:
      raise self._error(
          'eval_loop_num_batches',
          'means "until the data ends", which needs reset_for_eval=True; '
          'with reset_for_eval=False give a fixed number of batches per eval',
      )
    if self.reset_for_eval and n not in _DYNAMIC + (1,):
      raise self._error(
          'eval_loop_num_batches',
          'asks for the first N batches of each eval, which is not '
          'supported: reset_for_eval=True reads exactly one epoch, so leave '
          'eval_loop_num_batches at 1 or set it to -1/None',
      )

  # Batch sizes.

  @classmethod
  def get_batch_size(cls, params: Any) -> int:
    """Per-host batch size of a config (or instance) of this class."""
    if params.batch_size is None:
      raise ValueError(
          f'{cls.__name__} {params.name!r}: batch_size is not set.'
      )
    return params.batch_size

  @classmethod
  def get_global_batch_size(cls, params: Any) -> int:
    """`batch_size * num_infeed_hosts` (0 hosts counts as process_count)."""
    hosts = params.num_infeed_hosts or jax.process_count()
    return cls.get_batch_size(params) * hosts

  # Iteration.

  @abc.abstractmethod
  def get_next(self) -> NestedJTensor:
    """The next batch: a NestedMap of host-local numpy arrays, batch first.

    Raises:
      StopIteration: At the end of finite (reset_for_eval) data.
    """

  def reset(self) -> None:
    """Restarts the data (called before each eval when reset_for_eval)."""
    self._peek = None
    self._state_before_peek = None

  def get_next_padded(self) -> NestedJTensor:
    """`get_next()` plus `batch_padding_size` zero rows (or the peeked one)."""
    if self._peek is not None:
      batch, self._peek, self._state_before_peek = self._peek, None, None
      return batch
    batch = self.get_next()
    pad = self.batch_padding_size
    if not pad:
      return batch
    return jax.tree.map(
        lambda x: np.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)), batch
    )

  def peek_padded(self) -> NestedJTensor | None:
    """The batch the next `get_next_padded()` returns; None at the end."""
    if self._peek is not None:
      return self._peek
    try:
      self._state_before_peek = self._get_state_internal()
    except NotImplementedError:
      self._state_before_peek = None
    try:
      self._peek = self.get_next_padded()
    except StopIteration:
      logging.warning('Peek failed: input %s is exhausted.', self.name)
      self._peek = self._state_before_peek = None
    return self._peek

  def get_child(self, input_name: str) -> BaseInput:
    raise NotImplementedError(
        f'{type(self).__name__} {self.name!r} has no child inputs '
        f'(asked for {input_name!r}).'
    )

  def ids_to_strings(
      self,
      ids: pytypes.NpTensor,
      lengths: pytypes.NpTensor,
      key: str | None = None,
  ) -> Sequence[str]:
    """Detokenizes `ids[i, :lengths[i]]` for each row i.

    Args:
      ids: [batch, seqlen] int ids.
      lengths: [batch] number of valid ids per row.
      key: Which tokenizer to use, for inputs with several.

    Returns:
      One string per row.
    """
    del ids, lengths, key
    raise NotImplementedError(
        f'{type(self).__name__} {self.name!r} has no tokenizer: '
        'override ids_to_strings.'
    )

  # Checkpointing.

  def get_state(self) -> bytes:
    """The serialized position of the input (before any peeked batch).

    Raises:
      NotImplementedError: The input keeps no state.
      ValueError: A batch was peeked from an input that keeps no state, so
        the position before it is lost.
    """
    if self._peek is None:
      return self._get_state_internal()
    if self._state_before_peek is None:
      raise ValueError(
          f'{type(self).__name__} {self.name!r}: get_state() after '
          'peek_padded() needs an input with state (_get_state_internal), '
          'else the peeked batch is lost; use it with '
          'input_checkpointing_enabled=True only.'
      )
    return self._state_before_peek

  def set_state(self, state: bytes) -> None:
    """Moves the input to a position saved by `get_state()`."""
    self._peek = self._state_before_peek = None
    self._set_state_internal(state)

  def _no_state(self) -> NotImplementedError:
    return NotImplementedError(
        f'{type(self).__name__} {self.name!r} cannot be checkpointed: '
        'implement _get_state_internal and _set_state_internal.'
    )

  def _get_state_internal(self) -> bytes:
    raise self._no_state()

  def _set_state_internal(self, state: bytes) -> None:
    del state
    raise self._no_state()

  def __reduce_ex__(self, protocol: Any) -> Any:
    """Pickles a stateful input as its config and `get_state()`.

    Unpickling builds the config again and restores the state, so the copy
    continues where this input is (a peeked batch is read again). An input
    without state pickles as a plain object.

    Args:
      protocol: The pickle protocol.
    """
    try:
      state = self.get_state()
    except NotImplementedError:
      return super().__reduce_ex__(protocol)
    return _rebuild_input, (self.hparams.clone(), state)

  def save(self, checkpoint_path: epath.PathLike) -> None:
    epath.Path(checkpoint_path).write_bytes(self.get_state())

  def restore(self, checkpoint_path: epath.PathLike) -> None:
    self.set_state(epath.Path(checkpoint_path).read_bytes())

  # Host-local arrays to device arrays.

  def reshard_for_pmap(self, arrays: NestedJTensor) -> NestedJTensor:
    """[batch, ...] -> [local devices, batch / local devices, ...]."""
    if self.custom_device_order is not None:
      raise self._error('custom_device_order', 'is not supported with pmap')
    return jax.tree.map(py_utils.reshard, arrays)

  def reshard_for_spmd(
      self,
      arrays: NestedJTensor,
      global_mesh: jax.sharding.Mesh,
      pspecs: NestedPartitionSpec,
  ) -> NestedJTensor:
    """Host-local batches -> global `jax.Array`s on `global_mesh`.

    The global batch is the host batches stacked in process order. With
    `custom_device_order`, the batch dimension is split evenly over the mesh
    devices in that order and `pspecs` is ignored.

    Args:
      arrays: Host-local arrays from `get_next()`.
      global_mesh: The mesh of the jitted step.
      pspecs: Partition specs (a tree matching `arrays`, or one spec).

    Returns:
      Global arrays of shape [batch_size * process_count, ...].
    """
    order = self.custom_device_order
    if order is not None:
      if len(order) != global_mesh.devices.size:
        raise self._error(
            'custom_device_order',
            f'must list all {global_mesh.devices.size} mesh devices',
        )
      devices = np.asarray(global_mesh.devices).reshape(-1)[np.asarray(order)]
      global_mesh = jax.sharding.Mesh(devices, ('_custom_order',))
      pspecs = jax.sharding.PartitionSpec('_custom_order')

    def make(x: np.ndarray, pspec: jax.sharding.PartitionSpec) -> jax.Array:
      sharding = jax.sharding.NamedSharding(global_mesh, pspec)
      shape = (x.shape[0] * jax.process_count(),) + x.shape[1:]
      return jax.make_array_from_process_local_data(sharding, x, shape)

    if isinstance(pspecs, jax.sharding.PartitionSpec):
      return jax.tree.map(lambda x: make(x, pspecs), arrays)
    return jax.tree.map(make, arrays, pspecs)


def _rebuild_input(config: pax_fiddle.Config[BaseInput], state: bytes) -> Any:
  """Builds `config` and moves it to `state` (unpickles a `BaseInput`)."""
  inp = instantiate(config)
  inp.set_state(state)
  return inp


# ----------------------------------------------------------------------------
# InMemoryInput.
# ----------------------------------------------------------------------------


class InMemoryInput(BaseInput):
  """An input over arrays held in memory, for tests and demos.

  Host h owns global examples h, h + H, h + 2H, ... (H = num_infeed_hosts),
  so hosts never share an example. Training and rolling eval
  (`reset_for_eval=False`) repeat the host's examples forever; training
  shuffles them anew each epoch (seeded by `input_random_seed`, the host and
  the epoch). With `reset_for_eval=True` the input emits one epoch in order,
  padded (see `pad_batch`) so that every host emits
  `eval_num_batches(num_examples, batch_size, H)` batches, then raises
  `StopIteration` until `reset()`. Every batch has `eval_sample_weights`.

  Attributes:
    data: Global arrays, examples along the first dimension.
  """

  data: Mapping[str, Any] | None = None

  def __post_init__(self):
    super().__post_init__()
    if not self.data:
      raise self._error('data', 'must be a non-empty mapping of arrays')
    self._data = jax.tree.map(np.asarray, NestedMap(dict(self.data)))
    self._flat = _flat_arrays(self._data)
    sizes = {
        k: (v.shape[0] if v.ndim else None)
        for k, v in self._data.FlattenItems()
    }
    if None in sizes.values() or len(set(sizes.values())) != 1:
      raise self._error(
          'data', f'arrays need one shared leading (example) dim: {sizes}'
      )
    self._num_examples = next(iter(sizes.values()))
    self._own = host_example_indices(
        self._num_examples, self.num_infeed_hosts, self.infeed_host_index
    )
    self._eval_batches = None
    if self.reset_for_eval:  # One padded epoch, the same length on all hosts.
      self._eval_batches = eval_batch_indices(
          self._num_examples,
          self.batch_size,
          self.num_infeed_hosts,
          self.infeed_host_index,
      )
    elif not self._own.size:
      raise self._error(
          'data',
          f'has {self._num_examples} examples, too few to give each of '
          f'{self.num_infeed_hosts} hosts one',
      )
    self._seed = self.input_random_seed
    if self._seed is None:
      self._seed = int(np.random.SeedSequence().entropy)
    self._epoch = 0
    self._position = 0
    self._order = None

  @property
  def num_examples(self) -> int:
    """Examples in the global data set."""
    return self._num_examples

  def _epoch_order(self) -> np.ndarray:
    if self._order is None or self._order[0] != self._epoch:
      order = self._own
      if self.is_training:
        seed = [self._seed & (2**64 - 1), self.infeed_host_index, self._epoch]
        order = np.random.default_rng(seed).permutation(order)
      self._order = (self._epoch, order)
    return self._order[1]

  def _next_repeating_indices(self) -> np.ndarray:
    pieces, need = [], self.batch_size
    while need:
      order = self._epoch_order()
      piece = order[self._position:self._position + need]
      if not piece.size:  # Never loop forever on a bad position.
        raise RuntimeError(
            f'InMemoryInput {self.name!r}: position {self._position} is '
            f'outside this host\'s {order.size} examples.'
        )
      pieces.append(piece)
      need -= piece.size
      self._position += piece.size
      if self._position == order.size:
        self._epoch, self._position = self._epoch + 1, 0
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

  def _next_eval_indices(self) -> np.ndarray:
    k = self._position // self.batch_size
    if k >= len(self._eval_batches):
      raise StopIteration(
          f'{self.name}: end of the eval epoch '
          f'({len(self._eval_batches)} batches); call reset().'
      )
    self._position += self.batch_size
    return self._eval_batches[k]

  def get_next(self) -> NestedMap:
    if self._eval_batches is not None:
      indices = self._next_eval_indices()
    else:
      indices = self._next_repeating_indices()
    batch = _take_rows(self._data, indices, self._flat)
    return pad_batch(batch, self.batch_size)

  def reset(self) -> None:
    super().reset()
    self._epoch = self._position = 0

  def _get_state_internal(self) -> bytes:
    state = {'epoch': self._epoch, 'position': self._position,
             'seed': self._seed, 'num_examples': self._num_examples}
    return json.dumps(state).encode()

  def _set_state_internal(self, state: bytes) -> None:
    try:
      values = json.loads(state)
      epoch, position, seed = (
          int(values[k]) for k in ('epoch', 'position', 'seed')
      )
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(
          f'InMemoryInput {self.name!r}: cannot read state {state[:80]!r}; '
          'expected JSON with epoch, position and seed.'
      ) from e
    epoch, position = self._check_restored_state(values, epoch, position)
    self._epoch, self._position, self._seed = epoch, position, seed
    self._order = None

  def _check_restored_state(self, values: Mapping[str, Any], epoch: int,
                            position: int) -> tuple[int, int]:
    """(epoch, position) of a restored state; rejects one that does not fit
    the data, in one line naming the field and the valid range."""
    if self._eval_batches is not None:
      end = len(self._eval_batches) * self.batch_size
    else:
      end = self._own.size
    saved_n = values.get('num_examples')
    what = f'InMemoryInput {self.name!r}: restored input state'
    if saved_n is not None and saved_n != self._num_examples:
      logging.warning(
          '%s was saved for %s examples; the data now has %d: the restored '
          'epoch order differs.', what, saved_n, self._num_examples)
    if epoch < 0:
      raise ValueError(f'{what} has epoch={epoch}; expected >= 0.')
    if not 0 <= position <= end:
      raise ValueError(
          f'{what} has position={position}; expected 0..{end} (this host '
          f'reads {end} of the {self._num_examples} examples; did the data '
          'shrink?).'
      )
    if position == end and self._eval_batches is None:
      return epoch + 1, 0  # The end of an epoch: the next one starts.
    return epoch, position


# ----------------------------------------------------------------------------
# MultiInput.
# ----------------------------------------------------------------------------


_INHERITED_BY_CHILDREN = (
    'num_infeed_hosts',
    'infeed_host_index',
    'is_training',
    'reset_for_eval',
    'eval_loop_num_batches',
)


class MultiInput(BaseInput):
  """Several inputs read together: one NestedMap keyed by input name.

  Each child gets this input's hosts, mode and eval settings, and the name
  `<name>_<key>`. Leaves are reshaped to [outer, child_batch / outer, ...]
  where outer (`get_batch_size`) is the gcd of the children's batch sizes, so
  that all leaves share a leading batch dimension; models fold the two
  leading dimensions back together.

  Attributes:
    input_to_params: Child input configs by name.
    default_input: The child used by `ids_to_strings` when none is named.
  """

  _VALIDATE_BATCH_SIZE_NOT_NONE = False

  input_to_params: dict[str, pax_fiddle.Config[BaseInput]] | None = None
  default_input: str | None = None

  def __post_init__(self):
    super().__post_init__()
    if self.batch_size is not None:
      raise self._error(
          'batch_size', 'must be None: set the batch size of each child input'
      )
    if not self.input_to_params:
      raise self._error('input_to_params', 'must name at least one input')
    if self.reset_for_eval and len(self.input_to_params) > 1:
      raise self._error(
          'reset_for_eval', 'allows only one child input in input_to_params'
      )
    if (self.default_input is not None
        and self.default_input not in self.input_to_params):
      raise self._error(
          'default_input', f'is not one of {sorted(self.input_to_params)}'
      )
    self._inputs = {}
    for key, child_p in self.input_to_params.items():
      child_p = copy.deepcopy(child_p)
      for field in _INHERITED_BY_CHILDREN:
        setattr(child_p, field, getattr(self, field))
      child_p.name = f'{self.name}_{key}'
      self._inputs[key] = instantiate(child_p)

  @classmethod
  def get_batch_size(cls, params: Any) -> int:
    """The shared outer batch size: gcd of the children's batch sizes."""
    if not params.input_to_params:
      raise ValueError(f'MultiInput {params.name!r}: input_to_params is empty.')
    return math.gcd(*(
        p.cls.get_batch_size(p) for p in params.input_to_params.values()
    ))

  def get_next(self) -> NestedMap:
    outer = self.get_batch_size(self)
    return NestedMap({
        key: jax.tree.map(
            lambda x: x.reshape((outer, -1) + x.shape[1:]), inp.get_next()
        )
        for key, inp in self._inputs.items()
    })

  def get_child(self, input_name: str) -> BaseInput:
    return self._inputs[input_name]

  def reset(self) -> None:
    super().reset()
    for inp in self._inputs.values():
      inp.reset()

  def ids_to_strings(
      self,
      ids: pytypes.NpTensor,
      lengths: pytypes.NpTensor,
      key: str | None = None,
      input_name: str | None = None,
  ) -> Sequence[str]:
    """`ids_to_strings` of child `input_name` (default: `default_input`)."""
    input_name = input_name or self.default_input
    if input_name is None:
      raise ValueError(
          f'MultiInput {self.name!r}: pass input_name or set default_input.'
      )
    return self._inputs[input_name].ids_to_strings(ids, lengths, key)

  def _get_state_internal(self) -> bytes:
    states = {
        key: base64.b64encode(inp.get_state()).decode()
        for key, inp in self._inputs.items()
    }
    return json.dumps(states).encode()

  def _set_state_internal(self, state: bytes) -> None:
    states = json.loads(state)
    if set(states) != set(self._inputs):
      raise ValueError(
          f'MultiInput {self.name!r}: state has inputs {sorted(states)}, '
          f'expected {sorted(self._inputs)}.'
      )
    for key, inp in self._inputs.items():
      inp.set_state(base64.b64decode(states[key]))


# ----------------------------------------------------------------------------
# Input specs for model initialisation.
# ----------------------------------------------------------------------------


class BaseInputSpecsProvider(base_hyperparams.FiddleBaseParameterizable,
                             metaclass=abc.ABCMeta):
  """Gives the shapes and dtypes of one batch, to initialise a model."""

  @abc.abstractmethod
  def get_input_specs(self) -> NestedShapeDtypeStruct:
    """Per-host (unpadded for pjit) `jax.ShapeDtypeStruct`s of one batch."""


class DatasetInputSpecsProvider(BaseInputSpecsProvider):
  """Input specs of an input: its dataset's element spec, or a first batch.

  When the built input's `dataset` has an `element_spec` (a tf.data dataset)
  whose shapes are all known, the specs come from it; otherwise from the
  input's first `get_next_padded()` batch.

  Attributes:
    input_p: Config of the input to read.
  """

  input_p: pax_fiddle.Config[BaseInput] | None = None

  def __post_init__(self):
    if self.input_p is None:
      raise ValueError(
          f'DatasetInputSpecsProvider {self.name!r}: input_p must be set.'
      )
    inp = instantiate(self.input_p)
    self._input_specs = _element_specs(inp.dataset)
    if self._input_specs is None:
      logging.warning(
          'Input specs of %r come from its first batch; an explicit input '
          'specs provider is cheaper and deterministic.', inp.name)
      self._input_specs = jax.tree.map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
          inp.get_next_padded(),
      )

  def get_input_specs(self) -> NestedShapeDtypeStruct:
    return self._input_specs


def _element_specs(dataset: Any) -> NestedShapeDtypeStruct | None:
  """`dataset.element_spec` as ShapeDtypeStructs; None if absent or partial.

  Duck-typed on tf.data (`TensorSpec.shape.is_fully_defined()`,
  `dtype.as_numpy_dtype`), so that TensorFlow is not imported here.

  Args:
    dataset: Any object, usually a `tf.data.Dataset` or None.
  """
  spec = getattr(dataset, 'element_spec', None)
  leaves = jax.tree.leaves(spec)
  if not leaves:
    return None
  for leaf in leaves:
    fully_defined = getattr(getattr(leaf, 'shape', None), 'is_fully_defined',
                            None)
    if fully_defined is None or not fully_defined():
      return None
  return jax.tree.map(
      lambda s: jax.ShapeDtypeStruct(
          tuple(s.shape), np.dtype(s.dtype.as_numpy_dtype)
      ),
      spec,
  )
