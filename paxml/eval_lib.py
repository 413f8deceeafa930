"""Eval and decode jobs: follow a training job's checkpoints as they appear.

Public names: evaluate, decode, run_eval_programs, run_decode_programs,
CheckpointType, RunningMode.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any, Callable, Sequence

from absl import logging
import jax
from paxml import _config_checks
from paxml import _startup_gc
from paxml import _tuning_metrics
from paxml import checkpoints
from paxml import decode_programs as decode_programs_lib
from paxml import executors
from paxml import io_utils
from paxml import programs
from paxml import train
from paxml import train_states
from praxis import base_hyperparams
from praxis import optimizer_prefix_vectorization

_POLL_SECONDS = 10.0
_WAIT_LOG_SECONDS = 60.0  # How often a waiting job says what it waits for.
CheckpointType = checkpoints.CheckpointType
RunningMode = train.RunningMode


def run_eval_programs(*, eval_programs: Sequence[programs.BaseEvalProgram],
                      train_state: Any,
                      step: int) -> tuple[_tuning_metrics.EvalMetrics, float]:
  """Runs each eval program on `train_state` at `step`.

  Returns:
    (their metrics, with evaluated batches per second; the seconds taken).
  """
  return _tuning_metrics.run_eval_programs(eval_programs, train_state, step)


def run_decode_programs(
    *, decode_programs: Sequence[decode_programs_lib.SingleTaskDecodeProgram],
    train_state: Any,
    step: int) -> tuple[_tuning_metrics.DecodeMetrics, float]:
  """Runs each decode program on `train_state` at `step`.

  Returns:
    (their metrics, with decoded batches per second; the seconds taken).
  """
  return _tuning_metrics.run_decode_programs(decode_programs, train_state,
                                             step)


def _job_keys(task: Any, decode_job: bool) -> tuple[jax.Array, jax.Array]:
  """(eval key, decode key) of an eval or decode job, as Pax draws them.

  Pax splits `PRNGKey(task.evaluate.random_seed)` (an eval job) or
  `PRNGKey(task.decode.random_seed)` (a decode job) into the decode key and
  then the eval key.
  """
  seed = (task.decode if decode_job else task.evaluate).random_seed
  decode_key, eval_key = jax.random.split(jax.random.PRNGKey(seed))
  return eval_key, decode_key


def _follow_checkpoints(configs: train.ExperimentConfigs,
                        options: executors.RunOptions, once: bool,
                        make_programs: Callable[..., list[Any]],
                        prefix: str, early_stopping_fn: Any = None) -> None:
  """Runs the programs on each new checkpoint until the last train step.

  After each checkpoint, `early_stopping_fn` (if any) gets its eval and
  decode metrics (`_tuning_metrics.should_early_stop`, as Pax's eval and
  decode jobs); True stops following.
  """
  decode_job = prefix.startswith('decode')
  if decode_job and configs.hook('decode_programs') is None:
    _config_checks.check_input_names(configs.decode_datasets,
                                     'decode_datasets')
  if ((not decode_job or options.eval_during_decode)
      and configs.hook('eval_programs') is None):
    _config_checks.check_input_names(configs.eval_datasets, 'eval_datasets')
  job_log_dir = pathlib.Path(options.job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  train.write_hparams_file(configs, job_log_dir, filename_prefix=prefix)
  # Only the step and model variables are restored, as in Pax: less memory,
  # and checkpoints of another optimizer (the real Pax's) still evaluate.
  task, partitioner = train.setup_run(configs, options)
  checkpoints.reregister_type_handlers(
      getattr(task.train, 'tensorstore_metadata_key', None))
  eval_key, decode_key = _job_keys(task, decode_job)
  ckpt_dir = pathlib.Path(options.restore_checkpoint_dir or
                          job_log_dir / 'checkpoints')
  checkpointer = checkpoints.Checkpointer(
      job_log_dir, checkpoint_dir=ckpt_dir, enable_async_checkpointing=False,
      read_only=True)
  progs = make_programs(configs)
  for program in progs:
    if isinstance(program, decode_programs_lib.SingleTaskDecodeProgram):
      program.setup(task, partitioner, job_log_dir, decode_key,
                    output_pickle=options.decode_output_pickle,
                    enable_summary_writer=options.enable_summary_writer)
    else:
      program.setup(task, partitioner, job_log_dir, eval_key,
                    enable_summary_writer=options.enable_summary_writer)
  done, damaged, metrics = None, set(), None
  wait_start, last_wait_log = time.monotonic(), None
  while True:
    step = options.restore_checkpoint_step or checkpointer.latest_step()
    if step is None or step == done or step in damaged:
      if once:
        raise checkpoints.CheckpointNotFoundError(
            f'No checkpoint to restore in {ckpt_dir}.')
      now = time.monotonic()
      if last_wait_log is None or now - last_wait_log >= _WAIT_LOG_SECONDS:
        last_wait_log = now
        what = ('a first checkpoint' if done is None else
                f'a checkpoint newer than step {done}')
        logging.info('%s job waiting for %s in %s (waited %.0fs so far; the '
                     'training job writes them).', options.mode, what,
                     ckpt_dir, now - wait_start)
      time.sleep(_POLL_SECONDS)
      continue
    try:
      state, _ = checkpointer.restore(
          step, abstract_state=executors.abstract_train_state(
              partitioner, discard_opt_states=True))
    except checkpoints.CheckpointDirError as e:
      if options.restore_checkpoint_step or once:
        raise
      logging.warning('Skipping the checkpoint of step %d: %s', step, e)
      damaged.add(step)
      continue
    evals = [p for p in progs if isinstance(p, programs.BaseEvalProgram)]
    decodes = [p for p in progs
               if isinstance(p, decode_programs_lib.SingleTaskDecodeProgram)]
    metrics = decode_metrics = None
    if evals:
      metrics, _ = run_eval_programs(eval_programs=evals, train_state=state,
                                     step=step)
    if decodes:
      decode_metrics, _ = run_decode_programs(decode_programs=decodes,
                                              train_state=state, step=step)
    _startup_gc.settle('the first pass done')  # No-op after the first.
    done = step
    wait_start, last_wait_log = time.monotonic(), None
    last = bool(once or options.restore_checkpoint_step or (
        step >= int(task.train.num_train_steps)))
    if _tuning_metrics.should_early_stop(
        early_stopping_fn, step, last, eval_metrics=metrics,
        decode_metrics=decode_metrics, checkpoint_path=ckpt_dir):
      logging.info('Stopped at the checkpoint of step %d by the '
                   'early_stopping_fn.', step)
      break
    if last:
      break
  for program in progs:
    program.shutdown()
  checkpointer.close()
  summary = ''
  if metrics is not None and metrics.input_names:
    summary = '; eval: ' + ', '.join(
        f'{name}/{k}={v:.6g}'
        for name, m in zip(metrics.input_names, metrics.metrics_list)
        for k, v in sorted((m or {}).items()))
  logging.info('%s job finished at step %s%s; read checkpoints from %s; '
               'summaries in %s.', options.mode.capitalize(), done, summary,
               ckpt_dir, job_log_dir / 'summaries')


def _decode_programs(configs, with_eval=False):
  """The experiment's `decode_programs()` if it overrides it (as Pax's
  decode job), else one per decode dataset; then the eval programs."""
  custom = configs.hook('decode_programs')
  if custom is not None:
    progs = list(custom())
  else:
    progs = [decode_programs_lib.SingleTaskDecodeProgram(p)
             for p in configs.decode_datasets]
  return progs + (train.eval_programs_of(configs) if with_eval else [])


def _options(job_log_dir: Any, mode: str, **fields: Any
             ) -> executors.RunOptions:
  if isinstance(job_log_dir, executors.RunOptions):
    return job_log_dir
  return executors.RunOptions(job_log_dir=pathlib.Path(job_log_dir), mode=mode,
                              **fields)


def evaluate(
    experiment_config: Any,
    job_log_dir: Any,
    maybe_use_persistence_checkpointing: bool = False,
    restore_checkpoint_dir: Any = None,
    restore_checkpoint_step: int | None = None,
    early_stopping_fn: Any = None,
    enable_auto_sharding: bool = False,
    enforce_restore_shape_check: bool = False,
    tensorstore_use_ocdbt: bool = False,
    enable_summary_writer: bool = True,
) -> None:
  """Evaluates each new checkpoint of the training job (`--mode=eval`).

  Pax's signature; `evaluate(configs, run_options)` also works. Arguments
  about checkpoint formats and auto-sharding are ignored.

  Args:
    experiment_config: The experiment or its ExperimentConfigs.
    job_log_dir: The run's directory (or a RunOptions).
    maybe_use_persistence_checkpointing: Ignored.
    restore_checkpoint_dir: Checkpoints to read (default: the job's).
    restore_checkpoint_step: Evaluate this step only.
    early_stopping_fn: Called after each checkpoint's eval with its metrics
      (a tuning trial's), as Pax; True stops the job.
    enable_auto_sharding: Ignored.
    enforce_restore_shape_check: Ignored (shapes are always checked).
    tensorstore_use_ocdbt: Ignored.
    enable_summary_writer: Write TensorBoard summaries.
  """
  del (maybe_use_persistence_checkpointing, enable_auto_sharding,
       enforce_restore_shape_check, tensorstore_use_ocdbt)
  options = _options(
      job_log_dir, 'eval', restore_checkpoint_dir=restore_checkpoint_dir,
      restore_checkpoint_step=restore_checkpoint_step,
      enable_summary_writer=enable_summary_writer)
  _follow_checkpoints(train.as_experiment_configs(experiment_config), options,
                      False, train.eval_programs_of, 'eval_',
                      early_stopping_fn)


def decode(
    experiment_config: Any,
    job_log_dir: Any,
    maybe_use_persistence_checkpointing: bool = False,
    restore_checkpoint_dir: Any = None,
    restore_checkpoint_step: int | None = None,
    continuous_decode: bool = True,
    run_eval: bool | None = False,
    early_stopping_fn: Any = None,
    enable_auto_sharding: bool = False,
    output_pickle: bool = True,
    enforce_restore_shape_check: bool = False,
    tensorstore_use_ocdbt: bool = False,
    enable_summary_writer: bool = True,
    *,
    once: bool | None = None,
) -> None:
  """Decodes new checkpoints (`--mode=decode`), or the latest once.

  Pax's signature; `decode(configs, run_options, once=...)` also works.

  Args:
    experiment_config: The experiment or its ExperimentConfigs.
    job_log_dir: The run's directory (or a RunOptions).
    maybe_use_persistence_checkpointing: Ignored.
    restore_checkpoint_dir: Checkpoints to read (default: the job's).
    restore_checkpoint_step: Decode this step only.
    continuous_decode: Follow new checkpoints (else decode the latest once).
    run_eval: Also run the eval programs.
    early_stopping_fn: Called after each checkpoint's decode (and eval)
      with its metrics (a tuning trial's), as Pax; True stops the job.
    enable_auto_sharding: Ignored.
    output_pickle: Also write the outputs' `.pickle` beside the `.jsonl`.
    enforce_restore_shape_check: Ignored (shapes are always checked).
    tensorstore_use_ocdbt: Ignored.
    enable_summary_writer: Write TensorBoard summaries.
    once: Decode the latest checkpoint once (overrides continuous_decode).
  """
  del (maybe_use_persistence_checkpointing, enable_auto_sharding,
       enforce_restore_shape_check, tensorstore_use_ocdbt)
  options = _options(
      job_log_dir, 'decode', restore_checkpoint_dir=restore_checkpoint_dir,
      restore_checkpoint_step=restore_checkpoint_step,
      eval_during_decode=bool(run_eval),
      enable_summary_writer=enable_summary_writer,
      decode_output_pickle=output_pickle)
  once = (not continuous_decode) if once is None else once
  make = lambda c: _decode_programs(c, options.eval_during_decode)
  _follow_checkpoints(train.as_experiment_configs(experiment_config), options,
                      once, make, 'decode_', early_stopping_fn)


# Names Pax 1.4's module also has (aliases of other modules' names).
EvaluationMode = io_utils.EvaluationMode
NO_PREFIX_KEY = optimizer_prefix_vectorization.NO_PREFIX_KEY
TrainState = train_states.TrainState
instantiate = base_hyperparams.instantiate
