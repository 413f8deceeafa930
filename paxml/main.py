r"""Runs a Pax experiment: `python -m paxml.main --exp=... --job_log_dir=...`.

Example:

  python -m paxml.main --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps \
      --job_log_dir=/tmp/lm --fdl_set=task.train.num_train_steps=100

`--exp` is a registered experiment: a path relative to the `paxml` package
(`tasks.lm.params.lm_cloud.X`), a full module path of your own package
(`my_project.experiments.X`, imported on demand), or any unambiguous suffix.
This is the only module that reads flags.
"""

import importlib
import os
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
from fiddle import absl_flags as _  # pylint: disable=unused-import
import jax
from paxml import eval_lib
from paxml import executors
from paxml import experiment_registry
from paxml import train
from praxis import base_hyperparams

_EXP = flags.DEFINE_string('exp', None, 'The experiment to run.')
_JOB_LOG_DIR = flags.DEFINE_string(
    'job_log_dir', None, 'Where checkpoints, summaries and logs go.')
_MODE = flags.DEFINE_enum(
    'mode', 'train', ['train', 'eval', 'decode', 'decode_once'], 'What to run.')
_EVAL_ON_TEST = flags.DEFINE_bool(
    'eval_on_test', False, 'Run the eval programs during training.')
_DECODE_DURING_TRAIN = flags.DEFINE_bool(
    'decode_during_train', False, 'Run the decode programs during training.')
_EVAL_DURING_DECODE = flags.DEFINE_bool(
    'eval_during_decode', False, 'Also evaluate in decode jobs.')
_RESTORE_DIR = flags.DEFINE_string(
    'restore_checkpoint_dir', None, 'Checkpoints to read (eval/decode jobs).')
_RESTORE_STEP = flags.DEFINE_integer(
    'restore_checkpoint_step', None, 'The checkpoint step to restore.')
_SAVE = flags.DEFINE_bool(
    'enable_checkpoint_saving', True, 'Write checkpoints.')
_SUMMARIES = flags.DEFINE_bool(
    'enable_summary_writer', True, 'Write TensorBoard summaries.')
_PROFILER_PORT = flags.DEFINE_integer(
    'jax_profiler_port', None, 'Start the JAX profiler server on this port.')
flags.DEFINE_bool('pmap_use_tensorstore', False,
                  'Accepted for compatibility: checkpoints always use Orbax.')
# `--fdl_set=PATH=VALUE` (repeatable) is Fiddle's own flag, defined by
# `fiddle.absl_flags` (imported above for that).
_FDL = flags.DEFINE_multi_string(
    'fdl', [], "Pax's --fdl form: set:PATH=VALUE (same as --fdl_set).")
_SERVER_ADDR = flags.DEFINE_string(
    'server_addr', None, 'Coordinator address host:port (multi-host).')
_NUM_HOSTS = flags.DEFINE_integer('num_hosts', None, 'Number of processes.')
_HOST_IDX = flags.DEFINE_integer('host_idx', None, 'This process index.')
_MULTIPROCESS_GPU = flags.DEFINE_bool(
    'multiprocess_gpu', False, 'Initialise jax.distributed from the cluster.')


def get_experiment(name: str) -> type:
  """The experiment class `name` names, importing its module if needed."""
  cls = experiment_registry.get(name)
  if cls is not None:
    return cls
  module = name.rsplit('.', 1)[0] if '.' in name else ''
  for candidate in (f'paxml.{module}', module):
    if not candidate or candidate == 'paxml.':
      continue
    try:
      importlib.import_module(candidate)
    except ModuleNotFoundError as e:
      if not candidate.startswith(str(e.name)):
        raise
      continue
    cls = experiment_registry.get(name)
    if cls is not None:
      return cls
  close = experiment_registry.closest_names(name)
  hint = f' Closest registered: {", ".join(close)}.' if close else ''
  raise ValueError(f'Unknown experiment {name!r}.{hint}')


def _overrides() -> list[str]:
  extra = []
  for item in _FDL.value:
    if not item.startswith('set:'):
      raise ValueError(f'--fdl={item}: only the set:PATH=VALUE form is known.')
    extra.append(item[len('set:'):])
  return list(flags.FLAGS.fdl_set or []) + extra


def _cluster_detected() -> bool:
  """Whether the environment says this is one process of several."""
  env = os.environ
  counts = (env.get('SLURM_NTASKS'), env.get('OMPI_COMM_WORLD_SIZE'))
  if any(c and c.isdigit() and int(c) > 1 for c in counts):
    return True
  return ',' in env.get('TPU_WORKER_HOSTNAMES', '')


def _maybe_initialize_distributed() -> None:
  """Starts jax.distributed from the flags, or from a detected cluster."""
  if _SERVER_ADDR.value is not None:
    jax.distributed.initialize(coordinator_address=_SERVER_ADDR.value,
                               num_processes=_NUM_HOSTS.value,
                               process_id=_HOST_IDX.value)
  elif _MULTIPROCESS_GPU.value or _cluster_detected():
    jax.distributed.initialize()  # JAX reads SLURM, TPU, MPI, ... settings.


def run(argv) -> None:
  """Parses the flags into configs and options, and runs the mode."""
  del argv
  if not _EXP.value or not _JOB_LOG_DIR.value:
    raise app.UsageError('--exp and --job_log_dir are required.')
  _maybe_initialize_distributed()
  if _PROFILER_PORT.value:
    jax.profiler.start_server(_PROFILER_PORT.value)
  try:
    experiment = get_experiment(_EXP.value)()
    configs = train.ExperimentConfigs.from_experiment(experiment, _EXP.value)
    configs.apply_overrides(_overrides())
  except ValueError as e:
    _exit_with_error(e)
  options = executors.RunOptions(
      job_log_dir=pathlib.Path(_JOB_LOG_DIR.value),
      mode=_MODE.value,
      eval_on_test=_EVAL_ON_TEST.value,
      decode_during_train=_DECODE_DURING_TRAIN.value,
      eval_during_decode=_EVAL_DURING_DECODE.value,
      restore_checkpoint_dir=(pathlib.Path(_RESTORE_DIR.value)
                              if _RESTORE_DIR.value else None),
      restore_checkpoint_step=_RESTORE_STEP.value,
      enable_checkpoint_saving=_SAVE.value,
      enable_summary_writer=_SUMMARIES.value)
  try:
    if options.mode == 'train':
      train.train_and_evaluate(configs, options)
    elif options.mode == 'eval':
      eval_lib.evaluate(configs, options)
    else:
      eval_lib.decode(configs, options, once=options.mode == 'decode_once')
  except base_hyperparams.ConfigError as e:  # E.g. an input's file_pattern.
    _exit_with_error(e)


def _exit_with_error(error: Exception) -> None:
  """Reports a configuration error in one line and exits with status 2."""
  logging.error('%s', error)
  print(f'error: {error}', file=sys.stderr)
  sys.exit(2)


def main() -> None:
  """Console entry point (`paxml`)."""
  logging.set_verbosity(logging.INFO)
  app.run(run)


if __name__ == '__main__':
  main()
