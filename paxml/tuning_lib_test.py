"""Tests of tuning studies: metrics, trial loop, failures, resume, the CLI."""

import json
import math
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import pyglove as pg

from paxml import _preemption
from paxml import _study_main
from paxml import automl
from paxml import base_experiment
from paxml import trainer_lib
from paxml import tuning_lib
from praxis import pax_fiddle

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _tmp(test: absltest.TestCase) -> pathlib.Path:
  path = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, path, True)
  return pathlib.Path(path)


class Quadratic(base_experiment.BaseExperiment):
  """A fake experiment: the 'eval loss' of a trial is (x - 3)^2 + y."""

  X = pg.oneof([1, 2, 3, 4])
  Y = pg.oneof([0.0, 0.5])

  def task(self):
    return pg.Dict(x=self.X, y=self.Y)

  def datasets(self):
    return []

  def search(self):
    return automl.SearchHParams(
        search_algorithm=pax_fiddle.Config(automl.Sweeping),
        search_reward=pax_fiddle.Config(
            automl.SingleObjective, metric=automl.Metric.eval('loss'),
            goal='minimize'),
        max_num_trials=8)


def _report_loss(experiment, work_unit, trial_dir, stop_fn, calls=None):
  """A trial: two evals of the fake loss (the second is the last)."""
  del work_unit
  task = experiment.task()
  if calls is not None:
    calls.append((task.x, task.y))
  loss = (task.x - 3) ** 2 + task.y
  for step, last in ((10, False), (20, True)):
    if tuning_lib.should_early_stop(
        stop_fn, step, last, eval_metrics=tuning_lib.EvalMetrics(
            input_names=['test'], metrics_list=[{'loss': loss}],
            steps_per_sec=1.0)):
      break
  del trial_dir


def _worker(root: str, trained_log: str) -> None:
  """One worker process of a shared study (run by the two-worker test).

  Appends the (x, y) of every trial it trains to `trained_log`. Its first
  trial waits until another worker has claimed a trial in the journal: with
  both workers waiting so, each trains at least one trial, at the same time
  as the other.
  """
  journal = pathlib.Path(root) / 'study_journal' / 'shared.json'
  me = f':{os.getpid()}'

  def other_has_claimed():
    try:
      trials = json.loads(journal.read_text())['trials']
    except (FileNotFoundError, ValueError):
      return False
    return any(not t['owner'].endswith(me) for t in trials)

  waited = []

  def trial_fn(experiment, work_unit, trial_dir, stop_fn):
    task = experiment.task()
    with open(trained_log, 'a') as f:
      f.write(f'{task.x},{task.y}\n')
    if not waited:
      waited.append(True)
      deadline = time.monotonic() + 120
      while not other_has_claimed():
        if time.monotonic() > deadline:
          raise TimeoutError('the other worker never claimed a trial')
    _report_loss(experiment, work_unit, trial_dir, stop_fn)

  tuning_lib.tune(trial_fn, Quadratic(), None, pathlib.Path(root),
                  study='shared')


class TuningMetricsTest(absltest.TestCase):

  def test_metric_names(self):
    metrics = tuning_lib._tuning_metrics.tuning_metrics(
        train_metrics={'loss': 1.0},
        eval_metrics=tuning_lib.EvalMetrics(
            input_names=['a', 'b'], metrics_list=[{'acc': 0.5}, None],
            scoring_metrics_list=[{'bleu': 3.0}, {'bleu': 4.0}],
            steps_per_sec=2.0),
        decode_metrics=tuning_lib.DecodeMetrics(
            input_names=['d'], metrics_list=[{'f1': 0.25}]),
        num_params=7.0, train_steps_per_sec=9.0)
    self.assertEqual(metrics, {
        'train/loss': 1.0,
        'eval_test_a/metrics/acc': 0.5,
        'eval_test_a/scoring_eval/bleu': 3.0,
        'eval_test_b/scoring_eval/bleu': 4.0,
        'decode_test_d/f1': 0.25,
        'train_steps_per_sec': 9.0,
        'eval_steps_per_sec': 2.0,
        'decode_steps_per_sec': None,
        'num_params': 7.0,
    })

  def test_mismatched_input_names(self):
    with self.assertRaisesRegex(ValueError, '2 input names'):
      tuning_lib._tuning_metrics.tuning_metrics(
          eval_metrics=tuning_lib.EvalMetrics(
              input_names=['a', 'b'], metrics_list=[{'acc': 0.5}]))

  def test_is_last_checkpoint(self):
    mode = trainer_lib.RunningMode
    # A separate eval job (no train): the last checkpoint it can see is
    # within max(eval interval, save interval) of the end.
    self.assertTrue(tuning_lib.is_last_checkpoint(
        mode.EVAL, 95, 100, 10, 10, 20))
    self.assertFalse(tuning_lib.is_last_checkpoint(
        mode.EVAL, 75, 100, 10, 10, 20))
    # A train job that evaluates: checkpoints do not pace it.
    self.assertFalse(tuning_lib.is_last_checkpoint(
        mode.TRAIN | mode.EVAL, 85, 100, 10, 10, 20))
    self.assertTrue(tuning_lib.is_last_checkpoint(
        mode.TRAIN | mode.EVAL, 95, 100, 10, 10, 20))
    # train_to_end: only the very last step.
    self.assertFalse(tuning_lib.is_last_checkpoint(
        mode.EVAL, 95, 100, 10, 10, 20, train_to_end=True))


