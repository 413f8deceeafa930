"""Tests of paxml.eval_lib: what an eval job restores."""

import pathlib
import shutil
import tempfile

from absl.testing import absltest
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


if __name__ == '__main__':
  absltest.main()
