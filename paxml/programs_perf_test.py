"""Tests of the train program's lean steps and summary accumulation."""

import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
import threading

from absl.testing import absltest
import jax
import numpy as np
from paxml import _partitioned_step
from paxml import base_metrics
from paxml import executors
from paxml import partitioning_test
from paxml import programs
from paxml import train
from paxml.tasks.test import regression
from praxis import base_input
from praxis import pax_fiddle

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'testdata'))
import record_train_losses  # pylint: disable=g-import-not-at-top

# The first 7 losses of `record_train_losses.run()`, recorded (as float32
# hex) from the train program before it ran lean steps (commit eb4ad1c).
_RECORDED = [float.fromhex(x) for x in (
    '0x1.2dd99e0000000p+0', '0x1.9f65060000000p+0', '0x1.23cfcc0000000p+0',
    '0x1.0164200000000p+0', '0x1.3891d00000000p+0', '0x1.0aee960000000p+0',
    '0x1.2d796c0000000p+0')]
_RECORDED_L2_SUM = 0.1357973219419364


@contextlib.contextmanager
def recorded_compiles():
  """Yields the (thread name, static args) of each step compiled inside."""
  compiles = []
  real_compile = _partitioned_step.CompiledStep._compile

  def recording_compile(step, signature, *args):
    compiles.append((threading.current_thread().name, signature[-1]))
    return real_compile(step, signature, *args)

  _partitioned_step.CompiledStep._compile = recording_compile
  try:
    yield compiles
  finally:
    _partitioned_step.CompiledStep._compile = real_compile


class _Writer:
  """Records `add_scalar` calls: {(tag, step): value}."""

  def __init__(self):
    self.scalars = {}

  def add_scalar(self, tag, value, step):
    self.scalars[(tag, step)] = float(value)

  def flush(self):
    pass

  def close(self):
    pass


def _program(steps, keep_per_example_out=False, inspect=None, **train_fields):
  """(per-step TrainProgramOutputs, the writer) of a run of `steps`.

  `inspect(state)`, if given, is called on the state after each step (the
  next step donates it).
  """
  task = partitioning_test._task(None, train_fields=dict(
      num_train_steps=100, eval_interval_steps=0, **train_fields))
  batches = list(partitioning_test._batches(4, batch=16))
  data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  inp = base_input.InMemoryInput(name='train', batch_size=16, data=data,
                                 input_random_seed=1, is_training=True)
  partitioner = partitioning_test._partitioner(task)
  state = partitioning_test._init(partitioner)
  program = programs.SingleTaskTrainProgram(
      keep_per_example_out=keep_per_example_out)
  key = jax.random.PRNGKey(0)
  program.setup(task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
                key, key, 0, enable_summary_writer=False)
  writer = program._writer = _Writer()
  outs = []
  for step in range(steps):
    outs.append(program.run(state, step))
    state = outs[-1].state
    if inspect is not None:
      inspect(state)
  program.shutdown()
  return outs, writer


class LeanStepsTest(absltest.TestCase):

  def test_losses_and_state_are_those_recorded_before_the_change(self):
    losses, state = record_train_losses.run(steps=7, summary_interval_steps=3)
    np.testing.assert_allclose(losses, _RECORDED, rtol=1e-6)
    l2 = np.asarray(state.mdl_vars['params']['l2']['w'], np.float64)
    np.testing.assert_allclose(l2.sum(), _RECORDED_L2_SUM, rtol=1e-5)
    # Every step a summary step (the full outputs each time): same numbers.
    every, _ = record_train_losses.run(steps=7, summary_interval_steps=1)
    self.assertEqual(losses, every)

  def test_metrics_only_on_summary_steps_per_example_only_when_asked(self):
    outs, writer = _program(4, keep_per_example_out=True,
                            summary_interval_steps=2)
    self.assertEqual([o.weighted_scalars is None for o in outs],
                     [True, False, True, False])
    self.assertEqual([o.per_example_out is None for o in outs],
                     [True, False, True, False])
    # Written at steps 2 and 4: that step's loss (no accumulation).
    for step in (2, 4):
      self.assertAlmostEqual(writer.scalars[('loss', step)],
                             float(outs[step - 1].loss), places=6)
      self.assertAlmostEqual(writer.scalars[('Metrics/loss', step)],
                             float(outs[step - 1].loss), places=6)
    self.assertNotIn(('loss', 1), writer.scalars)


