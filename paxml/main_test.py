"""End-to-end tests of the runner: `python -m paxml.main` on a small experiment.

One uninterrupted training run is shared by the layout, summary, eval-job and
resume tests; the resume and preemption tests run the real command in a
subprocess and kill it with signals.
"""

import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import tempfile
from unittest import mock

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
from fiddle import absl_flags
import numpy as np
from paxml import _launch
from paxml import checkpoint_paths
from paxml import executors
from paxml import experiment_registry
from paxml import main
from paxml import train
from paxml.tasks.test import regression
from tensorboard.backend.event_processing import event_accumulator

_EXP = 'tasks.test.regression.RegressionExperiment'
_SIGNAL_EXP = 'tasks.test.regression.RegressionSignalExperiment'
_FULL_EXP = 'paxml.tasks.test.regression.RegressionExperiment'
_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _scalars(summary_dir: pathlib.Path, tag: str) -> dict[int, float]:
  """{step: value} of a scalar tag, the last write of each step winning."""
  acc = event_accumulator.EventAccumulator(str(summary_dir))
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars(tag)}


def _run_main(*args: str, check: bool = True) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)  # One CPU device, as a user's laptop.
  result = subprocess.run(
      [sys.executable, '-m', 'paxml.main', *args], cwd=_ROOT, env=env,
      capture_output=True, text=True, timeout=300)
  if check and result.returncode != 0:
    raise AssertionError(f'paxml.main {args} failed:\n{result.stderr[-3000:]}')
  return result


