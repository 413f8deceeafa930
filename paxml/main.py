r"""Runs a Pax experiment: `python -m paxml.main --exp=... --job_log_dir=...`.

Example:

  python -m paxml.main --exp=tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps \
      --job_log_dir=/tmp/lm --fdl_set=task.train.num_train_steps=100

`--exp` is a registered experiment: a path relative to the `paxml` package
(`tasks.lm.params.lm_cloud.X`), a full module path of your own package
(`my_project.experiments.X`, imported on demand), or any unambiguous suffix.
With `--exp`, `--fdl_set=PATH=VALUE` (also `--fdl.PATH=VALUE` and
`--fdl=set:PATH=VALUE`) edits the experiment's configs (`task...`,
`datasets[i]...`). Pax's Fiddle forms work too: `--fdl_config=module.Exp`
(or `--fdl=config:module.Exp`, `--fdl_config_file=cfg.json`) makes the
experiment from a function or class, and then `--fdl.ATTR=VALUE` sets the
experiment's own attributes, `--fiddler=fn` edits it, as in Pax.

Pax's other flags are accepted with Pax's meaning; the few that this runner
cannot honour (auto-sharding, tuning studies, the `infer` and tf.data-service
modes, ...) stop the run with one line saying so. Every bad flag, config
value or path stops the run before anything is written, with one line
`error: ...` and exit status 2 (`--debug_tracebacks` or `PAX_DEBUG=1` show
the traceback); libraries' INFO logs are hidden unless `--library_logs`.
On Linux the command first restarts itself once with glibc's huge-page
malloc tunable, which makes CPU steps faster (`paxml/_launch.py`;
`GLIBC_TUNABLES=glibc.malloc.hugetlb=0` keeps glibc's default), and it
collects garbage less until the first step (`paxml/_startup_gc.py`).
This is the only module that reads flags.
"""

import importlib
import os
import pathlib
import random
import sys
import time
from typing import Any, Sequence

if __name__ == '__main__':
  # Before JAX is imported: may restart this process once with a glibc
  # malloc tunable that makes CPU steps faster (see paxml/_launch.py).
  from paxml import _launch  # pylint: disable=g-import-not-at-top
  if _launch.started_as('paxml.main', __file__):
    _launch.restart_with_huge_pages()
  # Fewer garbage collections until the first step (paxml/_startup_gc.py).
  from paxml import _startup_gc  # pylint: disable=g-import-not-at-top
  _startup_gc.relax()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
from fiddle import absl_flags
import jax
from paxml import _config_checks
from paxml import _console
from paxml import _flag_checks
from paxml import _launch
from paxml import _study_main
from paxml import eval_lib
from paxml import executors
from paxml import experiment_registry
from paxml import setup_jax
from paxml import train
from praxis import base_hyperparams
from praxis import pax_fiddle

# paxml.tools define the same flag; whichever module is imported first does.
if 'exp' in flags.FLAGS:
  _EXP = flags.FlagHolder(flags.FLAGS, flags.FLAGS['exp'])
else:
  _EXP = flags.DEFINE_string('exp', None, 'The experiment to run.')
_JOB_LOG_DIR = flags.DEFINE_string(
    'job_log_dir', None, 'Where checkpoints, summaries and logs go.')
_MODES = ['train', 'eval', 'decode', 'decode_once']
_MODE = flags.DEFINE_enum(
    'mode', 'train',
    _MODES + ['infer', 'tf_data_service_dispatcher', 'tf_data_service_worker'],
    'What to run (the last three are refused: not in this runner).')
_EVAL_ON_TEST = flags.DEFINE_bool(
    'eval_on_test', False, 'Run the eval programs during training.')
_DECODE_DURING_TRAIN = flags.DEFINE_bool(
    'decode_during_train', False, 'Run the decode programs during training.')
_EVAL_DURING_DECODE = flags.DEFINE_bool(
    'eval_during_decode', False, 'Also evaluate in decode jobs.')
_RESTORE_DIR = flags.DEFINE_string(
    'restore_checkpoint_dir', None, 'Checkpoints to read (eval/decode jobs).')
