"""Programs: what the executor runs — training steps and evaluation passes.

Public names: Program, ProgramOutput, TrainProgramOutput, EvalProgramOutput,
BaseTrainProgram, SingleTaskTrainProgram, BaseEvalProgram,
SingleTaskEvalProgram, EvaluationMode, get_eval_train_state,
get_summary_base_dir, get_filename, safe_write_key_value_pairs,
maybe_write_eval_outputs, tokens_in_batch. Decoding is
`paxml.decode_programs.SingleTaskDecodeProgram`.

A program is built empty (eval programs from their input config), then
`setup` with the task, partitioner and keys; `run(state, step)` returns a
`ProgramOutput` holding the (new) state. Each writes its TensorBoard
summaries under `<job_log_dir>/summaries/`: `train` and `eval_train` (the
train program), `eval_test_<input name>` (each eval program).

  program = programs.SingleTaskTrainProgram()
  program.setup(task, train_input, partitioner, job_log_dir, train_key,
                eval_key, init_step=0)
  state = program.run(state, 0).state
"""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any, Callable, Mapping

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
from paxml import _program_utils
from paxml import _startup_gc
from paxml import io_utils
from paxml import mfu
from paxml import profiling
from paxml import summary_utils
from paxml import tasks_lib
from paxml import train_states
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import base_input
from praxis import py_utils
from praxis import trees

instantiate = base_hyperparams.instantiate
BaseStepFnStaticArgs = trainer_lib.BaseStepFnStaticArgs
StepFnOutput = trainer_lib.StepFnOutput
TrainStateMetadata = trainer_lib.TrainStateMetadata
get_summary_base_dir = _program_utils.get_summary_base_dir
tokens_in_batch = _program_utils.tokens_in_batch


def get_eval_train_state(task: Any, state: Any, use_ema: bool) -> Any:
  """The state eval and decode steps take: no optimizer states.

  Args:
    task: The task.
    state: A train state (with optimizer states).
    use_ema: Take the EMA of the variables (the optimizer must keep one).

  Returns:
    The eval state.
  """
  if not use_ema:
    return state.to_eval_state()
  if not tasks_lib.has_ema(task):
    raise ValueError(f'Task {task.name!r}: EMA variables are requested '
                     '(eval_use_ema_states or decode_use_ema_states) but the '
                     'optimizer has no ema_decay.')
  return tasks_lib.extract_ema(state).to_eval_state()


@dataclasses.dataclass(frozen=True)
class ProgramOutput:
  """What `Program.run` returns.

  Attributes:
    state: The train state after the program (changed only by training).
  """

  state: Any


@dataclasses.dataclass(frozen=True)
class TrainProgramOutput(ProgramOutput):
  """The output of one training step.

  Attributes:
    loss: The step's mean loss (a device scalar).
    weighted_scalars: The model's metrics.
    new_train_step: The step count after it.
    steps_per_sec: Steps/sec since the last measure, at multiples of
      `train.compute_steps_per_sec_interval_steps` (Pax's), else None.
    eval_train_metrics: Metrics of the eval on the training batch, if run.
    per_example_out: The model's per-example outputs, on summary steps of a
      program built with `keep_per_example_out` (else None).

  `weighted_scalars` are None on steps that write, accumulate or log no
  summaries, unless `keep_outputs_at` names them: those run a compiled step
  that returns the loss only.
  """

  loss: Any
  weighted_scalars: Any
  new_train_step: int
  steps_per_sec: float | None
  eval_train_metrics: Mapping[str, float] | None
  per_example_out: Any = None


# How far ahead of the first step `_compile_later_variant` looks for a step
# that runs the other variant (summary intervals are usually shorter).
_VARIANT_LOOKAHEAD = 10_000


@dataclasses.dataclass(frozen=True)
class _TrainStepStaticArgs(BaseStepFnStaticArgs):
  """Static arguments of the train program's steps: which outputs to keep.

  Each value compiles its own executable; XLA then drops the work of the
  outputs left out (metrics, summaries, per-example outputs), so steps that
  write no summaries compute and return the loss only. The new state is the
  same either way.

  Attributes:
    with_summaries: Return the weighted scalars and summary tensors.
    with_per_example_out: Return the per-example outputs.
    trace_from: Static arguments of a variant that keeps at least these
      outputs: this variant is then compiled from that one's trace (see
      `_partitioned_step.CompiledStep`) instead of tracing the model again.
  """

  with_summaries: bool = True
  with_per_example_out: bool = True
  trace_from: _TrainStepStaticArgs | None = None

  def select_outputs(self, states_and_out: tuple[Any, StepFnOutput]
                     ) -> tuple[Any, StepFnOutput]:
    """(new states, outputs) of a step without what this leaves out."""
    states, out = states_and_out
    return states, _keep_outputs(out, self)


