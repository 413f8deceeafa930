"""Rewards and metric aggregators of Pax's AutoML (re-exported by `automl`).

Public names (use them through `paxml.automl`):
  SUB_EXPERIMENT_STEP_OFFSET: the step offset between sub-experiments.
  SingleObjective: the reward is one metric.
  MultiObjectiveAggregator: base of the reductions of several objectives.
  MultiObjective: the reward reduces several metrics.
  WeightedSumAggregator: weighted average of the objectives.
  weighted_sum_reward: a `MultiObjective` config with weighted metrics.
  TwoObjectiveAggregator: base of quality/cost trade-offs.
  TunasAbsolute, MnasHard, MnasSoft: the TuNAS and MNAS trade-offs.
  MultiSubExperimentCrossStepMetricAggregator: base of the cross-step
    aggregators that merge the steps of sub-experiments.
  LastReportedMetricValues, AverageMetricValues, MetricsWithMaxValue,
  MetricsWithMinValue: the builtin cross-step aggregators.
"""

from __future__ import annotations

import abc
import math
from typing import Sequence

from paxml import automl_interfaces
from praxis import base_hyperparams
from praxis import pax_fiddle

Metric = automl_interfaces.Metric
StepMetrics = Sequence[tuple[int, dict[str, float]]]

# Sub-experiment i reports its step s at i * SUB_EXPERIMENT_STEP_OFFSET + s,
# so that the steps of sub-experiments never collide in one study.
SUB_EXPERIMENT_STEP_OFFSET = 1_000_000_000

_GOALS = ('maximize', 'minimize')


def _check_goal(owner: str, goal: str) -> None:
  if goal not in _GOALS:
    raise ValueError(
        f"Param `goal` should be either 'maximize' or 'minimize' "
        f'({owner}.goal), got {goal!r}.'
    )


class SingleObjective(automl_interfaces.BaseReward):
  """The reward is the value of one metric.

  Attributes:
    metric: The metric.
    goal: 'maximize', or 'minimize' (the reward is then the negated value).
    reward_for_nan: The reward when the value is NaN; None keeps NaN (the
      algorithm then skips the trial).
  """

  metric: Metric | None = None
  goal: str = 'maximize'
  reward_for_nan: float | None = None

  def __post_init__(self):
    if self.metric is None:
      raise ValueError('Param `metric` should not be None (SingleObjective).')
    if not isinstance(self.metric, Metric):
      raise ValueError(
          f'SingleObjective.metric must be an automl.Metric, got '
          f'{self.metric!r}.'
      )
    _check_goal('SingleObjective', self.goal)

  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    del global_step  # The reward does not depend on it.
    value = self.metric.get_value(metrics_dict)
    if math.isnan(value) and self.reward_for_nan is not None:
      return self.reward_for_nan
    return -value if self.goal == 'minimize' else value

  @property
  def used_metrics(self) -> Sequence[Metric]:
    return [self.metric]


