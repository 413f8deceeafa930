"""A tiny tuning study for tests: RegressionExperiment over a search space.

`python -m paxml.main --exp=tasks.test.tuning.RegressionTuning
--job_log_dir=/tmp/study --study=local_reg --num_trials=3` tunes the learning
rate and the hidden width of the 4 -> 2 regression (seconds per trial), on
the eval MSE.
"""

import pyglove as pg

from paxml import automl
from paxml import experiment_registry
from paxml.tasks.test import regression
from praxis import pax_fiddle


@experiment_registry.register
class RegressionTuning(regression.RegressionExperiment):
  """RegressionExperiment with the learning rate and width as decisions."""

  NUM_TRAIN_STEPS = 20
  LEARNING_RATE = pg.oneof([0.001, 0.05, 0.2])
  HIDDEN_DIMS = pg.oneof([0, 8])

  def task(self):
    task_p = super().task()
    task_p.model.hidden_dims = self.HIDDEN_DIMS
    task_p.train.learner.optimizer.learning_rate = self.LEARNING_RATE
    task_p.train.eval_interval_steps = 10
    task_p.train.save_interval_steps = 20
    return task_p

  def search(self):
    return automl.SearchHParams(
        search_algorithm=pax_fiddle.Config(automl.Sweeping),
        search_reward=pax_fiddle.Config(
            automl.SingleObjective, metric=automl.Metric.eval('loss'),
            goal='minimize'),
        max_num_trials=6)


@experiment_registry.register
class RegressionTrainLossTuning(RegressionTuning):
  """RegressionTuning scored on the training loss at the last step (no eval:
  run it with `--metrics_from=train`)."""

  def task(self):
    task_p = super().task()
    task_p.train.eval_interval_steps = 0
    return task_p

  def search(self):
    search_p = super().search()
    search_p.search_reward = pax_fiddle.Config(
        automl.SingleObjective, metric=automl.Metric.train('loss'),
        goal='minimize')
    return search_p
