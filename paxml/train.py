"""Training an experiment: set up task, inputs, mesh, state, and run the loop.

Public names: ExperimentConfigs, as_experiment_configs, train_and_evaluate,
write_hparams_file, write_experiment_class_vars_file,
write_post_init_model_hparams_file, setup_run, Checkpointer, CheckpointType,
RunningMode, RunStoppedError, NonFiniteTrainingError, JobLockedError.

A training run holds `<job_log_dir>/train.lock` (one writer per job dir),
writes checkpoints only under `<job_log_dir>/checkpoints` (a
`--restore_checkpoint_dir` is only read, for a warm start), stops with
`NonFiniteTrainingError` after `task.train.max_consecutive_nonfinite_steps`
non-finite losses in a row, and ends with one closing log line.

`write_post_init_model_hparams_file` here writes the runner's table of
variables (path, shape, dtype, partition spec); Pax's two-part file is
`trainer_lib.write_post_init_model_hparams_file`.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable

from absl import logging
from fiddle.absl_flags import utils as fdl_flag_utils
import jax
from paxml import _checkpointer
from paxml import _config_checks
from paxml import _job_lock
from paxml import _nonfinite_guard
from paxml import _preemption
from paxml import _run_errors
from paxml import base_experiment
from paxml import checkpoints
from paxml import decode_programs as decode_programs_lib
from paxml import executors
from paxml import partitioning
from paxml import programs
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import base_input
from praxis import base_layer
from praxis import pax_fiddle

instantiate = base_hyperparams.instantiate
Checkpointer = checkpoints.Checkpointer
CheckpointType = checkpoints.CheckpointType
RunningMode = trainer_lib.RunningMode
RunStoppedError = _run_errors.RunStoppedError
NonFiniteTrainingError = _nonfinite_guard.NonFiniteTrainingError
JobLockedError = _job_lock.JobLockedError


@dataclasses.dataclass
class ExperimentConfigs:
  """The configs of one experiment, materialised once and then edited.

  `--fdl_set=task.train.num_train_steps=100` edits `task`;
  `--fdl_set=datasets[0].batch_size=8` a dataset.

  Attributes:
    name: The experiment's registered name.
    task: The task config.
    datasets: Train and eval input configs.
    decode_datasets: Decode input configs.
  """

  name: str
  task: pax_fiddle.Config[Any]
  datasets: list[pax_fiddle.Config[Any]]
  decode_datasets: list[pax_fiddle.Config[Any]]
  input_specs_provider: pax_fiddle.Config[Any] | None = None
  experiment: Any = None

  def hook(self, name: str) -> Callable[[], Any] | None:
    """The experiment's override of Pax's runner hook `name` (one of
    `_RUNNER_HOOKS`), or None: the runner then builds its default (for the
    programs, from these configs, `--fdl_set` edits included)."""
    if self.experiment is None or not _overrides(self.experiment, name):
      return None
    return getattr(self.experiment, name)

  @classmethod
  def from_experiment(cls, experiment: Any, name: str) -> ExperimentConfigs:
    """Materialises the configs; keeps a custom input-specs provider.

    The default provider (read a training batch) is not kept: `setup_run`
    rebuilds it from `datasets`, so that `--fdl_set` edits reach it.
    """
    experiment.validate()
    provider = None
    if (type(experiment).get_input_specs_provider_params is not
        base_experiment.BaseExperiment.get_input_specs_provider_params):
      provider = experiment.get_input_specs_provider_params()
    datasets = list(experiment.datasets())
    _share_provider_input(provider, datasets)
    hooks = any(_overrides(experiment, hook) for hook in _RUNNER_HOOKS)
    return cls(name, experiment.task(), datasets,
               list(experiment.decode_datasets()), provider,
               experiment if hooks else None)

  def apply_overrides(self, assignments: list[str]) -> None:
    """Applies `path=value` assignments (Fiddle's `--fdl_set` syntax)."""
    for assignment in assignments:
      if '=' not in assignment:
        raise ValueError(f'--fdl_set={assignment}: expected PATH=VALUE.')
      try:
        fdl_flag_utils.set_value(self, assignment)
      except ValueError as e:
        cause = e.__cause__ or e
        raise ValueError(f'--fdl_set={assignment}: {cause}') from e

  @property
  def train_datasets(self) -> list[pax_fiddle.Config[Any]]:
    return [d for d in self.datasets if d.is_training]

  @property
  def eval_datasets(self) -> list[pax_fiddle.Config[Any]]:
    return [d for d in self.datasets if not d.is_training]


# BaseExperiment's methods that choose the runner's parts, as in Pax.
_RUNNER_HOOKS = ('partitioner', 'train_programs', 'eval_programs',
                 'decode_programs', 'executor')


def _overrides(experiment: Any, name: str) -> bool:
  return (getattr(type(experiment), name, None) is not
          getattr(base_experiment.BaseExperiment, name))


def make_partitioner(configs: ExperimentConfigs, task: Any) -> Any:
  """The experiment's `partitioner()`, if it gives one, else the default
  partitioner of `task` (as Pax's `create_experiment_or_default_partitioner`
  without auto-sharding)."""
  custom = configs.hook('partitioner')
  partitioner = custom() if custom is not None else None
  if partitioner is None:
    partitioner = partitioning.create_partitioner(task, reshard_inputs=True)
  return partitioner


def _share_provider_input(provider: Any, datasets: list[Any]) -> None:
  """Points a provider's `input_p` at the equal dataset config, if any.

  A provider built from `training_dataset()` then reads the dataset the run
  uses, `--fdl_set` edits of `datasets[i]` included.

  Args:
    provider: An input specs provider config, or None.
    datasets: The experiment's dataset configs.
  """
  input_p = getattr(provider, 'input_p', None)
  if input_p is None:
    return
  for dataset in datasets:
    if dataset == input_p:
      provider.input_p = dataset
      return


def as_experiment_configs(experiment_config: Any) -> ExperimentConfigs:
  """An experiment (Pax's `BaseExperiment`) as ExperimentConfigs, or as is."""
  if isinstance(experiment_config, ExperimentConfigs):
    return experiment_config
  if not isinstance(experiment_config, base_experiment.BaseExperiment):
    raise TypeError('Expected a BaseExperiment instance or ExperimentConfigs, '
                    f'got {type(experiment_config).__name__}.')
  return ExperimentConfigs.from_experiment(
      experiment_config, type(experiment_config).__name__)


def write_hparams_file(model_config: Any, job_log_dir: Any,
                       filename_prefix: str = '') -> None:
  """Writes the resolved configs to `<job_log_dir>/model_params.txt`.

  Args:
    model_config: The experiment (`BaseExperiment`) or its ExperimentConfigs.
    job_log_dir: The run's directory.
    filename_prefix: Prefix of the file name (e.g. 'eval_').
  """
  configs = as_experiment_configs(model_config)
  parts = [base_hyperparams.nested_struct_to_text(d)
           for d in configs.datasets + configs.decode_datasets]
  parts.append(base_hyperparams.nested_struct_to_text(configs.task))
  path = pathlib.Path(job_log_dir) / f'{filename_prefix}model_params.txt'
  path.write_text('\n\n'.join(parts))


def write_post_init_model_hparams_file(
    metadata: Any, job_log_dir: pathlib.Path, filename_prefix: str = '') -> None:
  """Lists every variable with its shape, dtype and partition spec."""
  hparams = metadata.var_weight_hparams
  specs = metadata.partition_specs.mdl_vars
  lines = []
  flat_specs = dict(jax.tree_util.tree_flatten_with_path(
      specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))[0])
  leaves = jax.tree_util.tree_flatten_with_path(
      hparams, is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))[0]
  for path, hp in leaves:
    name = '/'.join(str(getattr(k, 'key', k)) for k in path)
    dtype = getattr(hp.dtype, 'dtype', hp.dtype)
    lines.append(
        f'{name}: shape={list(hp.full_shape)} dtype={jax.numpy.dtype(dtype)} '
        f'partition_spec={flat_specs.get(path)} '
        f'collections={list(hp.collections or [])}')
  path = pathlib.Path(job_log_dir) / f'{filename_prefix}post_init_model_params.txt'
  path.write_text('\n'.join(lines) + '\n')


