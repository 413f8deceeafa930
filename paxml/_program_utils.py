"""Helpers shared by the train, eval and decode programs.

Private to `paxml.programs` and `paxml.decode_programs`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import pickle
import time
from typing import Any, Iterator

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
from paxml import base_metrics
from paxml import io_utils
from paxml import summary_utils
from praxis import base_hyperparams
from praxis import base_input


def get_summary_base_dir(job_log_dir: Any) -> epath.Path:
  """`<job_log_dir>/summaries`."""
  return epath.Path(job_log_dir) / 'summaries'


def tokens_in_batch(batch: Any) -> int:
  """Non-padding tokens of an LM batch (`paddings`), else its examples."""
  paddings = batch.get('paddings') if isinstance(batch, dict) else None
  if paddings is not None and np.ndim(paddings) >= 2:
    # sum(1 - p) without building `1 - p` (this runs once per train step).
    return int(round(np.size(paddings) - float(np.sum(paddings))))
  leaves = jax.tree.leaves(batch)
  return int(leaves[0].shape[0]) if leaves else 0


def host_scalars(weighted_scalars: Any) -> dict[str, tuple[float, float]]:
  """Weighted scalars as host floats `{key: (value, weight)}`."""
  out = {}
  for key, pair in dict(weighted_scalars or {}).items():
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
      out[key] = (float(np.asarray(pair[0])), float(np.asarray(pair[1])))
    else:
      out[key] = (float(np.asarray(pair)), 1.0)
  return out


def fetch(tree: Any) -> Any:
  """`tree` on the host as numpy arrays (read-only), fetched together.

  Arrays split over processes are read from this process's first shard
  (step outputs are replicated).
  """
  # One flattening (a decode batch's outputs are a NestedMap of a dozen
  # arrays, whose every traversal calls back into Python per node).
  leaves, treedef = jax.tree.flatten(tree)
  leaves = [x.addressable_data(0)
            if isinstance(x, jax.Array) and not x.is_fully_addressable else x
            for x in leaves]
  if all(not isinstance(x, jax.Array) or in_host_memory(x) for x in leaves):
    # CPU arrays are read in place: `device_get` would first start a copy
    # of each (`copy_to_host_async`), which costs the decode program about
    # twice the host time per batch when the outputs are not ready yet.
    leaves = [np.asarray(x) if isinstance(x, jax.Array) else x
              for x in leaves]
  else:
    leaves = jax.device_get(leaves)
  return jax.tree.unflatten(treedef, leaves)


def is_ready(tree: Any) -> bool:
  """Whether the device arrays of `tree` are all computed (never waits)."""
  return all(x.is_ready() for x in jax.tree.leaves(tree)
             if isinstance(x, jax.Array))


def in_host_memory(x: jax.Array) -> bool:
  """Whether all of `x` is in this process's host memory (CPU devices):
  numpy then reads it in place."""
  return x.is_fully_addressable and all(d.platform == 'cpu'
                                        for d in x.devices())


# `jax.random.fold_in` of a batch index, compiled once: the eager call costs
# about 0.4 ms of host time per batch (primitive dispatch and key checks),
# the cached jitted one a tenth of that. Same bits.
fold_in = jax.jit(jax.random.fold_in)
_fold_in_block = jax.jit(jax.vmap(jax.random.fold_in, in_axes=(None, 0)))


class BatchKeys:
  """`jax.random.fold_in(key, i)` for batch i, as host arrays (same bits).

  The keys are computed 64 at a time by one compiled call and fetched, so a
  step takes its key as a plain host array instead of waiting on the devices
  behind a separate tiny computation per batch (the decode program gained
  0.8% on a 2-core CPU, median of 16 alternating runs). Typed keys
  (`jax.random.key`) stay on the devices, one `fold_in` per batch.
  """

  _BLOCK = 64

  def __init__(self, key: jax.Array):
    self._key = key
    self._typed = jax.dtypes.issubdtype(getattr(key, 'dtype', None),
                                        jax.dtypes.prng_key)
    self._start = None
    self._block = None

  def __call__(self, i: int) -> Any:
    if self._typed:
      return fold_in(self._key, i)
    if self._start is None or not 0 <= i - self._start < self._BLOCK:
      self._start = i - i % self._BLOCK
      self._block = np.asarray(_fold_in_block(
          self._key, np.arange(self._start, self._start + self._BLOCK,
                               dtype=np.uint32)))
    return self._block[i - self._start]


def batch_rows(batch: Any) -> int | None:
  """The rows of a host batch (its leaves' leading dim); None if none."""
  leaves = [x for x in jax.tree.leaves(batch) if np.ndim(x) >= 1]
  return int(np.shape(leaves[0])[0]) if leaves else None


def batch_parts(partitioner: Any, batch: Any) -> int:
  """How many parts the partitioner splits the batch dimension into."""
  mesh = getattr(partitioner, 'global_mesh', None)
  spec_of = getattr(partitioner, 'input_partition_spec', None)
  if mesh is None or spec_of is None:
    return 1
  parts = 1
  for ndim in {np.ndim(x) for x in jax.tree.leaves(batch) if np.ndim(x)}:
    spec = spec_of(ndim)
    axes = spec[0] if len(spec) else None
    if axes is None:
      continue
    axes = axes if isinstance(axes, tuple) else (axes,)
    n = int(np.prod([mesh.shape[a] for a in axes if a in mesh.shape]))
    parts = math.lcm(parts, n)
  return parts


def pad_rows(batch: Any, rows: int, target: int) -> Any:
  """`batch` with `target - rows` more rows (leaves led by `rows` only).

  The new rows are zeros, except in `paddings`, where they are ones (all
  padding).
  """
  def pad(path, x):
    if np.ndim(x) == 0 or np.shape(x)[0] != rows:
      return x
    name = getattr(path[-1], 'key', getattr(path[-1], 'name', None))
    fill = 1 if name == 'paddings' else 0
    widths = [(0, target - rows)] + [(0, 0)] * (np.ndim(x) - 1)
    return np.pad(np.asarray(x), widths, constant_values=fill)
  return jax.tree_util.tree_map_with_path(pad, batch)


def take_rows(tree: Any, padded: int, rows: int) -> Any:
  """The first `rows` of each leaf led by `padded` rows (others as they are)."""
  return jax.tree.map(
      lambda x: x[:rows] if np.ndim(x) and np.shape(x)[0] == padded else x,
      tree)


# Eval and decode batches kept in flight at least (see `eval_window`).
EVAL_BATCHES_IN_FLIGHT = 8


def eval_window(train_p: Any) -> int:
  """How many eval or decode batches may be in flight (<= 0: no bound).

  Pax bounds train steps only (`train.max_inflight_steps`); its eval loop
  dispatches batch after batch (and waits for each one's per-example
  outputs). Here eval and decode batches are bounded by that setting, but
  at no fewer than `EVAL_BATCHES_IN_FLIGHT`: a batch's inputs and outputs
  are small beside the model, and with the train default of 2 the host
  would wake after every batch (on a 2-core CPU an eval ran 3% slower so),
  where with 8 it wakes every 4 batches on CPU (`InFlight`). A setting of 0
  or less (no bound) applies to them too.

  Args:
    train_p: The task's `train` settings.
  """
  limit = int(getattr(train_p, 'max_inflight_steps', 0) or 0)
  return limit if limit <= 0 else max(limit, EVAL_BATCHES_IN_FLIGHT)


class InFlight:
  """Bounds how many dispatched steps may wait for the devices.

  Dispatch is asynchronous: without a bound the host queues every batch
  (holding its inputs on the devices). A program calls `make_room()` once a
  step's inputs are ready and before dispatching it, then `add`s the step.
  As Pax's `max_inflight_steps`, at most `limit` steps are in flight once a
  step is dispatched: when `limit` already are, `make_room` waits until
  `resume_at` of them are left; nothing is copied to the host. As in Pax,
  the next batch is prepared before the wait, while the devices still run
  the steps the host would wait for.

  By default, as Pax, the host waits for the oldest step only (`resume_at`
  = `limit - 1`): with Pax's `limit` of 2, step k waits for step k - 2. On
  CPU devices (XLA:CPU runs the steps on the host's own cores) a larger
  `limit` waits until half of it is left (at least one step), so that the
  host wakes up once every few steps instead of after each: its work
  between two waits then runs in one burst, which costs less processor
  time (taken from the steps) than the same work split by a wake-up per
  step.
  """

  def __init__(self, limit: int, resume_at: int | None = None):
    """Constructor.

    Args:
      limit: Steps allowed in flight, counting the one being dispatched
        (<= 0: no bound).
      resume_at: Steps left in flight when a wait ends (at most `limit - 1`;
        at least 1 unless `limit` is 1); None: `limit // 2` (at least 1)
        when JAX's default backend is the CPU, else `limit - 1`.
    """
    self._limit = int(limit)
    most = max(self._limit - 1, 0)
    if resume_at is None:
      on_cpu = jax.default_backend() == 'cpu'
      resume_at = max(1, self._limit // 2) if on_cpu else most
    self._resume_at = min(max(int(resume_at), min(1, most)), most)
    self._queue = collections.deque()

  def make_room(self) -> None:
    """Before a dispatch: waits down to `resume_at` steps if at `limit`."""
    if self._limit > 0 and len(self._queue) >= self._limit:
      done = [self._queue.popleft()
              for _ in range(len(self._queue) - self._resume_at)]
      jax.block_until_ready(done)

  def add(self, marker: Any) -> None:
    """Counts a dispatched step by one of its outputs (a device array)."""
    if self._limit > 0:
      self._queue.append(marker)

  def wait_all(self) -> None:
    while self._queue:
      jax.block_until_ready(self._queue.popleft())


@dataclasses.dataclass(frozen=True)
class SummaryEntry:
  """Host values of one train summary, maybe over several steps.

  Attributes:
    step: The step it is written at (the last one it holds).
    loss: The mean of the steps' losses.
    weighted_scalars: `{key: [(value, weight), ...]}`, one pair per step.
    summary_tensors: `{key: [value, ...]}`, one value per step.
  """

  step: int
  loss: float
  weighted_scalars: dict[str, list[Any]]
  summary_tensors: dict[str, list[Any]]

  @classmethod
  def of(cls, steps_and_outputs: list[tuple[int, Any]]) -> SummaryEntry:
    """The entry of `[(step, StepFnOutput), ...]`, fetched at once."""
    host = fetch([(o.loss, o.weighted_scalars, o.summary_tensors)
                  for _, o in steps_and_outputs])
    weighted = collections.defaultdict(list)
    tensors = collections.defaultdict(list)
    for _, scalars, summaries in host:
      for key, pair in dict(scalars or {}).items():
        weighted[key].append(tuple(pair))
      for key, value in summary_utils.flatten_summary_dict(summaries or {}):
        tensors[key].append(value)
    loss = float(np.mean([np.mean(loss) for loss, _, _ in host]))
    return cls(steps_and_outputs[-1][0], loss, dict(weighted), dict(tensors))


class SummaryAccumulator:
  """Pax's `summary_accumulate_interval_steps` for the train program.

  The outputs of every `interval`-th step are kept as they are (device
  arrays: no wait); `take`, at a summary step, fetches them at once and
  averages them: the loss (mean over the steps), weighted scalars (by
  weight) and scalar summaries (mean); images, audio and text of all the
  steps are written, the newest first. The entry is written at the last
  accumulated step, as Pax's SummaryHandler does.
  """

  def __init__(self, interval: int | None):
    """Constructor.

    Args:
      interval: `train.summary_accumulate_interval_steps` (None: off).
    """
    if interval is not None and (isinstance(interval, bool) or
                                 int(interval) != interval or interval < 1):
      raise ValueError('train.summary_accumulate_interval_steps must be None '
                       f'or an integer >= 1, got {interval!r}.')
    self._interval = None if interval is None else int(interval)
    self._pending: list[tuple[int, Any]] = []

  def due(self, step: int) -> bool:
    """Whether the outputs of the step that ends at `step` are kept."""
    return self._interval is not None and step % self._interval == 0

  def add(self, step: int, outputs: Any) -> None:
    """Keeps a step's `StepFnOutput` (its arrays stay on the devices)."""
    self._pending.append((step, outputs))

  def take(self) -> SummaryEntry | None:
    """The accumulated entry (None if nothing was kept); starts afresh."""
    if not self._pending:
      return None
    pending, self._pending = self._pending, []
    return SummaryEntry.of(pending)


def _pair(value: Any) -> tuple[Any, Any]:
  if isinstance(value, (tuple, list)) and len(value) == 2:
    return value[0], value[1]
  return value, 1.0


def _add_batch(sums: Any, loss: Any, weighted: Any, loss_key: str) -> Any:
  """`sums` plus one batch's weighted sums (float32, on the devices)."""
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  terms = {}
  for key, pair in dict(weighted or {}).items():
    value, weight = _pair(pair)
    terms[key] = (jnp.sum(f32(value) * f32(weight)), jnp.sum(f32(weight)))
  loss_weight = f32(_pair(dict(weighted or {}).get(loss_key, 1.0))[1])
  terms = {'metrics': terms,
           'loss': (f32(loss) * loss_weight, loss_weight),
           'plain_loss': (f32(loss), jnp.float32(1.0))}
  return terms if sums is None else jax.tree.map(jnp.add, sums, terms)


# Module level: compiled once per metric structure, not once per eval.
_add_batch_jit = jax.jit(_add_batch, static_argnames='loss_key')


class DeviceMeans:
  """An eval's weighted means, summed on the devices batch by batch.

  What `base_metrics.MeanMetrics` computes (sum(v * w) / sum(w), weight
  sum(w), for scalar metrics), without fetching each batch: `add` is one
  jitted addition, `finalize` one fetch.
  """

  def __init__(self, loss_key: str):
    """Constructor.

    Args:
      loss_key: The metric whose weights weigh the batches' losses.
    """
    self._sums = None
    self._loss_key = loss_key

  def add(self, loss: Any, weighted_scalars: Any) -> None:
    self._sums = _add_batch_jit(self._sums, loss, weighted_scalars,
                                loss_key=self._loss_key)

  def finalize(self) -> tuple[float, dict[str, tuple[float, float]]]:
    """(the loss, weighted by the loss metric's weights when they sum to
    more than 0, else the plain mean; `{key: (mean, total weight)}`)."""
    if self._sums is None:
      raise ValueError('DeviceMeans.finalize: no batch was added.')
    sums = fetch(self._sums)
    self._sums = None
    metrics = {k: (float(s) / float(w) if float(w) else float('nan'),
                   float(w)) for k, (s, w) in sums['metrics'].items()}
    loss, weight = map(float, sums['loss'])
    if not weight:
      loss, weight = map(float, sums['plain_loss'])
    return loss / weight, metrics


def new_metrics(task: Any) -> Any:
  """A fresh aggregator of the task's metrics (MeanMetrics by default)."""
  if task.metrics is None:
    return base_metrics.MeanMetrics()
  return base_hyperparams.instantiate(task.metrics)


def abstract_like(tree: Any) -> Any:
  """`jax.ShapeDtypeStruct`s (with shardings) of a tree's arrays: what a
  step compiled on another thread is traced from, while the arrays
  themselves may be donated to the next step."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                     sharding=getattr(x, 'sharding', None)),
      tree)


def peek_for_compile(inp: Any) -> Any:
  """The input's next batch, kept for its next `get_next_padded`, or None.

  None where the input's `get_next_padded` is its own (a peek might not be
  given back) or it has no batch left.
  """
  if type(inp).get_next_padded is not base_input.BaseInput.get_next_padded:
    return None
  return inp.peek_padded()


def eval_batches(inp: Any) -> Iterator[Any]:
  """The batches of one evaluation, under the `reset_for_eval` contract."""
  if inp.reset_for_eval:
    while True:
      try:
        yield inp.get_next_padded()
      except StopIteration:
        inp.reset()
        return
  for _ in range(inp.eval_loop_num_batches):
    yield inp.get_next_padded()


@dataclasses.dataclass(frozen=True)
class Rates:
  steps_per_sec: float
  tokens_per_sec: float


class Progress:
  """Steps and tokens per second between two reports."""

  def __init__(self, step: int):
    self._time = None
    self._step = step
    self._tokens = 0

  def count(self, batch: Any) -> None:
    """Counts a host batch (the clock starts at the first one)."""
    if self._time is None:
      self._time = time.time()
    self._tokens += tokens_in_batch(batch)

  def rates(self, step: int) -> Rates:
    """The rates since the last call (or the first batch); restarts them."""
    now = time.time()
    elapsed = max(now - (self._time or now), 1e-9)
    rates = Rates((step - self._step) / elapsed,
                  self._tokens * jax.process_count() / elapsed)
    self._time, self._step, self._tokens = now, step, 0
    return rates


class KeyValueOutputs:
  """The decode program's (key, value) outputs, written as Pax writes them.

  `<name>.jsonl` holds one value a line (`io_utils.JnpEncoder`) and, with
  `write_pickle`, `<name>.pickle` the (key, value) pairs, as
  `io_utils.write_key_value_pairs`. The decode program adds each batch's
  records as they arrive, so their JSON lines are encoded, and (for the
  pickle) their device arrays turned into numpy arrays, while the devices
  decode the next batches instead of all after the last one. `pairs` keeps
  the records as they were added. A value JSON
  cannot hold is logged at `write` and leaves no `.jsonl`; a pair pickle
  cannot hold is logged and leaves no `.pickle` (the decoding is not lost
  either way).
  """

  def __init__(self, write_pickle: bool = True):
    self.pairs = []
    # `pairs` as the pickle holds them; None: no pickle is written.
    self._host_pairs = [] if write_pickle else None
    self._lines = []
    self._error = None

  def add(self, key_value_pairs: Any) -> None:
    key_value_pairs = list(key_value_pairs)
    self.pairs.extend(key_value_pairs)
    if self._host_pairs is not None:
      self._host_pairs.extend(io_utils.cast_to_ndarrays(key_value_pairs))
    if self._error is not None:
      return
    try:
      self._lines.extend(json.dumps(v, cls=io_utils.JnpEncoder)
                         for _, v in key_value_pairs)
    except (TypeError, ValueError) as e:
      self._error, self._lines = e, []

  def write(self, filename: Any) -> None:
    """Writes `filename` + `.jsonl` (and `.pickle`); makes its folder."""
    path = epath.Path(filename)
    path.parent.mkdir(parents=True, exist_ok=True)
    if self._host_pairs is not None:
      try:
        io_utils.write_pickle_file(path, self._host_pairs,
                                   cast_to_ndarray=False)
      except (pickle.PicklingError, TypeError, AttributeError) as e:
        logging.warning('Outputs for %s cannot be pickled: %s', path, e)
        path.with_suffix('.pickle').unlink(missing_ok=True)
    if self._error is not None:
      logging.warning('Outputs for %s are not serializable: %s', path,
                      self._error)
      return
    path.with_suffix('.jsonl').write_text(
        ''.join(line + '\n' for line in self._lines))
