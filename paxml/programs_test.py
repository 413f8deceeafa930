"""Tests of the train and eval programs on 8 devices."""

import dataclasses
import json
import pathlib
import pickle
import re
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import _program_utils
from paxml import decode_programs_test
from paxml import mfu
from paxml import partitioning_test
from paxml import programs
from paxml import programs_perf_test
from paxml import tasks_lib
from praxis import base_input
from praxis import pax_fiddle


def _input(batch_size=16, **fields):
  batches = list(partitioning_test._batches(8, batch=16))
  data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  return base_input.InMemoryInput(name='train', batch_size=batch_size,
                                  data=data, input_random_seed=1, **fields)


def _setup_train(task, inp):
  partitioner = partitioning_test._partitioner(task)
  state = partitioning_test._init(partitioner)
  program = programs.SingleTaskTrainProgram()
  key = jax.random.PRNGKey(0)
  program.setup(task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
                key, key, 0, enable_summary_writer=False)
  return partitioner, state, program


class TrainProgramTest(absltest.TestCase):

  def test_many_steps_between_summaries_on_eight_devices(self):
    # Without a bound on the steps in flight, hundreds of queued steps with
    # an all-reduce each made XLA:CPU's collective rendezvous abort the
    # process (all its threads were waiting on later steps).
    task = partitioning_test._task(  # Data parallel over 8 devices.
        None, train_fields=dict(summary_interval_steps=10**6,
                                num_train_steps=1000))
    _, state, program = _setup_train(task, _input(is_training=True))
    self.assertEqual(program.train_unpadded_global_batch_size, 16)
    first = None
    for step in range(task.train.num_train_steps):
      out = program.run(state, step)
      state = out.state
      self.assertEqual(out.new_train_step, step + 1)
      first = first if first is not None else float(out.loss)
    program.shutdown()
    self.assertEqual(int(state.step), 1000)
    self.assertLess(float(out.loss), first)

  def test_mfu_is_logged_from_the_whole_steps_flops(self):
    task = partitioning_test._task(  # Data parallel over 8 devices.
        None, train_fields=dict(summary_interval_steps=2,
                                num_train_steps=4))
    _, state, program = _setup_train(task, _input(is_training=True))
    # A made-up peak for CPUs (none is known): 1 GFLOP/s a device.
    with mock.patch.dict(mfu.PEAK_BF16_TFLOPS, {'cpu': 1e-3}), \
        self.assertLogs('absl', level='INFO') as logs:
      for step in range(4):
        state = program.run(state, step).state
      program.shutdown()
    lines = [r.getMessage() for r in logs.records if 'MFU' in r.getMessage()]
    self.assertLen(lines, 2)  # Steps 2 and 4.
    flops = program._compiled_train_step().flops
    # The two matmuls' forward and backward alone, on the global batch.
    self.assertGreater(flops, 3 * 2 * 16 * (8 * 16 + 16 * 4))
    for line in lines:
      rate = float(re.search(r'([0-9.]+) steps/sec', line).group(1))
      logged = float(re.search(r'MFU ([0-9.]+)%', line).group(1))
      self.assertAlmostEqual(logged, 100 * flops * rate / (8 * 1e9),
                             delta=0.05 + 0.01 * logged)


class _NoisyLoss(decode_programs_test.Doubler):
  """Its loss is the mean of one uniform draw per row, from the eval key."""

  def compute_predictions(self, input_batch):
    return jax.random.uniform(self.next_prng_key(), input_batch.idx.shape)

  def compute_loss(self, predictions, input_batch):
    return {'loss': (jnp.mean(predictions), jnp.array(1.0))}, {}


