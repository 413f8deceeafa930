"""Programs: what the executor runs — a train step, an eval pass, a decode pass.

Public names: Program, SingleTaskTrainProgram, SingleTaskEvalProgram,
SingleTaskDecodeProgram, get_summary_base_dir, tokens_in_batch.

A program has three methods (`should_run`, `run`, `shutdown`); each writes its
own TensorBoard summaries under `<job_log_dir>/summaries/`:
`train` and `eval_train` (the train program), `eval_test_<input name>` (one per
eval input), `decode_test_<input name>` (one per decode input), and decode
outputs as JSON lines under `<job_log_dir>/decoder_out/<input name>/`.
"""

from __future__ import annotations

import abc
import collections
import json
import pathlib
import time
from typing import Any

from absl import logging
import jax
import numpy as np
from paxml import base_metrics
from paxml import mfu
from paxml import partitioning
from paxml import summary_utils
from paxml import trainer_lib
from praxis import base_hyperparams

instantiate = base_hyperparams.instantiate

# Train steps dispatched ahead of the one the host waits for.
_MAX_STEPS_IN_FLIGHT = 2


def get_summary_base_dir(job_log_dir: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(job_log_dir) / 'summaries'


def tokens_in_batch(batch: Any) -> int:
  """Non-padding tokens of an LM batch (`paddings`), else its examples."""
  paddings = batch.get('paddings') if isinstance(batch, dict) else None
  if paddings is not None and np.ndim(paddings) >= 2:
    return int(np.sum(1.0 - np.asarray(paddings)))
  leaves = jax.tree.leaves(batch)
  return int(leaves[0].shape[0]) if leaves else 0


def _scalars(weighted_scalars: Any) -> dict[str, tuple[float, float]]:
  """Weighted scalars as host floats {key: (value, weight)}."""
  out = {}
  for key, pair in dict(weighted_scalars).items():
    if isinstance(pair, (tuple, list)) and len(pair) == 2:
      out[key] = (float(np.asarray(pair[0])), float(np.asarray(pair[1])))
    else:
      out[key] = (float(np.asarray(pair)), 1.0)
  return out


def _new_metrics(task: Any) -> Any:
  """A fresh aggregator of the task's metrics (MeanMetrics by default)."""
  if task.metrics is None:
    return base_metrics.MeanMetrics()
  return instantiate(task.metrics)


class Program(abc.ABC):
  """A unit of work the executor runs between checkpoints."""

  @abc.abstractmethod
  def should_run(self, state: Any, step: int) -> bool:
    """Whether to run at `step`."""

  @abc.abstractmethod
  def run(self, state: Any, step: int) -> tuple[Any, Any]:
    """Runs once; returns (state, output)."""

  def shutdown(self) -> None:
    """Flushes and closes what the program opened."""


class SingleTaskTrainProgram(Program):
  """One training step per `run`, with summaries and progress logging."""

  def __init__(self, task: Any, train_input: Any,
               partitioner: partitioning.Partitioner,
               job_log_dir: pathlib.Path, enable_summary_writer: bool = True):
    self._task = task
    self._input = train_input
    self._partitioner = partitioner
    self._train = task.train
    self._step_fn = partitioner.partition(trainer_lib.train_step_single_learner)
    self._eval_fn = partitioner.partition(
        trainer_lib.eval_step_single_learner, is_eval=True)
    base = get_summary_base_dir(job_log_dir)
    self._writer = summary_utils.get_summary_writer(
        base / 'train', enable_summary_writer)
    self._eval_writer = summary_utils.get_summary_writer(
        base / 'eval_train', enable_summary_writer)
    self._key = jax.random.PRNGKey(self._train.random_seed)
    self._last_time = None
    self._last_step = None
    self._tokens = 0
    self._in_flight = collections.deque()

  @property
  def num_train_steps(self) -> int:
    return int(self._train.num_train_steps)

  def should_run(self, state: Any, step: int) -> bool:
    return step < self.num_train_steps

  def run(self, state: Any, step: int) -> tuple[Any, Any]:
    if self._last_time is None:
      self._last_time, self._last_step = time.time(), step
    batch = self._input.get_next()
    self._tokens += tokens_in_batch(batch)
    inputs = self._partitioner.preprocess_inputs(batch)
    # The compiled step folds the state's step into this base key.
    state, outputs = self._step_fn(state, self._key, inputs)
    self._bound_steps_in_flight(outputs)
    new_step = step + 1
    if trainer_lib.is_summary_step(self._train, new_step):
      self._report(new_step, outputs, batch_size=len(jax.tree.leaves(batch)[0]))
    if self._should_eval_train(new_step):
      _, eval_out = self._eval_fn(state, jax.random.fold_in(self._key, step),
                                  inputs)
      summary_utils.write_summary_entry(
          self._eval_writer, new_step, float(eval_out.loss),
          _scalars(eval_out.weighted_scalars), {})
    return state, outputs

  def _bound_steps_in_flight(self, outputs: Any) -> None:
    # Dispatch is asynchronous; waiting for the step `_MAX_STEPS_IN_FLIGHT`
    # back keeps the devices fed while bounding the queue (and the batches
    # it holds). An unbounded queue of collective steps can also exhaust
    # XLA:CPU's thread pool: its all-reduce rendezvous then aborts.
    self._in_flight.append(outputs.loss)
    if len(self._in_flight) > _MAX_STEPS_IN_FLIGHT:
      self._in_flight.popleft().block_until_ready()

  def _should_eval_train(self, step: int) -> bool:
    interval = self._train.eval_interval_steps
    return bool(interval) and not self._train.eval_skip_train and (
        step % interval == 0 or step == self.num_train_steps)

  def _report(self, step: int, outputs: Any, batch_size: int) -> None:
    loss = float(outputs.loss)  # Waits for the step: only at intervals.
    now = time.time()
    elapsed = max(now - self._last_time, 1e-9)
    steps_per_sec = (step - self._last_step) / elapsed
    tokens_per_sec = self._tokens * jax.process_count() / elapsed
    eta = (self.num_train_steps - step) / max(steps_per_sec, 1e-9)
    utilisation = mfu.mfu(self._step_fn.flops, steps_per_sec,
                          jax.device_count(), jax.devices()[0].device_kind)
    logging.info(
        'step %d/%d loss %.5f, %.2f steps/sec, %.0f tokens/sec, ETA %.0fs%s',
        step, self.num_train_steps, loss, steps_per_sec, tokens_per_sec, eta,
        '' if utilisation is None else f', MFU {100 * utilisation:.1f}%')
    if utilisation is not None:
      self._writer.add_scalar('MFU', utilisation, step)
    summaries = dict(outputs.summary_tensors or {})
    summary_utils.write_summary_entry(
        self._writer, step, loss, _scalars(outputs.weighted_scalars),
        summaries, steps_per_sec=steps_per_sec)
    self._writer.add_scalar('tokens/sec', tokens_per_sec, step)
    del batch_size
    self._last_time, self._last_step, self._tokens = now, step, 0

  def shutdown(self) -> None:
    self._writer.close()
    self._eval_writer.close()


def _batches(inp: Any):
  """The batches of one evaluation, under the `reset_for_eval` contract."""
  if inp.reset_for_eval:
    while True:
      try:
        yield inp.get_next()
      except StopIteration:
        inp.reset()
        return
  for _ in range(inp.eval_loop_num_batches):
    yield inp.get_next()


class _InputProgram(Program):
  """A program over one input, with its step function and summary writer.

  Attributes:
    name: The input's name.
  """

  STEP_FN: Any = None  # A trainer_lib step function.
  SUMMARY_PREFIX = ''  # Summaries go to `summaries/<prefix>_<input name>`.

  def __init__(self, task: Any, input_p: Any,
               partitioner: partitioning.Partitioner,
               job_log_dir: pathlib.Path, enable_summary_writer: bool = True):
    self._task = task
    self._input = instantiate(input_p)
    self._partitioner = partitioner
    self._step_fn = partitioner.partition(type(self).STEP_FN, is_eval=True)
    self.name = self._input.name
    self._job_log_dir = pathlib.Path(job_log_dir)
    self._writer = summary_utils.get_summary_writer(
        get_summary_base_dir(job_log_dir) /
        f'{self.SUMMARY_PREFIX}_{self.name}', enable_summary_writer)

  def should_run(self, state: Any, step: int) -> bool:
    return True

  def shutdown(self) -> None:
    self._writer.close()


class SingleTaskEvalProgram(_InputProgram):
  """Evaluates on one input; writes `summaries/eval_test_<name>`."""

  STEP_FN = staticmethod(trainer_lib.eval_step_single_learner)
  SUMMARY_PREFIX = 'eval_test'

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self._key = jax.random.PRNGKey(self._task.evaluate.random_seed)

  def run(self, state: Any, step: int) -> tuple[Any, dict[str, Any]]:
    metrics = _new_metrics(self._task)
    loss_key = self._task.learners[0].loss_name
    losses, weights = [], []
    for i, batch in enumerate(_batches(self._input)):
      key = jax.random.fold_in(self._key, i)
      _, out = self._step_fn(state, key,
                               self._partitioner.preprocess_inputs(batch))
      scalars = _scalars(out.weighted_scalars)
      metrics.store(scalars)
      losses.append(float(out.loss))
      # Weighted like the metrics, so padded batches don't count.
      weights.append(scalars.get(loss_key, (0.0, 1.0))[1])
    if not losses:
      raise ValueError(f'Eval input {self.name!r} produced no batch.')
    final = {k: (float(v), float(w)) for k, (v, w) in metrics.finalize().items()}
    loss = float(np.average(losses, weights=weights)) if sum(weights) else float(
        np.mean(losses))
    summary_utils.write_summary_entry(self._writer, step, loss, final, {})
    logging.info('eval %s at step %d: loss %.5f %s', self.name, step, loss,
                 {k: round(v, 5) for k, (v, _) in final.items()})
    return state, {'loss': loss, 'metrics': final}


class SingleTaskDecodeProgram(_InputProgram):
  """Decodes one input; writes summaries and `decoder_out/<name>/*.jsonl`."""

  STEP_FN = staticmethod(trainer_lib.decode_step_for_partitioner)
  SUMMARY_PREFIX = 'decode_test'

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self._out_dir = self._job_log_dir / 'decoder_out' / self.name
    self._key = jax.random.PRNGKey(self._task.decode.random_seed)

  def run(self, state: Any, step: int) -> tuple[Any, list[Any]]:
    metrics = _new_metrics(self._task)
    records = []
    for i, batch in enumerate(_batches(self._input)):
      key = jax.random.fold_in(self._key, i)
      _, out = self._step_fn(state, key,
                               self._partitioner.preprocess_inputs(batch))
      out = jax.device_get(out)
      scalars, kv_pairs, _ = self._task.model.process_decode_out(
          self._input, out.per_example_out)
      metrics.store({**_scalars(out.weighted_scalars), **_scalars(scalars)})
      records.extend(kv_pairs)
    final = {k: (float(v), float(w)) for k, (v, w) in metrics.finalize().items()}
    for key, (value, weight) in final.items():
      self._writer.add_scalar(f'Metrics/{key}', value, step)
      self._writer.add_scalar(f'Metrics/{key}-weight', weight, step)
    self._writer.flush()
    self._write_records(step, records)
    logging.info('decode %s at step %d: %d outputs %s', self.name, step,
                 len(records), final)
    for key, value in records[:2]:
      logging.info('decode %s sample %s: %s', self.name, key,
                   str(value)[:500])
    return state, records

  def _write_records(self, step: int, records: list[Any]) -> None:
    self._out_dir.mkdir(parents=True, exist_ok=True)
    path = self._out_dir / (
        f'decoder_out_{step}_shard_{jax.process_index()}.jsonl')
    with path.open('w') as f:
      for key, value in records:
        f.write(json.dumps({'key': str(key), 'value': _jsonable(value)}) + '\n')


def _jsonable(value: Any) -> Any:
  """`value` with numpy arrays and scalars turned into JSON types."""
  return json.loads(json.dumps(
      jax.tree.map(lambda x: np.asarray(x).tolist()
                   if isinstance(x, (np.ndarray, np.generic, jax.Array))
                   else x, value),
      default=str))
