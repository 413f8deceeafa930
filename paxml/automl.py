"""AutoML for Pax: search algorithms, rewards, early stopping and sweeps.

Built on PyGlove (`pip install 'pax-jax[automl]'`); an experiment opts into a
search by returning `SearchHParams` from `search()`.

Public names:
  From `automl_interfaces`: BaseAlgorithm, BaseEarlyStoppingPolicy,
    BaseReward, CrossStepMetricAggregator, SearchHParams, MetricType, Metric,
    MetricAggregator, enable_class_level_hyper_primitives.
  SUB_EXPERIMENT_STEP_OFFSET: the step offset between sub-experiments.
  hyperparameter_tuning: search settings for tuning hyper-parameters.
  neural_architecture_search: search settings for architecture search.
  RandomSearch, Sweeping, RegularizedEvolution: search algorithms.
  SingleObjective, MultiObjective, MultiObjectiveAggregator,
    WeightedSumAggregator, weighted_sum_reward, TwoObjectiveAggregator,
    TunasAbsolute, MnasHard, MnasSoft: rewards.
  MultiSubExperimentCrossStepMetricAggregator, LastReportedMetricValues,
    AverageMetricValues, MetricsWithMaxValue, MetricsWithMinValue: cross-step
    metric aggregators.
  EarlyStoppingByValue, EarlyStoppingByRank: population-wise early stopping.
  EarlyStoppingError: raised by a trial to stop itself.
  COMBINED_DECISION_ATTR, COMBINED_DECISION_POINT_NAMES, parameter_sweep:
    the decorator that turns an experiment into a parameter sweep.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Type

from paxml import _automl_rewards
from paxml import automl_interfaces
from praxis import pax_fiddle
import pyglove as pg

BaseAlgorithm = automl_interfaces.BaseAlgorithm
BaseEarlyStoppingPolicy = automl_interfaces.BaseEarlyStoppingPolicy
BaseReward = automl_interfaces.BaseReward
CrossStepMetricAggregator = automl_interfaces.CrossStepMetricAggregator
SearchHParams = automl_interfaces.SearchHParams
MetricType = automl_interfaces.MetricType
Metric = automl_interfaces.Metric
MetricAggregator = automl_interfaces.MetricAggregator
enable_class_level_hyper_primitives = (
    automl_interfaces.enable_class_level_hyper_primitives
)

SUB_EXPERIMENT_STEP_OFFSET = _automl_rewards.SUB_EXPERIMENT_STEP_OFFSET
SingleObjective = _automl_rewards.SingleObjective
MultiObjectiveAggregator = _automl_rewards.MultiObjectiveAggregator
MultiObjective = _automl_rewards.MultiObjective
WeightedSumAggregator = _automl_rewards.WeightedSumAggregator
weighted_sum_reward = _automl_rewards.weighted_sum_reward
TwoObjectiveAggregator = _automl_rewards.TwoObjectiveAggregator
TunasAbsolute = _automl_rewards.TunasAbsolute
MnasHard = _automl_rewards.MnasHard
MnasSoft = _automl_rewards.MnasSoft
MultiSubExperimentCrossStepMetricAggregator = (
    _automl_rewards.MultiSubExperimentCrossStepMetricAggregator
)
LastReportedMetricValues = _automl_rewards.LastReportedMetricValues
AverageMetricValues = _automl_rewards.AverageMetricValues
MetricsWithMaxValue = _automl_rewards.MetricsWithMaxValue
MetricsWithMinValue = _automl_rewards.MetricsWithMinValue

ErrorsToSkip = automl_interfaces.ErrorsToSkip


#
# Search algorithms.
#


class RandomSearch(BaseAlgorithm):
  """Samples the search space uniformly (`pg.geno.Random`).

  Unlike Vizier's random search, it handles `pg.manyof` with constraints.

  Attributes:
    seed: The random seed; None draws one.
  """

  seed: int | None = None

  def __call__(self) -> pg.DNAGenerator:
    return pg.geno.Random(seed=self.seed)


class Sweeping(BaseAlgorithm):
  """Enumerates every point of a discrete search space (`pg.geno.Sweeping`).

  It handles `pg.manyof` with constraints, but not `pg.floatv`.
  """

  def __call__(self) -> pg.DNAGenerator:
    return pg.geno.Sweeping()


class RegularizedEvolution(BaseAlgorithm):
  """Regularized (aging) evolution, https://arxiv.org/abs/1802.01548.

  Attributes:
    mutator: How a parent is mutated into a child.
    population_size: The size of the population.
    tournament_size: How many members compete to be a parent.
    seed: The random seed; None draws one.
  """

  mutator: pg.evolution.Mutator = pg.evolution.mutators.Uniform()
  population_size: int = 100
  tournament_size: int = 10
  seed: int | None = None

  def __post_init__(self):
    for field in ('population_size', 'tournament_size'):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        raise ValueError(
            f'RegularizedEvolution.{field} must be a positive int, got '
            f'{value!r}.'
        )
    if self.tournament_size > self.population_size:
      raise ValueError(
          f'RegularizedEvolution.tournament_size ({self.tournament_size}) '
          f'must not exceed population_size ({self.population_size}).'
      )

  def __call__(self) -> pg.DNAGenerator:
    return pg.evolution.regularized_evolution(
        self.mutator,
        population_size=self.population_size,
        tournament_size=self.tournament_size,
        seed=self.seed,
    )


#
# Ready-made search settings.
#


def hyperparameter_tuning(
    metric: Metric,
    max_num_trials: int = 100,
    goal: str = 'maximize',
    *,
    enable_dataset_tuning: bool = False,
    errors_to_skip: ErrorsToSkip | None = None,
    cross_step_metric_aggregator: (
        pax_fiddle.Config[CrossStepMetricAggregator] | None
    ) = None,
    early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None,
    reward_for_nan: float | None = None,
    enable_train_programs_tuning: bool = False,
) -> SearchHParams:
  """Search settings that sweep hyper-parameters, optimizing one metric.

  Args:
    metric: The metric to optimize.
    max_num_trials: The most trials.
    goal: 'maximize' or 'minimize'.
    enable_dataset_tuning: Whether the training input joins the search space.
    errors_to_skip: Errors that make a trial infeasible (see `SearchHParams`).
    cross_step_metric_aggregator: How the metrics of several steps become the
      trial's; None takes the last reported.
    early_stopping: A population-wise early stopping policy, or None.
    reward_for_nan: The reward when the metric is NaN; None keeps NaN.
    enable_train_programs_tuning: Whether the train programs join the search
      space.

  Returns:
    Settings with `Sweeping` and a `SingleObjective` reward; early stopped
    trials count as done.
  """
  return SearchHParams(
      search_algorithm=pax_fiddle.Config(Sweeping),
      search_reward=pax_fiddle.Config(
          SingleObjective,
          metric=metric,
          goal=goal,
          reward_for_nan=reward_for_nan,
      ),
      early_stopping=early_stopping,
      cross_step_metric_aggregator=cross_step_metric_aggregator,
      max_num_trials=max_num_trials,
      errors_to_skip=errors_to_skip,
      treats_early_stopped_trials_as_done=True,
      enable_dataset_tuning=enable_dataset_tuning,
      enable_train_programs_tuning=enable_train_programs_tuning,
  )


_TWO_OBJECTIVE_REWARDS = {
    'tunas': TunasAbsolute,
    'mnas_hard': MnasHard,
    'mnas_soft': MnasSoft,
}


def neural_architecture_search(
    metrics: Metric | Sequence[Metric],
    cost_objective: float | None = None,
    reward_type: str = 'tunas',
    exponent: float = -0.07,
    max_num_trials: int = 10000,
    errors_to_skip: ErrorsToSkip | None = None,
    cross_step_metric_aggregator: (
        pax_fiddle.Config[CrossStepMetricAggregator] | None
    ) = None,
    early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None,
    reward_for_nan: float | None = None,
) -> SearchHParams:
  """Search settings for architecture search by regularized evolution.

  Args:
    metrics: The quality metric, or `[quality, cost]`.
    cost_objective: The targeted cost (needed with two metrics).
    reward_type: With two metrics: 'tunas', 'mnas_hard' or 'mnas_soft'.
    exponent: The trade-off exponent of the two-objective reward.
    max_num_trials: The most trials.
    errors_to_skip: Errors that make a trial infeasible.
    cross_step_metric_aggregator: How the metrics of several steps become the
      trial's; None takes the last reported.
    early_stopping: A population-wise early stopping policy, or None.
    reward_for_nan: The reward when a metric is NaN; None keeps NaN.

  Returns:
    Settings with `RegularizedEvolution` and a `SingleObjective` (one metric)
    or `MultiObjective` (two) reward.
  """
  if isinstance(metrics, Metric):
    metrics = [metrics]
  metrics = list(metrics)
  if len(metrics) == 1:
    reward = pax_fiddle.Config(
        SingleObjective, metric=metrics[0], reward_for_nan=reward_for_nan
    )
  elif len(metrics) == 2:
    if cost_objective is None:
      raise ValueError(
          'cost objective must be provided (`cost_objective`) with two '
          'metrics.'
      )
    if reward_type not in _TWO_OBJECTIVE_REWARDS:
      raise ValueError(
          f'Unsupported reward type {reward_type!r} (`reward_type`); expected '
          f'one of {sorted(_TWO_OBJECTIVE_REWARDS)}.'
      )
    reward = pax_fiddle.Config(
        MultiObjective,
        metrics=metrics,
        aggregator_tpl=pax_fiddle.Config(
            _TWO_OBJECTIVE_REWARDS[reward_type],
            cost_objective=cost_objective,
            exponent=exponent,
        ),
        reward_for_nan=reward_for_nan,
    )
  else:
    raise ValueError(
        f'Only 1 or 2 metrics are supported (`metrics`), got {len(metrics)}.'
    )
  return SearchHParams(
      search_algorithm=pax_fiddle.Config(RegularizedEvolution),
      search_reward=reward,
      early_stopping=early_stopping,
      cross_step_metric_aggregator=cross_step_metric_aggregator,
      max_num_trials=max_num_trials,
      errors_to_skip=errors_to_skip,
  )


#
# Population-wise early stopping.
#


def _watched_value(metric: Metric | None) -> Callable[[Any], float]:
  """Reads `metric` (None: the reward) from a `pg.tuning.Measurement`."""

  def read(measurement: pg.tuning.Measurement) -> float:
    if metric is None:
      return measurement.reward
    return metric.get_value(measurement.metrics)

  return read


class EarlyStoppingByValue(BaseEarlyStoppingPolicy):
  """Stops the trials whose value at a step is below (above) a threshold.

  Attributes:
    step_values: `(step, threshold)` gates.
    metric: The metric watched; None watches the reward.
    maximize: If True, values below the threshold stop; else values above.
  """

  step_values: list[tuple[int, float]] | None = None
  metric: Metric | None = None
  maximize: bool = True

  def __call__(self) -> pg.early_stopping.StepWise:
    if not self.step_values:
      raise ValueError(
          'EarlyStoppingByValue.step_values must be a non-empty list of '
          f'(step, threshold), got {self.step_values!r}.'
      )
    factory = pg.early_stopping.early_stop_by_value(
        step_values=self.step_values,
        metric=_watched_value(self.metric),
        maximize=self.maximize,
    )
    return factory()


class EarlyStoppingByRank(BaseEarlyStoppingPolicy):
  """Stops the trials that rank poorly at a step.

  Attributes:
    step_ranks: `(step, rank or fraction of the population,
      min_histogram_size)` gates.
    metric: The metric watched; None watches the reward.
    maximize: If True, the largest value ranks first; else the smallest.
  """

  step_ranks: list[tuple[int, int | float, int]] | None = None
  metric: Metric | None = None
  maximize: bool = True

  def __call__(self) -> pg.early_stopping.StepWise:
    if not self.step_ranks:
      raise ValueError(
          'EarlyStoppingByRank.step_ranks must be a non-empty list of '
          f'(step, rank, min_histogram_size), got {self.step_ranks!r}.'
      )
    factory = pg.early_stopping.early_stop_by_rank(
        step_ranks=self.step_ranks,
        metric=_watched_value(self.metric),
        maximize=self.maximize,
    )
    return factory()


class EarlyStoppingError(BaseException):
  """Raised during a trial to stop it; the tuning loop catches it.

  It derives from `BaseException` so that `except Exception` in user code
  does not swallow it.

  Attributes:
    skip: Whether the trial is infeasible.
    skip_reason: Why, when skipped.
    step: The step of the stop.
    reward: The final reward, if given.
    metrics: The final metrics, if given.
    checkpoint: The trial's checkpoint path, if given.
  """

  def __init__(
      self,
      skip: bool = True,
      skip_reason: str | None = None,
      step: int | None = None,
      reward: float | None = None,
      metrics: dict[str, float] | None = None,
      checkpoint_path: str | None = None,
  ):
    """Initializer.

    Args:
      skip: If True, the trial is marked infeasible.
      skip_reason: Why it is skipped.
      step: The step of the stop; required when `skip` is False.
      reward: The final reward; else it is computed from `metrics`. One of
        them is required when `skip` is False.
      metrics: The final metrics.
      checkpoint_path: The trial's checkpoint path.
    """
    if not skip:
      if step is None:
        raise ValueError('`step` must be provided when `skip` is set to False.')
      if reward is None and metrics is None:
        raise ValueError(
            'At least one of `reward` and `metrics` should be provided when '
            '`skip` is set to False.'
        )
    super().__init__('A trial stopped early; the tuning loop handles this.')
    self.skip = skip
    self.skip_reason = skip_reason
    self.step = step
    self.reward = reward
    self.metrics = metrics
    self.checkpoint = checkpoint_path


#
# Parameter sweeps.
#

COMBINED_DECISION_ATTR = 'PARAMETER_SWEEP_COMBINATION'
COMBINED_DECISION_POINT_NAMES = 'COMBINED_DECISION_POINT_NAMES'


def _check_combinations(combinations: Any) -> None:
  """Raises ValueError unless `combinations` is a header plus equal rows."""
  if not isinstance(combinations, list) or len(combinations) < 2:
    raise ValueError(
        '`combinations` must be a list (of tuples) with at least two items. '
        '(a header of attribute names, then one row of values per trial); '
        f'got {combinations!r}.'
    )
  width = None
  for index, row in enumerate(combinations):
    if not isinstance(row, tuple) or (width is not None and len(row) != width):
      raise ValueError(
          '`combinations` must be a list of tuples of equal length; row '
          f'{index} is {row!r} in {combinations!r}.'
      )
    width = len(row)
    if not width:
      raise ValueError(
          f'`combinations` must have at least 1 columns: {combinations!r}.'
      )
    if index == 0 and not all(isinstance(name, str) for name in row):
      raise ValueError(
          'The first row of `combinations` must be a list of class attribute '
          f'names; got {row!r}.'
      )


def _combination_reader(index: int) -> property:
  """A property reading column `index` of the chosen combination."""

  def read(self):
    return getattr(self, COMBINED_DECISION_ATTR)[index]

  return property(read)


def parameter_sweep(
    combinations: list[tuple[Any, ...]] | None = None,
    *,
    metric: Metric | None = None,
    goal: str = 'maximize',
    enable_dataset_tuning: bool = True,
    enable_partitioner_tuning: bool = False,
    enable_train_programs_tuning: bool = False,
    errors_to_skip: ErrorsToSkip | None = None,
) -> Callable[[Type[Any]], Type[Any]]:
  """A class decorator that makes an experiment sweep its parameters.

  Without `combinations` the sweep covers the cartesian product of the
  experiment's hyper primitives. With them, `combinations[0]` names class
  attributes and each further row gives their values for one trial, e.g.
  `[('LEARNING_RATE', 'BATCH_SIZE'), (0.1, 32), (0.01, 64)]` runs two trials.

  Args:
    combinations: An optional header row plus value rows.
    metric: The trial objective; None reports 0 (all metrics are still
      recorded).
    goal: 'maximize' or 'minimize' the metric.
    enable_dataset_tuning: Whether the training input joins the search space.
    enable_partitioner_tuning: Whether the partitioner joins the search space.
    enable_train_programs_tuning: Whether the train programs join the search
      space.
    errors_to_skip: Errors that make a trial infeasible.

  Returns:
    A decorator returning a subclass of the experiment (same name, module and
    qualified name) whose `search()` gives `Sweeping` settings.
  """
  if combinations is not None:
    _check_combinations(combinations)
  search_reward = None
  if metric is not None:
    search_reward = pax_fiddle.Config(SingleObjective, metric=metric, goal=goal)

  def search(self) -> SearchHParams:
    del self  # The settings are the decorator's.
    return SearchHParams(
        search_algorithm=pax_fiddle.Config(Sweeping),
        search_reward=search_reward,
        treats_early_stopped_trials_as_done=True,
        train_to_end=True,
        enable_dataset_tuning=enable_dataset_tuning,
        enable_partitioner_tuning=enable_partitioner_tuning,
        enable_train_programs_tuning=enable_train_programs_tuning,
        errors_to_skip=errors_to_skip,
    )

  def decorate(cls: Type[Any]) -> Type[Any]:
    if not isinstance(cls, type):
      raise TypeError(f'parameter_sweep decorates a class, got {cls!r}.')
    namespace = {'search': search}
    if combinations:
      names = combinations[0]
      for index, name in enumerate(names):
        if not hasattr(cls, name):
          raise ValueError(f'Attribute {name!r} does not exist in {cls!r}.')
        namespace[name] = _combination_reader(index)
      namespace[COMBINED_DECISION_ATTR] = pg.oneof(list(combinations[1:]))
      namespace[COMBINED_DECISION_POINT_NAMES] = names
    namespace['__module__'] = cls.__module__
    namespace['__qualname__'] = cls.__qualname__
    namespace['__doc__'] = cls.__doc__
    swept = type(cls)(cls.__name__, (cls,), namespace)
    if combinations:
      enable_class_level_hyper_primitives(swept)
    return swept

  return decorate
