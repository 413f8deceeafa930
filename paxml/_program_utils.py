"""Helpers shared by the train, eval and decode programs.

Private to `paxml.programs` and `paxml.decode_programs`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Iterator

from etils import epath
import jax
import numpy as np
from paxml import base_metrics
from praxis import base_hyperparams


def get_summary_base_dir(job_log_dir: Any) -> epath.Path:
  """`<job_log_dir>/summaries`."""
  return epath.Path(job_log_dir) / 'summaries'


def tokens_in_batch(batch: Any) -> int:
  """Non-padding tokens of an LM batch (`paddings`), else its examples."""
  paddings = batch.get('paddings') if isinstance(batch, dict) else None
  if paddings is not None and np.ndim(paddings) >= 2:
    return int(np.sum(1.0 - np.asarray(paddings)))
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


def new_metrics(task: Any) -> Any:
  """A fresh aggregator of the task's metrics (MeanMetrics by default)."""
  if task.metrics is None:
    return base_metrics.MeanMetrics()
  return base_hyperparams.instantiate(task.metrics)


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


def jsonable(value: Any) -> Any:
  """`value` with numpy arrays and scalars turned into JSON types."""
  return json.loads(json.dumps(
      jax.tree.map(lambda x: np.asarray(x).tolist()
                   if isinstance(x, (np.ndarray, np.generic, jax.Array))
                   else x, value),
      default=str))