class TuneTest(absltest.TestCase):

  def _tune(self, root, trial_fn, study, **kwargs):
    tuning_lib.tune(trial_fn, Quadratic(), None, root, study=study, **kwargs)
    path = root / (f'{study}_summary.json' if study else 'study_summary.json')
    return json.loads(path.read_text())

  def test_best_trial_has_the_best_reported_metric(self):
    root = _tmp(self)
    summary = self._tune(root, _report_loss, 'local_q_best')
    self.assertLen(summary['trials'], 8)
    # Sweeping visits every (x, y); the smallest loss is x=3, y=0.0.
    losses = [r['metrics']['eval_test_test/metrics/loss']
              for r in summary['trials']]
    self.assertEqual(sorted(losses), sorted(
        (x - 3) ** 2 + y for x in (1, 2, 3, 4) for y in (0.0, 0.5)))
    best = summary['best_trial']
    self.assertEqual(best['metrics'], {'eval_test_test/metrics/loss': 0.0})
    self.assertEqual(best['reward'], -0.0)
    self.assertIn('X=3|Y=0.0', best['dir'])

  def test_failed_trial_is_infeasible_and_the_study_goes_on(self):
    root = _tmp(self)

    def trial_fn(experiment, work_unit, trial_dir, stop_fn):
      if experiment.task().x == 2:
        raise RuntimeError('boom')
      _report_loss(experiment, work_unit, trial_dir, stop_fn)

    summary = self._tune(root, trial_fn, 'local_q_fail',
                         errors_to_skip=(RuntimeError,))
    status = {r['decisions']: r['status'] for r in summary['trials']}
    self.assertLen(status, 8)
    self.assertEqual(sorted(status.values()),
                     ['completed'] * 6 + ['infeasible'] * 2)
    self.assertIn('X=3', summary['best_trial']['dir'])

  def test_unlisted_error_stops_the_study(self):
    root = _tmp(self)

    def trial_fn(*args):
      raise RuntimeError('not a trial failure')

    with self.assertRaisesRegex(RuntimeError, 'not a trial failure'):
      tuning_lib.tune(trial_fn, Quadratic(), None, root, study='local_q_err')

  def test_killed_study_resumes_without_rerunning_finished_trials(self):
    root = _tmp(self)
    calls = []

    def killed_at_third(experiment, work_unit, trial_dir, stop_fn):
      if len(calls) == 2:
        raise KeyboardInterrupt  # What a kill leaves: no more trials.
      _report_loss(experiment, work_unit, trial_dir, stop_fn, calls)

    # Unnamed studies: PyGlove keeps a named local study in the process, and
    # a restarted process starts with none.
    with self.assertRaises(KeyboardInterrupt):
      self._tune(root, killed_at_third, None)
    first_two = list(calls)
    calls.clear()
    resumed = self._tune(root, lambda *a: _report_loss(*a, calls=calls), None)
    # Only the 6 unfinished trials ran again; none of the first two.
    self.assertLen(calls, 6)
    self.assertEmpty(set(first_two) & set(calls))
    # The result is that of a study that was never interrupted.
    fresh = self._tune(_tmp(self), _report_loss, None)
    self.assertEqual(
        [(r['decisions'], r['reward']) for r in resumed['trials']],
        [(r['decisions'], r['reward']) for r in fresh['trials']])

  def test_two_workers_share_a_study_and_train_each_trial_once(self):
    root = _tmp(self)
    logs = [root / 'trained_a.txt', root / 'trained_b.txt']
    env = dict(os.environ, JAX_PLATFORMS='cpu')
    procs = [subprocess.Popen(
        [sys.executable, '-c',
         'import sys; from paxml import tuning_lib_test as t; '
         't._worker(sys.argv[1], sys.argv[2])', str(root), str(log)],
        cwd=_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True) for log in logs]
    for proc in procs:
      out, _ = proc.communicate(timeout=300)
      self.assertEqual(proc.returncode, 0, out[-3000:])
    trained = [log.read_text().split() if log.exists() else [] for log in logs]
    # Both worked, no trial twice, every one of the 8 once.
    self.assertNotEmpty(trained[0])
    self.assertNotEmpty(trained[1])
    self.assertEmpty(set(trained[0]) & set(trained[1]))
    self.assertLen(trained[0] + trained[1], 8)
    summary = json.loads((root / 'shared_summary.json').read_text())
    self.assertEqual([r['status'] for r in summary['trials']],
                     ['completed'] * 8)
    self.assertIn('X=3|Y=0.0', summary['best_trial']['dir'])

  def test_a_dead_workers_claim_is_taken_over(self):
    root = _tmp(self)
    # A worker that died holding trial 1 (a pid that is not running).
    dead = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True, check=True)
    calls = []
    tuning_lib.tune(lambda *a: _report_loss(*a, calls=calls), Quadratic(),
                    None, root, study='taken_over', max_num_trials=1)
    path = root / 'study_journal' / 'taken_over.json'
    saved = json.loads(path.read_text())
    saved['trials'][0].update(
        status='running', measurements=[],
        owner=f'{socket.gethostname()}:{dead.stdout.strip()}')
    path.write_text(json.dumps(saved))
    calls.clear()
    tuning_lib.tune(lambda *a: _report_loss(*a, calls=calls), Quadratic(),
                    None, root, study='taken_over', max_num_trials=1)
    self.assertEqual(calls, [(1, 0.0)])
    summary = json.loads((root / 'taken_over_summary.json').read_text())
    self.assertEqual(summary['trials'][0]['status'], 'completed')

  def test_sigterm_stops_the_study_and_the_trial_runs_again(self):
    root = _tmp(self)
    calls = []

    def trial_fn(experiment, work_unit, trial_dir, stop_fn):
      if len(calls) == 1:  # The second trial is preempted while it trains.
        calls.append('preempted')
        _preemption.install_sigterm_handler()
        try:
          os.kill(os.getpid(), signal.SIGTERM)
        finally:
          _preemption.uninstall_sigterm_handler()
        return  # As the train loop does: it saves and returns.
      _report_loss(experiment, work_unit, trial_dir, stop_fn, calls)

    def run():
      _study_main.run_study(
          Quadratic(), trial_fn, job_log_dir=str(root), study=None,
          num_trials=3, tuner_group=None, controller_mode='auto',
          mode='train', reports=True)

    run()  # Stops at the second trial, without raising.
    summary = json.loads((root / 'study_summary.json').read_text())
    self.assertEqual([r['status'] for r in summary['trials']],
                     ['completed', 'running'])
    run()  # Resumes: the second trial runs again, then the third.
    self.assertEqual(calls, [(1, 0.0), 'preempted', (1, 0.5), (2, 0.0)])
    summary = json.loads((root / 'study_summary.json').read_text())
    self.assertEqual([r['status'] for r in summary['trials']],
                     ['completed'] * 3)

  def test_journal_of_another_experiment_is_refused(self):
    root = _tmp(self)
    self._tune(root, _report_loss, 'local_q_other')

    class Other(Quadratic):
      X = pg.oneof([5, 6])

    with self.assertRaisesRegex(ValueError, 'records study .local_q_other.'):
      tuning_lib.tune(_report_loss, Other(), None, root,
                      study='local_q_other')

  def test_no_decision_points(self):

    class Constant(Quadratic):
      X = 3
      Y = 0.0

    with self.assertRaisesRegex(ValueError, 'no decision points'):
      tuning_lib.tune(_report_loss, Constant(), None,
                      _tmp(self))

  def test_nan_reward_makes_the_trial_infeasible(self):
    root = _tmp(self)

    def nan_for_x1(experiment, work_unit, trial_dir, stop_fn):
      if experiment.task().x == 1:
        tuning_lib.should_early_stop(
            stop_fn, 10, True, eval_metrics=tuning_lib.EvalMetrics(
                input_names=['test'], metrics_list=[{'loss': math.nan}]))
        return
      _report_loss(experiment, work_unit, trial_dir, stop_fn)

    summary = self._tune(root, nan_for_x1, 'local_q_nan')
    infeasible = [r['decisions'] for r in summary['trials']
                  if r['status'] == 'infeasible']
    self.assertLen(infeasible, 2)


