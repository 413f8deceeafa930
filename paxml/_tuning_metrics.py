"""The metrics a trial reports to its tuner, under Pax's names.

A training run calls `should_early_stop` after each step (and its
evaluations and decodes, if any: `run_eval_programs`,
`run_decode_programs`); it gathers what was measured into one flat dict
whose keys are the names that `automl.Metric` matches (`train/<name>`,
`eval_test_<input>/metrics/<name>`, `decode_test_<input>/<name>`,
`train_steps_per_sec`, ...) and hands it to the trial's early-stopping
function, whose answer says whether the run stops.
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple, Sequence

from absl import logging

from paxml import metric_utils
from paxml import trainer_lib
from praxis import py_utils

_ALWAYS_AGGREGATE_ENV = 'PAXML_EARLY_STOP_ALWAYS_AGGREGATE_TRAIN_METRICS'


class EvalMetrics(NamedTuple):
  """What one round of evaluation measured, per eval input."""
  metrics_list: Sequence[dict[str, float] | None] | None = None
  scoring_metrics_list: Sequence[dict[str, float] | None] | None = None
  steps_per_sec: float | None = None
  input_names: Sequence[str] | None = None


class DecodeMetrics(NamedTuple):
  """What one round of decoding measured, per decode input."""
  metrics_list: Sequence[dict[str, float] | None] | None = None
  processed_metrics_list: Sequence[dict[str, float] | None] | None = None
  seqio_metrics_list: Sequence[dict[str, float] | None] | None = None
  steps_per_sec: float | None = None
  input_names: Sequence[str] | None = None


def _run(programs: Sequence[Any], train_state: Any,
         step: int) -> tuple[list[Any], float]:
  """Each program's output on `train_state` at `step`, and the seconds."""
  start = time.time()
  outs = [program.run(train_state, step) for program in programs]
  return outs, time.time() - start


def run_eval_programs(eval_programs: Sequence[Any], train_state: Any,
                      step: int) -> tuple[EvalMetrics, float]:
  """Runs each eval program on `train_state` at `step`: their metrics, with
  the evaluated batches per second, and the seconds taken."""
  outs, elapsed = _run(eval_programs, train_state, step)
  return EvalMetrics(
      metrics_list=[o.eval_metrics for o in outs],
      scoring_metrics_list=[o.eval_scoring_metrics for o in outs],
      steps_per_sec=sum(o.num_eval_steps for o in outs) / max(elapsed, 1e-9),
      input_names=[p.eval_input.name for p in eval_programs]), elapsed


def run_decode_programs(decode_programs: Sequence[Any], train_state: Any,
                        step: int) -> tuple[DecodeMetrics, float]:
  """Runs each decode program on `train_state` at `step`: their metrics,
  with the decoded batches per second, and the seconds taken."""
  outs, elapsed = _run(decode_programs, train_state, step)
  return DecodeMetrics(
      metrics_list=[o.decode_metrics for o in outs],
      processed_metrics_list=[o.processed_decode_metrics for o in outs],
      seqio_metrics_list=[o.seqio_metrics for o in outs],
      steps_per_sec=sum(o.num_decode_steps for o in outs) / max(elapsed,
                                                                  1e-9),
      input_names=[p.decode_input.name for p in decode_programs]), elapsed


def aggregates_train_metrics(is_last: bool, evaluates: bool,
                             decodes: bool) -> bool:
  """Whether `should_early_stop` turns the train metrics of a step into
  floats (the last step, a step with an eval or a decode, or every step
  under PAXML_EARLY_STOP_ALWAYS_AGGREGATE_TRAIN_METRICS=true)."""
  return (is_last or evaluates or decodes
          or os.getenv(_ALWAYS_AGGREGATE_ENV, '') == 'true')


def _per_input(names: Sequence[str] | None,
               values: Sequence[dict[str, float] | None] | None,
               prefix_of) -> dict[str, float]:
  """Flattens one metrics dict per input under `prefix_of(input_name)`."""
  if names is None or values is None:
    return {}
  if len(names) != len(values):
    raise ValueError(f'{len(names)} input names ({list(names)}) for '
                     f'{len(values)} metric dicts.')
  flat = {}
  for name, metrics in zip(names, values):
    if metrics is not None:
      metric_utils.update_float_dict(flat, metrics, prefix_of(name))
  return flat