_RESTORE_STEP = flags.DEFINE_multi_integer(
    'restore_checkpoint_step', None,
    'The checkpoint step(s) to restore; decode_once decodes each in turn.')
_SAVE = flags.DEFINE_bool(
    'enable_checkpoint_saving', True, 'Write checkpoints.')
_SUMMARIES = flags.DEFINE_bool(
    'enable_summary_writer', True, 'Write TensorBoard summaries.')
_PROFILER_PORT = flags.DEFINE_integer(
    'jax_profiler_port', None, 'Start the JAX profiler server on this port.')
_PGLE_PROFILE = flags.DEFINE_bool(
    'pgle_profile', False,
    'Profile a few training steps (at train.profiler_capture_step, 5 if '
    'unset) into <job_log_dir>/profile, extract the PGLE file profile.pb for '
    'XLA:GPU and log the XLA_FLAGS of a run that compiles with it.')
flags.DEFINE_bool('pmap_use_tensorstore', False,
                  'Accepted for compatibility: checkpoints always use Orbax.')
_SERVER_ADDR = flags.DEFINE_string(
    'server_addr', None, 'Coordinator address host:port (multi-host).')
_NUM_HOSTS = flags.DEFINE_integer('num_hosts', None, 'Number of processes.')
_HOST_IDX = flags.DEFINE_integer('host_idx', None, 'This process index.')
_MULTIPROCESS_GPU = flags.DEFINE_bool(
    'multiprocess_gpu', False, 'Initialise jax.distributed from the cluster.')
# JAX settings (see setup_jax).
_HARDWARE_RNG = flags.DEFINE_bool(
    'globally_use_hardware_rng', False,
    "Make 'rbg' (the fast hardware RNG) JAX's default PRNG.")
_TRACEBACK_FILTERING = flags.DEFINE_string(
    'jax_traceback_filtering_option', 'auto',
    "JAX's traceback filtering: off, auto, tracebackhide, remove_frames.")
_TFDS_DATA_DIR = flags.DEFINE_string(
    'tfds_data_dir', None, 'TFDS data directory given to seqio.')
# Checkpointing. Checkpoints are always Orbax, per-array (the persistence
# kind), OCDBT, written asynchronously, and a restore always checks shapes.
_ASYNC_CKPT = flags.DEFINE_bool(
    'jax_fully_async_checkpoint', False,
    'Pax: write checkpoints asynchronously (here they always are); like '
    'Pax, True also starts jax.distributed.')
flags.DEFINE_bool(
    'maybe_use_persistence_checkpointing', False,
    'Pax: per-array checkpoints when suitable (here always: Orbax).')
flags.DEFINE_bool(
    'tensorstore_use_ocdbt', False,
    'Pax: save in the OCDBT format (Orbax writes OCDBT; any format restores).')
flags.DEFINE_bool(
    'enforce_restore_shape_check', False,
    'Pax: fail on a checkpoint shape mismatch (here always checked).')
flags.DEFINE_bool(
    'exit_after_ondemand_checkpoint', False,
    'Pax: exit after the checkpoint saved on preemption (here always).')
flags.DEFINE_integer(
    'async_timeout_secs', 600,
    'Timeout of asynchronous saves (only the default is supported).')
flags.DEFINE_string(
    'checkpoint_todelete_subdir', None,
    'Pax: rename old checkpoints into this subdirectory instead of deleting '
    'them (not supported).')
_DECODE_OUTPUT_PICKLE = flags.DEFINE_bool(
    'decode_output_pickle', True,
    'A decode job also writes its outputs as .pickle beside the .jsonl.')
flags.DEFINE_bool('enable_auto_sharding', False,
                  "XLA's auto-SPMD partitioner (not supported).")
# Tuning: an experiment whose configs have PyGlove decision points is tuned
# (paxml.tuning_lib), one training per trial; these flags shape the study.
flags.DEFINE_string(
    'study', None,
    'Tuning study name (names starting with "local" register the study with '
    "PyGlove's local backend); results in <job_log_dir>/<study>_summary.json.")
flags.DEFINE_enum('controller_mode', 'auto', ['primary', 'secondary', 'auto'],
                  'Tuning controller role (primary needs a Vizier service).')
