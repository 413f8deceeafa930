"""Tests of the decode program: metrics, summaries and output files."""

import json
import pathlib
import pickle
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import decode_programs
from paxml import io_utils
from paxml import partitioning
from paxml import programs_perf_test
from paxml import tasks_lib
from praxis import base_hyperparams
from praxis import base_input
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils

NestedMap = py_utils.NestedMap


class Doubler(base_model.BaseModel):
  """Decodes `2 * x`; the metric is the mean of x."""

  def setup(self):
    self.create_variable('unused', base_model.base_layer.WeightHParams([1]))

  def compute_predictions(self, input_batch):
    return input_batch.x * self.theta.unused

  def compute_loss(self, predictions, input_batch):
    return {'loss': (jnp.mean(predictions), jnp.array(1.0))}, NestedMap()

  def decode(self, input_batch):
    x = input_batch.x
    return ({'x_mean': (jnp.mean(x), jnp.array(x.size, jnp.float32))},
            NestedMap(doubled=2 * x, idx=input_batch.idx), {})

  def process_decode_out(self, input_obj, decode_out):
    pairs = [(int(i), v.tolist()) for i, v in
             zip(decode_out.idx, decode_out.doubled)]
    return {}, pairs, {}


class Sampler(Doubler):
  """Decodes one uniform draw per row from the decode key."""

  def decode(self, input_batch):
    draws = jax.random.uniform(self.next_prng_key(), input_batch.idx.shape)
    return ({}, NestedMap(draw=draws, idx=input_batch.idx), {})

  def process_decode_out(self, input_obj, decode_out):
    return {}, [(int(i), float(v)) for i, v in
                zip(decode_out.idx, decode_out.draw)], {}


class WeightedDoubler(Doubler):
  """A Doubler whose metric counts rows by `eval_sample_weights`."""

  def decode(self, input_batch):
    x, w = input_batch.x, input_batch.eval_sample_weights
    total = jnp.sum(w) * x.shape[1]
    return ({'x_mean': (jnp.sum(x * w[:, None]) / total, total)},
            NestedMap(doubled=2 * x, idx=input_batch.idx), {})


class _UnpaddedInput(base_input.InMemoryInput):
  """InMemoryInput without its own padding: the last batch is short."""

  def get_next(self):
    batch = super().get_next()
    keep = batch.eval_sample_weights > 0
    return jax.tree.map(lambda x: x[keep], batch)


def _setup(model_cls, input_cls, num_rows, batch_size, fold_keys=False,
           **decode_fields):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
  task_p.decode.prng_key_fold_with_batch_index = fold_keys
  for name, value in decode_fields.items():
    setattr(task_p.decode, name, value)
  task_p.model = pax_fiddle.Config(model_cls, name='m')
  task_p.train.learner.loss_name = 'loss'
  task_p.train.learner.optimizer = pax_fiddle.Config(optimizers.Sgd)
  task = base_hyperparams.instantiate(task_p)
  x = np.arange(2 * num_rows, dtype=np.float32).reshape(num_rows, 2)
  data = {'x': x, 'idx': np.arange(num_rows, dtype=np.int32)}
  input_p = pax_fiddle.Config(input_cls, name='dec', batch_size=batch_size,
                              data=data, reset_for_eval=True)
  partitioner = partitioning.create_partitioner(task)
  partitioner.setup(task, None, NestedMap(jax.tree.map(
      lambda a: jax.ShapeDtypeStruct((8,) + a.shape[1:], a.dtype), data)))
  _, state, _ = partitioner.initialize_prng_key_and_train_state(
      jax.random.PRNGKey(0), None, None)
  return task, partitioner, state, input_p, x