def tuning_metrics(
    train_metrics: dict[str, float] | None = None,
    eval_train_metrics: dict[str, float] | None = None,
    eval_metrics: EvalMetrics | None = None,
    decode_metrics: DecodeMetrics | None = None,
    num_params: float | None = None,
    train_steps_per_sec: float | None = None,
) -> dict[str, float | None]:
  """One flat dict of everything measured, keyed by Pax's metric names."""
  flat: dict[str, Any] = {}
  if train_metrics is not None:
    metric_utils.update_float_dict(flat, train_metrics, 'train')
  if eval_train_metrics is not None:
    metric_utils.update_float_dict(flat, eval_train_metrics,
                                   'eval_train/metrics')
  if eval_metrics:
    names = eval_metrics.input_names
    flat.update(_per_input(names, eval_metrics.metrics_list,
                           lambda n: f'eval_test_{n}/metrics'))
    flat.update(_per_input(names, eval_metrics.scoring_metrics_list,
                           lambda n: f'eval_test_{n}/scoring_eval'))
  if decode_metrics:
    names = decode_metrics.input_names
    for values in (decode_metrics.metrics_list,
                   decode_metrics.processed_metrics_list,
                   decode_metrics.seqio_metrics_list):
      flat.update(_per_input(names, values, lambda n: f'decode_test_{n}'))
  if train_steps_per_sec is not None:
    flat['train_steps_per_sec'] = train_steps_per_sec
  if eval_metrics is not None:
    flat['eval_steps_per_sec'] = eval_metrics.steps_per_sec
  if decode_metrics is not None:
    flat['decode_steps_per_sec'] = decode_metrics.steps_per_sec
  if num_params is not None:
    flat['num_params'] = num_params
  return flat


def should_early_stop(
    early_stop_fn: trainer_lib.EarlyStoppingFn | None,
    global_step: int,
    is_last_ckpt: bool,
    train_weighted_scalars: Any = None,
    eval_train_metrics: dict[str, float] | None = None,
    eval_metrics: EvalMetrics | None = None,
    decode_metrics: DecodeMetrics | None = None,
    num_params: float | None = None,
    train_steps_per_sec: float | None = None,
    checkpoint_path: Any = None,
) -> bool:
  """Reports what a run measured at `global_step`; True: stop the run.

  Train metrics (weighted scalars, computed every step) are turned into
  floats only where they can matter: at the last checkpoint, with an eval or
  decode, or always when the environment sets
  PAXML_EARLY_STOP_ALWAYS_AGGREGATE_TRAIN_METRICS=true.
  """
  if early_stop_fn is None:
    return False
  mode = trainer_lib.RunningMode.detect(
      has_train_metrics=train_steps_per_sec is not None,
      has_eval_metrics=bool(eval_metrics),
      has_decode_metrics=bool(decode_metrics))
  train_metrics = None
  aggregate_now = aggregates_train_metrics(is_last_ckpt, mode.has_eval,
                                           mode.has_decode)
  if train_weighted_scalars is not None and aggregate_now:
    scalars = py_utils.maybe_unreplicate_for_fully_replicated(
        train_weighted_scalars)
    train_metrics = metric_utils.as_float_dict(scalars)
    logging.info('Train metrics reported for tuning at step %d: %s',
                 global_step, train_metrics)
  metrics = tuning_metrics(train_metrics, eval_train_metrics, eval_metrics,
                           decode_metrics, num_params, train_steps_per_sec)
  return early_stop_fn(metrics, mode, global_step, is_last_ckpt,
                       checkpoint_path)


def is_last_checkpoint(
    running_mode: trainer_lib.RunningMode,
    global_step: int,
    num_train_steps: int,
    eval_interval_steps: int,
    decode_interval_steps: int,
    save_interval_steps: int,
    train_to_end: bool = False) -> bool:
  """Whether the measurement at `global_step` is the trial's last one.

  A job that trains evaluates the weights in memory, so checkpoints do not
  pace it; a separate eval/decode job sees only saved checkpoints, so its
  last measurement is the last one within an interval of the end.
  """
  remaining = num_train_steps - global_step
  if remaining == 0 or train_to_end:
    return remaining == 0
  pace = 0 if running_mode.has_train else save_interval_steps
  return bool(
      (running_mode.has_eval and remaining < max(eval_interval_steps, pace))
      or (running_mode.has_decode
          and remaining < max(decode_interval_steps, pace)))