flags.DEFINE_string('tuner_group', None,
                    'Jobs of one tuner group work on the same trial.')
flags.DEFINE_enum(
    'metrics_from', 'eval', ['train', 'eval', 'decode'],
    'Which job reports the tuning metrics; a train job that evaluates '
    '(--eval_on_test, on by default in a study) reports eval metrics.')
flags.DEFINE_integer('num_trials', None,
                     'Most trials of the study (default: search().'
                     'max_num_trials).')
flags.DEFINE_integer('pythia_port', None, 'Pythia port (unused).')
_DEBUG_TRACEBACKS = flags.DEFINE_bool(
    'debug_tracebacks', False,
    'Show the full traceback of a bad flag or config value (also: '
    'PAX_DEBUG=1) instead of the one-line error.')
_LIBRARY_LOGS = flags.DEFINE_bool(
    'library_logs', False,
    "Show the INFO logs of libraries (Orbax, ...); by default only Pax's own "
    'INFO lines and every library warning are shown.')
# Pax's Fiddle flag: --fdl=config:F, --fdl=set:PATH=VALUE, --fdl=fiddler:F.
# The legacy forms (--fdl_config, --fdl_config_file, --fdl_set, --fdl.X=V,
# --fiddler) are defined by `fiddle.absl_flags`.
_FDL = flags.DEFINE_multi_string(
    'fdl', [],
    'Fiddle commands: config:F (the experiment), set:PATH=VALUE, fiddler:F.')

# --pgle_profile's capture step: past the first steps' compilation.
_PGLE_DEFAULT_CAPTURE_STEP = 5

# Flags Pax accepts that this runner cannot honour: flag -> (the values it
# can honour, why the others cannot be).
_UNSUPPORTED = {
    'mode': (set(_MODES), 'only train, eval, decode and decode_once run here'),
    'enable_auto_sharding': ({False}, "XLA's auto-sharding is not wired in"),
    'checkpoint_todelete_subdir': (
        {None}, 'old checkpoints are deleted by Orbax, never renamed'),
    'async_timeout_secs': ({600}, "Orbax's save timeout is not configurable "
                           'here'),
}


def get_experiment(experiment_name: str) -> type:
  """The experiment class `experiment_name` names (see
  `experiment_registry.load`)."""
  return experiment_registry.load(experiment_name)


def _check_flags() -> None:
  """Refuses, in one line, flags set to values this runner cannot honour."""
  for name, (honoured, why) in _UNSUPPORTED.items():
    value = flags.FLAGS[name].value
    if value not in honoured:
      raise app.UsageError(f'--{name}={value} is not supported: {why}.')
  if _EXP.value:
    fiddle_config = [f'--{n}={flags.FLAGS[n].value}'
                     for n in ('fdl_config', 'fdl_config_file', 'fiddler')
                     if n in flags.FLAGS and flags.FLAGS[n].value]
    fiddle_config += [f'--fdl={c}' for c in _fdl_commands()[0]]
    if fiddle_config:
      raise app.UsageError(
          f'{fiddle_config[0]} cannot be combined with --exp={_EXP.value}: '
          'the experiment comes from one of them; expected --exp with '
          '--fdl_set edits, or the Fiddle flags without --exp.')
  _flag_checks.check_hosts(_SERVER_ADDR.value, _NUM_HOSTS.value,
                           _HOST_IDX.value,
                           _MULTIPROCESS_GPU.value or _cluster_detected())
  if _TFDS_DATA_DIR.value is not None:
    try:
      seqio = importlib.import_module('seqio')
    except ModuleNotFoundError as e:
      raise app.UsageError('--tfds_data_dir needs seqio, which is not '
                           'installed.') from e
    seqio.set_tfds_data_dir_override(_TFDS_DATA_DIR.value)


def _fdl_commands() -> tuple[list[str], list[str]]:
  """Splits --fdl into (config/fiddler commands, set:PATH=VALUE edits)."""
  commands, edits = [], []
  for item in _FDL.value:
    command = item.split(':', 1)[0]
    if command == 'set':
      edits.append(item)
    elif command in ('config', 'config_file', 'config_str', 'fiddler'):
      commands.append(item)
    else:
      raise app.UsageError(f'--fdl={item}: expected config:, config_file:, '
                           'config_str:, set: or fiddler:.')
  return commands, edits


