"""Training an experiment: set up task, inputs, mesh, state, and run the loop.

Public names: ExperimentConfigs, train_and_evaluate, write_hparams_file,
write_post_init_model_hparams_file, setup_run.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

from absl import logging
from fiddle.absl_flags import utils as fdl_flag_utils
import jax
from paxml import base_experiment
from paxml import checkpoints
from paxml import executors
from paxml import partitioning
from paxml import programs
from praxis import base_hyperparams
from praxis import base_input
from praxis import base_layer
from praxis import pax_fiddle

instantiate = base_hyperparams.instantiate


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
    return cls(name, experiment.task(), list(experiment.datasets()),
               list(experiment.decode_datasets()), provider)

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


def write_hparams_file(configs: ExperimentConfigs, job_log_dir: pathlib.Path,
                       filename_prefix: str = '') -> None:
  """Writes the resolved configs to `<job_log_dir>/model_params.txt`."""
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


def _abstract_state(partitioner: partitioning.Partitioner) -> Any:
  shapes = partitioner.metadata.unpadded_global_shapes
  return jax.tree.map(
      lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
      shapes, partitioner.state_shardings)


def setup_run(configs: ExperimentConfigs, options: executors.RunOptions,
              discard_opt_states: bool = False):
  """Instantiates the task and partitioner from the experiment's configs.

  Returns:
    (task, partitioner), with the partitioner set up from the input specs.
  """
  task = instantiate(configs.task)
  if configs.input_specs_provider is not None:
    provider = instantiate(configs.input_specs_provider)
  else:
    specs_input = configs.train_datasets or configs.eval_datasets
    if not specs_input:
      raise ValueError(f'Experiment {configs.name} defines no dataset.')
    provider = base_input.DatasetInputSpecsProvider(input_p=specs_input[0])
  partitioner = partitioning.create_partitioner(task)
  partitioner.setup(provider.get_input_specs(),
                    discard_opt_states=discard_opt_states)
  del options
  return task, partitioner


def restore_or_initialize(task: Any, partitioner: partitioning.Partitioner,
                          checkpointer: checkpoints.Checkpointer | None,
                          options: executors.RunOptions,
                          train_input: Any = None) -> tuple[Any, int]:
  """The latest checkpoint if there is one, else a freshly initialised state."""
  step = options.restore_checkpoint_step
  if checkpointer is not None and (step is not None or
                                   checkpointer.latest_step() is not None):
    state, input_state = checkpointer.restore(
        step, abstract_state=_abstract_state(partitioner))
    if input_state is not None and train_input is not None:
      train_input.set_state(input_state)
    restored = int(jax.device_get(state.step))
    logging.info('Restored the checkpoint of step %d.', restored)
    return state, restored
  key = jax.random.PRNGKey(task.train.random_seed)
  return partitioner.initialize_state(key), 0


def train_and_evaluate(configs: ExperimentConfigs,
                       options: executors.RunOptions) -> Any:
  """Trains (resuming from the latest checkpoint), evaluating and decoding.

  Args:
    configs: The experiment's configs (after command-line overrides).
    options: How to run.

  Returns:
    The final train state.
  """
  job_log_dir = pathlib.Path(options.job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  if jax.process_index() == 0:
    write_hparams_file(configs, job_log_dir)
  task, partitioner = setup_run(configs, options)
  if jax.process_index() == 0:
    write_post_init_model_hparams_file(partitioner.metadata, job_log_dir)

  train_input = instantiate(configs.train_datasets[0])
  checkpointer = None
  if options.enable_checkpoint_saving:
    checkpointer = checkpoints.Checkpointer(
        job_log_dir,
        save_interval_steps=task.train.save_interval_steps,
        save_max_to_keep=task.train.save_max_to_keep,
        checkpoint_dir=options.restore_checkpoint_dir)
    checkpoints.install_sigterm_handler()
  state, step = restore_or_initialize(task, partitioner, checkpointer, options,
                                      train_input)
  kwargs = dict(partitioner=partitioner, job_log_dir=job_log_dir,
                enable_summary_writer=options.enable_summary_writer)
  train_program = programs.SingleTaskTrainProgram(task, train_input, **kwargs)
  eval_programs = [
      programs.SingleTaskEvalProgram(task, p, **kwargs)
      for p in (configs.eval_datasets if options.eval_on_test else [])]
  decode_programs = [
      programs.SingleTaskDecodeProgram(task, p, **kwargs)
      for p in (configs.decode_datasets if options.decode_during_train else [])]
  executor = executors.DefaultExecutor(
      task, checkpointer, train_program, eval_programs, decode_programs,
      train_input=train_input)
  state = executor.start(state, step)
  if checkpointer is not None:
    checkpointer.close()
  return state
