"""The decode program: runs the model's `decode` over one input.

Public names: DecodeProgramOutput, SingleTaskDecodeProgram.

Metrics go to `<job_log_dir>/summaries/decode_test_<input name>/`, decoded
outputs as JSON lines to
`<job_log_dir>/decoder_out/<input name>/decoder_out_<step>_shard_<host>.jsonl`.

  program = decode_programs.SingleTaskDecodeProgram(decode_input_p)
  program.setup(task, partitioner, job_log_dir, decode_key)
  output = program.run(state, step)  # output.decode_metrics
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from absl import logging
from etils import epath
import jax
from paxml import _program_utils
from paxml import programs
from paxml import summary_utils
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
    self._output_dir = None
    self._writer = None
    self._step_fn = None
    self._input_specs = None

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
      decode_prng_seed: The decoding key (each batch folds its index in).
      output_pickle: Unused (outputs are written as JSON lines).
      enable_summary_writer: Write TensorBoard summaries.
    """
    del output_pickle
    self._task = task
    self._partitioner = partitioner
    self._prng_key = decode_prng_seed
    self._input_p = partitioner.preprocess_input_config(self._input_p)
    self._input = instantiate(self._input_p)
    self._name = self._input.name
    self._output_dir = epath.Path(job_log_dir) / 'decoder_out' / self._name
    self._writer = summary_utils.get_summary_writer(
        programs.get_summary_base_dir(job_log_dir) /
        f'decode_test_{self._name}', enable_summary_writer)

  def should_run(self, state: Any, step: int) -> bool:
    return True

  def decode_step(self, state: Any, prng_key: jax.Array, inputs: Any,
                  static_args: Any = None) -> Any:
    """The StepFnOutput of one decode step (`state` is an eval state)."""
    return self._get_step(inputs)[0](state, prng_key, inputs, static_args)[1]

  def decode_input_partition_spec(self, inputs: Any) -> Any:
    return self._get_step(inputs)[1]

  def _get_step(self, inputs: Any) -> tuple[Any, Any]:
    if self._step_fn is None:
      self._step_fn, self._input_specs = self._partitioner.partition(
          trainer_lib.decode_step_for_partitioner,
          trees.get_shape_dtype(inputs), is_eval=True)
    return self._step_fn, self._input_specs

  def run(self, state: Any, step: int) -> DecodeProgramOutput:
    """Decodes the whole input; writes metrics and outputs."""
    eval_state = programs.get_eval_train_state(
        self._task, state, self._task.train.decode_use_ema_states)
    metrics = _program_utils.new_metrics(self._task)
    records = []
    num_steps = 0
    for i, batch in enumerate(_program_utils.eval_batches(self._input)):
      inputs = self._partitioner.preprocess_inputs(
          self._input, batch, self.decode_input_partition_spec(batch))
      out = jax.device_get(self.decode_step(
          eval_state, jax.random.fold_in(self._prng_key, i), inputs))
      scalars, kv_pairs, _ = self._task.model.process_decode_out(
          self._input, out.per_example_out)
      metrics.store({**_program_utils.host_scalars(out.weighted_scalars),
                     **_program_utils.host_scalars(scalars)})
      records.extend(kv_pairs)
      num_steps += 1
    final = {k: (float(v), float(w))
             for k, (v, w) in metrics.finalize().items()}
    self._write_summaries(step, final)
    self._write_records(step, records)
    logging.info('decode %s at step %d: %d outputs %s', self._name, step,
                 len(records), final)
    for key, value in records[:2]:
      logging.info('decode %s sample %s: %s', self._name, key,
                   str(value)[:500])
    values = {k: v for k, (v, _) in final.items()}
    return DecodeProgramOutput(
        state, decode_metrics=values, processed_decode_metrics=values,
        num_decode_steps=num_steps, records=records)

  def _write_summaries(self, step: int, final: dict[str, Any]) -> None:
    prefix = self._task.decode.metrics_prefix
    for key, (value, weight) in final.items():
      self._writer.add_scalar(f'{prefix}{key}', value, step)
      self._writer.add_scalar(f'{prefix}{key}-weight', weight, step)
    self._writer.flush()

  def _write_records(self, step: int, records: list[Any]) -> None:
    programs.safe_write_key_value_pairs(
        self._output_dir / (programs.get_filename(step, 'decoder') + '.jsonl'),
        records)

  def shutdown(self) -> None:
    self._writer.close()
