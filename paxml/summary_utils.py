"""TensorBoard summaries of a run, Pax's summary_utils.

Public names: MAX_IMAGES_PER_SUMMARY, MAX_AUDIOS_PER_SUMMARY,
MAX_TEXTS_PER_SUMMARY, AUDIO_SAMPLE_RATE, AUDIO_SUMMARY_SAMPLE_RATE,
PMAP_PARALLEL_AXIS_NAME, SummaryType, SummaryWriter, get_summary_writer,
writing_to, flatten_summary_dict, get_summary_display_name_from_key,
write_summary_tensor, write_summary_entry, write_text,
write_clu_metric_summaries, compute_and_write_clu_metric_summaries,
write_seqio_metric_summaries, write_model_structure, write_model_provenance,
write_total_num_params, write_global_batch_size, pretty_repr,
pretty_format_iters, pretty_repr_shapes, pretty_repr_provenance, l2_mean,
flatten_flax_summaries, aggregate_per_replica_summaries, SummaryHandler.

Each program writes to its own directory (`<job_log_dir>/summaries/train`,
`.../eval_test_<name>`, ...) with a tensorboardX writer from
`get_summary_writer`; only process 0 writes, the other processes, and runs
with summaries disabled, get a writer that does nothing. Every function that
takes a writer also takes a TensorFlow summary writer
(`tf.summary.create_file_writer`), as Pax's do; TensorFlow is touched only
then. Tags follow Pax: `loss`, `Steps/sec`, `Metrics/<key>` and
`Metrics/<key>-weight` for weighted scalars, and each layer summary
(`add_summary`) under its key with its base type suffix (`x_scalar`; an
`_aggregate_scalar` key shows as `_scalar`); images and audio clips get one
tag each, `<key>/<i>`.

  writer = summary_utils.get_summary_writer(job_log_dir / 'summaries/train')
  handler = summary_utils.SummaryHandler(writer, write_interval_steps=100)
  for step in ...:
    handler.process(step, out.loss, out.weighted_scalars, out.summary_tensors)
  handler.close()
  writer.close()
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
import concurrent.futures
from typing import Any, Iterator, Self

from absl import logging
from etils import epath
import jax
import numpy as np
from paxml import _summary_trees
from paxml import _summary_writers
from paxml._tensorboardx import tensorboardX
from paxml import metric_utils
from paxml import train_states
from praxis import base_layer

SummaryType = base_layer.SummaryType
SummaryWriter = tensorboardX.SummaryWriter
PMAP_PARALLEL_AXIS_NAME = base_layer.PMAP_PARALLEL_AXIS_NAME

MAX_IMAGES_PER_SUMMARY = 64
MAX_AUDIOS_PER_SUMMARY = 64
MAX_TEXTS_PER_SUMMARY = 64
AUDIO_SUMMARY_SAMPLE_RATE = 44_000
AUDIO_SAMPLE_RATE = AUDIO_SUMMARY_SAMPLE_RATE

pretty_repr = _summary_trees.pretty_repr
pretty_format_iters = _summary_trees.pretty_format_iters
pretty_repr_shapes = _summary_trees.pretty_repr_shapes
pretty_repr_provenance = _summary_trees.pretty_repr_provenance
l2_mean = _summary_trees.l2_mean
flatten_flax_summaries = _summary_trees.flatten_flax_summaries
writing_to = _summary_writers.writing_to
# tensorboardX writes events on a thread and flushes its file every this many
# seconds (its `flush()` does not wait for queued events); `close()` writes
# everything.
_FLUSH_SECS = 10


class _DefaultWhileEntered:
  """`with writer:` makes it the writer that `write_*` functions use, as
  Pax's `with get_summary_writer(dir):` does; leaving the block restores the
  previous one (and closes a real writer)."""

  def __enter__(self) -> Self:
    context = _summary_writers.writing_to(self)
    context.__enter__()
    self.__dict__.setdefault('_pax_contexts', []).append(context)
    return self

  def __exit__(self, *exc: Any) -> None:
    self.__dict__['_pax_contexts'].pop().__exit__(*exc)
    self._close_on_exit()

  def _close_on_exit(self) -> None:
    pass


class _NoOpSummaryWriter(_DefaultWhileEntered):
  """Takes every `tensorboardX.SummaryWriter` call and writes nothing."""

  def __getattr__(self, name: str) -> Any:
    if name.startswith('__'):
      raise AttributeError(name)
    return lambda *args, **kwargs: None


class _SummaryWriter(_DefaultWhileEntered, tensorboardX.SummaryWriter):
  """A tensorboardX writer that is also the default inside `with`."""

  def _close_on_exit(self) -> None:
    self.close()


def get_summary_writer(
    summary_dir: epath.PathLike, enable_summary_writer: bool = True
) -> Any:
  """A `tensorboardX.SummaryWriter` on process 0, a no-op writer elsewhere.

  Args:
    summary_dir: Where the event files go.
    enable_summary_writer: False gives the no-op writer on every process.

  Returns:
    The writer. As a context manager (Pax's `with get_summary_writer(d):`)
    it is the writer that the `write_*` functions use inside the block, and
    is closed at its end. Events reach the disk within about ten seconds,
    and all of them on `close()`.
  """
  if not enable_summary_writer or jax.process_index() != 0:
    return _NoOpSummaryWriter()
  logging.info('Writing summaries to %s', summary_dir)
  return _SummaryWriter(logdir=str(summary_dir), flush_secs=_FLUSH_SECS)


def flatten_summary_dict(
    summary_dict: Mapping[str, Any], parent_key: str | None = None
) -> list[tuple[str, Any]]:
  """(key, value) pairs of a nested dict, keys joined with '/'."""
  out = []
  for key, value in summary_dict.items():
    key = key if parent_key is None else f'{parent_key}/{key}'
    if isinstance(value, Mapping):
      out.extend(flatten_summary_dict(value, key))
    else:
      out.append((key, value))
  return out


def _host(x: Any) -> Any:
  """`x` as a numpy array (strings stay strings); floats at least 32-bit."""
  if isinstance(x, (str, bytes)):
    return x
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    if not x.is_fully_replicated:
      raise ValueError(
          f'A summary value of shape {x.shape} is split across processes; '
          'replicate step outputs (out_shardings) before writing summaries.')
    x = x.addressable_data(0)
  x = np.asarray(x)
  if jax.dtypes.issubdtype(x.dtype, np.floating) and x.dtype.itemsize < 4:
    x = x.astype(np.float32)  # bfloat16 and float16.
  return x


def _fetch(tree: Any) -> Any:
  """`tree` on the host in one `jax.device_get`; arrays split over
  processes read from this process's first shard (as `_host`)."""
  def local(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      if not x.is_fully_replicated:
        return _host(x)  # Raises the clear error.
      return x.addressable_data(0)
    return x
  return jax.device_get(jax.tree.map(local, tree))


def _weighted_mean(key: str, pairs: Any) -> tuple[float, float]:
  """(sum(value * weight) / sum(weight), sum(weight)) over (value, weight)s."""
  if not (isinstance(pairs, list)
          and all(isinstance(p, (tuple, list)) and len(p) == 2
                  for p in pairs)):
    pairs = [pairs]
  total, weight = 0.0, 0.0
  for pair in pairs:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
      raise ValueError(f'Weighted scalar {key!r} must be a (value, weight) '
                       f'pair, got {pair!r}.')
    value, w = _host(pair[0]), _host(pair[1])
    total += float(np.sum(value * w))
    weight += float(np.sum(w))
  return (total / weight if weight else float('nan')), weight


def aggregate_per_replica_summaries(summary_tensors: dict[str, Any]
                                    ) -> dict[str, Any]:
  """Inside pmap: scalar summaries averaged over the replicas, images and
  audio gathered from all of them (at most MAX_*_PER_SUMMARY)."""
  return _summary_trees.aggregate_per_replica_summaries(
      summary_tensors, MAX_IMAGES_PER_SUMMARY, MAX_AUDIOS_PER_SUMMARY,
      PMAP_PARALLEL_AXIS_NAME)


def get_summary_display_name_from_key(key: str) -> str:
  """The tag of a summary key: the aggregate marker dropped, e.g.
  `x_aggregate_scalar` -> `x_scalar`."""
  kind = base_layer.get_summary_base_type(
      base_layer.get_summary_type_from_key(key))
  return (base_layer.trim_summary_type_from_key(key)
          + base_layer.get_summary_type_suffix(kind))


def _items(tensors: list[Any], limit: int, item_rank: int) -> Iterator[tuple[
    int, np.ndarray]]:
  """(i, [1, ...] slice) of the newest tensors' items, at most `limit` in all.

  Each tensor is reshaped to [-1, <last item_rank dims>]; the index restarts
  at 0 for each tensor, as Pax tags them.
  """
  left = limit
  for tensor in reversed(tensors):
    if left <= 0:
      return
    tensor = np.reshape(tensor, (-1,) + np.shape(tensor)[-item_rank:])
    for i in range(min(tensor.shape[0], left)):
      yield i, tensor[i:i + 1]
    left -= tensor.shape[0]


def write_summary_tensor(
    step_i: int,
    key: str,
    tensor: Any,
    summary_type: SummaryType,
    metadata: Any | None = None,
    sample_rate: int = AUDIO_SUMMARY_SAMPLE_RATE,
) -> None:
  """Writes one summary (a value, or a list of values over steps).

  Writes into the writer of the enclosing `writing_to` (or
  `write_summary_entry`), or TensorFlow's default writer.

  Args:
    step_i: The step.
    key: The tag.
    tensor: One value or a list of them (the newest last): scalars are
      averaged, histograms pooled, images/audio/text written item by item.
    summary_type: How to write it.
    metadata: Unused (video summaries are not written).
    sample_rate: Of audio clips.
  """
  del metadata
  out = _summary_writers.current()
  tensors = [_host(t) for t in (tensor if isinstance(tensor, (list, tuple))
                                else [tensor])]
  kind = base_layer.get_summary_base_type(summary_type)
  if kind == SummaryType.SCALAR:
    out.scalar(key, float(np.mean([np.mean(t) for t in tensors])), step_i)
  elif kind == SummaryType.IMAGE:
    for i, image in _items(tensors, MAX_IMAGES_PER_SUMMARY, 3):
      out.image(f'{key}/{i}', image, step_i)
  elif kind == SummaryType.AUDIO:
    for i, clip in _items(tensors, MAX_AUDIOS_PER_SUMMARY, 2):
      out.audio(f'{key}/{i}', clip, sample_rate, step_i)
  elif kind == SummaryType.TEXT:
    _write_texts(out, step_i, key, tensors)
  elif kind == SummaryType.HISTOGRAM:
    out.histogram(key, np.concatenate([np.ravel(t) for t in tensors]), step_i)
  else:
    logging.warning('Summary %s of type %s is not written.', key, kind.name)


def _write_texts(out: Any, step: int, key: str, tensors: list[Any]) -> None:
  left = MAX_TEXTS_PER_SUMMARY
  for tensor in reversed(tensors):
    if left <= 0:
      return
    if isinstance(tensor, (str, bytes)):
      out.text(key, tensor.decode() if isinstance(tensor, bytes) else tensor,
               step)
      continue
    tensor = np.atleast_1d(tensor)
    for i in range(min(tensor.shape[0], left)):
      out.text(f'{key}/{i}', str(tensor[i:i + 1]), step)
    left -= tensor.shape[0]


def write_summary_entry(
    summary_writer: Any,
    step_i: int,
    loss: Any,
    weighted_scalars_list: Mapping[str, Any] | None,
    clu_metrics: Mapping[str, Any] | None = None,
    summary_tensors: Mapping[str, Any] | None = None,
    steps_per_sec: float | None = None,
    metrics_prefix: str = 'Metrics/',
) -> None:
  """Writes the loss, metrics and layer summaries of one step.

  Args:
    summary_writer: From `get_summary_writer`, or a TF summary writer.
    step_i: The step.
    loss: The loss (averaged if it has several values).
    weighted_scalars_list: key -> (value, weight), or a list of such pairs
      accumulated over steps; written as their weighted mean and total weight.
    clu_metrics: key -> clu-style metric (`compute()`), written computed.
    summary_tensors: Nested dict of layer summaries, keys ending in a summary
      type suffix (`_scalar`, `_image`, ...); each value one array or a list.
    steps_per_sec: Written as `Steps/sec` if given.
    metrics_prefix: Prefix of the metric tags.
  """
  mean_loss = float(np.mean(_host(loss)))
  status = [f'loss={mean_loss:.6g}']
  with writing_to(summary_writer) as out:
    out.scalar('loss', mean_loss, step_i)
    if steps_per_sec is not None:
      out.scalar('Steps/sec', steps_per_sec, step_i)
      status.append(f'steps/sec={steps_per_sec:.4g}')
    for key, pairs in (weighted_scalars_list or {}).items():
      value, weight = _weighted_mean(key, pairs)
      out.scalar(f'{metrics_prefix}{key}', value, step_i)
      out.scalar(f'{metrics_prefix}{key}-weight', weight, step_i)
      status.append(f'{key}={value:.6g} (weight={weight:.6g})')
    compute_and_write_clu_metric_summaries(clu_metrics, step_i,
                                           metrics_prefix=metrics_prefix)
    for key, tensors in flatten_summary_dict(summary_tensors or {}):
      write_summary_tensor(step_i, get_summary_display_name_from_key(key),
                           tensors, base_layer.get_summary_type_from_key(key))
    out.flush()
  logging.info('Summaries at step %d: %s', step_i, ', '.join(status))


def write_text(writer: Any, step: int, tag: str, text: str) -> None:
  """Writes one text summary (e.g. `Model`, `Total Num Params`)."""
  with writing_to(writer) as out:
    out.text(tag, text, step)
    out.flush()


# The summary type of each clu `Value` class (by name: clu is optional).
_CLU_VALUE_TYPES = {
    'Scalar': SummaryType.AGGREGATE_SCALAR,
    'Image': SummaryType.AGGREGATE_IMAGE,
    'Text': SummaryType.TEXT,
    'Histogram': SummaryType.HISTOGRAM,
    'Audio': SummaryType.AUDIO,
    'Summary': SummaryType.VIDEO,  # As Pax: a clu Summary is a video (GIF).
}


def write_clu_metric_summaries(metric_values: Mapping[str, Any], step_i: int,
                               metrics_prefix: str = 'Metrics/') -> None:
  """Writes computed metric values (clu `Value`s, or plain scalars).

  Call it inside `writing_to(writer)` (or with a TF writer as default).

  Args:
    metric_values: name -> value, as `metric_utils.compute_metric_values`
      gives.
    step_i: The step.
    metrics_prefix: Prefix of the tags.
  """
  for name, value in metric_values.items():
    kind = _CLU_VALUE_TYPES.get(type(value).__name__)
    if kind is None:  # A plain number or array: a scalar.
      kind, payload, extra = SummaryType.AGGREGATE_SCALAR, value, {}
    else:
      payload = value.value
      extra = ({'sample_rate': value.sample_rate}
               if kind == SummaryType.AUDIO else {})
    write_summary_tensor(step_i, f'{metrics_prefix}{name}', payload, kind,
                         **extra)


def compute_and_write_clu_metric_summaries(
    metrics: Mapping[str, Any] | None, step: int,
    metrics_prefix: str = 'Metrics/') -> None:
  """Computes clu-style metrics and writes their values (see above)."""
  if metrics:
    write_clu_metric_summaries(
        metric_utils.compute_metric_values(jax.device_get(metrics)), step,
        metrics_prefix=metrics_prefix)


def write_seqio_metric_summaries(seqio_metrics: Sequence[Mapping[str, Any]],
                                 metric_name_prefix: str, step: int) -> None:
  """Writes seqio metric dicts as `<prefix>/<name>` summaries.

  Scalars (and plain floats) are written as scalars, `Text` as text;
  seqio's image, audio, histogram and generic values are written in their
  own kind where the writer supports it. Call it inside `writing_to`.
  """
  out = _summary_writers.current()
  for metrics in seqio_metrics:
    for name, value in metrics.items():
      tag = f'{metric_name_prefix}/{name}'
      kind = type(value).__name__
      if kind == 'Text':
        text = value.textdata
        out.text(tag, text.decode() if isinstance(text, bytes) else text, step)
      elif kind == 'Image':
        for i, image in _items([np.asarray(value.image)], value.max_outputs,
                               3):
          out.image(f'{tag}/{i}', image, step)
      elif kind == 'Audio':
        for i, clip in _items([np.asarray(value.audiodata)],
                              value.max_outputs, 2):
          out.audio(f'{tag}/{i}', clip, value.sample_rate, step)
      elif kind == 'Histogram':
        out.histogram(tag, np.asarray(value.values), step)
      elif kind == 'Generic':
        logging.warning('Generic seqio metric %s is not written.', tag)
      else:
        out.scalar(tag, metric_utils.as_float(
            value.value if kind == 'Scalar' else value), step)


def _text_at_step_0(writer: Any, texts: dict[str, str]) -> None:
  with writing_to(writer) as out:
    for tag, text in texts.items():
      out.text(tag, text, 0)
    out.flush()


def _spaced(number: int) -> str:
  return f'{number:,}'.replace(',', ' ')


def write_model_structure(train_summary_writer: Any, train_state: Any,
                          is_vars_replicated: bool) -> None:
  """Writes the variables' shapes as the text summary `Model`."""
  _text_at_step_0(train_summary_writer, {
      'Model': pretty_repr_shapes(train_state.mdl_vars, is_vars_replicated)})


def write_model_provenance(train_summary_writer: Any,
                           train_state_provenance: Any) -> None:
  """Writes where the variables and optimizer states were loaded from."""
  _text_at_step_0(train_summary_writer, {
      'Model vars provenance': pretty_repr_provenance(
          train_state_provenance.mdl_vars),
      'Opt states provenance': pretty_repr_provenance(
          train_state_provenance.opt_states)})


def write_total_num_params(train_summary_writer: Any,
                           total_num_params: int) -> None:
  """Writes `Total Num Params` (digits grouped by spaces)."""
  _text_at_step_0(train_summary_writer,
                  {'Total Num Params': _spaced(total_num_params)})


def write_global_batch_size(train_summary_writer: Any,
                            global_batch_size: int) -> None:
  """Writes `Global batch size` (digits grouped by spaces)."""
  _text_at_step_0(train_summary_writer,
                  {'Global batch size': _spaced(global_batch_size)})


class SummaryHandler:
  """Decides when to accumulate, write and log the summaries of each step.

  Without `accumulate_interval_steps` the values of every
  `write_interval_steps`-th step are written; with it, the values of every
  `accumulate_interval_steps`-th step are collected and written averaged
  (weighted scalars by weight) at the next write step.
  """

  def __init__(
      self,
      summary_writer: Any,
      write_interval_steps: int,
      accumulate_interval_steps: int | None = None,
      log_interval_steps: int | None = None,
      is_async: bool = False,
      name: str = '',
      metrics_prefix: str = 'Metrics/',
  ):
    """Sets the intervals.

    Args:
      summary_writer: From `get_summary_writer`.
      write_interval_steps: Write at steps that are multiples of this.
      accumulate_interval_steps: Collect values at multiples of this.
      log_interval_steps: Log step outputs at multiples of this (None: always).
      is_async: Move values to the host and write them on a worker thread, so
        the caller need not wait for the step's results.
      name: Shown in the logs.
      metrics_prefix: Prefix of the metric tags.
    """
    log_interval_steps = log_interval_steps or None  # As Pax: 0 logs always.
    for field, value in [('write_interval_steps', write_interval_steps),
                         ('accumulate_interval_steps',
                          accumulate_interval_steps),
                         ('log_interval_steps', log_interval_steps)]:
      if value is not None and value < 1:
        raise ValueError(f'SummaryHandler {name!r}: {field} must be >= 1, '
                         f'got {value}.')
    self._writer = summary_writer
    self._write_every = write_interval_steps
    self._accumulate_every = accumulate_interval_steps
    self._log_every = log_interval_steps
    self._name = name
    self._prefix = metrics_prefix
    self._pool = (concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix='SummaryHandler')
                  if is_async else None)
    self._pending: list[concurrent.futures.Future[None]] = []
    self._clear()

  def process(
      self,
      step: int,
      loss: Any,
      weighted_scalars: Mapping[str, Any] | None,
      summary_tensors: Mapping[str, Any] | None,
      per_example_out: Any = None,
      steps_per_sec: float | None = None,
      clu_metrics: Mapping[str, Any] | None = None,
  ) -> bool:
    """Takes one step's outputs; returns whether this step writes summaries.

    Args:
      step: The step.
      loss: Its loss.
      weighted_scalars: key -> (value, weight), or None.
      summary_tensors: The layer summaries (nested dict), or None.
      per_example_out: Logged at log steps, if given.
      steps_per_sec: The training speed, written as `Steps/sec`.
      clu_metrics: key -> clu-style metric (merged when accumulating), or
        None.

    Returns:
      Whether this step's summaries are written.
    """
    step = int(step)
    args = (step, loss, weighted_scalars or {}, summary_tensors or {},
            per_example_out, steps_per_sec, clu_metrics or {})
    if self._pool is None:
      self._process(*args)
    else:
      for done in [f for f in self._pending if f.done()]:
        self._pending.remove(done)
        done.result()  # Raises a worker's error here.
      self._pending.append(self._pool.submit(self._process, *args))
    return step % self._write_every == 0

  def close(self, wait: bool = True) -> None:
    """Waits for the worker's writes (raising their errors); `wait` is
    Pax's argument (the writes are always waited for).

    The writer stays open; close it when every handler using it is closed.
    """
    del wait
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      pending, self._pending = self._pending, []
      for future in pending:
        future.result()
    self._writer.flush()

  def _process(self, step: int, loss: Any, weighted_scalars: Any,
               summary_tensors: Any, per_example_out: Any,
               steps_per_sec: float | None, clu_metrics: Any) -> None:
    accumulate = (self._accumulate_every is not None
                  and step % self._accumulate_every == 0)
    write = step % self._write_every == 0
    if self._log_every is None or step % self._log_every == 0:
      logging.info('step %d %s loss=%s weighted_scalars=%s', step,
                   self._name, _host(loss), weighted_scalars)
      if per_example_out is not None:
        logging.info('per_example_out: %s', per_example_out)
    if accumulate or (write and self._accumulate_every is None):
      self._add(step, loss, weighted_scalars, summary_tensors, steps_per_sec,
                clu_metrics)
    if write and self._losses:
      # The accumulated values stayed on the devices: fetched here at once.
      losses, weighted, tensors = _fetch(
          (self._losses, dict(self._weighted), dict(self._tensors)))
      write_summary_entry(
          self._writer, self._latest_step,
          np.mean(np.concatenate([np.ravel(_host(x)) for x in losses])),
          weighted, self._clu, tensors,
          np.mean(self._speeds) if self._speeds else None, self._prefix)
      self._clear()

  def _add(self, step: int, loss: Any, weighted_scalars: Any,
           summary_tensors: Any, steps_per_sec: float | None,
           clu_metrics: Any) -> None:
    self._latest_step = step
    if clu_metrics:
      self._clu = metric_utils.merge_clu_metrics(
          self._clu, dict(jax.device_get(clu_metrics)))
    # Kept as they are (no wait for the devices); averaged at writes.
    self._losses.append(loss)
    for key, pair in weighted_scalars.items():
      self._weighted[key].append(tuple(pair))
    for key, tensor in flatten_summary_dict(summary_tensors):
      self._tensors[key].append(tensor)
    if steps_per_sec is not None:
      self._speeds.append(float(steps_per_sec))

  def _clear(self) -> None:
    self._latest_step = -1
    self._losses: list[np.ndarray] = []
    self._weighted: dict[str, list[Any]] = collections.defaultdict(list)
    self._tensors: dict[str, list[Any]] = collections.defaultdict(list)
    self._speeds: list[float] = []
    self._clu: dict[str, Any] = {}


# Names Pax 1.4's module also has (aliases of other modules' names).
TensorProvenance = train_states.TensorProvenance
TrainState = train_states.TrainState
TrainStateProvenance = train_states.TrainStateProvenance