def _experiment_from_fiddle_flags() -> tuple[object, str]:
  """The experiment that Pax's Fiddle flags make, and a name for it."""
  commands, edits = _fdl_commands()
  if commands:
    fdl_flag = absl_flags.FiddleFlag(
        name='fdl', default=None, parser=flags.ArgumentParser(),
        serializer=None, help_string='', allow_imports=True)
    fdl_flag.parse(commands + edits)
    cfg = fdl_flag.value
    name = commands[0].split(':', 1)[1]
  else:
    cfg = absl_flags.create_buildable_from_flags(module=None,
                                                 allow_imports=True)
    name = flags.FLAGS.fdl_config or str(flags.FLAGS.fdl_config_file)
  return pax_fiddle.build(cfg), name


def _experiment_and_name() -> tuple[Any, str]:
  """The experiment the flags name (--exp, or Fiddle's flags), and its name."""
  if _EXP.value:
    try:
      experiment_class = get_experiment(_EXP.value)
    except ValueError as e:  # Pax's message lists every registered name.
      first = str(e).splitlines()[0]
      close = experiment_registry.closest_names(_EXP.value)
      hint = (f' Closest registered: {", ".join(close)}.'
              if close and 'Closest' not in first else '')
      raise ValueError(f'--exp={_EXP.value}: {first}{hint}') from e
    return experiment_class(), _EXP.value
  if not (absl_flags.fdl_flags_supplied() or _fdl_commands()[0]):
    raise app.UsageError('No experiment provided. At least one of --exp, '
                         '--fdl, --fdl_config, or --fdl_config_file is '
                         'required.')
  config_file = flags.FLAGS.fdl_config_file
  if config_file and not os.path.isfile(config_file):
    raise app.UsageError(f'--fdl_config_file={config_file}: no such file; '
                         'expected a Fiddle config serialized as JSON.')
  try:
    return _experiment_from_fiddle_flags()
  except (ValueError, OSError) as e:
    if not config_file:
      raise
    raise ValueError(f'--fdl_config_file={config_file}: cannot read a Fiddle '
                     f'config from it ({e}); expected a Fiddle config '
                     'serialized as JSON.') from e


def create_experiment_config() -> Any:
  """The experiment the flags name, validated (`experiment.validate()`)."""
  experiment, _ = _experiment_and_name()
  experiment.validate()
  return experiment


def _configs_of(experiment: Any, name: str) -> train.ExperimentConfigs:
  """The experiment's configs; with --exp, the --fdl_set edits applied."""
  configs = train.ExperimentConfigs.from_experiment(experiment, name)
  if _EXP.value:
    _, edits = _fdl_commands()
    assignments = (list(flags.FLAGS.fdl_set or [])
                   + [e[len('set:'):] for e in edits])
    for assignment in assignments:
      if '=' in assignment:
        _config_checks.parse_value(assignment)
    configs.apply_overrides(assignments)
    _config_checks.check_override_types(configs, assignments)
  if _PGLE_PROFILE.value and configs.task.train.profiler_capture_step is None:
    configs.task.train.profiler_capture_step = _PGLE_DEFAULT_CAPTURE_STEP
  _config_checks.check_train(configs.task)
  _config_checks.check_model_dtypes(getattr(configs.task, 'model', None))
  return configs


def _load_configs() -> train.ExperimentConfigs:
  """The experiment's configs, with the command line's edits applied."""
  experiment, name = _experiment_and_name()
  experiment.validate()
  return _configs_of(experiment, name)


def _setup_jax() -> None:
  """JAX settings, distributed start-up and the profiler, from the flags."""
  start_distributed = (_ASYNC_CKPT.value or _MULTIPROCESS_GPU.value
                       or _SERVER_ADDR.value is not None or _cluster_detected())
  setup_jax.setup_jax(
      _HARDWARE_RNG.value, None, None, False, _TRACEBACK_FILTERING.value,
      start_distributed,
      setup_jax.JaxDistributedOptions(_SERVER_ADDR.value, _NUM_HOSTS.value,
                                      _HOST_IDX.value))
  if _PROFILER_PORT.value:
    jax.profiler.start_server(_PROFILER_PORT.value)


