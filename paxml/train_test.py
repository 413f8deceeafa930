"""Tests of paxml.train and paxml.eval_lib called with Pax's signatures."""

import gc
import pathlib
import pickle
import re
import tempfile

from absl.testing import absltest
import numpy as np
from paxml import eval_lib
from paxml import tasks_lib
from paxml import train
from paxml.tasks.test import regression
from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle


class ShortRegression(regression.RegressionExperiment):
  NUM_TRAIN_STEPS = 4


class PaxSignaturesTest(absltest.TestCase):

  def test_train_then_evaluate_and_decode_the_checkpoint(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    calls = []
    state = train.train_and_evaluate(
        ShortRegression(), job_dir, eval_on_test=True, run_decode=False,
        override_num_train_steps=3,
        train_first_result_callback_fn=calls.append)
    self.assertEqual(int(state.step), 3)
    self.assertEqual(calls, [True])
    self.assertEqual(sorted(p.name for p in (job_dir / 'summaries').iterdir()),
                     ['eval_test_test', 'eval_train', 'train'])
    eval_lib.evaluate(ShortRegression(), job_dir, restore_checkpoint_step=3,
                      enable_summary_writer=False)
    eval_lib.decode(ShortRegression(), job_dir, continuous_decode=False)
    out = job_dir / 'decoder_out' / 'decode' / 'decoder_out_3_shard_0'
    rows = out.with_suffix('.jsonl').read_text().splitlines()
    self.assertLen(rows, 64)  # Every decode example, once.
    with out.with_suffix('.pickle').open('rb') as f:
      self.assertLen(pickle.load(f), 64)

  def test_early_stopping_fn_sees_pax_metric_names_and_stops(self):

    class EveryStep(regression.RegressionExperiment):
      NUM_TRAIN_STEPS = 20

      def task(self):
        task_p = super().task()
        task_p.train.eval_interval_steps = 1
        return task_p

    seen = []

    def stop_at_third_eval(metrics, running_mode, step, is_last, path):
      seen.append((sorted(metrics), running_mode.has_eval, step, is_last,
                   path.name))
      return len(seen) == 3

    job_dir = pathlib.Path(tempfile.mkdtemp())
    state = train.train_and_evaluate(EveryStep(), job_dir, eval_on_test=True,
                                     early_stopping_fn=stop_at_third_eval)
    self.assertEqual(int(state.step), 3)  # Stopped after the 3rd eval.
    names, has_eval, step, is_last, path = seen[-1]
    self.assertIn('eval_test_test/metrics/loss', names)
    self.assertEqual((has_eval, step, is_last, path),
                     (True, 3, False, 'checkpoints'))

  def test_early_stopping_fn_gets_every_step_and_train_metrics_as_pax(self):
    # No eval and no decode: Pax calls the function after every step, with
    # the train metrics at the last one (a reward on `train/...` metrics
    # completes its trial there) and steps/sec at multiples of
    # compute_steps_per_sec_interval_steps.
    seen = {}

    def record(metrics, running_mode, step, is_last, path):
      seen[step] = (dict(metrics), running_mode.has_train, is_last, path.name)
      return False

    with self.assertLogs('absl', level='INFO') as logs:
      _train_4_steps(summary_interval_steps=4,
                     compute_steps_per_sec_interval_steps=2,
                     early_stopping_fn=record)
    self.assertEqual(sorted(seen), [1, 2, 3, 4])
    for step in (1, 3):
      self.assertEqual(seen[step], ({'num_params': 8.0}, False, False,
                                    'checkpoints'))  # proj.w: 4 x 2.
    self.assertEqual(seen[2][0].keys(), {'num_params', 'train_steps_per_sec'})
    self.assertTrue(seen[2][1])
    metrics, has_train, is_last, _ = seen[4]
    self.assertEqual(metrics.keys(), {'num_params', 'train_steps_per_sec',
                                      'train/loss'})
    self.assertTrue(has_train and is_last)
    self.assertGreater(metrics['train_steps_per_sec'], 0.0)
    summary = [re.search(r'Summaries at step 4: loss=(\S+?),', m)
               for m in logs.output]
    loss = float(next(m for m in summary if m).group(1))
    self.assertAlmostEqual(metrics['train/loss'], loss, places=4)

  def test_the_tasks_early_stopping_fn_serves_when_none_is_given(self):
    seen = []

    def stop_at_2(metrics, running_mode, step, is_last, path):
      seen.append(step)
      return step == 2

    class TaskStops(ShortRegression):

      def task(self):
        task_p = super().task()
        task_p.early_stopping_fn = stop_at_2
        return task_p

    state = train.train_and_evaluate(TaskStops(),
                                     pathlib.Path(tempfile.mkdtemp()),
                                     enable_checkpoint_saving=False)
    self.assertEqual((int(state.step), seen), (2, [1, 2]))
    job_dir = pathlib.Path(tempfile.mkdtemp()) / 'job'
    with self.assertRaisesRegex(base_hyperparams.ConfigError,
                                'task.early_stopping_fn is set and so is'):
      train.train_and_evaluate(TaskStops(), job_dir,
                               early_stopping_fn=stop_at_2)
    self.assertFalse(job_dir.exists())

  def test_class_vars_file_groups_by_class(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.write_experiment_class_vars_file(ShortRegression, job_dir, 'x_')
    text = (job_dir / 'x_experiment_cls_vars.txt').read_text()
    base = text.index('RegressionExperiment:\n    NUM_TRAIN_STEPS = 40')
    own = text.index('ShortRegression:\n    NUM_TRAIN_STEPS = 4')
    self.assertLess(base, own)

  def test_hparams_file_from_an_experiment(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.write_hparams_file(ShortRegression(), job_dir)
    text = (job_dir / 'model_params.txt').read_text()
    self.assertIn("name : 'decode'", text)
    self.assertIn('num_train_steps : 4', text)
    with self.assertRaisesRegex(TypeError, 'BaseExperiment instance'):
      train.write_hparams_file(ShortRegression, job_dir)


class WarmStartTest(absltest.TestCase):

  def test_a_run_starts_from_another_runs_weights(self):
    first_dir = pathlib.Path(tempfile.mkdtemp())
    first = train.train_and_evaluate(ShortRegression(), first_dir)
    ckpt_dir = str(first_dir / 'checkpoints')

    class WarmStart(ShortRegression):

      def task(self):
        task_p = super().task()
        source = ShortRegression()
        task_p.train.init_from_checkpoint_rules = {
            ckpt_dir: tasks_lib.CheckpointLoadingRules(
                task_p=source.task(), load_rules=[(r'params/(.*)',
                                                   'params/{}')],
                input_specs_provider_p=pax_fiddle.Config(
                    base_input.DatasetInputSpecsProvider,
                    input_p=source.datasets()[0]))}
        return task_p

    second_dir = pathlib.Path(tempfile.mkdtemp())
    second = train.train_and_evaluate(WarmStart(), second_dir,
                                      override_num_train_steps=1)
    provenance = (second_dir / 'train_state_provenance.txt').read_text()
    self.assertIn(f"['params']['proj']['w']: \"({ckpt_dir}:latest)\"",
                  provenance)
    self.assertIn('"(random_init)"', provenance)  # Optimizer states.
    # One Adam step (rate 0.05) from the first run's final weights.
    moved = np.abs(np.asarray(second.mdl_vars['params']['proj']['w']) -
                   np.asarray(first.mdl_vars['params']['proj']['w']))
    self.assertLessEqual(moved.max(), 0.05 + 1e-6)
    self.assertGreater(moved.max(), 0.0)


def _train_4_steps(early_stopping_fn=None, **train_fields):
  """Trains ShortRegression (no eval, decode or checkpoints) in a new job
  directory, with `train_fields` set on its `task.train`."""

  class Experiment(ShortRegression):

    def task(self):
      task_p = super().task()
      task_p.train.eval_interval_steps = 0
      task_p.train.decode_interval_steps = 0
      for name, value in train_fields.items():
        setattr(task_p.train, name, value)
      return task_p

  return train.train_and_evaluate(
      Experiment(), pathlib.Path(tempfile.mkdtemp()), run_decode=False,
      enable_checkpoint_saving=False, early_stopping_fn=early_stopping_fn)


class GarbageCollectionTest(absltest.TestCase):

  def test_gc_interval_steps_collects_in_full_at_its_multiples(self):

    def full_collections(gc_interval):
      starts = []
      record = lambda phase, info: starts.append(
          (phase, info['generation']))
      gc.callbacks.append(record)
      self.addCleanup(gc.unfreeze)
      try:
        _train_4_steps(gc_interval_steps=gc_interval)
      finally:
        gc.callbacks.remove(record)
      return starts.count(('start', 2))

    gc.disable()  # Only the runner's collections: no automatic ones.
    self.addCleanup(gc.enable)
    self.assertEqual(full_collections(0), 0)
    self.assertEqual(full_collections(2), 2)  # After steps 2 and 4.
    self.assertGreater(gc.get_freeze_count(), 0)  # Frozen again.


class TrainLogTest(absltest.TestCase):

  def _logged(self, **train_fields):
    """{step: (loss, 'loss' weighted scalar, its weight)} of the step lines
    logged by a 4-step run (the regression's only weighted scalar is its
    mean squared error, weighted by the batch's 8 examples)."""
    line = re.compile(r'step (\d+)/4 loss (\S+?),?(?: .*)?$')
    scalar = re.compile(r'\bloss=(\S+) \(weight=(\S+)\)')
    with self.assertLogs('absl', level='INFO') as logs:
      _train_4_steps(**train_fields)
    logged = {}
    for message in logs.output:
      m = line.search(message)
      if m:
        pair = scalar.search(message)
        logged[int(m.group(1))] = (float(m.group(2)),) + (
            tuple(map(float, pair.groups())) if pair else ())
    return logged

  def test_log_train_output_interval_steps_logs_loss_and_weighted_scalars(
      self):
    self.assertEqual(list(self._logged(summary_interval_steps=4)), [4])
    every_step = self._logged(summary_interval_steps=4,
                              log_train_output_interval_steps=1)
    self.assertEqual(list(every_step), [1, 2, 3, 4])
    for step in (1, 2, 3):  # Not summary steps: the full step ran anyway.
      loss, mse, weight = every_step[step]
      self.assertAlmostEqual(mse, loss, places=4)
      self.assertEqual(weight, 8.0)
    self.assertEqual(list(self._logged(summary_interval_steps=4,
                                       log_train_output_interval_steps=2)),
                     [2, 4])
    # The same losses as a run that writes summaries at every step.
    summaries = {}
    with self.assertLogs('absl', level='INFO') as logs:
      _train_4_steps(summary_interval_steps=1)
    for message in logs.output:
      m = re.search(r'Summaries at step (\d+): loss=(\S+?),', message)
      if m:
        summaries[int(m.group(1))] = float(m.group(2))
    for step in (1, 2, 3):
      self.assertAlmostEqual(every_step[step][0], summaries[step], places=4)


class RunProgramsTest(absltest.TestCase):

  def test_metrics_are_listed_per_program(self):

    class Out:
      def __init__(self, m):
        self.eval_metrics, self.eval_scoring_metrics = m, None
        self.num_eval_steps = 2

    class Prog:
      def __init__(self, name, m):
        self.eval_input = type('I', (), {'name': name})()
        self._m = m

      def run(self, state, step):
        return Out({'loss': self._m * step + np.sum(state)})

    metrics, elapsed = eval_lib.run_eval_programs(
        eval_programs=[Prog('a', 1.0), Prog('b', 2.0)],
        train_state=np.ones(2), step=3)
    self.assertEqual(metrics.input_names, ['a', 'b'])
    self.assertEqual(metrics.metrics_list, [{'loss': 5.0}, {'loss': 8.0}])
    self.assertGreater(metrics.steps_per_sec, 0)
    self.assertGreaterEqual(elapsed, 0)


if __name__ == '__main__':
  absltest.main()
