"""Tests of paxml.eval_lib: what an eval job restores."""

import pathlib
import shutil
import tempfile
import types

from absl.testing import absltest
import jax
import numpy as np
from paxml import eval_lib
from paxml import train
from paxml.tasks.test import regression


class ShortRegression(regression.RegressionExperiment):
  NUM_TRAIN_STEPS = 2


class EvalRestoreTest(absltest.TestCase):

  def test_eval_job_needs_no_optimizer_states(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(ShortRegression(), job_dir, eval_on_test=False)
    # Without the optimizer states on disk the eval job still runs: it
    # restores the step and the model variables only.
    removed = [p for p in job_dir.glob('checkpoints/*/**/opt_states*')]
    self.assertNotEmpty(removed)
    for path in removed:
      (shutil.rmtree if path.is_dir() else pathlib.Path.unlink)(path)
    seen = []
    run = eval_lib.run_eval_programs

    def spy(**kwargs):
      seen.append(kwargs['train_state'])
      return run(**kwargs)

    eval_lib.run_eval_programs = spy
    try:
      eval_lib.evaluate(ShortRegression(), job_dir,
                        restore_checkpoint_step=2, enable_summary_writer=False)
    finally:
      eval_lib.run_eval_programs = run
    self.assertLen(seen, 1)
    self.assertEqual(int(seen[0].step), 2)
    self.assertEqual(list(seen[0].opt_states), [])
    self.assertNotEmpty(seen[0].mdl_vars['params'])


class EarlyStoppingTest(absltest.TestCase):

  def test_eval_job_hands_each_checkpoints_metrics_to_early_stopping_fn(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(ShortRegression(), job_dir, eval_on_test=False)
    seen = []

    def record(metrics, running_mode, step, is_last, path):
      seen.append((dict(metrics), running_mode, step, is_last, path))
      return True

    with self.assertLogs('absl', level='INFO') as logs:
      eval_lib.evaluate(ShortRegression(), job_dir, early_stopping_fn=record,
                        enable_summary_writer=False)
    self.assertLen(seen, 1)
    metrics, mode, step, is_last, path = seen[0]
    self.assertEqual((step, is_last, path), (2, True, job_dir / 'checkpoints'))
    self.assertTrue(mode.has_eval)
    self.assertFalse(mode.has_train or mode.has_decode)
    self.assertEqual(metrics.keys(), {'eval_test_test/metrics/loss',
                                      'eval_steps_per_sec'})
    # The loss the job logs at its end.
    finished = [m for m in logs.output if 'Eval job finished at step 2' in m]
    self.assertLen(finished, 1)
    self.assertIn(f"test/loss={metrics['eval_test_test/metrics/loss']:.6g}",
                  finished[0])


class JobKeysTest(absltest.TestCase):

  def test_keys_from_the_jobs_own_seed_decode_key_first(self):
    task = types.SimpleNamespace(
        evaluate=types.SimpleNamespace(random_seed=7),
        decode=types.SimpleNamespace(random_seed=9))
    for decode_job, seed in ((False, 7), (True, 9)):
      eval_key, decode_key = eval_lib._job_keys(task, decode_job)
      want = jax.random.split(jax.random.PRNGKey(seed))
      np.testing.assert_array_equal(decode_key, want[0])
      np.testing.assert_array_equal(eval_key, want[1])


if __name__ == '__main__':
  absltest.main()
