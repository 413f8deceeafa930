"""The training loop: checkpoints, train steps, periodic eval and decode.

Public names: RunOptions, DefaultExecutor.

  executor = executors.DefaultExecutor()
  executor.setup(task, job_log_dir, checkpointer, partitioner,
                 input_specs_provider, train_input_p,
                 programs.SingleTaskTrainProgram(), eval_programs,
                 decode_programs, early_stopping_fn=None)
  final_state = executor.start()
"""

from __future__ import annotations

import dataclasses
import gc
import pathlib
from typing import Any, Sequence

from absl import logging
from etils import epath
import jax
from paxml import _config_checks
from paxml import _nonfinite_guard
from paxml import _tuning_metrics
from paxml import base_executor
from paxml import checkpoints
from paxml import summary_utils
from paxml import train_states
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import py_utils

instantiate = base_hyperparams.instantiate
RunningMode = trainer_lib.RunningMode
TrainState = train_states.TrainState
TrainStateProvenance = train_states.TrainStateProvenance


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """How `paxml.main` was asked to run (its flags, parsed once).

  Attributes:
    job_log_dir: Where the run writes everything.
    mode: 'train', 'eval', 'decode' or 'decode_once'.
    eval_on_test: Run the eval programs during training.
    decode_during_train: Run the decode programs during training.
    eval_during_decode: Also evaluate in a decode job.
    restore_checkpoint_dir: Checkpoints to read instead of
      `<job_log_dir>/checkpoints` (eval/decode jobs, or a warm start).
    restore_checkpoint_step: The step to restore (default: the latest).
    enable_checkpoint_saving: Write checkpoints.
    enable_summary_writer: Write TensorBoard summaries.
    decode_output_pickle: A decode job also writes its outputs' `.pickle`
      (training's decode programs always do, as in Pax).
  """

  job_log_dir: pathlib.Path
  mode: str = 'train'
  eval_on_test: bool = True
  decode_during_train: bool = True
  eval_during_decode: bool = False
  restore_checkpoint_dir: pathlib.Path | None = None
  restore_checkpoint_step: int | None = None
  enable_checkpoint_saving: bool = True
  enable_summary_writer: bool = True
  decode_output_pickle: bool = True


def abstract_train_state(partitioner: Any,
                         discard_opt_states: bool = False) -> Any:
  """The state's `ShapeDtypeStruct`s with their shardings (for restores)."""
  metadata = partitioner.get_train_state_metadata(discard_opt_states)
  return jax.tree.map(
      lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
      metadata.unpadded_global_shapes,
      partitioner.state_shardings(discard_opt_states))


def _collect_garbage() -> None:
  """A full collection, the frozen set-up heap included, frozen again after
  (`train.gc_interval_steps`, as in Pax)."""
  gc.unfreeze()
  gc.collect()
  gc.freeze()