def _keep_outputs(out: StepFnOutput, static_args: Any) -> StepFnOutput:
  """`out` without what `static_args` (a `_TrainStepStaticArgs`) leaves out."""
  if not isinstance(static_args, _TrainStepStaticArgs):
    return out
  if not static_args.with_summaries:
    out = out.replace(weighted_scalars=None, summary_tensors=None)
  if not static_args.with_per_example_out:
    out = out.replace(per_example_out=None)
  return out


def _train_step(jax_task: Any, states: Any, prng_key: jax.Array, inputs: Any,
                fprop_dtype: Any = jnp.float32, var_weight_hparams: Any = None,
                static_args: Any = None) -> tuple[Any, StepFnOutput]:
  """`train_step_single_learner` with the outputs `static_args` keeps."""
  states, out = trainer_lib.train_step_single_learner(
      jax_task, states, prng_key, inputs, fprop_dtype=fprop_dtype,
      var_weight_hparams=var_weight_hparams, static_args=static_args)
  return states, _keep_outputs(out, static_args)


@dataclasses.dataclass(frozen=True)
class EvalProgramOutput(ProgramOutput):
  """The output of one evaluation pass.

  Attributes:
    eval_metrics: `{metric: value}` over the whole input (and 'loss').
    eval_scoring_metrics: Unused (Pax's scoring metrics).
    num_eval_steps: Batches evaluated.
  """

  eval_metrics: Mapping[str, float] | None = None
  eval_scoring_metrics: Mapping[str, float] | None = None
  num_eval_steps: int = 0


EvaluationMode = io_utils.EvaluationMode


def get_filename(step: Any, prefix: str) -> str:
  """`<prefix>_out_<step>_shard_<process index>`."""
  step = int(np.asarray(
      py_utils.maybe_unreplicate_for_fully_replicated(step)).reshape(-1)[0])
  return f'{prefix}_out_{step}_shard_{jax.process_index()}'


def safe_write_key_value_pairs(filename: Any, key_value_pairs: Any,
                               cast_to_ndarray: bool = True,
                               write_pickle: bool = True) -> None:
  """`io_utils.write_key_value_pairs`, logging a value JSON cannot hold.

  Args:
    filename: The path; `.jsonl` and `.pickle` replace its suffix.
    key_value_pairs: The (key, value) pairs.
    cast_to_ndarray: Turn device arrays into numpy arrays first.
    write_pickle: Also write the `.pickle` of the pairs.
  """
  try:
    io_utils.write_key_value_pairs(filename, key_value_pairs, cast_to_ndarray,
                                   write_pickle)
  except TypeError as e:
    logging.warning('Outputs for %s are not serializable: %s', filename, e)


def maybe_write_eval_outputs(mode: EvaluationMode, output_dir: Any, step: int,
                             eval_outputs: Any,
                             write_pickle: bool = True) -> None:
  """Writes outputs to `<output_dir>/<mode>_out_<step>_shard_<i>.jsonl`.

  And `.pickle` beside it unless `write_pickle` is False. Only process 0
  writes.
  """
  if jax.process_index() != 0:
    return
  filename = epath.Path(output_dir) / get_filename(step, mode.value)
  filename.parent.mkdir(parents=True, exist_ok=True)
  logging.info('Writing %s outputs to %s with %d entries', mode.value,
               filename, len(eval_outputs))
  safe_write_key_value_pairs(filename, eval_outputs, write_pickle=write_pickle)


class Program(metaclass=abc.ABCMeta):
  """A unit of work the executor runs between checkpoints."""

  @abc.abstractmethod
  def should_run(self, state: Any, step: int) -> bool:
    """Whether to run at `step`."""

  @abc.abstractmethod
  def run(self, state: Any, step: int) -> ProgramOutput:
    """Runs once on `state` at train step `step`."""

  @abc.abstractmethod
  def shutdown(self) -> None:
    """Flushes and closes what the program opened."""