def write_experiment_class_vars_file(exp_cls: type[Any], job_log_dir: Any,
                                     filename_prefix: str = '') -> None:
  """Writes `<prefix>experiment_cls_vars.txt`: the experiment's class vars.

  One `NAME = value` line per upper-case class attribute, the class's own
  and its bases', grouped by the class that sets them (process 0 only).

  Args:
    exp_cls: The experiment class.
    job_log_dir: The run's directory.
    filename_prefix: Prefix of the file name.
  """
  if jax.process_index() != 0:
    return
  sections = []
  for cls in reversed(exp_cls.__mro__):
    names = [n for n in vars(cls) if n.isupper() and not n.startswith('_')]
    if names:
      lines = [f'    {n} = {vars(cls)[n]!r}' for n in sorted(names)]
      sections.append(f'{cls.__module__}.{cls.__qualname__}:\n' +
                      '\n'.join(lines))
  job_log_dir = pathlib.Path(job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  (job_log_dir / f'{filename_prefix}experiment_cls_vars.txt').write_text(
      '\n\n'.join(sections) + '\n')


def _input_specs_provider(configs: ExperimentConfigs) -> Any:
  """The experiment's provider, else one reading a training batch."""
  if configs.input_specs_provider is not None:
    return instantiate(configs.input_specs_provider)
  specs_input = configs.train_datasets or configs.eval_datasets
  if not specs_input:
    raise ValueError(f'Experiment {configs.name} defines no dataset.')
  return base_input.DatasetInputSpecsProvider(input_p=specs_input[0])


def setup_run(configs: ExperimentConfigs, options: executors.RunOptions,
              discard_opt_states: bool = False):
  """Instantiates the task and sets up its partitioner (eval/decode jobs).

  Returns:
    (task, partitioner), the partitioner set up from the input specs.
  """
  del options, discard_opt_states
  task = instantiate(configs.task)
  provider = _input_specs_provider(configs)
  partitioner = make_partitioner(configs, task)
  partitioner.setup(
      task, jax.random.PRNGKey(task.train.random_seed),
      trainer_lib.get_train_input_specs_for_model_init(task, provider))
  return task, partitioner


def train_and_evaluate(
    experiment_config: Any,
    job_log_dir: Any,
    maybe_use_persistence_checkpointing: bool = False,
    eval_on_test: bool | None = False,
    checkpoint_todelete_subdir: str | None = None,
    early_stopping_fn: Any = None,
    run_decode: bool = False,
    enable_auto_sharding: bool = False,
    enable_async_checkpointing: bool = True,
    enable_checkpoint_saving: bool = True,
    enforce_restore_shape_check: bool = False,
    tensorstore_use_ocdbt: bool = False,
    exit_after_ondemand_checkpoint: bool = False,
    override_num_train_steps: int | None = None,
    enable_summary_writer: bool = True,
    async_timeout_secs: int | None = None,
    train_first_result_callback_fn: Any = None,
) -> Any:
  """Trains (resuming from the latest checkpoint), evaluating and decoding.

  Pax's signature; `train_and_evaluate(configs, run_options)` (an
  ExperimentConfigs and `executors.RunOptions`, as `paxml.main` calls it)
  also works. Arguments about checkpoint formats, auto-sharding and timeouts
  are accepted and ignored.

  Args:
    experiment_config: The experiment (`BaseExperiment`) or its
      ExperimentConfigs.
    job_log_dir: The run's directory (or a RunOptions).
    maybe_use_persistence_checkpointing: Ignored.
    eval_on_test: Run the eval programs during training.
    checkpoint_todelete_subdir: Ignored.
    early_stopping_fn: Called after each step with Pax's metrics
      (`train/<name>`, `eval_test_<input>/metrics/<name>`, ...); True stops
      training. `task.early_stopping_fn` serves when this is None (both set
      is an error, as in Pax).
    run_decode: Run the decode programs during training.
    enable_auto_sharding: Ignored.
    enable_async_checkpointing: Ignored (saves are asynchronous).
    enable_checkpoint_saving: Write checkpoints.
    enforce_restore_shape_check: Ignored (shapes are always checked).
    tensorstore_use_ocdbt: Ignored.
    exit_after_ondemand_checkpoint: Ignored.
    override_num_train_steps: Train this many steps instead.
    enable_summary_writer: Write TensorBoard summaries.
    async_timeout_secs: Ignored.
    train_first_result_callback_fn: Called with True after the first step.

  Returns:
    The final train state.
  """
  del (maybe_use_persistence_checkpointing, checkpoint_todelete_subdir,
       enable_auto_sharding, enable_async_checkpointing,
       enforce_restore_shape_check, tensorstore_use_ocdbt,
       exit_after_ondemand_checkpoint, async_timeout_secs)
  configs = as_experiment_configs(experiment_config)
  if isinstance(job_log_dir, executors.RunOptions):
    options = job_log_dir
  else:
    options = executors.RunOptions(
        job_log_dir=pathlib.Path(job_log_dir), eval_on_test=bool(eval_on_test),
        decode_during_train=run_decode,
        enable_checkpoint_saving=enable_checkpoint_saving,
        enable_summary_writer=enable_summary_writer)
  if override_num_train_steps:
    configs.task.train.num_train_steps = override_num_train_steps
  return _run_training(configs, options, train_first_result_callback_fn,
                       early_stopping_fn)


def _run_training(configs: ExperimentConfigs, options: executors.RunOptions,
                  first_result_callback: Any = None,
                  early_stopping_fn: Any = None) -> Any:
  """`train_and_evaluate` on ExperimentConfigs and RunOptions."""
  job_log_dir = pathlib.Path(options.job_log_dir)
  train_p = configs.task.train
  if options.enable_checkpoint_saving:  # Checked before anything is written.
    _checkpointer.check_options(train_p.save_interval_steps,
                                train_p.save_max_to_keep,
                                options.restore_checkpoint_dir)
  _config_checks.check_external_checkpoint(train_p)
  if (getattr(configs.task, 'early_stopping_fn', None) is not None
      and early_stopping_fn is not None):
    raise base_hyperparams.ConfigError(
        'task.early_stopping_fn is set and so is the early_stopping_fn '
        "argument (a tuning trial's); expected one of them, as in Pax.")
  if options.eval_on_test and configs.hook('eval_programs') is None:
    _config_checks.check_input_names(configs.eval_datasets, 'eval_datasets')
  if options.decode_during_train:
    _config_checks.check_input_names(configs.decode_datasets,
                                     'decode_datasets')
  # Checked first too; before the checkpointer copies Orbax's handlers.
  checkpoints.reregister_type_handlers(
      getattr(train_p, 'tensorstore_metadata_key', None))
  job_log_dir.mkdir(parents=True, exist_ok=True)
  lock = _job_lock.JobLock(job_log_dir)
  if jax.process_index() == 0:
    lock.acquire()
  checkpointer = None
  try:
    if jax.process_index() == 0:
      write_hparams_file(configs, job_log_dir)
    task = instantiate(configs.task)
    if getattr(task, 'early_stopping_fn', None) is not None:
      early_stopping_fn = task.early_stopping_fn  # As in Pax.
    partitioner = make_partitioner(configs, task)
    if options.enable_checkpoint_saving:
      checkpointer = checkpoints.Checkpointer(
          job_log_dir,
          save_interval_steps=task.train.save_interval_steps,
          save_max_to_keep=task.train.save_max_to_keep,
          restore_dir=options.restore_checkpoint_dir,
          verify_before_gc=True)
      checkpoints.install_sigterm_handler()
    train_program, eval_programs = _train_and_eval_programs(configs,
                                                            options)
    # As in Pax, training decodes its decode datasets with the default
    # program (`decode_programs()` serves decode jobs).
    decode_programs = [decode_programs_lib.SingleTaskDecodeProgram(p) for p in (
        configs.decode_datasets if options.decode_during_train else [])]
    if first_result_callback is not None:
      train_program.register_first_result_callback_fn(first_result_callback)
    custom_executor = configs.hook('executor')
    executor = custom_executor() if custom_executor is not None else None
    setup_args = (task, job_log_dir, checkpointer, partitioner,
                  _input_specs_provider(configs), configs.train_datasets[0],
                  train_program, eval_programs, decode_programs)
    if executor is None:
      executor = executors.DefaultExecutor()
      executor.setup(
          *setup_args, early_stopping_fn=early_stopping_fn,
          enable_summary_writer=options.enable_summary_writer,
          restore_checkpoint_step=options.restore_checkpoint_step)
    else:  # Pax's BaseExecutor.setup.
      executor.setup(*setup_args, early_stopping_fn,
                     enable_summary_writer=options.enable_summary_writer)
    if jax.process_index() == 0:
      write_post_init_model_hparams_file(
          partitioner.get_train_state_metadata(), job_log_dir)
    state = executor.start()
    if checkpointer is not None:
      ckpt, checkpointer = checkpointer, None
      ckpt.close()
    logging.info('%s', _closing_line(executor, job_log_dir, options))
    return state
  finally:
    _preemption.uninstall_sigterm_handler()
    if checkpointer is not None:  # Stopped by an error: keep the saves made.
      try:
        checkpointer.close()
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('While stopping: %s', e)
    lock.release()


def _train_and_eval_programs(
    configs: ExperimentConfigs,
    options: executors.RunOptions) -> tuple[Any, list[Any]]:
  """The train program and the eval programs of a training run: the
  experiment's `train_programs()[0]` and `eval_programs()` where it
  overrides them, as in Pax, else the defaults on the (edited) configs."""
  custom = configs.hook('train_programs')
  train_program = (custom()[0] if custom is not None
                   else programs.SingleTaskTrainProgram())
  return train_program, (eval_programs_of(configs) if options.eval_on_test
                         else [])


def eval_programs_of(configs: ExperimentConfigs) -> list[Any]:
  """The experiment's `eval_programs()` where it overrides it (as Pax's
  training and eval jobs), else one per eval dataset of the (edited)
  configs."""
  custom = configs.hook('eval_programs')
  if custom is not None:
    return list(custom())
  return [programs.SingleTaskEvalProgram(p) for p in configs.eval_datasets]


def _closing_line(executor: executors.DefaultExecutor,
                  job_log_dir: pathlib.Path,
                  options: executors.RunOptions) -> str:
  """One line: steps done, final eval metrics, where the outputs are."""
  signal_name = _preemption.requesting_signal()
  head = (f'Training stopped by {signal_name}' if signal_name
          else 'Training finished')
  if isinstance(executor, executors.DefaultExecutor):
    start, end = executor.start_step, executor.step
    parts = [f'{head} at step {end} ({end - start} steps run this time, '
             f'from step {start})']
  else:  # An experiment's own executor.
    parts = [head]
  if getattr(executor, 'final_eval_metrics', None):
    parts.append('final eval: ' + ', '.join(
        f'{k}={v:.6g}' for k, v in sorted(executor.final_eval_metrics.items())))
  if options.enable_checkpoint_saving:
    parts.append(f'checkpoints in {job_log_dir / "checkpoints"}')
  if options.enable_summary_writer:
    parts.append(f'summaries in {job_log_dir / "summaries"}')
  return '; '.join(parts) + '.'
