"""Eval and decode jobs: follow a training job's checkpoints as they appear.

Public names: evaluate, decode.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any, Callable

from absl import logging
import jax
from paxml import checkpoints
from paxml import decode_programs as decode_programs_lib
from paxml import executors
from paxml import programs
from paxml import train

_POLL_SECONDS = 10.0


def _follow_checkpoints(configs: train.ExperimentConfigs,
                        options: executors.RunOptions, once: bool,
                        make_programs: Callable[..., list[Any]],
                        prefix: str) -> None:
  """Runs the programs on each new checkpoint until the last train step."""
  job_log_dir = pathlib.Path(options.job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  train.write_hparams_file(configs, job_log_dir, filename_prefix=prefix)
  # The full state is restored (optimizer state included): simple and exact;
  # a partial restore would save memory for very large models.
  task, partitioner = train.setup_run(configs, options)
  keys = jax.random.split(jax.random.PRNGKey(task.train.random_seed), 2)
  ckpt_dir = pathlib.Path(options.restore_checkpoint_dir or
                          job_log_dir / 'checkpoints')
  checkpointer = checkpoints.Checkpointer(
      job_log_dir, checkpoint_dir=ckpt_dir, enable_async_checkpointing=False)
  progs = make_programs(configs)
  for program in progs:
    key = keys[1] if isinstance(
        program, decode_programs_lib.SingleTaskDecodeProgram) else keys[0]
    program.setup(task, partitioner, job_log_dir, key,
                  enable_summary_writer=options.enable_summary_writer)
  done = None
  while True:
    step = options.restore_checkpoint_step or checkpointer.latest_step()
    if step is None or step == done:
      if once:
        raise FileNotFoundError(f'No checkpoint to restore in {ckpt_dir}.')
      time.sleep(_POLL_SECONDS)
      continue
    state, _ = checkpointer.restore(
        step, abstract_state=executors.abstract_train_state(partitioner))
    for program in progs:
      program.run(state, step)
    done = step
    if once or options.restore_checkpoint_step or (
        step >= int(task.train.num_train_steps)):
      break
  for program in progs:
    program.shutdown()
  checkpointer.close()
  logging.info('%s finished at step %s.', options.mode, done)


def _eval_programs(configs):
  return [programs.SingleTaskEvalProgram(p) for p in configs.eval_datasets]


def _decode_programs(configs, with_eval=False):
  progs = [decode_programs_lib.SingleTaskDecodeProgram(p)
           for p in configs.decode_datasets]
  return progs + (_eval_programs(configs) if with_eval else [])


def evaluate(configs: train.ExperimentConfigs,
             options: executors.RunOptions) -> None:
  """Evaluates each new checkpoint of the training job (`--mode=eval`)."""
  _follow_checkpoints(configs, options, False, _eval_programs, 'eval_')


def decode(configs: train.ExperimentConfigs, options: executors.RunOptions,
           once: bool = False) -> None:
  """Decodes new checkpoints (`--mode=decode`), or the latest once."""
  make = lambda c: _decode_programs(c, options.eval_during_decode)
  _follow_checkpoints(configs, options, once, make, 'decode_')