class BaseTrainProgram(Program):
  """One training step per `run`, with summaries and progress logging.

  Subclasses say how to run a step: `train_step`, `eval_train_step`,
  `train_input_partition_spec`.
  """

  def __init__(self, keep_per_example_out: bool = False):
    """Constructor.

    Args:
      keep_per_example_out: Return the model's per-example outputs of the
        summary steps (`TrainProgramOutput.per_example_out`); else the
        compiled step leaves them out.
    """
    self._keep_per_example_out = keep_per_example_out
    self._static_args = None
    self._accumulator = None
    self._task = None
    self._train_input = None
    self._partitioner = None
    self._train_prng_seed = None
    self._eval_prng_seed = None
    self._initial_step = -1
    self._train_unpadded_global_batch_size = None
    self._writer = None
    self._eval_writer = None
    self._in_flight = None
    self._first_result_callback = lambda ok: None
    self._progress = None
    self._profiler = None
    self._last_run_time = None
    self._first_loss = None  # Until it is ready (`_startup_gc.settle`).
    self._outputs_wanted = lambda step: False
    self._rate_mark = None  # (time, step) of the last steps/sec measured.

  def keep_outputs_at(self, wanted: Callable[[int], bool]) -> None:
    """Also computes the full outputs of the steps done at `wanted(step)`.

    Steps that write or accumulate no summaries run a variant that returns
    the loss only; a caller that reads the outputs' weighted scalars at
    other steps (the executor, for a tuner's `train/...` metrics) names
    them here, before the first step.
    """
    self._outputs_wanted = wanted

  def register_first_result_callback_fn(
      self, train_first_result_callback_fn: Callable[[bool], None]) -> None:
    """Calls `fn(True)` once the first step has been dispatched."""
    self._first_result_callback = train_first_result_callback_fn

  def first_result_callback_fn(self, metric: bool) -> None:
    self._first_result_callback(metric)

  @property
  def train_input(self) -> Any:
    return self._train_input

  @property
  def summary_writer(self) -> Any:
    return self._writer

  @property
  def train_unpadded_global_batch_size(self) -> int:
    return self._train_unpadded_global_batch_size

  def setup(self, task: Any, train_input: Any, partitioner: Any,
            job_log_dir: Any, train_prng_seed: jax.Array,
            eval_prng_seed: jax.Array, init_step: int,
            enable_summary_writer: bool = True) -> None:
    """Binds the program to a task, its input and a partitioner.

    Args:
      task: The task.
      train_input: The (instantiated) training input.
      partitioner: The partitioner (set up).
      job_log_dir: The run's directory.
      train_prng_seed: The key of the train steps (each folds its step in).
      eval_prng_seed: The key of the evaluations on training batches.
      init_step: The step training starts from.
      enable_summary_writer: Write TensorBoard summaries.
    """
    self._bind_steps(task, train_input, partitioner)
    self._train_prng_seed = train_prng_seed
    self._eval_prng_seed = eval_prng_seed
    self._initial_step = init_step
    base = get_summary_base_dir(job_log_dir)
    self._writer = summary_utils.get_summary_writer(
        base / 'train', enable_summary_writer)
    self._eval_writer = summary_utils.get_summary_writer(
        base / 'eval_train', enable_summary_writer)
    self._progress = _program_utils.Progress(init_step)
    train_p = task.train
    # Dispatch is asynchronous; bounding the steps in flight keeps the
    # devices fed while bounding the queue (and the batches it holds). An
    # unbounded queue of collective steps can also exhaust XLA:CPU's thread
    # pool: its all-reduce rendezvous then aborts.
    self._in_flight = _program_utils.InFlight(train_p.max_inflight_steps)
    self._profiler = None
    if train_p.profiler_capture_step is not None:
      self._profiler = profiling.Profiler(
          num_steps=train_p.profiler_num_steps,
          min_duration_sec=train_p.profiler_min_duration_sec,
          max_num_hosts=train_p.profiler_max_num_hosts,
          capture_host_profile=train_p.profiler_capture_host_profile,
          log_dir=epath.Path(job_log_dir) / 'profile')

  def _bind_steps(self, task: Any, train_input: Any, partitioner: Any) -> None:
    """What choosing and calling the steps needs (before `setup` too)."""
    if (self._static_args is not None and self._task is task and
        self._train_input is train_input and self._partitioner is partitioner):
      return  # Bound by `compile_ahead`: its objects key the compiled step.
    self._task = task
    self._train_input = train_input
    self._partitioner = partitioner
    self._train_unpadded_global_batch_size = (
        train_input.get_global_batch_size(train_input))
    # Built once: a new object per step costs hashing in the step's cache.
    # The loss-only variant reuses the summary variant's trace.
    summary_step = _TrainStepStaticArgs(
        unpadded_global_batch_size=self._train_unpadded_global_batch_size,
        with_per_example_out=self._keep_per_example_out)
    self._static_args = {
        True: summary_step,
        False: dataclasses.replace(summary_step, with_summaries=False,
                                   with_per_example_out=False,
                                   trace_from=summary_step)}
    self._accumulator = _program_utils.SummaryAccumulator(
        task.train.summary_accumulate_interval_steps)

  def _logs_outputs(self, step: int) -> bool:
    """Whether the outputs of the step done at `step` are logged: at
    multiples of `train.log_train_output_interval_steps`, as in Pax (unset:
    at summary steps only, which log them anyway)."""
    every = getattr(self._task.train, 'log_train_output_interval_steps', None)
    return bool(every) and step % every == 0

  def _kept_outputs(self, step: int) -> tuple[bool, bool, bool]:
    """(summaries written, outputs accumulated, outputs logged or read by
    the caller) once `step` is done; any of them needs the full variant of
    the step."""
    done = step + 1
    return (bool(trainer_lib.is_summary_step(self._task.train, done)),
            self._accumulator.due(done),
            self._logs_outputs(done) or self._outputs_wanted(done))

  def compile_ahead(self, task: Any, train_input: Any, partitioner: Any,
                    abstract_state: Any, prng_key: Any, step: int) -> None:
    """Starts compiling the first step in the background, if it can.

    Called before the state exists (while it is initialised or restored),
    with its shapes: `run(state, step)` then waits for this compilation
    instead of starting its own. The default does nothing.

    Args:
      task: The task.
      train_input: The (instantiated) training input, at its first batch.
      partitioner: The partitioner (set up).
      abstract_state: The train state's `jax.ShapeDtypeStruct`s.
      prng_key: The train key (or its `ShapeDtypeStruct`).
      step: The step training will start from.
    """
    del task, train_input, partitioner, abstract_state, prng_key, step

  @property
  def num_train_steps(self) -> int:
    return int(self._task.train.num_train_steps)

  def update_state(self, state: Any, step: int) -> Any:
    """A hook to change the state before a step (none by default)."""
    del step
    return state

  def should_run(self, state: Any, step: int) -> bool:
    return step < self.num_train_steps

  def run(self, state: Any, step: int) -> TrainProgramOutput:
    """Runs one training step (and its summaries and eval, when due).

    Steps that write or accumulate no summaries run a lean variant of the
    compiled step that returns the loss only (see `_TrainStepStaticArgs`);
    nothing here waits for the devices except at summary steps.
    """
    train_p = self._task.train
    if self._rate_mark is None:  # Steps/sec are measured from here.
      self._rate_mark = (time.time(), step)
    if self._profiler is not None:
      self._maybe_profile(step - self._initial_step)
    batch = self._train_input.get_next_padded()
    if step == self._initial_step and train_p.enforce_input_specs:
      self._partitioner.check_input_spec(batch)
    self._progress.count(batch)
    inputs = self._partitioner.preprocess_inputs(
        self._train_input, batch, self.train_input_partition_spec(batch))
    write, accumulate, read = self._kept_outputs(step)
    full = write or accumulate or read
    self._in_flight.make_room()
    new_step, state, outputs = self.train_step(
        step, state, self._train_prng_seed, inputs, self._static_args[full])
    self._in_flight.add(outputs.loss)
    if step == self._initial_step:
      # Once the first step's own executable is ready (it is dispatched).
      self._compile_later_variant(state, inputs, step, full)
      self.first_result_callback_fn(True)
      _startup_gc.end_setup()  # The command's set-up is over;
      self._first_loss = outputs.loss  # its heap is settled once this is.
    elif (self._first_loss is not None
          and _program_utils.is_ready(self._first_loss)):
      self._first_loss = None
      _startup_gc.settle()  # Not beside the first step: after it.
    if accumulate:
      self._accumulator.add(new_step, outputs)
    if write:
      self._report(new_step, outputs)
    elif self._logs_outputs(new_step):  # Waits for this step's outputs.
      self._log_outputs(new_step, outputs)
    steps_per_sec = self._steps_per_sec(new_step)
    eval_metrics = None
    if self._should_eval_train(new_step):
      eval_metrics = self._eval_train(state, new_step, inputs,
                                      self._static_args[True])
    return TrainProgramOutput(
        state, loss=outputs.loss, weighted_scalars=outputs.weighted_scalars,
        new_train_step=new_step, steps_per_sec=steps_per_sec,
        eval_train_metrics=eval_metrics,
        per_example_out=outputs.per_example_out)

  def _compile_later_variant(self, state: Any, inputs: Any, step: int,
                             full: bool) -> None:
    """Once the first step is dispatched (`full`: its variant keeps all
    outputs; `state`: the state it returns): starts compiling the other
    variant, if a later step of this run needs it, on another thread while
    the next steps run. The default does nothing."""
    del state, inputs, step, full

  def _any_later_step(self, step: int, ends_at: Callable[[int], bool]
                      ) -> bool:
    """Whether one of the `_VARIANT_LOOKAHEAD` steps after `step` (up to
    the last) satisfies `ends_at(the step count once it is done)`."""
    last = min(self.num_train_steps, step + 1 + _VARIANT_LOOKAHEAD)
    return any(ends_at(done) for done in range(step + 2, last + 1))

  @abc.abstractmethod
  def train_step(self, step: int, state: Any, prng_key: jax.Array,
                 inputs: Any, static_args: BaseStepFnStaticArgs
                 ) -> tuple[int, Any, StepFnOutput]:
    """(new step, new state, StepFnOutput) of one training step."""

  @abc.abstractmethod
  def eval_train_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                      static_args: BaseStepFnStaticArgs) -> StepFnOutput:
    """An eval step on a training batch (`state` is an eval state)."""

  @abc.abstractmethod
  def train_input_partition_spec(self, inputs: Any) -> Any:
    """The partition specs of the training inputs."""

  def _maybe_profile(self, steps_run: int) -> None:
    """Times the steps before `profiler_capture_step`, then captures."""
    capture_step = self._task.train.profiler_capture_step
    now = time.perf_counter()
    if 3 <= steps_run <= capture_step:  # Earlier steps include compiling.
      self._profiler.update_step_moving_mean(now - self._last_run_time)
    self._last_run_time = now
    if steps_run == capture_step:
      self._profiler.capture_async()

  def _should_eval_train(self, step: int) -> bool:
    train_p = self._task.train
    interval = train_p.eval_interval_steps
    return bool(interval) and not train_p.eval_skip_train and (
        step % interval == 0 or step == self.num_train_steps)

  def _eval_train(self, state: Any, step: int, inputs: Any,
                  static_args: BaseStepFnStaticArgs) -> dict[str, float]:
    eval_state = get_eval_train_state(self._task, state,
                                      self._task.train.eval_use_ema_states)
    out = self.eval_train_step(
        eval_state, jax.random.fold_in(self._eval_prng_seed, step), inputs,
        static_args)
    loss, weighted = _program_utils.fetch((out.loss, out.weighted_scalars))
    scalars = _program_utils.host_scalars(weighted)
    summary_utils.write_summary_entry(self._eval_writer, step,
                                      float(loss), scalars, {})
    return {k: v for k, (v, _) in scalars.items()}

  def _steps_per_sec(self, step: int) -> float | None:
    """Steps/sec since the last measure, at multiples of
    `train.compute_steps_per_sec_interval_steps` (else None), as Pax
    measures them: host time between dispatches, no wait for the devices."""
    every = getattr(self._task.train, 'compute_steps_per_sec_interval_steps',
                    None)
    if not every or step % every:
      return None
    start, first = self._rate_mark
    now = time.time()
    self._rate_mark = (now, step)
    return (step - first) / max(now - start, 1e-9)

  def _log_outputs(self, step: int, outputs: StepFnOutput) -> None:
    """Logs the loss and weighted scalars of a step that writes no
    summaries (`train.log_train_output_interval_steps`)."""
    loss, weighted = _program_utils.fetch(
        (outputs.loss, outputs.weighted_scalars))
    scalars = ''.join(
        f', {key}={value:.6g} (weight={weight:.6g})' for key, (value, weight)
        in _program_utils.host_scalars(weighted).items())
    logging.info('step %d/%d loss %.5f%s', step, self.num_train_steps,
                 float(np.mean(loss)), scalars)

  def _report(self, step: int, outputs: StepFnOutput) -> float:
    """Logs and writes the summaries of a summary step (one device fetch)."""
    entry = self._accumulator.take()
    if entry is None:  # Not accumulating (or nothing accumulated yet).
      entry = _program_utils.SummaryEntry.of([(step, outputs)])
    rates = self._progress.rates(step)
    kind = jax.devices()[0].device_kind
    utilisation = None
    if mfu.peak_flops_per_device(kind) is not None:  # Else no FLOP count.
      utilisation = mfu.mfu(
          getattr(self._compiled_train_step(), 'flops', None),
          rates.steps_per_sec, jax.device_count(), kind)
    eta = (self.num_train_steps - step) / max(rates.steps_per_sec, 1e-9)
    logging.info(
        'step %d/%d loss %.5f, %.2f steps/sec, %.0f tokens/sec, ETA %.0fs%s',
        step, self.num_train_steps, entry.loss, rates.steps_per_sec,
        rates.tokens_per_sec, eta,
        '' if utilisation is None else f', MFU {100 * utilisation:.1f}%')
    if utilisation is not None:
      self._writer.add_scalar('MFU', utilisation, step)
    summary_utils.write_summary_entry(
        self._writer, entry.step, entry.loss, entry.weighted_scalars,
        summary_tensors=entry.summary_tensors,
        steps_per_sec=rates.steps_per_sec)
    self._writer.add_scalar('tokens/sec', rates.tokens_per_sec, step)
    return rates.steps_per_sec

  def _compiled_train_step(self) -> Any:
    """The compiled train step, if the subclass has one (for MFU)."""
    return None

  def shutdown(self) -> None:
    if self._in_flight is not None:
      self._in_flight.wait_all()
    if self._profiler is not None:
      self._profiler.stop_now()
    self._writer.close()
    self._eval_writer.close()