class TrainRunTest(absltest.TestCase):
  """One in-process run of RegressionExperiment, inspected several ways."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.job_dir = pathlib.Path(tempfile.mkdtemp()) / 'job'
    exp = experiment_registry.get(_EXP)()
    configs = train.ExperimentConfigs.from_experiment(exp, _EXP)
    configs.task.train.summary_interval_steps = 1
    options = executors.RunOptions(job_log_dir=cls.job_dir,
                                   decode_during_train=True, eval_on_test=True)
    cls.state = train.train_and_evaluate(configs, options)

  def test_layout(self):
    names = {p.name for p in self.job_dir.iterdir()}
    self.assertLessEqual({'model_params.txt', 'post_init_model_params.txt',
                          'checkpoints', 'summaries', 'decoder_out'}, names)
    summaries = {p.name for p in (self.job_dir / 'summaries').iterdir()}
    self.assertEqual(summaries, {'train', 'eval_train', 'eval_test_test',
                                 'decode_test_decode'})
    steps = sorted(int(p.name.split('_')[1])
                   for p in (self.job_dir / 'checkpoints').iterdir())
    self.assertEqual(steps[-3:], [20, 30, 40])
    params = (self.job_dir / 'model_params.txt').read_text()
    self.assertIn('\ntrain.num_train_steps : 40', params)
    post_init = (self.job_dir / 'post_init_model_params.txt').read_text()
    self.assertIn('params/proj/w: shape=[4, 2] dtype=float32', post_init)

  def test_train_and_eval_scalars_read_back_with_tensorboard(self):
    train_loss = _scalars(self.job_dir / 'summaries' / 'train', 'loss')
    self.assertEqual(sorted(train_loss), list(range(1, 41)))
    # The least-squares problem is learnt: noise variance is 2 * 1e-4.
    self.assertGreater(train_loss[1], 0.5)
    self.assertLess(train_loss[40], train_loss[1] / 10)
    eval_loss = _scalars(self.job_dir / 'summaries' / 'eval_test_test',
                         'Metrics/loss')
    self.assertEqual(sorted(eval_loss), [20, 40])
    self.assertLess(eval_loss[40], eval_loss[20])
    steps_per_sec = _scalars(self.job_dir / 'summaries' / 'train', 'Steps/sec')
    self.assertTrue(all(v > 0 for v in steps_per_sec.values()))

  def test_eval_loss_matches_numpy_on_final_weights(self):
    w = np.asarray(self.state.mdl_vars['params']['proj']['w'])
    data = regression.make_data(64, seed=2)
    host_data = {k: v[0::1] for k, v in data.items()}
    mse = np.mean(np.sum((host_data['inputs'] @ w - host_data['targets'])**2,
                         axis=-1))
    eval_loss = _scalars(self.job_dir / 'summaries' / 'eval_test_test',
                         'Metrics/loss')
    np.testing.assert_allclose(eval_loss[40], mse, rtol=1e-5)
    # The eval `loss` tag is weighted like the metrics (no padded examples).
    plain_loss = _scalars(self.job_dir / 'summaries' / 'eval_test_test',
                          'loss')
    np.testing.assert_allclose(plain_loss[40], mse, rtol=1e-5)

  def test_decoder_out_jsonl_and_pickle(self):
    out = self.job_dir / 'decoder_out' / 'decode' / 'decoder_out_40_shard_0'
    lines = out.with_suffix('.jsonl').read_text().splitlines()
    self.assertLen(lines, 64)
    value = json.loads(lines[0])  # A line is the value alone, as in Pax.
    self.assertLen(value['prediction'], 2)
    with out.with_suffix('.pickle').open('rb') as f:
      pairs = pickle.load(f)
    self.assertEqual(pairs[0][0], 'example_0')
    np.testing.assert_allclose(pairs[0][1]['prediction'], value['prediction'],
                               rtol=1e-6)

  def test_decode_once_job_on_the_trained_checkpoints(self):
    out_dir = pathlib.Path(tempfile.mkdtemp())
    result = _run_main(
        f'--exp={_EXP}', f'--job_log_dir={out_dir}', '--mode=decode_once',
        f'--restore_checkpoint_dir={self.job_dir / "checkpoints"}',
        '--nodecode_output_pickle')
    # A decode job's set-up ends with its first pass (paxml/_startup_gc.py).
    self.assertIn('(command start to the first pass done)', result.stderr)
    name = pathlib.Path('decoder_out', 'decode', 'decoder_out_40_shard_0.jsonl')
    once = [json.loads(x) for x in (out_dir / name).read_text().splitlines()]
    during_train = [json.loads(x)
                    for x in (self.job_dir / name).read_text().splitlines()]
    self.assertLen(once, 64)
    self.assertFalse((out_dir / name).with_suffix('.pickle').exists())
    # One device here, eight in the training run: equal up to rounding.
    np.testing.assert_allclose(
        [r['prediction'] for r in once],
        [r['prediction'] for r in during_train], rtol=1e-5)

  def test_checkpoint_of_another_shape_names_the_variable(self):
    out_dir = pathlib.Path(tempfile.mkdtemp())
    result = _run_main(
        f'--exp={_EXP}', f'--job_log_dir={out_dir}', '--mode=decode_once',
        f'--restore_checkpoint_dir={self.job_dir / "checkpoints"}',
        '--fdl_set=task.model.hidden_dims=3', check=False)
    self.assertNotEqual(result.returncode, 0)
    error = result.stderr[-3000:]
    self.assertIn("'mdl_vars.params.proj.w' has shape (4, 2) in the checkpoint "
                  'but (3, 2) in the model', error)

  def test_resume_after_sigkill_matches_the_uninterrupted_run(self):
    job_dir = pathlib.Path(tempfile.mkdtemp()) / 'job'
    # JAX's own flags pass through as in Pax: the resumed run reads its
    # compiled steps from the persistent compilation cache the first wrote.
    cache_dir = job_dir.parent / 'xla_cache'
    common = [f'--exp={_SIGNAL_EXP}', f'--job_log_dir={job_dir}',
              f'--jax_compilation_cache_dir={cache_dir}',
              '--jax_persistent_cache_min_compile_time_secs=0']
    # Killed while reading the batch of step 14. Checkpoint 1 is complete;
    # checkpoint 10 is complete unless the kill came before its asynchronous
    # write committed — then its temp dir must be ignored.
    killed = _run_main(*common, '--fdl_set=datasets[0].signal_at_batch=14',
                       check=False)
    self.assertEqual(killed.returncode, -signal.SIGKILL)
    latest = checkpoint_paths.retrieve_latest_checkpoint_step(
        job_dir / 'checkpoints')
    self.assertIn(latest, (1, 10))
    self.assertNotEmpty(list(cache_dir.iterdir()))
    # A half-written checkpoint (a temp dir without its commit) is ignored.
    (job_dir / 'checkpoints' / 'checkpoint_13.orbax-checkpoint-tmp-1').mkdir()
    resumed = _run_main(*common)
    self.assertTrue(
        f'Restored the checkpoint of step {latest}.' in resumed.stderr,
        resumed.stderr[-2000:])
    # Where the launcher wants the huge-page tunable for this environment
    # (launch_test checks when that is), `python -m paxml.main` restarted
    # with it before importing JAX, and the log says so.
    wants_restart = _launch.environment_with_huge_pages(
        os.environ, _launch.glibc_version(), _launch.huge_pages_mode(),
        tool_attached=False) is not None
    self.assertEqual('glibc malloc: glibc.malloc.hugetlb=1' in resumed.stderr,
                     wants_restart)
    # The command collected garbage less until its first step's dispatch
    # (paxml/_startup_gc.py), then logged how long set-up took.
    self.assertRegex(resumed.stderr, r'Set-up took [0-9.]+ s \(command '
                     r'start to the first step dispatched\)')
    losses = _scalars(job_dir / 'summaries' / 'train', 'loss')
    reference = _scalars(self.job_dir / 'summaries' / 'train', 'loss')
    self.assertEqual(sorted(losses), list(range(1, 41)))
    for step in range(1, 41):
      self.assertAlmostEqual(losses[step], reference[step], places=5,
                             msg=f'step {step}')


class PreemptionTest(absltest.TestCase):

  def test_sigterm_saves_the_current_step_and_exits_cleanly(self):
    job_dir = pathlib.Path(tempfile.mkdtemp()) / 'job'
    _run_main(f'--exp={_SIGNAL_EXP}', f'--job_log_dir={job_dir}',
              '--fdl_set=datasets[0].signal_at_batch=16',
              f'--fdl_set=datasets[0].signal_number={int(signal.SIGTERM)}')
    steps = sorted(int(p.name.split('_')[1])
                   for p in (job_dir / 'checkpoints').iterdir())
    # The signal arrives while step 16 trains; that step completes and is
    # saved before the run stops.
    self.assertEqual(steps[-1], 17)
    self.assertNotIn(40, steps)


class FlagsTest(absltest.TestCase):
  """Pax's flag forms, read in-process (no run)."""

  def setUp(self):
    super().setUp()
    if not flags.FLAGS.is_parsed():  # Under pytest rather than absltest.
      flags.FLAGS.mark_as_parsed()

  def test_fdl_config_makes_the_experiment_and_fdl_set_edits_it(self):
    with flagsaver.as_parsed(fdl_config=_FULL_EXP,
                             fdl_set=['NUM_TRAIN_STEPS=7']):
      configs = main._load_configs()
    self.assertEqual(configs.task.train.num_train_steps, 7)
    self.assertEqual(configs.task.train.save_interval_steps, 10)

  def test_fdl_config_command_and_set_command(self):
    with flagsaver.as_parsed(
        fdl=[f'config:{_FULL_EXP}', 'set:NUM_TRAIN_STEPS=5']):
      configs = main._load_configs()
    self.assertEqual(configs.task.train.num_train_steps, 5)

  def test_fdl_set_with_exp_edits_the_configs(self):
    with flagsaver.as_parsed(exp=_EXP, fdl=['set:task.train.num_train_steps=3'],
                             fdl_set=['datasets[0].batch_size=2']):
      configs = main._load_configs()
    self.assertEqual(configs.task.train.num_train_steps, 3)
    self.assertEqual(configs.datasets[0].batch_size, 2)

  def test_fdl_dot_form_is_rewritten_to_fdl_set(self):
    argv = absl_flags.flags_parser(['prog', '--fdl.NUM_TRAIN_STEPS=9'])
    self.assertEqual(argv, ['prog'])
    self.assertEqual(flags.FLAGS.fdl_set, ['NUM_TRAIN_STEPS=9'])
    flags.FLAGS['fdl_set'].unparse()

  def test_no_experiment_is_a_usage_error(self):
    with flagsaver.flagsaver(exp=None):
      with self.assertRaisesRegex(app.UsageError, 'No experiment provided'):
        main._load_configs()

  def test_run_experiment_runs_the_mode_with_paxs_arguments(self):
    exp = regression.RegressionExperiment()
    with flagsaver.flagsaver(mode='decode_once', restore_checkpoint_step=[3, 5],
                             exp=_EXP), \
        mock.patch.object(main.eval_lib, 'decode') as decode:
      main.run_experiment(exp, None, '/tmp/h5_job',
                          enable_checkpoint_saving=False)
    self.assertEqual([c.args[1].restore_checkpoint_step
                      for c in decode.call_args_list], [3, 5])
    options = decode.call_args.args[1]
    self.assertEqual(str(options.job_log_dir), '/tmp/h5_job')
    self.assertFalse(options.enable_checkpoint_saving)
    self.assertTrue(decode.call_args.kwargs['once'])
    # Training hands a tuning trial's early_stopping_fn to the loop.
    with flagsaver.flagsaver(mode='train', exp=_EXP), \
        mock.patch.object(main.train, 'train_and_evaluate') as train_fn:
      main.run_experiment(exp, None, '/tmp/h5_job', early_stopping_fn=min)
    self.assertIs(train_fn.call_args.kwargs['early_stopping_fn'], min)

  def test_create_experiment_config_validates(self):
    with flagsaver.flagsaver(exp=_EXP), mock.patch.object(
        regression.RegressionExperiment, 'validate') as validate:
      exp = main.create_experiment_config()
    self.assertIsInstance(exp, regression.RegressionExperiment)
    validate.assert_called_once()

  def test_flags_that_cannot_be_honoured_are_refused(self):
    for name, value in (('enable_auto_sharding', True), ('mode', 'infer'), ('async_timeout_secs', 5),
                        ('checkpoint_todelete_subdir', 'old')):
      with flagsaver.flagsaver(**{name: value}):
        with self.assertRaisesRegex(app.UsageError,
                                    f'--{name}={value} is not supported'):
          main._check_flags()
    with flagsaver.flagsaver(study='s', num_trials=3,
                             enforce_restore_shape_check=True,
                             tensorstore_use_ocdbt=True):
      main._check_flags()  # Accepted: honoured, or meaningful only in a study.