class MultiObjectiveAggregator(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Reduces the values of several objectives to one."""

  @abc.abstractmethod
  def __call__(self, values: Sequence[float]) -> float | complex:
    """The reduction of `values`."""


class MultiObjective(automl_interfaces.BaseReward):
  """The reward reduces the values of several metrics.

  Attributes:
    metrics: The metrics, in the order the aggregator expects them.
    aggregator_tpl: A `MultiObjectiveAggregator` config; needed with more than
      one metric (a single metric is its own reward).
    goal: 'maximize', or 'minimize' (the reward is then negated).
    reward_for_nan: The reward when any value is NaN; None lets NaN through.
  """

  metrics: Sequence[Metric] | None = None
  aggregator_tpl: pax_fiddle.Config[MultiObjectiveAggregator] | None = None
  goal: str = 'maximize'
  reward_for_nan: float | None = None

  def __post_init__(self):
    if not self.metrics:
      raise ValueError(
          'Param `metrics` must be provided. (MultiObjective.metrics: a '
          'non-empty list of automl.Metric)'
      )
    if len(self.metrics) > 1 and self.aggregator_tpl is None:
      raise ValueError(
          'Param `aggregator` must be provided. (MultiObjective.aggregator_tpl'
          f' reduces the {len(self.metrics)} metrics to one reward)'
      )
    _check_goal('MultiObjective', self.goal)
    self._aggregator = None
    if self.aggregator_tpl is not None:
      self._aggregator = base_hyperparams.instantiate(self.aggregator_tpl)

  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    del global_step  # The reward does not depend on it.
    values = [m.get_value(metrics_dict) for m in self.metrics]
    if self.reward_for_nan is not None and any(math.isnan(v) for v in values):
      return self.reward_for_nan
    if len(values) == 1:
      reward = values[0]
    else:
      reward = self._aggregator(values)
    return -reward if self.goal == 'minimize' else reward

  @property
  def used_metrics(self) -> Sequence[Metric]:
    return self.metrics


class WeightedSumAggregator(MultiObjectiveAggregator):
  """The weighted sum of the objectives over the sum of |weights|.

  Attributes:
    weights: One weight per objective (any sign, not all zero).
  """

  weights: Sequence[float] | None = None

  def __post_init__(self):
    weights = self.weights
    if not weights or not sum(abs(w) for w in weights):
      raise ValueError(
          'Invalid value for `weights` (WeightedSumAggregator.weights: one '
          f'weight per objective, not all zero): {weights!r}.'
      )
    self._norm = float(sum(abs(w) for w in weights))

  def __call__(self, values: Sequence[float]) -> float | complex:
    if len(values) != len(self.weights):
      raise ValueError(
          f'The length of weights {list(self.weights)} does not match the '
          f'length of objective values {list(values)}.'
      )
    total = sum(w * v for w, v in zip(self.weights, values))
    return total / self._norm


def weighted_sum_reward(
    metrics_and_weights: Sequence[tuple[Metric, float]],
    goal: str = 'maximize',
    reward_for_nan: float | None = None,
) -> pax_fiddle.Config[MultiObjective]:
  """A `MultiObjective` config whose reward weights several metrics.

  Args:
    metrics_and_weights: `(metric, weight)` pairs.
    goal: 'maximize' or 'minimize'.
    reward_for_nan: The reward when a value is NaN.

  Returns:
    The config.
  """
  pairs = list(metrics_and_weights)
  for pair in pairs:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
      raise ValueError(
          '`metrics_and_weights` must hold (automl.Metric, weight) pairs, '
          f'got {pair!r}.'
      )
  return pax_fiddle.Config(
      MultiObjective,
      metrics=[m for m, _ in pairs],
      goal=goal,
      aggregator_tpl=pax_fiddle.Config(
          WeightedSumAggregator, weights=[w for _, w in pairs]
      ),
      reward_for_nan=reward_for_nan,
  )


class TwoObjectiveAggregator(MultiObjectiveAggregator):
  """Trades a quality objective off against a cost objective.

  Attributes:
    cost_objective: The targeted cost.
    exponent: The strength of the trade-off; the more negative, the harder a
      cost above the target is penalized.
  """

  cost_objective: float | None = None
  exponent: float = -0.07

  def __post_init__(self):
    if self.cost_objective is None:
      raise ValueError(
          'Param `cost_objective` must be provided. '
          f'({type(self).__name__}.cost_objective: the targeted cost)'
      )

  def __call__(self, values: Sequence[float]) -> float | complex:
    if len(values) != 2:
      raise ValueError(
          'Only two objectives are supported (quality, cost); got '
          f'{list(values)}.'
      )
    quality, cost = values
    return self.aggregate(quality, cost)

  @abc.abstractmethod
  def aggregate(self, quality: float, cost: float) -> float | complex:
    """The reward of `quality` at `cost`."""


class TunasAbsolute(TwoObjectiveAggregator):
  """TuNAS's absolute reward (https://arxiv.org/abs/2008.06120).

  quality + exponent * |cost / cost_objective - 1|.
  """

  def aggregate(self, quality: float, cost: float) -> float | complex:
    distance = abs(cost / self.cost_objective - 1)
    return quality + self.exponent * distance


class MnasHard(TwoObjectiveAggregator):
  """MNAS's hard reward (https://arxiv.org/abs/1807.11626).

  quality * min((cost / cost_objective) ** exponent, 1): only costs above the
  target are penalized.
  """

  def aggregate(self, quality: float, cost: float) -> float | complex:
    factor = pow(cost / self.cost_objective, self.exponent)
    return quality * min(factor, 1.0)


class MnasSoft(TwoObjectiveAggregator):
  """MNAS's soft reward (https://arxiv.org/abs/1807.11626).

  quality * (cost / cost_objective) ** exponent.
  """

  def aggregate(self, quality: float, cost: float) -> float | complex:
    return quality * pow(cost / self.cost_objective, self.exponent)


class MultiSubExperimentCrossStepMetricAggregator(
    automl_interfaces.CrossStepMetricAggregator
):
  """A cross-step aggregator that first merges the sub-experiments' steps.

  Steps equal modulo `SUB_EXPERIMENT_STEP_OFFSET` are one step: their
  metrics are merged into one dict, in the order the steps first appear.
  """

  def __call__(self, metrics_across_steps: StepMetrics) -> dict[str, float]:
    merged = {}
    for step, metrics in metrics_across_steps:
      merged.setdefault(step % SUB_EXPERIMENT_STEP_OFFSET, {}).update(metrics)
    return self.call(list(merged.items()))

  @abc.abstractmethod
  def call(self, merged_metrics_across_steps: StepMetrics) -> dict[str, float]:
    """Aggregates the merged `(step, metrics)` pairs."""


class LastReportedMetricValues(MultiSubExperimentCrossStepMetricAggregator):
  """The metrics of the last step."""

  def call(self, merged_metrics_across_steps: StepMetrics) -> dict[str, float]:
    if not merged_metrics_across_steps:
      raise ValueError('No metrics were reported at any step.')
    return merged_metrics_across_steps[-1][1]


class AverageMetricValues(MultiSubExperimentCrossStepMetricAggregator):
  """Each metric averaged over the steps that reported it.

  Attributes:
    last_n: Average only the last `last_n` values of each metric; None
      averages them all.
  """

  last_n: int | None = None

  def __post_init__(self):
    if self.last_n is not None and (
        not isinstance(self.last_n, int) or self.last_n < 1
    ):
      raise ValueError(
          'AverageMetricValues.last_n must be None or a positive int, got '
          f'{self.last_n!r}.'
      )

  def call(self, merged_metrics_across_steps: StepMetrics) -> dict[str, float]:
    series = {}
    for _, metrics in merged_metrics_across_steps:
      for key, value in metrics.items():
        series.setdefault(key, []).append(value)
    averages = {}
    for key, values in series.items():
      if self.last_n is not None:
        values = values[-self.last_n:]
      averages[key] = sum(values) / len(values)
    return averages


class _ExtremeMetricValues(MultiSubExperimentCrossStepMetricAggregator):
  """The metrics of the step where one metric is extreme (ties: the last)."""

  metric: Metric | None = None

  @abc.abstractmethod
  def _better_or_equal(self, value: float, best: float) -> bool:
    """Whether `value` replaces `best`."""

  def call(self, merged_metrics_across_steps: StepMetrics) -> dict[str, float]:
    if not merged_metrics_across_steps:
      raise ValueError('No metrics were reported at any step.')
    metric = self.metric or Metric('reward')
    best, chosen = None, None
    for _, metrics in merged_metrics_across_steps:
      value = metric.get_value(metrics)
      if best is None or self._better_or_equal(value, best):
        best, chosen = value, metrics
    return chosen


class MetricsWithMaxValue(_ExtremeMetricValues):
  """The metrics of the step where a metric is largest.

  Attributes:
    metric: The metric compared; None compares the reward.
  """

  def _better_or_equal(self, value: float, best: float) -> bool:
    return value >= best


class MetricsWithMinValue(_ExtremeMetricValues):
  """The metrics of the step where a metric is smallest.

  Attributes:
    metric: The metric compared; None compares the reward.
  """

  def _better_or_equal(self, value: float, best: float) -> bool:
    return value <= best