class SingleTaskTrainProgram(BaseTrainProgram):
  """Trains a single task on one input with trainer_lib's step functions."""

  def __init__(self, keep_per_example_out: bool = False):
    super().__init__(keep_per_example_out)
    self._train_step_fn = None
    self._train_input_specs = None
    self._eval_train_step_fn = None

  def _get_train_step(self, inputs: Any) -> tuple[Any, Any]:
    if self._train_step_fn is None:
      self._train_step_fn, self._train_input_specs = (
          self._partitioner.partition(
              _train_step, trees.get_shape_dtype(inputs), is_eval=False))
    return self._train_step_fn, self._train_input_specs

  def compile_ahead(self, task: Any, train_input: Any, partitioner: Any,
                    abstract_state: Any, prng_key: Any, step: int) -> None:
    """Compiles the first step for the input's next batch, in the background.

    The batch is peeked (`peek_padded`: the first `run` gets it, and a
    checkpoint before it keeps the position before it) when the input keeps
    a state and its `get_next_padded` is `BaseInput`'s, the one that returns
    a peeked batch; else nothing is done.
    """
    if (type(train_input).get_next_padded
        is not base_input.BaseInput.get_next_padded):
      return
    try:
      train_input.get_state()
    except NotImplementedError:
      return  # After a peek, its checkpoints would fail.
    self._bind_steps(task, train_input, partitioner)
    batch = train_input.peek_padded()
    if batch is None:
      return  # Exhausted: the first `run` says so.
    step_fn, specs = self._get_train_step(batch)
    compile_ahead = getattr(step_fn, 'compile_ahead', None)
    if compile_ahead is None:  # Not the partitioner's own step type.
      return
    inputs = partitioner.preprocess_inputs(train_input, batch, specs)
    compile_ahead(abstract_state, prng_key, trees.get_shape_dtype(inputs),
                  self._static_args[any(self._kept_outputs(step))])

  def _compiled_train_step(self) -> Any:
    return self._train_step_fn

  def _compile_later_variant(self, state: Any, inputs: Any, step: int,
                             full: bool) -> None:
    """Compiles the variant a later step needs ahead (`CompiledStep`s only).

    The lean and full variants share one trace; the second is compiled from
    it on another thread once the first step is dispatched (its own
    executable compiled), beside the next steps, instead of at the first
    step that runs it (the first summary step), where the run would wait
    for XLA: 3.1 s at step 10 of a 10-step run of the reference's TinyLm on
    a 2-core CPU. A run whose steps all run one variant (e.g. a single
    step) compiles only that one. The step of the eval on training batches
    (`eval_interval_steps`, unless `eval_skip_train`) is compiled ahead
    too, when the run evaluates.
    """
    shapes = trees.get_shape_dtype(inputs)
    if self._any_later_step(
        step, lambda done: any(self._kept_outputs(done - 1)) != full):
      step_fn, _ = self._get_train_step(inputs)
      if hasattr(step_fn, 'compile_ahead'):
        step_fn.compile_ahead(_program_utils.abstract_like(state),
                              self._train_prng_seed, shapes,
                              self._static_args[not full])
    # The eval on training batches, likewise, if a later step runs it.
    if self._any_later_step(step, self._should_eval_train):
      eval_fn = self._get_eval_train_step(inputs)
      if hasattr(eval_fn, 'compile_ahead'):
        eval_state = get_eval_train_state(
            self._task, state, self._task.train.eval_use_ema_states)
        eval_fn.compile_ahead(
            _program_utils.abstract_like(eval_state),
            _program_utils.abstract_like(self._eval_prng_seed), shapes,
            self._static_args[True])

  def train_step(self, step: int, state: Any, prng_key: jax.Array,
                 inputs: Any, static_args: BaseStepFnStaticArgs
                 ) -> tuple[int, Any, StepFnOutput]:
    step_fn, _ = self._get_train_step(inputs)
    # The compiled step folds the state's step into this base key.
    state, outputs = step_fn(state, prng_key, inputs, static_args)
    return step + 1, state, outputs

  def _get_eval_train_step(self, inputs: Any) -> Any:
    if self._eval_train_step_fn is None:
      self._eval_train_step_fn, _ = self._partitioner.partition(
          trainer_lib.eval_step_single_learner,
          trees.get_shape_dtype(inputs), is_eval=True)
    return self._eval_train_step_fn

  def eval_train_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                      static_args: BaseStepFnStaticArgs) -> StepFnOutput:
    return self._get_eval_train_step(inputs)(state, prng_key, inputs,
                                             static_args)[1]

  def train_input_partition_spec(self, inputs: Any) -> Any:
    return self._get_train_step(inputs)[1]