class CompileAheadTest(absltest.TestCase):

  def test_first_step_traced_ahead_and_losses_as_recorded(self):
    threads = []
    real_step = programs._train_step

    def recording_step(*args, **kwargs):
      threads.append(threading.current_thread().name)
      return real_step(*args, **kwargs)

    programs._train_step = recording_step
    try:
      losses, state = record_train_losses.run(
          steps=7, summary_interval_steps=3, compile_ahead=True)
    finally:
      programs._train_step = real_step
    # One trace, on the background thread; the lean steps reuse it.
    self.assertEqual(threads, ['compile_ahead'])
    np.testing.assert_allclose(losses, _RECORDED, rtol=1e-6)
    l2 = np.asarray(state.mdl_vars['params']['l2']['w'], np.float64)
    np.testing.assert_allclose(l2.sum(), _RECORDED_L2_SUM, rtol=1e-5)

  def _compiles(self, **kwargs):
    """(losses, [(thread, with_summaries) of each step compiled])."""
    with recorded_compiles() as compiles:
      losses, _ = record_train_losses.run(steps=7, **kwargs)
    return losses, [(thread, static_args.with_summaries)
                    for thread, static_args in compiles]

  def test_variant_of_later_steps_compiled_beside_the_first(self):
    # Summaries every 3 steps: the first step runs the lean variant, the
    # third the full one, compiled on another thread since the first step.
    for ahead, first_thread in ((True, 'compile_ahead'),
                                (False, 'MainThread')):
      losses, compiles = self._compiles(summary_interval_steps=3,
                                        compile_ahead=ahead)
      self.assertCountEqual(compiles, [(first_thread, False),
                                       ('compile_ahead', True)])
      np.testing.assert_allclose(losses, _RECORDED, rtol=1e-6)

  def test_no_variant_compiled_that_no_step_runs(self):
    # A summary at every step: the lean variant is never needed.
    _, compiles = self._compiles(summary_interval_steps=1, compile_ahead=True)
    self.assertEqual(compiles, [('compile_ahead', True)])

  def test_eval_and_decode_steps_compiled_beside_training(self):

    class EvalAndDecode(regression.RegressionExperiment):
      NUM_TRAIN_STEPS = 4

      def task(self):
        task_p = super().task()
        task_p.train.eval_interval_steps = 2
        task_p.train.decode_interval_steps = 2
        return task_p

    with recorded_compiles() as compiles:
      train.train_and_evaluate(
          EvalAndDecode(), pathlib.Path(tempfile.mkdtemp()),
          eval_on_test=True, run_decode=True, enable_checkpoint_saving=False)
    # The train step's two variants, the eval on training batches, the eval
    # and the decode steps: none compiled on the main thread, where training
    # would have waited.
    self.assertLen(compiles, 5)
    self.assertEqual({thread for thread, _ in compiles}, {'compile_ahead'})

  def test_exit_while_compiling_ahead_keeps_the_exit_status(self):
    # The process ends (as on an error before the first step) while XLA
    # compiles on the other thread: it waits for it and exits with status 3
    # (a daemon thread made it abort at exit, status 134).
    script = (
        'import jax, jax.numpy as jnp\n'
        'from paxml import _partitioned_step\n'
        'def fn(state, key, inputs):\n'
        '  for i in range(200):\n'
        '    inputs = jnp.sin(inputs) @ state + i\n'
        '  return inputs\n'
        'mesh = jax.sharding.Mesh(jax.devices()[:1], ("x",))\n'
        'step = _partitioned_step.CompiledStep(\n'
        '    lambda inputs, static_args, f=None: jax.jit(f or fn), mesh,\n'
        '    lambda inputs: None)\n'
        'x = jax.ShapeDtypeStruct((64, 64), jnp.float32)\n'
        'step.compile_ahead(x, x, x)\n'
        'raise SystemExit(3)\n')
    proc = subprocess.run([sys.executable, '-c', script], check=False,
                          capture_output=True, text=True,
                          env=dict(os.environ, JAX_PLATFORMS='cpu'))
    self.assertEqual(proc.returncode, 3, proc.stderr[-2000:])

  def _compile_ahead(self, inp):
    task = partitioning_test._task(None)
    partitioner = partitioning_test._partitioner(task)
    program = programs.SingleTaskTrainProgram()
    program.compile_ahead(task, inp, partitioner,
                          executors.abstract_train_state(partitioner),
                          jax.random.PRNGKey(0), 0)
    return program

  def test_peeked_input_keeps_its_position_for_checkpoints(self):
    data = next(partitioning_test._batches(1, batch=32))
    inp = base_input.InMemoryInput(name='train', batch_size=16, data=data,
                                   input_random_seed=1, is_training=True)
    before = inp.get_state()
    program = self._compile_ahead(inp)
    self.assertIsNotNone(program._train_step_fn)
    self.assertEqual(inp.get_state(), before)  # The first batch is peeked.
    fresh = base_input.InMemoryInput(name='train', batch_size=16, data=data,
                                     input_random_seed=1, is_training=True)
    jax.tree.map(np.testing.assert_array_equal, inp.get_next_padded(),
                 fresh.get_next_padded())

  def test_input_without_state_is_not_peeked(self):

    class NoState(base_input.BaseInput):

      def get_next(self):
        return next(partitioning_test._batches(1))

    inp = NoState(name='train', batch_size=16)
    program = self._compile_ahead(inp)
    self.assertIsNone(program._train_step_fn)
    self.assertIsNone(inp._peek)