class DefaultExecutor(base_executor.BaseExecutor):
  """Runs the train program until `num_train_steps`, with eval and decode.

  Each iteration: save a checkpoint if one is due (or a preemption was
  signalled), run one train step, then the eval programs every
  `eval_interval_steps` and the decode programs every
  `decode_interval_steps`. A final checkpoint is written at the end.
  """

  def __init__(self):
    self._task = None
    self._checkpointer = None
    self._train_program = None
    self._eval_programs = []
    self._decode_programs = []
    self._train_input = None
    self._state = None
    self._step = 0
    self._early_stopping_fn = None
    self._num_params = None
    self._provenance = None
    self._job_log_dir = None
    self._guard = None
    self.start_step = 0
    self.final_eval_metrics = {}

  def setup(self, jax_task: Any, job_log_dir: Any,
            checkpointer: checkpoints.Checkpointer | None, partitioner: Any,
            input_specs_provider: Any, train_input_p: Any,
            train_program: Any, eval_programs: Sequence[Any],
            decode_programs: Sequence[Any], early_stopping_fn: Any,
            exit_after_ondemand_checkpoint: bool = False,
            enable_summary_writer: bool = True,
            restore_checkpoint_step: int | None = None) -> None:
    """Sets up the partitioner, restores or initialises the state, programs.

    Args:
      jax_task: The task.
      job_log_dir: The run's directory.
      checkpointer: The checkpointer (None: no checkpoints).
      partitioner: A partitioner, not set up yet.
      input_specs_provider: Gives the input shapes the model is traced with.
      train_input_p: Config of the training input.
      train_program: A `BaseTrainProgram`, not set up yet.
      eval_programs: `BaseEvalProgram`s, not set up yet.
      decode_programs: `SingleTaskDecodeProgram`s, not set up yet.
      early_stopping_fn: Called after each step as Pax does,
        `fn(metrics, running_mode, step, is_last_ckpt, checkpoint_path)`
        (`_tuning_metrics.should_early_stop`: Pax's metric names); True
        stops training (the step is saved).
      exit_after_ondemand_checkpoint: Unused.
      enable_summary_writer: Write TensorBoard summaries.
      restore_checkpoint_step: The step to restore (default: the latest).
    """
    del exit_after_ondemand_checkpoint
    self._task = jax_task
    self._train_program = train_program
    self._eval_programs = list(eval_programs)
    self._decode_programs = list(decode_programs)
    self._checkpointer = checkpointer
    self._early_stopping_fn = early_stopping_fn
    self._job_log_dir = job_log_dir
    root_key = jax.random.PRNGKey(jax_task.train.random_seed)
    train_input_p = partitioner.preprocess_input_config(train_input_p)
    self._train_input = instantiate(train_input_p)
    specs = trainer_lib.get_train_input_specs_for_model_init(
        jax_task, input_specs_provider)
    partitioner.setup(jax_task, root_key, specs, job_log_dir=job_log_dir)
    abstract_state = abstract_train_state(partitioner)
    restored = self._maybe_restore(restore_checkpoint_step, abstract_state,
                                   partitioner)
    if early_stopping_fn is not None:
      # The tuner reads the train metrics where Pax aggregates them.
      train_program.keep_outputs_at(
          lambda step: _tuning_metrics.aggregates_train_metrics(
              step == train_program.num_train_steps, self._evals_due(step),
              self._decodes_due(step)))
    # The first step compiles on another thread while the state is made.
    train_program.compile_ahead(
        jax_task, self._train_input, partitioner, abstract_state,
        partitioner.preprocess_prng_key(root_key),
        0 if restored is None else int(jax.device_get(restored.step)))
    root_key, self._state, provenance = (
        partitioner.initialize_prng_key_and_train_state(
            root_key, restored, checkpoint_type=None))
    if provenance is not None:
      trainer_lib.write_train_provenance_file(provenance, job_log_dir)
    self._provenance = provenance
    self._step = int(jax.device_get(self._state.step))
    self.start_step = self._step
    self._guard = _nonfinite_guard.NonFiniteGuard(
        getattr(jax_task.train, 'max_consecutive_nonfinite_steps', 0),
        self._describe_last_good, self._on_finite_loss)
    train_key, eval_key, decode_key = jax.random.split(root_key, 3)
    train_program.setup(
        jax_task, self._train_input, partitioner, job_log_dir,
        partitioner.preprocess_prng_key(train_key),
        partitioner.preprocess_prng_key(eval_key), self._step,
        enable_summary_writer=enable_summary_writer)
    for program in eval_programs:
      program.setup(jax_task, partitioner, job_log_dir,
                    partitioner.preprocess_prng_key(eval_key),
                    enable_summary_writer=enable_summary_writer)
    for program in decode_programs:
      program.setup(jax_task, partitioner, job_log_dir,
                    partitioner.preprocess_prng_key(decode_key),
                    enable_summary_writer=enable_summary_writer)

  def _maybe_restore(self, step: int | None, abstract_state: Any,
                     partitioner: Any) -> Any:
    """The checkpointed state (and the input's position), or None.

    Without a checkpoint to restore, the state of the task's external
    checkpoint, if it names one (`_maybe_restore_external`).

    Args:
      step: The step to restore (None: the latest, if any).
      abstract_state: `abstract_train_state(partitioner)`.
      partitioner: The partitioner, set up.
    """
    if self._checkpointer is None or (
        step is None and self._checkpointer.latest_step() is None):
      return self._maybe_restore_external(abstract_state, partitioner)
    state, input_state = self._checkpointer.restore(
        step, abstract_state=abstract_state)
    if step is not None:  # Going back: newer checkpoints would block saves.
      self._checkpointer.set_aside_newer(step)
    if input_state is not None:
      self._train_input.set_state(input_state)
    logging.info('Restored the checkpoint of step %d.',
                 int(jax.device_get(state.step)))
    logging.info('(read from %s)', self._checkpointer.restored_from)
    return state

  def _maybe_restore_external(self, abstract_state: Any,
                              partitioner: Any) -> Any:
    """The state read by `train.external_checkpoint_handler`, or None.

    As in Pax: a run that has no checkpoint of its own starts from
    `train.external_checkpoint_path` (any format) when it names one; the
    handler (an Orbax `CheckpointHandler` in Pax's protocol) is called as
    `restore(path, item=<TrainStateMetadata>, partitioner=...,
    transformations=train.restore_transformations)` and returns the
    TrainState, placed here on the state's shardings.
    """
    train_p = self._task.train
    path = getattr(train_p, 'external_checkpoint_path', None)
    if path is None:
      return None
    _config_checks.check_external_checkpoint(train_p)
    handler = train_p.external_checkpoint_handler
    state = handler.restore(
        epath.Path(path), item=partitioner.get_train_state_metadata(),
        partitioner=partitioner,
        transformations=getattr(train_p, 'restore_transformations', None))
    want = jax.tree.structure(abstract_state)
    if jax.tree.structure(state) != want:
      raise ValueError(
          f'task.train.external_checkpoint_handler ({type(handler).__name__}) '
          f'read {path}: its state {jax.tree.structure(state)} does not have '
          f"the model's TrainState structure {want}.")
    state = jax.device_put(state, jax.tree.map(
        lambda a: a.sharding, abstract_state))
    logging.info('Started from the external checkpoint %s (step %d).', path,
                 int(jax.device_get(state.step)))
    return state

  def _input_state(self) -> bytes | None:
    try:
      return self._train_input.get_state()
    except NotImplementedError:
      return None

  def _describe_last_good(self) -> str:
    if self._checkpointer is None:
      return 'Checkpoints are off.'
    return self._checkpointer.last_good()

  def _on_finite_loss(self, step: int) -> None:
    # The state of `step` gave a finite loss: its checkpoint is good.
    if self._checkpointer is not None:
      self._checkpointer.mark_good(step)

  def _save(self, step: int, state: Any, force: bool = False) -> None:
    """Saves if due, never a state that is (or just gave) non-finite."""
    if self._checkpointer is None or not self._checkpointer.save_due(
        step, force):
      return
    self._guard.sync()
    if self._guard.consecutive:
      logging.warning('Not saving step %d: the loss of step %d was not '
                      'finite.', step, step - 1)
      return
    if not _nonfinite_guard.state_is_finite(state):
      logging.warning('Not saving step %d: the train state holds non-finite '
                      'values.', step)
      return
    self._checkpointer.save(step, state, self._input_state, force=force)

  def _total_num_params(self) -> int:
    """The elements of the model's variables (Pax's `total_num_params`)."""
    if self._num_params is None:
      self._num_params = int(py_utils.total_num_vars(self._state.mdl_vars))
    return self._num_params

  def _write_run_summaries(self, state: Any) -> None:
    """Pax's text summaries at step 0 of a training run: the variables'
    shapes (`Model`), their provenance, `Total Num Params` and `Global
    batch size`."""
    writer = self._train_program.summary_writer
    summary_utils.write_model_structure(writer, state, False)
    if self._provenance is not None:
      summary_utils.write_model_provenance(writer, self._provenance)
    summary_utils.write_total_num_params(writer, self._total_num_params())
    summary_utils.write_global_batch_size(
        writer, self._train_program.train_unpadded_global_batch_size)

  def _compile_programs_ahead(self, state: Any) -> None:
    """After the run's first step: the eval and decode programs that this
    run will run (their interval is set: they run at the last step at
    least) start compiling their steps on other threads, beside training,
    instead of when they first run while training waits."""
    train_p = self._task.train
    last = self._train_program.num_train_steps
    programs = []
    if train_p.eval_interval_steps:
      programs += self._eval_programs
    if (train_p.decode_interval_steps and
        last >= (train_p.decode_start_after_n_steps or 0)):
      programs += self._decode_programs
    for program in programs:
      compile_ahead = getattr(program, 'compile_ahead', None)
      if compile_ahead is not None:
        compile_ahead(state)

  def _due(self, interval: int | None, step: int, start: int = 0) -> bool:
    last = step == self._train_program.num_train_steps
    return bool(interval) and step >= start and (step % interval == 0 or last)

  def _evals_due(self, step: int) -> bool:
    """Whether the eval programs run once `step` is done."""
    return bool(self._eval_programs) and self._due(
        self._task.train.eval_interval_steps, step)

  def _decodes_due(self, step: int) -> bool:
    """Whether the decode programs run once `step` is done."""
    train_p = self._task.train
    return bool(self._decode_programs) and self._due(
        train_p.decode_interval_steps, step,
        train_p.decode_start_after_n_steps)

  def _should_stop_early(self, step: int, out: Any,
                         evals: _tuning_metrics.EvalMetrics | None,
                         decodes: _tuning_metrics.DecodeMetrics | None) -> bool:
    """Reports the step to the early_stopping_fn as Pax does (after every
    step, with Pax's metric names); True: stop training."""
    if self._early_stopping_fn is None:
      return False
    train_p = self._task.train
    is_last = _tuning_metrics.is_last_checkpoint(
        RunningMode.detect(has_train_metrics=True,
                           has_eval_metrics=bool(evals),
                           has_decode_metrics=bool(decodes)),
        step, self._train_program.num_train_steps,
        train_p.eval_interval_steps, train_p.decode_interval_steps or 0,
        train_p.save_interval_steps,
        train_to_end=getattr(self._early_stopping_fn, 'train_to_end', False))
    return bool(_tuning_metrics.should_early_stop(
        self._early_stopping_fn, step, is_last,
        train_weighted_scalars=out.weighted_scalars,
        eval_train_metrics=out.eval_train_metrics, eval_metrics=evals,
        decode_metrics=decodes, num_params=float(self._total_num_params()),
        train_steps_per_sec=out.steps_per_sec,
        checkpoint_path=pathlib.Path(self._job_log_dir) / 'checkpoints'))

  def _note_eval_metrics(self, evals: _tuning_metrics.EvalMetrics) -> None:
    for name, metrics in zip(evals.input_names, evals.metrics_list):
      for key, value in (metrics or {}).items():
        self.final_eval_metrics[f'{name}/{key}'] = float(value)

  @property
  def step(self) -> int:
    return self._step

  def start(self) -> Any:
    """Trains from the set-up state and step; returns the final state."""
    state, step = self._state, self._step
    train_p = self._task.train
    logging.info('Training from step %d to %d.', step,
                 self._train_program.num_train_steps)
    while self._train_program.should_run(state, step):
      if step > 0:
        self._save(step, state)
      if checkpoints.preemption_requested():
        logging.warning('Preemption requested: saving step %d and exiting.',
                        step)
        break
      state = self._train_program.update_state(state, step)
      out = self._train_program.run(state, step)
      self._guard.record(step, out.loss)
      state = out.state
      step += 1
      if step == self.start_step + 1:
        self._compile_programs_ahead(state)
        self._write_run_summaries(state)  # While the first step runs.
      gc_interval = getattr(train_p, 'gc_interval_steps', 0)
      if gc_interval and step % gc_interval == 0:
        _collect_garbage()
      evals = decodes = None
      if self._evals_due(step):
        evals, _ = _tuning_metrics.run_eval_programs(self._eval_programs,
                                                     state, step)
        self._note_eval_metrics(evals)
        if gc_interval:
          _collect_garbage()
      if self._decodes_due(step):
        decodes, _ = _tuning_metrics.run_decode_programs(
            self._decode_programs, state, step)
      if self._should_stop_early(step, out, evals, decodes):
        logging.info('Training loop is early stopped at step %d (of %d) by '
                     'the early_stopping_fn.', step,
                     self._train_program.num_train_steps)
        break
    self._guard.sync()
    if self._checkpointer is not None:
      self._save(step, state, force=True)
      self._checkpointer.wait_until_finished()
      if not self._guard.consecutive and step > self.start_step:
        self._checkpointer.mark_good(step)  # The run ended on finite steps.
    for program in [self._train_program, *self._eval_programs,
                    *self._decode_programs]:
      program.shutdown()
    self._state, self._step = state, step
    return state
