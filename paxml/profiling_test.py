"""Tests of the profiler: capture length, the train program's capture, PGLE."""

import os
import pathlib
import subprocess
import sys
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
import jax
from paxml import executors
from paxml import main
from paxml import profiling
from paxml import train
from paxml.tasks.test import regression

_EXP = 'tasks.test.regression.RegressionExperiment'


class ProfilerTest(absltest.TestCase):

  def test_capture_length_from_the_mean_step_time(self):
    prof = profiling.Profiler(num_steps=3, min_duration_sec=0.5,
                              default_duration_sec=4.0, log_dir='/tmp/x')
    self.assertEqual(prof.step_duration_estimate_sec, 4.0)  # No step yet.
    self.assertEqual(prof.capture_duration_sec, 12.0)
    prof.update_step_moving_mean(0.1)
    prof.update_step_moving_mean(0.3)
    self.assertAlmostEqual(prof.step_duration_estimate_sec, 0.2)
    self.assertAlmostEqual(prof.capture_duration_sec, 0.6)  # 3 x 0.2
    prof.update_step_moving_mean(0.05)  # Mean 0.15: 0.45 < the minimum.
    self.assertAlmostEqual(prof.capture_duration_sec, 0.5)

  def test_bad_settings_name_the_field(self):
    with self.assertRaisesRegex(ValueError, 'num_steps must be > 0, got 0'):
      profiling.Profiler(num_steps=0)
    with self.assertRaisesRegex(ValueError, 'min_duration_sec must be >= 0'):
      profiling.Profiler(min_duration_sec=-1)

  def test_a_refused_start_warns_and_leaves_no_directory(self):
    root = pathlib.Path(tempfile.mkdtemp())
    jax.profiler.start_trace(os.fspath(root / 'other'))
    try:
      prof = profiling.Profiler(log_dir=root / 'mine', tag='decode_test')
      with self.assertLogs('absl', level='WARNING') as logs:
        prof.capture_async()
    finally:
      jax.profiler.stop_trace()
    self.assertIn('Not profiling into', logs.output[0])
    self.assertFalse((root / 'mine').exists())

  def test_tag_names_a_subdirectory(self):
    prof = profiling.Profiler(log_dir='/tmp/p', tag='decode')
    self.assertEqual(prof.log_dir, pathlib.Path('/tmp/p/decode'))

  def test_pgle_flags_are_the_scheduler_with_the_file(self):
    flags = profiling.pgle_xla_flags('/j/profile.pb').split()
    self.assertEqual(flags, [
        '--xla_gpu_enable_latency_hiding_scheduler=true',
        '--xla_gpu_pgle_profile_file_or_directory_path=/j/profile.pb'])

  def test_installed_xla_accepts_the_pgle_flags(self):
    # XLA parses every backend's flags wherever it runs and stops on one it
    # does not know: the seeds' async-collective flags made the second run
    # of the PGLE workflow exit at start-up.
    proc = subprocess.run(
        [sys.executable, '-c',
         'import jax; jax.numpy.zeros(1).block_until_ready()'],
        env=dict(os.environ, JAX_PLATFORMS='cpu',
                 XLA_FLAGS=profiling.pgle_xla_flags('/j/profile.pb')),
        capture_output=True, text=True, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])

  def test_missing_trace_is_a_clear_error(self):
    with self.assertRaisesRegex(FileNotFoundError, 'No profiler run under'):
      profiling.write_pgle_profile(tempfile.mkdtemp())


class TrainProgramProfileTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not flags.FLAGS.is_parsed():  # Under pytest nothing parsed them.
      flags.FLAGS.mark_as_parsed()

  def test_capture_step_writes_a_trace_and_the_pgle_files(self):
    with flagsaver.as_parsed(exp=_EXP, pgle_profile='true',
                             fdl_set=['task.train.num_train_steps=8',
                                      'task.train.eval_interval_steps=0',
                                      'task.train.decode_interval_steps=0']):
      configs = main._load_configs()  # pylint: disable=protected-access
    self.assertEqual(configs.task.train.profiler_capture_step, 5)
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False,
        enable_summary_writer=False))
    runs = list((job_dir / 'profile' / 'plugins' / 'profile').iterdir())
    self.assertLen(runs, 1)
    files = {p.name for p in runs[0].iterdir()}
    self.assertTrue(any(f.endswith('.xplane.pb') for f in files), files)
    self.assertIn('profile.pb', files)  # Empty on CPU: no GPU instructions.
    self.assertEqual(
        (runs[0] / 'xla_flags.txt').read_text().split()[-1],
        '--xla_gpu_pgle_profile_file_or_directory_path='
        f'{runs[0] / "profile.pb"}')

  def test_no_capture_step_writes_no_profile(self):
    exp = regression.RegressionExperiment()
    configs = train.ExperimentConfigs.from_experiment(exp, _EXP)
    configs.apply_overrides(['task.train.num_train_steps=3'])
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False,
        enable_summary_writer=False))
    self.assertFalse((job_dir / 'profile').exists())

  def test_negative_capture_step_is_refused(self):
    with (flagsaver.as_parsed(
        exp=_EXP, fdl_set=['task.train.profiler_capture_step=-1']),
          self.assertRaisesRegex(ValueError,
                                 r'profiler_capture_step=-1; expected None')):
      main._load_configs()  # pylint: disable=protected-access


if __name__ == '__main__':
  absltest.main()