class StudyCommandTest(absltest.TestCase):
  """`python -m paxml.main` on an experiment with a search space."""

  def _run(self, job_dir, num_trials, exp='RegressionTuning', *flags):
    cmd = [sys.executable, '-m', 'paxml.main',
           f'--exp=tasks.test.tuning.{exp}',
           f'--job_log_dir={job_dir}', '--study=local_cli',
           f'--num_trials={num_trials}', *flags]
    env = dict(os.environ, JAX_PLATFORMS='cpu')
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=_ROOT,
                          env=env, timeout=600, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    return proc

  def test_trials_best_trial_and_resume(self):
    job_dir = _tmp(self)
    self._run(job_dir, 2)
    summary = json.loads((job_dir / 'local_cli_summary.json').read_text())
    first = {r['id']: r for r in summary['trials']}
    self.assertEqual(sorted(first), [1, 2])
    for row in first.values():
      self.assertTrue((pathlib.Path(row['dir']) / 'summaries').is_dir())
    stamp = {i: os.stat(pathlib.Path(r['dir']) / 'checkpoints').st_mtime_ns
             for i, r in first.items()}
    # A third trial: the study resumes; trials 1 and 2 are not trained again.
    proc = self._run(job_dir, 3)
    summary = json.loads((job_dir / 'local_cli_summary.json').read_text())
    rows = {r['id']: r for r in summary['trials']}
    self.assertEqual(sorted(rows), [1, 2, 3])
    for i in (1, 2):
      self.assertEqual(rows[i]['reward'], first[i]['reward'])
      self.assertEqual(
          os.stat(pathlib.Path(rows[i]['dir']) / 'checkpoints').st_mtime_ns,
          stamp[i])
    self.assertEqual(proc.stderr.count('replayed its recorded result'), 2)
    rewards = {i: r['reward'] for i, r in rows.items()}
    best = max(rewards, key=rewards.get)
    self.assertEqual(summary['best_trial']['id'], best)
    # The reward is the negated eval loss that the trial reported.
    self.assertEqual(
        rows[best]['reward'],
        -rows[best]['metrics']['eval_test_test/metrics/loss'])
    self.assertIn('<- best', proc.stdout)

  def test_a_reward_on_the_train_loss_completes_each_trial(self):
    job_dir = _tmp(self)
    proc = self._run(job_dir, 2, 'RegressionTrainLossTuning',
                     '--metrics_from=train')
    summary = json.loads((job_dir / 'local_cli_summary.json').read_text())
    self.assertEqual([r['status'] for r in summary['trials']],
                     ['completed'] * 2)
    # Each reward is the negated loss of the trial's last step, as its
    # summary of step 20 logged it.
    losses = [float(x) for x in re.findall(
        r'Summaries at step 20: loss=([^,]+),', proc.stderr)]
    self.assertLen(losses, 2)
    for row, loss in zip(summary['trials'], losses):
      self.assertAlmostEqual(row['reward'], -loss, places=4)

  def test_reporting_role(self):
    self.assertTrue(_study_main.reporting_role('eval', 'eval', False, False))
    self.assertTrue(_study_main.reporting_role('train', 'eval', True, False))
    self.assertFalse(_study_main.reporting_role('train', 'eval', False,
                                                False))
    self.assertFalse(_study_main.reporting_role('eval', 'train', True, True))


if __name__ == '__main__':
  absltest.main()
