"""Checks of paxml.automl against values worked out by hand."""

import itertools
import math
import subprocess
import sys

from absl.testing import absltest
from paxml import automl
from praxis import base_hyperparams
from praxis import pax_fiddle
import pyglove as pg


def _make(cls, **kwargs):
  return base_hyperparams.instantiate(pax_fiddle.Config(cls, **kwargs))


class MetricOwnTest(absltest.TestCase):

  def test_pattern_of_a_dataset_and_sub_experiment(self):
    m = automl.Metric.decode('bleu', 'wmt', sub_experiment_id='big')
    self.assertEqual(m.pattern, '^decode_test_wmt/bleu:big$')
    metrics = {
        'decode_test_wmt/BLEU:big': 31.0,  # Matching ignores case.
        'decode_test_wmt/bleu:small': 20.0,
        'decode_test_ende/bleu:big': 25.0,
    }
    self.assertEqual(m.get_values(metrics), [31.0])
    self.assertFalse(m.applies_to_multiple_datasets)
    self.assertTrue(m.is_decode_metric)

  def test_aggregation_by_name_and_errors(self):
    metrics = {'eval_test_a/metrics/acc': 0.5, 'eval_test_b/metrics/acc': 0.7}
    m = automl.Metric.eval('acc', aggregator='max')
    self.assertEqual(m.get_value(metrics), 0.7)
    m = automl.Metric.eval('acc', aggregator=automl.MetricAggregator.SUM)
    self.assertAlmostEqual(m.get_value(metrics), 1.2)
    with self.assertRaisesRegex(KeyError, 'does not match'):
      m.get_value({'train/loss': 1.0})
    with self.assertRaisesRegex(ValueError, 'metric_type'):
      automl.Metric('loss', metric_type='train')
    with self.assertRaisesRegex(ValueError, 'aggregator'):
      automl.Metric.eval('acc', aggregator=3)


class RewardOwnTest(absltest.TestCase):

  def test_single_objective(self):
    reward = _make(
        automl.SingleObjective,
        metric=automl.Metric.train('loss'),
        goal='minimize',
        reward_for_nan=-10.0,
    )
    self.assertEqual(reward({'train/loss': 0.25}, 7), -0.25)
    self.assertEqual(reward({'train/loss': math.nan}, 7), -10.0)
    self.assertTrue(reward.needs_train)
    self.assertFalse(reward.needs_eval)
    self.assertFalse(reward.needs_decode)

  def test_weighted_sum_divides_by_the_absolute_weights(self):
    # (3 * 2 + (-1) * 4) / (|3| + |-1|) = 2 / 4.
    agg = _make(automl.WeightedSumAggregator, weights=[3.0, -1.0])
    self.assertEqual(agg([2.0, 4.0]), 0.5)

  def test_two_objective_trade_offs(self):
    # |150 / 100 - 1| = 0.5, so 0.8 - 0.1 * 0.5.
    tunas = _make(automl.TunasAbsolute, cost_objective=100, exponent=-0.1)
    self.assertAlmostEqual(tunas([0.8, 150.0]), 0.75)
    # (200 / 100) ** -1 = 0.5; below the target the factor is capped at 1.
    hard = _make(automl.MnasHard, cost_objective=100, exponent=-1.0)
    self.assertAlmostEqual(hard([0.8, 200.0]), 0.4)
    self.assertAlmostEqual(hard([0.8, 50.0]), 0.8)
    # (50 / 100) ** -1 = 2: the soft reward rewards a cheaper model.
    soft = _make(automl.MnasSoft, cost_objective=100, exponent=-1.0)
    self.assertAlmostEqual(soft([0.8, 50.0]), 1.6)

  def test_multi_objective_nan_and_goal(self):
    reward = base_hyperparams.instantiate(
        automl.weighted_sum_reward(
            [
                (automl.Metric.eval('loss', 'a'), 1.0),
                (automl.Metric.eval('loss', 'b'), 3.0),
            ],
            goal='minimize',
            reward_for_nan=-99.0,
        )
    )
    metrics = {'eval_test_a/metrics/loss': 2.0, 'eval_test_b/metrics/loss': 6.0}
    # -(1 * 2 + 3 * 6) / 4.
    self.assertEqual(reward(metrics, 0), -5.0)
    metrics['eval_test_b/metrics/loss'] = math.nan
    self.assertEqual(reward(metrics, 0), -99.0)
    metrics['eval_test_b/metrics/loss'] = 2.0
    self.assertEqual(reward(metrics, 0), -2.0)

  def test_bad_settings_name_the_field(self):
    with self.assertRaisesRegex(ValueError, 'goal'):
      _make(automl.MultiObjective, metrics=[automl.Metric('x')], goal='up')
    with self.assertRaisesRegex(ValueError, 'weights'):
      _make(automl.WeightedSumAggregator, weights=[0.0, 0.0])
    with self.assertRaisesRegex(ValueError, 'last_n'):
      _make(automl.AverageMetricValues, last_n=0)
    with self.assertRaisesRegex(ValueError, 'tournament_size'):
      _make(automl.RegularizedEvolution, population_size=4, tournament_size=5)
    with self.assertRaisesRegex(ValueError, 'step_values'):
      _make(automl.EarlyStoppingByValue)()