def _cluster_detected() -> bool:
  """Whether the environment says this is one process of several."""
  env = os.environ
  counts = (env.get('SLURM_NTASKS'), env.get('OMPI_COMM_WORLD_SIZE'))
  if any(c and c.isdigit() and int(c) > 1 for c in counts):
    return True
  return ',' in env.get('TPU_WORKER_HOSTNAMES', '')


def _run_options(restore_step: int | None, job_log_dir: Any = None,
                 enable_checkpoint_saving: bool | None = None
                 ) -> executors.RunOptions:
  return executors.RunOptions(
      job_log_dir=pathlib.Path(job_log_dir or _JOB_LOG_DIR.value),
      mode=_MODE.value,
      eval_on_test=_EVAL_ON_TEST.value,
      decode_during_train=_DECODE_DURING_TRAIN.value,
      eval_during_decode=_EVAL_DURING_DECODE.value,
      restore_checkpoint_dir=(pathlib.Path(_RESTORE_DIR.value)
                              if _RESTORE_DIR.value else None),
      restore_checkpoint_step=restore_step,
      enable_checkpoint_saving=(_SAVE.value if enable_checkpoint_saving is None
                                else enable_checkpoint_saving),
      enable_summary_writer=_SUMMARIES.value,
      decode_output_pickle=_DECODE_OUTPUT_PICKLE.value)


def run_experiment(experiment_config: Any, work_unit: Any = None,
                   job_log_dir: Any = None, early_stopping_fn: Any = None,
                   enable_checkpoint_saving: bool = True) -> None:
  """Runs `--mode` on an experiment (Pax's signature).

  Args:
    experiment_config: A BaseExperiment instance, or ExperimentConfigs.
    work_unit: Unused (Pax reports status to an XManager work unit).
    job_log_dir: Where the run writes (default: --job_log_dir).
    early_stopping_fn: Called by training after each step, and by eval and
      decode jobs after each checkpoint (a tuning trial's
      `tuning_lib.EarlyStoppingFn`); True stops the job.
    enable_checkpoint_saving: Write checkpoints.
  """
  del work_unit
  if isinstance(experiment_config, train.ExperimentConfigs):
    configs = experiment_config
  else:
    configs = _configs_of(experiment_config, _EXP.value or
                          type(experiment_config).__name__)
  steps = _RESTORE_STEP.value or [None]
  if len(steps) > 1 and _MODE.value != 'decode_once':
    raise app.UsageError('Several --restore_checkpoint_step values need '
                         '--mode=decode_once.')
  for step in steps:
    _run_mode(configs, _run_options(step, job_log_dir,
                                    enable_checkpoint_saving),
              early_stopping_fn)


def wait_with_random_jitter(min_secs: int, max_secs: int) -> None:
  """Sleeps a random whole number of seconds in [min_secs, max_secs], so that
  many processes starting together do not all call out at once."""
  time.sleep(random.randint(min_secs, max_secs))


def run(experiment_config: Any, enable_checkpoint_saving: bool = True) -> None:
  """Runs `--mode` on an experiment into --job_log_dir (Pax's `run`; with
  over 128 processes each first waits up to a minute, as Pax)."""
  if jax.process_count() > 128:
    wait_with_random_jitter(min_secs=0, max_secs=60)
  run_experiment(experiment_config, None, _JOB_LOG_DIR.value,
                 enable_checkpoint_saving=enable_checkpoint_saving)