class EvalProgramTest(absltest.TestCase):

  def test_every_batch_gets_the_eval_key_as_in_pax(self):
    # The same key for each batch of 8 rows: the mean over three batches is
    # that of the first batch alone (per-batch keys would give other draws).
    def eval_loss(rows):
      task, partitioner, state, input_p, _ = decode_programs_test._setup(
          _NoisyLoss, base_input.InMemoryInput, rows, 8)
      program = programs.SingleTaskEvalProgram(input_p)
      program.setup(task, partitioner, tempfile.mkdtemp(),
                    jax.random.PRNGKey(1), enable_summary_writer=False)
      out = program.run(state, 0)
      program.shutdown()
      self.assertEqual(out.num_eval_steps, rows // 8)
      return out.eval_metrics['loss']

    one = eval_loss(8)
    self.assertGreater(one, 0.0)
    self.assertAlmostEqual(eval_loss(24), one, places=6)


  def _eval(self, compile_ahead):
    """(the eval's output, the state, the numpy MSE, threads compiling)."""
    task = partitioning_test._task(None)
    partitioner, state, _ = _setup_train(task, _input(is_training=True))
    eval_p = pax_fiddle.Config(
        base_input.InMemoryInput, name='test', batch_size=16,
        data=_input().data, reset_for_eval=True)
    program = programs.SingleTaskEvalProgram(eval_p)
    program.setup(task, partitioner, tempfile.mkdtemp(),
                  jax.random.PRNGKey(1), enable_summary_writer=False)
    with programs_perf_test.recorded_compiles() as compiles:
      if compile_ahead:
        program.compile_ahead(state)
      out = program.run(state, 0)
    program.shutdown()
    # Eval mode: BatchNorm uses its initial moving stats (0 mean, 1 var).
    p = jax.tree.map(np.asarray, state.mdl_vars['params'])
    data = eval_p.data
    h = np.maximum(data['inputs'] / np.sqrt(1 + 1e-3) @ p['l1']['w'], 0)
    mse = np.mean((h @ p['l2']['w'] - data['targets']) ** 2)
    return out, state, mse, [thread for thread, _ in compiles]

  def test_eval_loss_is_the_numpy_mse_over_the_input(self):
    out, state, mse, threads = self._eval(compile_ahead=False)
    self.assertIs(out.state, state)
    self.assertEqual(out.num_eval_steps, 8)
    np.testing.assert_allclose(out.eval_metrics['loss'], mse, rtol=1e-4)
    self.assertEqual(threads, ['MainThread'])

  def test_eval_batches_stay_in_flight_with_pax_train_bound(self):
    # train.max_inflight_steps = 2 (Pax's default) bounds train steps; the
    # eval's 8 batches go out without the host waiting for any of them.
    waits = []

    class CountingInFlight(_program_utils.InFlight):

      def make_room(self):
        before = len(self._queue)
        super().make_room()
        waits.append(before - len(self._queue))

    with mock.patch.object(_program_utils, 'InFlight', CountingInFlight):
      out, _, mse, _ = self._eval(compile_ahead=False)
    self.assertEqual(waits, [0] * 8)
    np.testing.assert_allclose(out.eval_metrics['loss'], mse, rtol=1e-4)

  def test_compiled_ahead_on_another_thread_same_loss(self):
    out, _, mse, threads = self._eval(compile_ahead=True)
    self.assertEqual(out.num_eval_steps, 8)  # The peeked batch counted once.
    np.testing.assert_allclose(out.eval_metrics['loss'], mse, rtol=1e-4)
    self.assertEqual(threads, ['compile_ahead'])

  def test_get_eval_train_state_drops_opt_states_and_checks_ema(self):
    task = partitioning_test._task(None)
    state = partitioning_test._init(partitioning_test._partitioner(task))
    eval_state = programs.get_eval_train_state(task, state, use_ema=False)
    self.assertEqual(eval_state.opt_states, [])
    self.assertIs(eval_state.mdl_vars, state.mdl_vars)
    with self.assertRaisesRegex(ValueError, 'no ema_decay'):
      programs.get_eval_train_state(task, state, use_ema=True)
    self.assertFalse(tasks_lib.has_ema(task))


class _Step:
  """A dispatched step's marker that records when it is waited for."""

  def __init__(self, name, waited):
    self.name, self._waited = name, waited

  def block_until_ready(self):
    self._waited.append(self.name)
    return self


class InFlightTest(absltest.TestCase):

  def _waits(self, in_flight, steps):
    """The markers waited for before each of `steps` dispatches."""
    waited, per_step = [], []
    for i in range(steps):
      in_flight.make_room()  # The step's inputs are ready: room for it?
      per_step.append(list(waited))
      waited.clear()
      in_flight.add(_Step(i, waited))
    return per_step

  def test_as_pax_the_oldest_step_only(self):
    # Pax's queue of two: steps 0 and 1 go at once; step 2 waits for step 0,
    # 3 for 1, ... (at most two in flight once a step is dispatched).
    self.assertEqual(self._waits(_program_utils.InFlight(2, resume_at=1), 5),
                     [[], [], [0], [1], [2]])
    self.assertEqual(self._waits(_program_utils.InFlight(3, resume_at=2), 5),
                     [[], [], [], [0], [1]])

  def test_down_to_resume_at(self):
    self.assertEqual(self._waits(_program_utils.InFlight(3, resume_at=1), 7),
                     [[], [], [], [0, 1], [], [2, 3], []])
    self.assertEqual(self._waits(_program_utils.InFlight(4, resume_at=1), 8),
                     [[], [], [], [], [0, 1, 2], [], [], [3, 4, 5]])

  def test_resume_at_is_clipped_below_the_limit(self):
    # Never resumes with `limit` steps in flight, never idles the devices
    # (0 left) unless the limit is one step.
    self.assertEqual(self._waits(_program_utils.InFlight(2, resume_at=5), 4),
                     [[], [], [0], [1]])
    self.assertEqual(self._waits(_program_utils.InFlight(3, resume_at=0), 5),
                     [[], [], [], [0, 1], []])

  def test_default_on_cpu(self):
    self.assertEqual(jax.default_backend(), 'cpu')  # These tests' devices.
    # Pax's limit of two leaves no room for bursts: as Pax.
    self.assertEqual(self._waits(_program_utils.InFlight(2), 5),
                     [[], [], [0], [1], [2]])
    # A larger limit waits down to half of it: a wake-up every other step.
    self.assertEqual(self._waits(_program_utils.InFlight(4), 8),
                     [[], [], [], [], [0, 1], [], [2, 3], []])
    # One step allowed: each step waits for the one before.
    self.assertEqual(self._waits(_program_utils.InFlight(1), 4),
                     [[], [0], [1], [2]])

  def test_adding_never_waits(self):
    waited = []
    in_flight = _program_utils.InFlight(2, resume_at=1)
    for i in range(4):
      in_flight.add(_Step(i, waited))
    self.assertEqual(waited, [])
    in_flight.make_room()
    self.assertEqual(waited, [0, 1, 2])

  def test_no_bound_never_waits_and_wait_all_takes_the_rest(self):
    self.assertEqual(self._waits(_program_utils.InFlight(0), 4),
                     [[], [], [], []])
    waited = []
    in_flight = _program_utils.InFlight(3, resume_at=3)
    for i in range(3):
      in_flight.make_room()
      in_flight.add(_Step(i, waited))
    self.assertEqual(waited, [])
    in_flight.wait_all()
    self.assertEqual(waited, [0, 1, 2])


class EvalWindowTest(absltest.TestCase):

  def test_at_least_eight_batches_and_no_bound_stays_none(self):
    window = lambda n: _program_utils.eval_window(
        tasks_lib.SingleTask.Train(max_inflight_steps=n))
    self.assertEqual([window(n) for n in (1, 2, 8, 12)], [8, 8, 8, 12])
    self.assertEqual([window(n) for n in (0, -1)], [0, -1])


class BatchKeysTest(absltest.TestCase):

  def test_same_bits_as_fold_in_across_blocks(self):
    key = jax.random.PRNGKey(11)
    keys = _program_utils.BatchKeys(key)
    for i in (0, 1, 63, 64, 130, 5):  # Back to an earlier block last.
      got = keys(i)
      self.assertIsInstance(got, np.ndarray)
      np.testing.assert_array_equal(got, jax.random.fold_in(key, i))

  def test_typed_keys(self):
    key = jax.random.key(2)
    keys = _program_utils.BatchKeys(key)
    np.testing.assert_array_equal(
        jax.random.key_data(keys(70)),
        jax.random.key_data(jax.random.fold_in(key, 70)))


class OutputFilesTest(absltest.TestCase):

  def test_names_values_lines_and_pickle(self):
    self.assertEqual(programs.get_filename(np.array(12), 'eval'),
                     'eval_out_12_shard_0')
    self.assertEqual(programs.EvaluationMode.DECODE.value, 'decoder')
    out_dir = pathlib.Path(tempfile.mkdtemp()) / 'new'
    pairs = [('a', np.array([1.5, 2.0])), (7, {'n': np.int32(4)})]
    programs.maybe_write_eval_outputs(
        programs.EvaluationMode.DECODE, out_dir, 3, pairs)
    out = out_dir / 'decoder_out_3_shard_0'
    lines = out.with_suffix('.jsonl').read_text().splitlines()
    self.assertEqual([json.loads(x) for x in lines], [[1.5, 2.0], {'n': 4}])
    with out.with_suffix('.pickle').open('rb') as f:
      loaded = pickle.load(f)
    self.assertEqual([k for k, _ in loaded], ['a', 7])
    np.testing.assert_array_equal(loaded[0][1], [1.5, 2.0])
    self.assertEqual(loaded[1][1], {'n': 4})

  def test_without_pickle(self):
    out_dir = pathlib.Path(tempfile.mkdtemp())
    programs.maybe_write_eval_outputs(
        programs.EvaluationMode.EVAL, out_dir, 5, [('k', 1.0)],
        write_pickle=False)
    self.assertEqual(sorted(p.name for p in out_dir.iterdir()),
                     ['eval_out_5_shard_0.jsonl'])

  def test_value_json_cannot_hold_is_logged_and_pickled(self):
    out = pathlib.Path(tempfile.mkdtemp()) / 'out'
    with self.assertLogs(level='WARNING') as logs:
      programs.safe_write_key_value_pairs(out, [('a', 1), ('b', {2, 3})])
    self.assertIn('not serializable', logs.output[0])
    with out.with_suffix('.pickle').open('rb') as f:
      self.assertEqual(pickle.load(f), [('a', 1), ('b', {2, 3})])

  def test_decode_records_written_as_they_arrive(self):
    outputs = _program_utils.KeyValueOutputs(write_pickle=False)
    outputs.add([('x', np.float32(0.5))])
    outputs.add(iter([('y', {'ids': np.array([1, 2], np.int32)})]))
    out = pathlib.Path(tempfile.mkdtemp()) / 'sub' / 'decoder_out_1_shard_0'
    outputs.write(out)
    self.assertEqual(
        [json.loads(x) for x in out.with_suffix('.jsonl').read_text()
         .splitlines()], [0.5, {'ids': [1, 2]}])
    self.assertFalse(out.with_suffix('.pickle').exists())
    self.assertEqual([k for k, _ in outputs.pairs], ['x', 'y'])

  def test_decode_pickle_holds_numpy_arrays_records_keep_theirs(self):
    outputs = _program_utils.KeyValueOutputs()
    first = jnp.arange(3, dtype=jnp.int32)
    outputs.add([('a', {'ids': first, 'n': 1})])
    outputs.add([('b', {'ids': jnp.array([4.5], jnp.float32), 'n': 2})])
    out = pathlib.Path(tempfile.mkdtemp()) / 'decoder_out_2_shard_0'
    outputs.write(out)
    with out.with_suffix('.pickle').open('rb') as f:
      pairs = pickle.load(f)
    self.assertEqual([k for k, _ in pairs], ['a', 'b'])
    for _, value in pairs:
      self.assertIs(type(value['ids']), np.ndarray)
    np.testing.assert_array_equal(pairs[0][1]['ids'], [0, 1, 2])
    np.testing.assert_array_equal(pairs[1][1]['ids'], [4.5])
    self.assertEqual([v['n'] for _, v in pairs], [1, 2])
    self.assertIs(outputs.pairs[0][1]['ids'], first)  # As added.

  def test_a_value_pickle_cannot_hold_leaves_the_jsonl(self):

    @dataclasses.dataclass
    class Local:  # Pickle cannot find a local class; JSON takes its fields.
      n: int

    outputs = _program_utils.KeyValueOutputs()
    outputs.add([('x', Local(1)), ('y', {'n': 2})])
    out = pathlib.Path(tempfile.mkdtemp()) / 'decoder_out_1_shard_0'
    with self.assertLogs(level='WARNING') as logs:
      outputs.write(out)
    self.assertIn('cannot be pickled', logs.output[0])
    self.assertEqual([p.name for p in out.parent.iterdir()],
                     ['decoder_out_1_shard_0.jsonl'])
    self.assertEqual(out.with_suffix('.jsonl').read_text(),
                     '{"n": 1}\n{"n": 2}\n')


if __name__ == '__main__':
  absltest.main()