def _eval_step_metrics_only(jax_task: Any, states: Any, prng_key: jax.Array,
                            inputs: Any, fprop_dtype: Any = jnp.float32,
                            var_weight_hparams: Any = None,
                            static_args: Any = None) -> tuple[None, Any]:
  """`eval_step_single_learner` returning the loss and metrics only."""
  _, out = trainer_lib.eval_step_single_learner(
      jax_task, states, prng_key, inputs, fprop_dtype=fprop_dtype,
      var_weight_hparams=var_weight_hparams, static_args=static_args)
  return None, out.replace(per_example_out=None, summary_tensors=None)


class BaseEvalProgram(Program):
  """Evaluates on one input; writes `summaries/eval_test_<input name>`.

  Subclasses say how to run a step: `eval_step`, `eval_input_partition_spec`.
  """

  def __init__(self, input_p: Any):
    """Constructor.

    Args:
      input_p: Config of the eval input (built in `setup`).
    """
    self._input_p = input_p
    self._task = None
    self._partitioner = None
    self._job_log_dir = None
    self._eval_prng_seed = None
    self._input = None
    self._name = None
    self._writer = None

  @property
  def eval_input(self) -> Any:
    return self._input

  def setup(self, task: Any, partitioner: Any, job_log_dir: Any,
            eval_prng_seed: jax.Array,
            enable_summary_writer: bool = True) -> None:
    """Builds the input and the summary writer.

    Args:
      task: The task.
      partitioner: The partitioner (set up).
      job_log_dir: The run's directory.
      eval_prng_seed: The evaluation key (each batch folds its index in).
      enable_summary_writer: Write TensorBoard summaries.
    """
    self._task = task
    self._partitioner = partitioner
    self._job_log_dir = job_log_dir
    self._eval_prng_seed = eval_prng_seed
    self._input_p = partitioner.preprocess_input_config(self._input_p)
    self._input = instantiate(self._input_p)
    self._name = self._input.name
    self._writer = summary_utils.get_summary_writer(
        get_summary_base_dir(job_log_dir) / f'eval_test_{self._name}',
        enable_summary_writer)

  def should_run(self, state: Any, step: int) -> bool:
    return True

  def run(self, state: Any, step: int) -> EvalProgramOutput:
    """Evaluates `state` over the whole input (see `reset_for_eval`).

    The batches are dispatched without waiting for their results (at most
    `_program_utils.eval_window` of them ahead of the devices: 8, or
    `train.max_inflight_steps` if larger or no bound); the metrics
    are summed on the devices (or, with the task's own metrics class, kept
    there) and fetched once, at the end.
    """
    eval_state = get_eval_train_state(self._task, state,
                                      self._task.train.eval_use_ema_states)
    static_args = self._static_args()
    in_flight = _program_utils.InFlight(
        _program_utils.eval_window(self._task.train))
    loss_key = self._task.learners[0].loss_name
    # The default metrics (weighted means) are summed on the devices; a
    # task's own metrics class gets every batch's values, fetched at once.
    means = (_program_utils.DeviceMeans(loss_key)
             if self._task.metrics is None else None)
    results = []
    for batch in _program_utils.eval_batches(self._input):
      inputs = self._partitioner.preprocess_inputs(
          self._input, batch, self.eval_input_partition_spec(batch))
      in_flight.make_room()
      # Every batch with the eval key, as in Pax.
      out = self.eval_step(eval_state, self._eval_prng_seed, inputs,
                           static_args)
      in_flight.add(out.loss)
      if means is not None:
        means.add(out.loss, out.weighted_scalars)
        results.append(None)
      else:
        results.append((out.loss, out.weighted_scalars))
    if not results:
      raise ValueError(f'Eval input {self._name!r} produced no batch.')
    if means is not None:
      loss, final = means.finalize()
    else:
      loss, final = self._host_metrics(results, loss_key)
    summary_utils.write_summary_entry(self._writer, step, loss, final, {})
    logging.info('eval %s at step %d: loss %.5f %s', self._name, step, loss,
                 {k: round(v, 5) for k, (v, _) in final.items()})
    return EvalProgramOutput(
        state, eval_metrics={'loss': loss, **{k: v for k, (v, _) in
                                               final.items()}},
        num_eval_steps=len(results))

  def _static_args(self) -> BaseStepFnStaticArgs:
    return BaseStepFnStaticArgs(
        unpadded_global_batch_size=self._input.get_global_batch_size(
            self._input))

  def compile_ahead(self, state: Any) -> None:
    """Starts compiling the eval step on another thread (see subclasses).

    The executor calls it after the first train step of a run that will
    evaluate, so that the first eval waits, if at all, for a compilation
    already under way instead of compiling while training waits. The
    default does nothing.

    Args:
      state: The train state (only its shapes and shardings are used).
    """
    del state

  def _host_metrics(self, results: list[Any], loss_key: str
                    ) -> tuple[float, dict[str, tuple[float, float]]]:
    """(loss, `{key: (value, weight)}`) by the task's metrics class."""
    metrics = _program_utils.new_metrics(self._task)
    losses, weights = [], []
    for loss, weighted in _program_utils.fetch(results):
      scalars = _program_utils.host_scalars(weighted)
      metrics.store(scalars)
      losses.append(float(loss))
      # Weighted like the metrics, so padded batches don't count.
      weights.append(scalars.get(loss_key, (0.0, 1.0))[1])
    final = {k: (float(v), float(w))
             for k, (v, w) in metrics.finalize().items()}
    loss = float(np.average(losses, weights=weights) if sum(weights)
                 else np.mean(losses))
    return loss, final

  @abc.abstractmethod
  def eval_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                static_args: BaseStepFnStaticArgs) -> StepFnOutput:
    """The StepFnOutput of one eval step (`state` is an eval state)."""

  @abc.abstractmethod
  def eval_input_partition_spec(self, inputs: Any) -> Any:
    """The partition specs of the eval inputs."""

  def shutdown(self) -> None:
    self._writer.close()