def _main(argv: Sequence[str]) -> None:
  """Parses the flags into configs and options, and runs the mode."""
  if len(argv) > 1:
    raise app.UsageError(f'Too many command-line arguments: {argv[1:]}.')
  try:
    if not _JOB_LOG_DIR.value:
      raise app.UsageError('--job_log_dir is required.')
    _check_flags()
    _flag_checks.check_job_log_dir(_JOB_LOG_DIR.value)
  except (app.UsageError, ValueError) as e:
    _exit_with_error(e)
  _setup_jax()
  note = _launch.host_malloc_note()
  if note:
    logging.info(note)
  try:
    experiment, name = _experiment_and_name()
    experiment.validate()
    tuning = _study_main.has_search_space(experiment)
    configs = None if tuning else _configs_of(experiment, name)
  except (app.UsageError, ValueError, TypeError) as e:
    _exit_with_error(e)
  try:
    if tuning:
      _run_study(experiment)
    else:
      run_experiment(configs, enable_checkpoint_saving=_SAVE.value)
  except (base_hyperparams.ConfigError, app.UsageError) as e:  # A file_pattern.
    _exit_with_error(e)
  except train.RunStoppedError as e:  # Set up well, stopped: one line, 1.
    if _console.debug_tracebacks(_DEBUG_TRACEBACKS.value):
      raise
    _console.exit_with_error(e, status=1)


def _run_study(experiment: Any) -> None:
  """Tunes an experiment with decision points: one training per trial."""
  flag = flags.FLAGS
  if (_MODE.value == 'train' and flag.metrics_from == 'eval'
      and not _EVAL_ON_TEST.value):
    logging.info('Tuning on eval metrics: the train job evaluates '
                 '(--eval_on_test).')
    flag.eval_on_test = True
  if not _SAVE.value:
    logging.warning('--enable_checkpoint_saving=false is ignored in a study.')

  def trial(trial_experiment, work_unit, trial_dir, early_stopping_fn):
    run_experiment(trial_experiment, work_unit, trial_dir, early_stopping_fn)

  _study_main.run_study(
      experiment, trial, job_log_dir=_JOB_LOG_DIR.value, study=flag.study,
      num_trials=flag.num_trials, tuner_group=flag.tuner_group,
      controller_mode=flag.controller_mode, mode=_MODE.value,
      reports=_study_main.reporting_role(
          _MODE.value, flag.metrics_from, _EVAL_ON_TEST.value,
          _DECODE_DURING_TRAIN.value))


def _run_mode(configs: train.ExperimentConfigs,
              options: executors.RunOptions,
              early_stopping_fn: Any = None) -> None:
  if options.mode == 'train':
    train.train_and_evaluate(configs, options,
                             early_stopping_fn=early_stopping_fn)
  elif options.mode == 'eval':
    eval_lib.evaluate(configs, options, early_stopping_fn=early_stopping_fn)
  else:
    eval_lib.decode(configs, options, once=options.mode == 'decode_once',
                    early_stopping_fn=early_stopping_fn)


def _exit_with_error(error: Exception) -> None:
  """Reports a configuration error in one line and exits with status 2
  (with --debug_tracebacks or PAX_DEBUG=1: raises it, with its traceback)."""
  if _console.debug_tracebacks(_DEBUG_TRACEBACKS.value):
    raise error
  _console.exit_with_error(error)


def main(argv: Sequence[str] | None = None) -> None:
  """Pax's `main(argv)` (what `app.run` calls); without argv, the console
  entry point (`paxml`): parses the command line and runs."""
  if argv is not None:
    _main(argv)
    return
  logging.set_verbosity(logging.INFO)
  # JAX's options as flags, as Pax's main does (--jax_compilation_cache_dir,
  # --jax_enable_x64, ...).
  jax.config.config_with_absl()
  _console.show_flags_in_help(__name__, _OWN_FIDDLE_FLAGS)
  main_module = sys.modules.get('__main__')
  if main_module is not None and not main_module.__doc__:
    main_module.__doc__ = __doc__
  try:
    app.run(_console.run_quietly(main, lambda: _LIBRARY_LOGS.value),
            flags_parser=_console.one_line_flag_errors(absl_flags.flags_parser))
  except SystemExit as e:  # How app.run ends, also after a run that worked.
    _console.exit_process(e.code)


# Fiddle's flags that this runner reads (listed in --help with its own).
_OWN_FIDDLE_FLAGS = ('fdl_config', 'fdl_config_file', 'fdl_set', 'fiddler')


if __name__ == '__main__':
  main()