class EvalFetchTest(absltest.TestCase):

  def _run_eval(self, metrics_p=None):
    """(EvalProgramOutput, the fetches it made, per-batch numpy MSEs)."""
    task = partitioning_test._task(None)
    if metrics_p is not None:
      object.__setattr__(task, 'metrics', metrics_p)
    partitioner = partitioning_test._partitioner(task)
    state = partitioning_test._init(partitioner)
    batches = list(partitioning_test._batches(5, batch=16))
    data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    eval_p = pax_fiddle.Config(
        base_input.InMemoryInput, name='test', batch_size=16, data=data,
        reset_for_eval=True)
    program = programs.SingleTaskEvalProgram(eval_p)
    program.setup(task, partitioner, tempfile.mkdtemp(),
                  jax.random.PRNGKey(1), enable_summary_writer=False)
    fetches = []
    fetch = programs._program_utils.fetch

    def counting_fetch(tree):
      fetches.append(tree)
      return fetch(tree)

    programs._program_utils.fetch = counting_fetch
    try:
      out = program.run(state, 0)
    finally:
      programs._program_utils.fetch = fetch
    program.shutdown()
    # numpy: eval-mode BatchNorm (initial stats), the MSE of each batch.
    p = jax.tree.map(np.asarray, state.mdl_vars['params'])
    mses = []
    for b in batches:
      h = np.maximum(b['inputs'] / np.sqrt(1 + 1e-3) @ p['l1']['w'], 0)
      mses.append(np.mean((h @ p['l2']['w'] - b['targets']) ** 2))
    return out, fetches, mses

  def test_default_means_summed_on_device_fetched_once(self):
    out, fetches, mses = self._run_eval()
    self.assertLen(fetches, 1)
    self.assertEqual(out.num_eval_steps, 5)
    # Every batch has weight 1: plain means.
    np.testing.assert_allclose(out.eval_metrics['loss'], np.mean(mses),
                               rtol=1e-5)

  def test_task_metrics_class_gets_every_batch_fetched_once(self):
    out, fetches, mses = self._run_eval(
        pax_fiddle.Config(base_metrics.MaxMetrics))
    self.assertLen(fetches, 1)
    self.assertLen(fetches[0], 5)  # The 5 batches' values, at once.
    # The model's metric is named 'loss': its maximum over the batches.
    np.testing.assert_allclose(out.eval_metrics['loss'], np.max(mses),
                               rtol=1e-5)


class FetchTest(absltest.TestCase):

  def test_device_arrays_become_numpy_other_leaves_stay(self):
    host = np.ones(2, np.float32)
    tree = {'a': jax.numpy.arange(6.0).reshape(2, 3), 'b': 2.5, 'c': host,
            'd': (jax.numpy.int32(7), None)}
    out = programs._program_utils.fetch(tree)
    self.assertIsInstance(out['a'], np.ndarray)
    np.testing.assert_array_equal(out['a'], np.arange(6.0).reshape(2, 3))
    self.assertFalse(out['a'].flags.writeable)  # As jax.device_get's.
    self.assertIs(out['b'], 2.5)
    self.assertIs(out['c'], host)
    self.assertIsInstance(out['d'][0], np.ndarray)
    self.assertEqual(int(out['d'][0]), 7)
    self.assertIsNone(out['d'][1])


class SummaryAccumulationTest(absltest.TestCase):

  def test_every_step_accumulated_means_written_at_summary_steps(self):
    outs, writer = _program(6, summary_interval_steps=3,
                            summary_accumulate_interval_steps=1)
    # Not asked for: no per-example outputs, summary steps included.
    self.assertTrue(all(o.per_example_out is None for o in outs))
    losses = [float(o.loss) for o in outs]
    for step in (3, 6):
      mean = np.mean(losses[step - 3:step])
      self.assertAlmostEqual(writer.scalars[('loss', step)], mean, places=6)
      # The MSE metric has weight 1 per step: the plain mean, weight 3.
      self.assertAlmostEqual(writer.scalars[('Metrics/loss', step)], mean,
                             places=6)
      self.assertEqual(writer.scalars[('Metrics/loss-weight', step)], 3.0)

  def test_every_other_step_written_at_the_last_accumulated_step(self):
    rms = []  # numpy: the RMS of the first layer's weights after each step.
    outs, writer = _program(
        5, summary_interval_steps=5, summary_accumulate_interval_steps=2,
        inspect=lambda state: rms.append(np.sqrt(np.mean(np.asarray(
            state.mdl_vars['params']['l1']['w'], np.float64) ** 2))))
    losses = [float(o.loss) for o in outs]
    # Steps 2 and 4 are kept; the write at step 5 is labelled 4, as Pax.
    self.assertAlmostEqual(writer.scalars[('loss', 4)],
                           (losses[1] + losses[3]) / 2, places=6)
    self.assertNotIn(('loss', 5), writer.scalars)
    # Variable norms, as every summary: the mean over the kept steps.
    self.assertAlmostEqual(writer.scalars[('vars/params/l1/w_scalar', 4)],
                           (rms[1] + rms[3]) / 2, places=6)

  def test_bad_interval_is_refused(self):
    for bad in (0, -2, 1.5, True):
      with self.assertRaisesRegex(ValueError,
                                  'summary_accumulate_interval_steps'):
        programs._program_utils.SummaryAccumulator(bad)


if __name__ == '__main__':
  absltest.main()
