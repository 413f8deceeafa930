"""TensorBoard summaries of a run, written with tensorboardX.

Public names: MAX_IMAGES_PER_SUMMARY, MAX_AUDIOS_PER_SUMMARY,
AUDIO_SAMPLE_RATE, get_summary_writer, flatten_summary_dict,
write_summary_entry, write_text, SummaryHandler.

Each program writes to its own directory (`<job_log_dir>/summaries/train`,
`.../eval_test_<name>`, ...). Only process 0 writes; the other processes, and
runs with summaries disabled, get a writer that does nothing. Tags follow
Pax: `loss`, `Steps/sec`, `Metrics/<key>` and `Metrics/<key>-weight` for
weighted scalars, and each layer summary (`add_summary`) under its key
without the `_scalar`/`_image`/... suffix.

  writer = summary_utils.get_summary_writer(job_log_dir / 'summaries/train')
  handler = summary_utils.SummaryHandler(writer, write_interval_steps=100)
  for step in ...:
    handler.process(step, out.loss, out.weighted_scalars, out.summary_tensors)
  handler.close()
  writer.close()
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
import concurrent.futures
import importlib.util
from typing import Any, Self

from absl import logging
from etils import epath
import jax
import numpy as np
from praxis import base_layer
import tensorboardX

SummaryType = base_layer.SummaryType

MAX_IMAGES_PER_SUMMARY = 64
MAX_AUDIOS_PER_SUMMARY = 64
AUDIO_SAMPLE_RATE = 44_000
# tensorboardX writes events on a thread and flushes its file every this many
# seconds (its `flush()` does not wait for queued events); `close()` writes
# everything.
_FLUSH_SECS = 10


class _NoOpSummaryWriter:
  """Takes every `tensorboardX.SummaryWriter` call and writes nothing."""

  def __getattr__(self, name: str) -> Any:
    return lambda *args, **kwargs: None

  def __enter__(self) -> Self:
    return self

  def __exit__(self, *exc: object) -> None:
    pass


def get_summary_writer(
    summary_dir: epath.PathLike, enable_summary_writer: bool = True
) -> Any:
  """A `tensorboardX.SummaryWriter` on process 0, a no-op writer elsewhere.

  Args:
    summary_dir: Where the event files go.
    enable_summary_writer: False gives the no-op writer on every process.

  Returns:
    The writer (also a context manager that closes it). Events reach the disk
    within about ten seconds, and all of them on `close()`.
  """
  if not enable_summary_writer or jax.process_index() != 0:
    return _NoOpSummaryWriter()
  logging.info('Writing summaries to %s', summary_dir)
  return tensorboardX.SummaryWriter(
      logdir=str(summary_dir), flush_secs=_FLUSH_SECS)


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


def _write_tensors(writer: Any, step: int, key: str, tensors: Any) -> None:
  """Writes one layer summary (one value, or a list of them over steps)."""
  kind = base_layer.get_summary_base_type(
      base_layer.get_summary_type_from_key(key))
  tag = base_layer.trim_summary_type_from_key(key)
  if not isinstance(tensors, (list, tuple)):
    tensors = [tensors]
  values = [_host(t) for t in tensors]
  if kind == SummaryType.SCALAR:
    writer.add_scalar(tag, float(np.mean([np.mean(v) for v in values])), step)
  elif kind == SummaryType.IMAGE:  # The latest images first.
    images = np.concatenate(
        [v.reshape((-1,) + v.shape[-3:]) for v in reversed(values)])
    writer.add_images(tag, images[:MAX_IMAGES_PER_SUMMARY], step,
                      dataformats='NHWC')
  elif kind == SummaryType.TEXT:
    text = values[-1]
    if not isinstance(text, str):
      text = '\n\n'.join(
          t.decode() if isinstance(t, bytes) else str(t)
          for t in np.ravel(text))
    writer.add_text(tag, text, step)
  elif kind == SummaryType.HISTOGRAM:
    writer.add_histogram(tag, np.concatenate([np.ravel(v) for v in values]),
                         step)
  elif kind == SummaryType.AUDIO:
    _write_audio(writer, step, tag, values)
  else:
    logging.warning('Summary %s of type %s is not written.', key, kind.name)


def _write_audio(writer: Any, step: int, tag: str, values: list[Any]) -> None:
  """Clips [batch, frames, channels] as `tag/<i>` (needs `soundfile`)."""
  if importlib.util.find_spec('soundfile') is None:
    logging.warning('Audio summary %s skipped: install soundfile.', tag)
    return
  clips = np.concatenate(
      [v.reshape((-1,) + v.shape[-2:]) for v in reversed(values)])
  for i, clip in enumerate(clips[:MAX_AUDIOS_PER_SUMMARY]):
    writer.add_audio(f'{tag}/{i}', clip, step, sample_rate=AUDIO_SAMPLE_RATE)


def write_summary_entry(
    writer: Any,
    step: int,
    loss: Any,
    weighted_scalars: Mapping[str, Any],
    summary_tensors: Mapping[str, Any],
    steps_per_sec: float | None = None,
    metrics_prefix: str = 'Metrics/',
) -> None:
  """Writes the loss, metrics and layer summaries of one step.

  Args:
    writer: From `get_summary_writer`.
    step: The step.
    loss: The loss (averaged if it has several values).
    weighted_scalars: key -> (value, weight), or a list of such pairs
      accumulated over steps; written as their weighted mean and total weight.
    summary_tensors: Nested dict of layer summaries, keys ending in a summary
      type suffix (`_scalar`, `_image`, ...); each value one array or a list.
    steps_per_sec: Written as `Steps/sec` if given.
    metrics_prefix: Prefix of the metric tags.
  """
  mean_loss = float(np.mean(_host(loss)))
  writer.add_scalar('loss', mean_loss, step)
  status = [f'loss={mean_loss:.6g}']
  if steps_per_sec is not None:
    writer.add_scalar('Steps/sec', float(steps_per_sec), step)
    status.append(f'steps/sec={steps_per_sec:.4g}')
  for key, pairs in weighted_scalars.items():
    value, weight = _weighted_mean(key, pairs)
    writer.add_scalar(f'{metrics_prefix}{key}', value, step)
    writer.add_scalar(f'{metrics_prefix}{key}-weight', weight, step)
    status.append(f'{key}={value:.6g} (weight={weight:.6g})')
  for key, tensors in flatten_summary_dict(summary_tensors):
    _write_tensors(writer, step, key, tensors)
  writer.flush()
  logging.info('Summaries at step %d: %s', step, ', '.join(status))


def write_text(writer: Any, step: int, tag: str, text: str) -> None:
  """Writes one text summary (e.g. `Model`, `Total Num Params`)."""
  writer.add_text(tag, text, step)
  writer.flush()


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
      weighted_scalars: Mapping[str, Any],
      summary_tensors: Mapping[str, Any],
      per_example_out: Any = None,
      steps_per_sec: float | None = None,
  ) -> bool:
    """Takes one step's outputs; returns whether this step writes summaries."""
    step = int(step)
    args = (step, loss, weighted_scalars, summary_tensors, per_example_out,
            steps_per_sec)
    if self._pool is None:
      self._process(*args)
    else:
      for done in [f for f in self._pending if f.done()]:
        self._pending.remove(done)
        done.result()  # Raises a worker's error here.
      self._pending.append(self._pool.submit(self._process, *args))
    return step % self._write_every == 0

  def close(self) -> None:
    """Waits for the worker's writes (raising their errors).

    The writer stays open; close it when every handler using it is closed.
    """
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      pending, self._pending = self._pending, []
      for future in pending:
        future.result()
    self._writer.flush()

  def _process(self, step: int, loss: Any, weighted_scalars: Any,
               summary_tensors: Any, per_example_out: Any,
               steps_per_sec: float | None) -> None:
    accumulate = (self._accumulate_every is not None
                  and step % self._accumulate_every == 0)
    write = step % self._write_every == 0
    if self._log_every is None or step % self._log_every == 0:
      logging.info('step %d %s loss=%s weighted_scalars=%s', step,
                   self._name, _host(loss), weighted_scalars)
      if per_example_out is not None:
        logging.info('per_example_out: %s', per_example_out)
    if accumulate or (write and self._accumulate_every is None):
      self._add(step, loss, weighted_scalars, summary_tensors, steps_per_sec)
    if write and self._losses:
      write_summary_entry(
          self._writer, self._latest_step, np.mean(self._losses),
          self._weighted, self._tensors,
          np.mean(self._speeds) if self._speeds else None, self._prefix)
      self._clear()

  def _add(self, step: int, loss: Any, weighted_scalars: Any,
           summary_tensors: Any, steps_per_sec: float | None) -> None:
    self._latest_step = step
    self._losses.append(np.mean(_host(loss)))
    for key, pair in weighted_scalars.items():
      self._weighted[key].append(tuple(_host(v) for v in pair))
    for key, tensor in flatten_summary_dict(summary_tensors):
      self._tensors[key].append(_host(tensor))
    if steps_per_sec is not None:
      self._speeds.append(float(steps_per_sec))

  def _clear(self) -> None:
    self._latest_step = -1
    self._losses: list[float] = []
    self._weighted: dict[str, list[Any]] = collections.defaultdict(list)
    self._tensors: dict[str, list[Any]] = collections.defaultdict(list)
    self._speeds: list[float] = []