class _LoggedDoubler(Doubler):
  """A Doubler that logs which batches it turns into records."""

  log = []

  def process_decode_out(self, input_obj, decode_out):
    _LoggedDoubler.log.append(('records', int(decode_out.idx[0]) // 8 + 1))
    return super().process_decode_out(input_obj, decode_out)


class _LoggedProgram(decode_programs.SingleTaskDecodeProgram):
  """A decode program that logs the batches it dispatches."""

  def decode_step(self, state, prng_key, inputs, static_args=None):
    _LoggedDoubler.log.append(('dispatch', int(inputs.idx[0]) // 8 + 1))
    return super().decode_step(state, prng_key, inputs, static_args)


class DecodeProgramTest(absltest.TestCase):

  def test_batches_turn_into_records_half_a_window_at_a_time(self):
    # 12 batches; the default train.max_inflight_steps (2) gives decode a
    # window of 8 batches, and on CPU the host then turns the oldest into
    # records until 4 are left in flight, then decodes on.
    task, partitioner, state, input_p, x = _setup(
        _LoggedDoubler, base_input.InMemoryInput, 96, 8)
    self.assertEqual(task.train.max_inflight_steps, 2)
    program = _LoggedProgram(input_p)
    program.setup(task, partitioner, pathlib.Path(tempfile.mkdtemp()),
                  jax.random.PRNGKey(1), enable_summary_writer=False)
    _LoggedDoubler.log = []
    out = program.run(state, 1)
    program.shutdown()
    expected = ([('dispatch', i) for i in range(1, 10)]
                + [('records', i) for i in range(1, 6)]
                + [('dispatch', i) for i in range(10, 13)]
                + [('records', i) for i in range(6, 13)])
    self.assertEqual(_LoggedDoubler.log, expected)
    got = dict(out.records)
    np.testing.assert_allclose([got[i] for i in range(96)], 2 * x)

  def test_short_and_odd_batches_are_padded_and_trimmed(self):
    # 21 rows in batches of 8 (last one 5 rows), then of 6 (not divisible
    # by the 8 devices): both padded to 8, padded rows not in the outputs.
    for batch_size, batches in ((8, 3), (6, 4)):
      task, partitioner, state, input_p, x = _setup(
          WeightedDoubler, _UnpaddedInput, 21, batch_size)
      program = decode_programs.SingleTaskDecodeProgram(input_p)
      job_dir = pathlib.Path(tempfile.mkdtemp())
      program.setup(task, partitioner, job_dir, jax.random.PRNGKey(1),
                    enable_summary_writer=False)
      out = program.run(state, 1)
      program.shutdown()
      self.assertEqual(out.num_decode_steps, batches)
      got = dict(out.records)
      self.assertEqual(sorted(got), list(range(21)))
      np.testing.assert_allclose([got[i] for i in range(21)], 2 * x)
      # Padded rows have weight 0: the metric is the mean of the real rows.
      self.assertAlmostEqual(out.decode_metrics['x_mean'], x.mean(),
                             places=4)

  def test_compiled_ahead_for_the_padded_first_batch(self):
    # Batches of 6 rows, padded to the 8 devices: the step compiled ahead
    # (another thread) is the one the run calls; the records are unchanged.
    task, partitioner, state, input_p, x = _setup(
        WeightedDoubler, _UnpaddedInput, 21, 6)
    program = decode_programs.SingleTaskDecodeProgram(input_p)
    program.setup(task, partitioner, pathlib.Path(tempfile.mkdtemp()),
                  jax.random.PRNGKey(1), enable_summary_writer=False)
    with programs_perf_test.recorded_compiles() as compiles:
      program.compile_ahead(state)
      out = program.run(state, 1)
    program.shutdown()
    self.assertEqual([thread for thread, _ in compiles], ['compile_ahead'])
    self.assertEqual(out.num_decode_steps, 4)
    got = dict(out.records)
    np.testing.assert_allclose([got[i] for i in range(21)], 2 * x)

  def test_batch_keys_as_prng_key_fold_with_batch_index_says(self):
    # Three batches of 8 rows. Pax's default decodes every batch with the
    # same key (the same draws, row by row); with the flag, batch n (from 1)
    # gets the key folded with n: what the default gives for that key.
    def draws(key, fold):
      task, partitioner, state, input_p, _ = _setup(
          Sampler, base_input.InMemoryInput, 24, 8, fold)
      program = decode_programs.SingleTaskDecodeProgram(input_p)
      program.setup(task, partitioner, pathlib.Path(tempfile.mkdtemp()),
                    key, enable_summary_writer=False)
      out = program.run(state, 1)
      program.shutdown()
      got = dict(out.records)
      return np.array([got[i] for i in range(24)]).reshape(3, 8)

    key = jax.random.PRNGKey(1)
    same = draws(key, False)
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_array_equal(same[0], same[2])
    folded = draws(key, True)
    self.assertFalse(np.array_equal(folded[0], folded[1]))
    for n in (1, 3):
      np.testing.assert_array_equal(
          folded[n - 1], draws(jax.random.fold_in(key, n), False)[0])

  def test_decode_profiler_settings_write_a_trace(self):
    # Pax's decode profiler: a trace from batch 2 of 3, under the job's
    # profile directory; none with profiler_num_steps=0 (the default).
    for num_steps, traced in ((0, False), (1, True)):
      task, partitioner, state, input_p, _ = _setup(
          Doubler, base_input.InMemoryInput, 24, 8,
          profiler_num_steps=num_steps, profiler_capture_step=2,
          profiler_min_duration_sec=0.0)
      job_dir = pathlib.Path(tempfile.mkdtemp())
      program = decode_programs.SingleTaskDecodeProgram(input_p)
      program.setup(task, partitioner, job_dir, jax.random.PRNGKey(1),
                    enable_summary_writer=False)
      self.assertEqual(program.run(state, 1).num_decode_steps, 3)
      program.shutdown()
      traces = list((job_dir / 'profile').glob('decode_dec/**/*.xplane.pb'))
      self.assertEqual(bool(traces), traced, traces)

  def test_outputs_and_metrics_match_numpy(self):
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
    task_p.model = pax_fiddle.Config(Doubler, name='m')
    task_p.train.learner.loss_name = 'loss'
    task_p.train.learner.optimizer = pax_fiddle.Config(optimizers.Sgd)
    task = base_hyperparams.instantiate(task_p)
    x = np.arange(48, dtype=np.float32).reshape(24, 2)
    data = {'x': x, 'idx': np.arange(24, dtype=np.int32)}
    input_p = pax_fiddle.Config(base_input.InMemoryInput, name='dec',
                                batch_size=8, data=data, reset_for_eval=True)
    partitioner = partitioning.create_partitioner(task)
    partitioner.setup(task, None, NestedMap(jax.tree.map(
        lambda a: jax.ShapeDtypeStruct((8,) + a.shape[1:], a.dtype), data)))
    _, state, _ = partitioner.initialize_prng_key_and_train_state(
        jax.random.PRNGKey(0), None, None)
    job_dir = pathlib.Path(tempfile.mkdtemp()) / '1'  # As load_outputs wants.
    program = decode_programs.SingleTaskDecodeProgram(input_p)
    program.setup(task, partitioner, job_dir, jax.random.PRNGKey(1),
                  enable_summary_writer=False)
    out = program.run(state, 7)
    program.shutdown()
    self.assertEqual(out.num_decode_steps, 3)
    self.assertAlmostEqual(out.decode_metrics['x_mean'], x.mean(), places=4)
    path = job_dir / 'decoder_out' / 'dec' / 'decoder_out_7_shard_0'
    with path.with_suffix('.pickle').open('rb') as f:
      pairs = pickle.load(f)
    got = {int(k): v for k, v in pairs}
    self.assertEqual(sorted(got), list(range(24)))
    np.testing.assert_allclose([got[i] for i in range(24)], 2 * x)
    # The .jsonl holds the values alone, in the pickle's order (as Pax).
    values = [json.loads(line) for line in
              path.with_suffix('.jsonl').read_text().splitlines()]
    np.testing.assert_allclose(values, [v for _, v in pairs])
    loaded = io_utils.load_outputs(job_dir, 'dec', 'decoder')
    self.assertEqual([k for k, _ in loaded], [k for k, _ in pairs])


if __name__ == '__main__':
  absltest.main()