class CommandLineErrorsTest(absltest.TestCase):

  def test_unknown_experiment_names_the_closest(self):
    result = _run_main('--exp=tasks.test.regression.RegresionExperiment',
                       '--job_log_dir=/tmp/unused', check=False)
    self.assertNotEqual(result.returncode, 0)
    error = result.stderr[-2000:]
    self.assertIn('Could not find experiment `tasks.test.regression.'
                  'RegresionExperiment`.', error)
    self.assertIn('paxml.tasks.test.regression.RegressionExperiment', error)

  def test_bad_fdl_set_field_is_named(self):
    result = _run_main(f'--exp={_EXP}', '--job_log_dir=/tmp/unused',
                       '--fdl_set=task.train.num_trian_steps=3', check=False)
    self.assertNotEqual(result.returncode, 0)
    error = result.stderr[-2000:]
    self.assertIn("no field 'num_trian_steps'", error)
    self.assertIn("'num_train_steps'", error)

  def test_bad_input_field_is_one_line_without_a_traceback(self):
    result = _run_main(f'--exp={_EXP}', '--job_log_dir=/tmp/unused',
                       '--fdl_set=datasets[0].batch_size=-1', check=False)
    self.assertEqual(result.returncode, 2)
    self.assertIn("error: InMemoryInput 'train': batch_size=-1 must be "
                  'positive.', result.stderr)
    self.assertNotIn('Traceback', result.stderr)


if __name__ == '__main__':
  absltest.main()
