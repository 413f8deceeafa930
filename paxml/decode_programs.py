"""The decode program: runs the model's `decode` over one input.

Public names: DecodeProgramOutput, SingleTaskDecodeProgram.

Metrics go to `<job_log_dir>/summaries/decode_test_<input name>/`, decoded
outputs, as Pax writes them, to
`<job_log_dir>/decoder_out/<input name>/decoder_out_<step>_shard_<host>`:
`.jsonl` (a value a line) and `.pickle` (the (key, value) pairs).

  program = decode_programs.SingleTaskDecodeProgram(decode_input_p)
  program.setup(task, partitioner, job_log_dir, decode_key)
  output = program.run(state, step)  # output.decode_metrics
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Mapping

from absl import logging
from etils import epath
import jax
from paxml import _program_utils
from paxml import base_metrics
from paxml import io_utils
from paxml import profiling
from paxml import programs
from paxml import summary_utils
from paxml import train_states
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import trees

instantiate = base_hyperparams.instantiate


@dataclasses.dataclass(frozen=True)
class DecodeProgramOutput(programs.ProgramOutput):
  """The output of one decoding pass.

  Attributes:
    decode_metrics: `{metric: value}` over the whole input.
    processed_decode_metrics: The same (Pax splits out post-processing).
    seqio_metrics: Unused (SeqIO metrics).
    num_decode_steps: Batches decoded.
    records: The `(key, value)` outputs, in input order (this host's).
  """

  decode_metrics: Mapping[str, float] | None = None
  processed_decode_metrics: Mapping[str, float] | None = None
  seqio_metrics: Mapping[str, float] | None = None
  num_decode_steps: int = 0
  records: list[Any] = dataclasses.field(default_factory=list)


class SingleTaskDecodeProgram(programs.Program):
  """Decodes one input with `decode_step_for_partitioner`."""

  def __init__(self, input_p: Any):
    """Constructor.

    Args:
      input_p: Config of the decode input (built in `setup`).
    """
    self._input_p = input_p
    self._task = None
    self._partitioner = None
    self._prng_key = None
    self._input = None
    self._name = None
    self._job_log_dir = None
    self._output_dir = None
    self._writer = None
    self._step_fn = None
    self._input_specs = None
    self._full_rows = None
    self._output_pickle = True

  @property
  def decode_input(self) -> Any:
    return self._input

  def setup(self, task: Any, partitioner: Any, job_log_dir: Any,
            decode_prng_seed: jax.Array, output_pickle: bool = True,
            enable_summary_writer: bool = True) -> None:
    """Builds the input and the summary writer.

    Args:
      task: The task.
      partitioner: The partitioner (set up).
      job_log_dir: The run's directory.
      decode_prng_seed: The decoding key: every batch's, or, with
        `task.decode.prng_key_fold_with_batch_index`, folded with the
        batch's number (from 1), as in Pax.
      output_pickle: Write the outputs' `.pickle` beside their `.jsonl`.
      enable_summary_writer: Write TensorBoard summaries.
    """
    self._output_pickle = output_pickle
    self._task = task
    self._partitioner = partitioner
    self._prng_key = decode_prng_seed
    self._input_p = partitioner.preprocess_input_config(self._input_p)
    self._input = instantiate(self._input_p)
    self._name = self._input.name
    self._job_log_dir = epath.Path(job_log_dir)
    self._output_dir = self._job_log_dir / 'decoder_out' / self._name
    self._writer = summary_utils.get_summary_writer(
        programs.get_summary_base_dir(job_log_dir) /
        f'decode_test_{self._name}', enable_summary_writer)

  def should_run(self, state: Any, train_step: int) -> bool:
    return True

  def decode_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                  static_args: Any = None) -> Any:
    """The StepFnOutput of one decode step (`state` is an eval state)."""
    return self._get_step(inputs)[0](state, prng_key, inputs, static_args)[1]

  def decode_input_partition_spec(self, inputs: Any) -> Any:
    return self._get_step(inputs)[1]

  def compile_ahead(self, state: Any) -> None:
    """Starts compiling the decode step on another thread.

    Called by the executor after the first train step of a run that will
    decode, for the input's next batch (peeked; padded as `run` pads it),
    so that the first decode does not compile while training waits.
    Nothing happens where the batch cannot be peeked
    (`_program_utils.peek_for_compile`) or the partitioner's step cannot
    compile ahead.

    Args:
      state: The train state (only its shapes and shardings are used).
    """
    batch = _program_utils.peek_for_compile(self._input)
    if batch is None:
      return
    batch, _ = self._pad(batch)
    step_fn, specs = self._get_step(batch)
    compile_ahead = getattr(step_fn, 'compile_ahead', None)
    if compile_ahead is None:
      return
    inputs = self._partitioner.preprocess_inputs(self._input, batch, specs)
    eval_state = programs.get_eval_train_state(
        self._task, state, self._task.train.decode_use_ema_states)
    compile_ahead(_program_utils.abstract_like(eval_state),
                  self._batch_keys()(0), trees.get_shape_dtype(inputs))

  def _batch_keys(self) -> Callable[[int], Any]:
    """The key of batch i (from 0): Pax's decode key as it is, or with the
    batch's number (i + 1) folded in when the task's
    `decode.prng_key_fold_with_batch_index` says so."""
    if getattr(self._task.decode, 'prng_key_fold_with_batch_index', False):
      keys = _program_utils.BatchKeys(self._prng_key)
      return lambda i: keys(i + 1)
    return lambda i: self._prng_key

  def _profiler(self) -> profiling.Profiler | None:
    """Pax's decode profiler: with `task.decode.profiler_num_steps` > 0, a
    trace of that many batches from batch `decode.profiler_capture_step`
    (counted from 1) into `<job_log_dir>/profile/decode_<input name>`."""
    decode_p = self._task.decode
    if getattr(decode_p, 'profiler_num_steps', 0) <= 0:
      return None
    return profiling.Profiler(
        num_steps=decode_p.profiler_num_steps,
        min_duration_sec=decode_p.profiler_min_duration_sec,
        max_num_hosts=decode_p.profiler_max_num_hosts,
        log_dir=self._job_log_dir / 'profile', tag=f'decode_{self._name}')

  def _get_step(self, inputs: Any) -> tuple[Any, Any]:
    if self._step_fn is None:
      self._step_fn, self._input_specs = self._partitioner.partition(
          trainer_lib.decode_step_for_partitioner,
          trees.get_shape_dtype(inputs), is_eval=True)
    return self._step_fn, self._input_specs

  def run(self, state: Any, train_step: int) -> DecodeProgramOutput:
    """Decodes the whole input; writes metrics and outputs.

    Batches are dispatched ahead of their results (`_program_utils.
    eval_window` of them; 8 when `train.max_inflight_steps` sets no bound):
    the host turns earlier batches' outputs into records while the devices
    decode the next ones (on CPU devices, half the window at a time, so that
    the host wakes every few batches). A batch with fewer rows than the
    first one, or rows the data devices cannot split evenly, is padded (see
    `_pad`) and its padded rows are dropped from the outputs.
    """
    eval_state = programs.get_eval_train_state(
        self._task, state, self._task.train.decode_use_ema_states)
    metrics = _program_utils.new_metrics(self._task)
    outputs = _program_utils.KeyValueOutputs(self._output_pickle)
    lag = _program_utils.eval_window(self._task.train)
    if lag <= 0:
      lag = _program_utils.EVAL_BATCHES_IN_FLIGHT
    keep = max(1, lag // 2) if jax.default_backend() == 'cpu' else lag
    pending = collections.deque()
    num_steps = 0
    keys = self._batch_keys()
    profiler = self._profiler()
    for i, batch in enumerate(_program_utils.eval_batches(self._input)):
      if (profiler is not None
          and i + 1 == self._task.decode.profiler_capture_step):
        profiler.capture_async()
      batch, rows = self._pad(batch)  # rows: (real, padded) or None.
      inputs = self._partitioner.preprocess_inputs(
          self._input, batch, self.decode_input_partition_spec(batch))
      pending.append((rows, self.decode_step(
          eval_state, keys(i), inputs)))
      num_steps += 1
      if len(pending) > lag:
        while len(pending) > keep:
          self._consume(*pending.popleft(), metrics, outputs)
    while pending:
      self._consume(*pending.popleft(), metrics, outputs)
    if profiler is not None:
      profiler.stop_now()  # The trace is written by now, however short.
    final = {k: (float(v), float(w))
             for k, (v, w) in metrics.finalize().items()}
    self._write_summaries(train_step, final)
    records = outputs.pairs
    outputs.write(self._output_dir / programs.get_filename(
        train_step, programs.EvaluationMode.DECODE.value))
    logging.info('decode %s at step %d: %d outputs %s', self._name,
                 train_step,
                 len(records), final)
    for key, value in records[:2] if logging.level_info() else ():
      logging.info('decode %s sample %s: %s', self._name, key,
                   str(value)[:500])
    values = {k: v for k, (v, _) in final.items()}
    return DecodeProgramOutput(
        state, decode_metrics=values, processed_decode_metrics=values,
        num_decode_steps=num_steps, records=records)

  def _consume(self, rows: tuple[int, int] | None, out: Any, metrics: Any,
               outputs: _program_utils.KeyValueOutputs) -> None:
    """Fetches one batch's outputs; stores its metrics and records."""
    out = _program_utils.fetch(out)
    per_example = out.per_example_out
    if rows is not None:  # Drop the padded rows.
      real, padded = rows
      per_example = _program_utils.take_rows(per_example, padded, real)
    scalars, kv_pairs, _ = self._task.model.process_decode_out(
        self._input, per_example)
    metrics.store({**_program_utils.host_scalars(out.weighted_scalars),
                   **_program_utils.host_scalars(scalars)})
    outputs.add(kv_pairs)

  def _pad(self, batch: Any) -> tuple[Any, tuple[int, int] | None]:
    """(the batch padded to the full size, (real rows, padded rows) or None).

    The full size is the first batch's rows (the input's batch size), rounded
    up to a multiple of the devices its batch dimension is split over (on one
    process). Padded rows are zeros, except `paddings` (1: all padding), so
    `eval_sample_weights` and `paddings` mark them as empty; metrics the
    model computes over the rows regardless count them. The
    `batch_padding_size` rows the input pads itself are dropped too.
    """
    rows = _program_utils.batch_rows(batch)
    if rows is None:
      return batch, None
    real = rows - int(getattr(self._input, 'batch_padding_size', 0) or 0)
    if self._full_rows is None:
      self._full_rows = rows
    target = max(rows, self._full_rows)
    if jax.process_count() == 1:
      parts = _program_utils.batch_parts(self._partitioner, batch)
      target = -(-target // parts) * parts
    if target == real:
      return batch, None
    if target > rows:
      batch = _program_utils.pad_rows(batch, rows, target)
    return batch, (real, target)

  def _write_summaries(self, step: int, final: dict[str, Any]) -> None:
    prefix = self._task.decode.metrics_prefix
    for key, (value, weight) in final.items():
      self._writer.add_scalar(f'{prefix}{key}', value, step)
      self._writer.add_scalar(f'{prefix}{key}-weight', weight, step)
    self._writer.flush()

  def shutdown(self) -> None:
    self._writer.close()


# Names Pax 1.4's module also has (aliases of other modules' names).
BaseMetrics = base_metrics.BaseMetrics
EvaluationMode = io_utils.EvaluationMode
StepFnOutput = trainer_lib.StepFnOutput
TrainState = train_states.TrainState