class SingleTaskEvalProgram(BaseEvalProgram):
  """Evaluates a single task on one input with `eval_step_single_learner`."""

  def __init__(self, input_p: Any, keep_per_example_out: bool = False):
    """Constructor.

    Args:
      input_p: Config of the eval input (built in `setup`).
      keep_per_example_out: `eval_step` returns the model's per-example
        outputs and summaries (the program uses neither: by default the
        compiled step leaves them out).
    """
    super().__init__(input_p)
    self._keep_per_example_out = keep_per_example_out
    self._eval_step_fn = None
    self._input_specs = None

  def _get_eval_step(self, inputs: Any) -> tuple[Any, Any]:
    if self._eval_step_fn is None:
      self._eval_step_fn, self._input_specs = self._partitioner.partition(
          trainer_lib.eval_step_single_learner if self._keep_per_example_out
          else _eval_step_metrics_only,
          trees.get_shape_dtype(inputs), is_eval=True)
    return self._eval_step_fn, self._input_specs

  def eval_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                static_args: BaseStepFnStaticArgs) -> StepFnOutput:
    return self._get_eval_step(inputs)[0](state, prng_key, inputs,
                                          static_args)[1]

  def eval_input_partition_spec(self, inputs: Any) -> Any:
    return self._get_eval_step(inputs)[1]

  def compile_ahead(self, state: Any) -> None:
    """Compiles the step for the input's next batch (peeked) ahead.

    Nothing happens where the batch cannot be peeked
    (`_program_utils.peek_for_compile`) or the partitioner's step cannot
    compile ahead.
    """
    batch = _program_utils.peek_for_compile(self._input)
    if batch is None:
      return
    step_fn, specs = self._get_eval_step(batch)
    compile_ahead = getattr(step_fn, 'compile_ahead', None)
    if compile_ahead is None:
      return
    inputs = self._partitioner.preprocess_inputs(self._input, batch, specs)
    eval_state = get_eval_train_state(self._task, state,
                                      self._task.train.eval_use_ema_states)
    compile_ahead(_program_utils.abstract_like(eval_state),
                  self._eval_prng_seed, trees.get_shape_dtype(inputs),
                  self._static_args())


# Names Pax 1.4's module also has (aliases of other modules' names).
TrainState = train_states.TrainState