class CrossStepOwnTest(absltest.TestCase):

  def test_sub_experiment_steps_are_merged(self):
    offset = automl.SUB_EXPERIMENT_STEP_OFFSET
    steps = [
        (10, {'reward:a': 1.0}),
        (offset + 10, {'reward:b': 4.0}),
        (20, {'reward:a': 3.0}),
        (offset + 20, {'reward:b': 8.0}),
    ]
    self.assertEqual(
        _make(automl.AverageMetricValues)(steps),
        {'reward:a': 2.0, 'reward:b': 6.0},
    )
    self.assertEqual(
        _make(automl.LastReportedMetricValues)(steps),
        {'reward:a': 3.0, 'reward:b': 8.0},
    )

  def test_min_value_prefers_the_last_tie(self):
    steps = [(1, {'reward': 0.5, 'x': 1}), (2, {'reward': 0.5, 'x': 2})]
    self.assertEqual(_make(automl.MetricsWithMinValue)(steps)['x'], 2)
    self.assertEqual(_make(automl.MetricsWithMaxValue)(steps)['x'], 2)


class AlgorithmOwnTest(absltest.TestCase):

  def test_sweeping_enumerates_the_grid(self):
    space = pg.Dict(a=pg.oneof([1, 2]), b=pg.oneof(['x', 'y', 'z']))
    algorithm = _make(automl.Sweeping)()
    seen = [(d.a, d.b) for d in pg.iter(space, algorithm=algorithm)]
    self.assertEqual(seen, list(itertools.product([1, 2], 'xyz')))

  def test_random_search_stays_in_the_space_and_repeats_by_seed(self):
    space = pg.Dict(lr=pg.floatv(0.1, 0.2), bs=pg.oneof([8, 16]))

    def draw(seed):
      algorithm = _make(automl.RandomSearch, seed=seed)()
      return [(d.lr, d.bs) for d in pg.iter(space, 20, algorithm=algorithm)]

    first = draw(3)
    self.assertLen(first, 20)
    for lr, bs in first:
      self.assertBetween(lr, 0.1, 0.2)
      self.assertIn(bs, (8, 16))
    self.assertEqual(first, draw(3))


class EarlyStoppingErrorOwnTest(absltest.TestCase):

  def test_infeasible_trial_and_early_result(self):
    error = automl.EarlyStoppingError(skip_reason='OOM')
    self.assertTrue(error.skip)
    # It escapes `except Exception`, as the tuning loop relies on.
    self.assertNotIsInstance(error, Exception)
    error = automl.EarlyStoppingError(skip=False, step=5, reward=0.3)
    self.assertEqual((error.step, error.reward), (5, 0.3))
    with self.assertRaisesRegex(ValueError, '`step`'):
      automl.EarlyStoppingError(skip=False, reward=0.3)


class _Experiment:
  LR = 0.1
  BS = 8
  DEPTH = pg.oneof([2, 4])


@automl.parameter_sweep([('LR', 'BS'), (0.1, 16), (0.2, 32)])
class _Sweep(_Experiment):
  """A sweep of two combinations."""


class SweepOwnTest(absltest.TestCase):

  def test_sweep_runs_exactly_the_rows(self):
    exp = _Sweep()
    self.assertEqual(_Sweep.__name__, '_Sweep')
    self.assertEqual(exp.search().search_algorithm.__fn_or_cls__,
                     automl.Sweeping)

    def trial():
      return (exp.LR, exp.BS, exp.DEPTH)

    context = pg.hyper.trace(trial)
    seen = []
    for example in pg.iter(context, algorithm=automl.Sweeping()()):
      with example():
        seen.append(trial())
    # The rows times DEPTH's choices (made searchable by the decorator).
    self.assertEqual(
        seen,
        [(0.1, 16, 2), (0.1, 16, 4), (0.2, 32, 2), (0.2, 32, 4)],
    )

  def test_unknown_attribute(self):
    with self.assertRaisesRegex(ValueError, 'NOPE'):
      automl.parameter_sweep([('NOPE',), (1,)])(_Experiment)

  def test_pyglove_stays_optional(self):
    code = (
        'import sys; import paxml.base_experiment; '
        "sys.exit('pyglove' in sys.modules)"
    )
    self.assertEqual(subprocess.run([sys.executable, '-c', code]).returncode,
                     0)


if __name__ == '__main__':
  absltest.main()
