"""The interfaces of Pax's AutoML: search settings, metrics and base classes.

This module needs PyGlove (`pip install 'pax-jax[automl]'`); nothing the
runner imports unconditionally imports it.

Public names:
  MetricAggregationFn: `Callable[[Sequence[float]], float]`.
  BaseAlgorithm: configurable factory of a `pg.DNAGenerator`.
  BaseEarlyStoppingPolicy: configurable factory of a PyGlove early stopping
    policy for a whole population of trials.
  BaseReward: turns a dict of metrics into one float reward.
  CrossStepMetricAggregator: turns the metrics reported at several steps into
    one dict of metrics.
  BaseExperiment: an alias of `Any` (no dependency on `base_experiment`).
  SearchHParams: the settings of a search (`BaseExperiment.search()`).
  MetricType: the families of metrics Pax reports.
  MetricAggregator: the builtin ways to reduce several matching values.
  Metric: names a metric and finds its value(s) in a dict of metrics.
  enable_class_level_hyper_primitives: lets the hyper primitives assigned to
    class attributes of an experiment be seen by a search.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import inspect
import re
from typing import Any, Callable, Sequence, Type

from praxis import base_hyperparams
from praxis import pax_fiddle
import pyglove as pg


MetricAggregationFn = Callable[[Sequence[float]], float]

# `base_experiment` imports this module lazily, so it cannot be named here.
BaseExperiment = Any


class BaseAlgorithm(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """A search algorithm: calling it gives a fresh `pg.DNAGenerator`."""

  @abc.abstractmethod
  def __call__(self) -> pg.DNAGenerator:
    """The PyGlove DNA generator that proposes the trials."""


class BaseEarlyStoppingPolicy(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """A policy that stops the unpromising trials of a population early."""

  @abc.abstractmethod
  def __call__(self) -> pg.tuning.EarlyStoppingPolicy:
    """The PyGlove early stopping policy."""


class BaseReward(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Computes the reward of a trial from the metrics it reported."""

  @abc.abstractmethod
  def __call__(self, metrics_dict: dict[str, float], global_step: int) -> float:
    """The reward for `metrics_dict`, reported at `global_step`."""

  @property
  @abc.abstractmethod
  def used_metrics(self) -> Sequence[Metric]:
    """The `Metric`s the reward reads."""

  def _any_used(self, kind: str) -> bool:
    return any(getattr(m, kind) for m in self.used_metrics)

  @property
  def needs_train(self) -> bool:
    """Whether a training metric is read."""
    return self._any_used('is_train_metric')

  @property
  def needs_eval(self) -> bool:
    """Whether an evaluation metric is read."""
    return self._any_used('is_eval_metric')

  @property
  def needs_decode(self) -> bool:
    """Whether a decoding metric is read."""
    return self._any_used('is_decode_metric')


class CrossStepMetricAggregator(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Reduces the metrics reported at several steps to a single dict."""

  @abc.abstractmethod
  def __call__(
      self, metrics_across_steps: Sequence[tuple[int, dict[str, float]]]
  ) -> dict[str, float]:
    """Reduces `(step, metrics)` pairs to the metrics the reward reads."""


ErrorsToSkip = list[Type[Exception] | tuple[Type[Exception], str]]


@dataclasses.dataclass
class SearchHParams:
  """The settings of an AutoML search.

  Attributes:
    search_algorithm: A `BaseAlgorithm` config.
    search_reward: A `BaseReward` config; None gives every trial a reward of 0
      (for sweeps and random search).
    early_stopping: A `BaseEarlyStoppingPolicy` config, or None for none (a
      trial may still stop itself by raising `automl.EarlyStoppingError`).
    cross_step_metric_aggregator: How the metrics of several steps become
      those of the trial; None takes the last reported ones.
    max_num_trials: The most trials the search runs.
    errors_to_skip: Errors that mark a trial infeasible instead of failing
      the search: exception types, or `(type, regex on the message)` pairs.
    prior_study_ids: Studies whose completed trials warm up this search.
    add_prior_trials: Whether trials of `prior_study_ids` are copied here.
    add_experiment_config_to_metadata: Whether each trial's metadata holds the
      serialized experiment config.
    treats_early_stopped_trials_as_done: Whether early stopped trials (that
      reported a measurement) feed their reward back to the algorithm.
    train_to_end: Whether training runs to `num_train_steps` even when no
      evaluation or decoding is left.
    enable_dataset_tuning: Whether the training input joins the search space.
    enable_partitioner_tuning: Whether the partitioner joins the search space.
    enable_train_programs_tuning: Whether the train programs join the search
      space.
    vizier_service_endpoint: A Vizier endpoint, for debugging.
  """

  search_algorithm: pax_fiddle.Config[BaseAlgorithm] | None = None
  search_reward: pax_fiddle.Config[BaseReward] | None = None
  early_stopping: pax_fiddle.Config[BaseEarlyStoppingPolicy] | None = None
  cross_step_metric_aggregator: (
      pax_fiddle.Config[CrossStepMetricAggregator] | None
  ) = None
  max_num_trials: int = 1000000
  errors_to_skip: ErrorsToSkip | None = None
  prior_study_ids: list[int] | None = None
  add_prior_trials: bool = False
  add_experiment_config_to_metadata: bool = True
  treats_early_stopped_trials_as_done: bool = False
  train_to_end: bool = False
  enable_dataset_tuning: bool = False
  enable_partitioner_tuning: bool = False
  enable_train_programs_tuning: bool = False
  vizier_service_endpoint: str | None = None


class MetricType(enum.Enum):
  """The families of metrics, by the key prefix Pax reports them under."""

  CUSTOM = 0
  TRAIN_METRICS = 1
  EVAL_TRAIN_METRICS = 2
  EVAL_METRICS = 3
  EVAL_SCORING_METRICS = 4
  DECODE_METRICS = 5

  @classmethod
  def metric_schema(cls, metric_type: MetricType) -> tuple[str, str]:
    """`(category, section)` of the keys of `metric_type`."""
    try:
      return _SCHEMAS[metric_type]
    except KeyError:
      raise ValueError(
          f'`metric_type` must be a MetricType, got {metric_type!r}.'
      ) from None

  @classmethod
  def applies_to_multiple_datasets(cls, metric_type: MetricType) -> bool:
    """Whether keys of `metric_type` are reported once per dataset."""
    return metric_type in (
        MetricType.EVAL_METRICS,
        MetricType.EVAL_SCORING_METRICS,
        MetricType.DECODE_METRICS,
    )


_SCHEMAS = {
    MetricType.CUSTOM: ('', ''),
    MetricType.TRAIN_METRICS: ('train', ''),
    MetricType.EVAL_TRAIN_METRICS: ('eval_train', 'metrics'),
    MetricType.EVAL_METRICS: ('eval_test', 'metrics'),
    MetricType.EVAL_SCORING_METRICS: ('eval_test', 'scoring_eval'),
    MetricType.DECODE_METRICS: ('decode_test', ''),
}


class MetricAggregator(str, enum.Enum):
  """Builtin reductions of the several values a `Metric` may match."""

  MAX = 0
  MIN = 1
  AVERAGE = 2
  SUM = 3


def _average(values: Sequence[float]) -> float:
  return sum(values) / len(values)


_BUILTIN_AGGREGATORS = {
    MetricAggregator.MAX: max,
    MetricAggregator.MIN: min,
    MetricAggregator.AVERAGE: _average,
    MetricAggregator.SUM: sum,
}


def _aggregation_fn(aggregator: Any) -> MetricAggregationFn | None:
  """The function behind `Metric.aggregator`."""
  if aggregator is None:
    return None
  for member, fn in _BUILTIN_AGGREGATORS.items():
    if aggregator == member or (
        isinstance(aggregator, str) and aggregator.upper() == member.name
    ):
      return fn
  if callable(aggregator):
    return aggregator
  raise ValueError(
      f'Unsupported aggregator {aggregator!r} for `Metric.aggregator`: '
      'expected a member of `automl.MetricAggregator` (or its name) or a '
      'callable taking a sequence of floats.'
  )


# The key prefixes that tell which part of the run reports a metric.
_TRAIN_PREFIXES = ('^train', '^num_params')
_EVAL_TRAIN_PREFIXES = ('^eval_train',)
_EVAL_PREFIXES = ('^eval_test', '^eval_steps')
_DECODE_PREFIXES = ('^decode_test', '^decode_steps')


@dataclasses.dataclass
class Metric:
  """A metric a search reads, matched against the keys Pax reports.

  Keys look like `train/loss`, `eval_train/metrics/log_pplx`,
  `eval_test_<dataset>/metrics/<name>`, `eval_test_<dataset>/scoring_eval/
  <name>`, `decode_test_<dataset>/<name>` or custom names such as
  `train_steps_per_sec`; each may end with `:<sub_experiment_id>`. Matching
  ignores case.

  Attributes:
    metric_name: The name of the metric (a regular expression fragment).
    metric_type: Its family.
    dataset_name: The dataset; None matches every dataset.
    sub_experiment_id: The sub-experiment; None matches them all.
    aggregator: How `get_value` reduces several matching values: a
      `MetricAggregator` or a callable; None makes several matches an error.
  """

  metric_name: str
  metric_type: MetricType = MetricType.CUSTOM
  dataset_name: str | None = None
  sub_experiment_id: str | None = None
  aggregator: MetricAggregator | MetricAggregationFn | None = None

  def __post_init__(self):
    if not isinstance(self.metric_name, str) or not self.metric_name:
      raise ValueError(
          'Metric.metric_name must be a non-empty string, got '
          f'{self.metric_name!r}.'
      )
    if not isinstance(self.metric_type, MetricType):
      raise ValueError(
          'Metric.metric_type must be an automl.MetricType, got '
          f'{self.metric_type!r}.'
      )
    self._reduce = _aggregation_fn(self.aggregator)
    self._regex = re.compile(self.pattern, re.IGNORECASE)

  @property
  def pattern(self) -> str:
    """The regular expression the keys of this metric match."""
    category, section = MetricType.metric_schema(self.metric_type)
    parts = []
    if MetricType.applies_to_multiple_datasets(self.metric_type):
      parts.append(f'{category}_{self.dataset_name or "[^/]+"}')
    elif category:
      parts.append(category)
    if section:
      parts.append(section)
    parts.append(self.metric_name)
    if self.sub_experiment_id is None:
      tail = '(:.+)?'
    else:
      tail = ':' + self.sub_experiment_id
    return '^' + '/'.join(parts) + tail + '$'

  def _starts_with(self, prefixes: tuple[str, ...]) -> bool:
    return self.pattern.startswith(prefixes)

  @property
  def is_train_metric(self) -> bool:
    """Whether training reports this metric."""
    return self._starts_with(_TRAIN_PREFIXES)

  @property
  def is_eval_train_metric(self) -> bool:
    """Whether evaluation on the training data reports this metric."""
    return self._starts_with(_EVAL_TRAIN_PREFIXES)

  @property
  def is_eval_metric(self) -> bool:
    """Whether evaluation on the test data reports this metric."""
    return self._starts_with(_EVAL_PREFIXES)

  @property
  def is_decode_metric(self) -> bool:
    """Whether decoding reports this metric."""
    return self._starts_with(_DECODE_PREFIXES)

  @property
  def applies_to_multiple_datasets(self) -> bool:
    """Whether this metric may match the keys of several datasets."""
    return self.dataset_name is None and (
        MetricType.applies_to_multiple_datasets(self.metric_type)
    )

  def match_items(
      self, metric_dict: dict[str, float]
  ) -> list[tuple[str, float]]:
    """The `(key, value)` items of `metric_dict` this metric matches."""
    return [(k, v) for k, v in metric_dict.items() if self._regex.match(k)]

  def get_values(self, metric_dict: dict[str, float]) -> list[float]:
    """The values of the matching items, in the dict's order."""
    return [v for _, v in self.match_items(metric_dict)]

  def get_value(self, metric_dict: dict[str, float]) -> float:
    """The single value of this metric in `metric_dict`.

    Args:
      metric_dict: Reported metrics, by key.

    Returns:
      The matching value, or the `aggregator`'s reduction of several.

    Raises:
      KeyError: nothing matches.
      ValueError: several keys match and there is no `aggregator`.
    """
    items = self.match_items(metric_dict)
    if not items:
      raise KeyError(
          f'Metric {self.pattern!r} does not match with any metrics; the '
          f'metrics are {list(metric_dict)}.'
      )
    if len(items) == 1:
      return items[0][1]
    if self._reduce is None:
      raise ValueError(
          f'Found multiple metrics that match {self.pattern!r} and no '
          f'`aggregator` to reduce them: {items}.'
      )
    return self._reduce([v for _, v in items])

  # Metrics that are not reported under a category.
  @classmethod
  def train_steps_per_second(
      cls,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """Training steps per second."""
    return cls('train_steps_per_sec', sub_experiment_id=sub_experiment_id,
               aggregator=aggregator)

  @classmethod
  def eval_steps_per_second(
      cls,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """Evaluation steps per second."""
    return cls('eval_steps_per_sec', sub_experiment_id=sub_experiment_id,
               aggregator=aggregator)

  @classmethod
  def decode_steps_per_second(
      cls,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """Decoding steps per second."""
    return cls('decode_steps_per_sec', sub_experiment_id=sub_experiment_id,
               aggregator=aggregator)

  @classmethod
  def num_params(
      cls,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """The number of model parameters."""
    return cls('num_params', sub_experiment_id=sub_experiment_id,
               aggregator=aggregator)

  # Metrics of a category.
  @classmethod
  def train(
      cls,
      metric_name: str,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """A metric of the training steps (`train/<name>`)."""
    return cls(metric_name, MetricType.TRAIN_METRICS,
               sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def eval_train(
      cls,
      metric_name: str,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """A metric of evaluation on the training data."""
    return cls(metric_name, MetricType.EVAL_TRAIN_METRICS,
               sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def eval(
      cls,
      metric_name: str,
      dataset_name: str | None = None,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """A metric of evaluation on a test dataset."""
    return cls(metric_name, MetricType.EVAL_METRICS, dataset_name,
               sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def eval_scoring(
      cls,
      metric_name: str,
      dataset_name: str | None = None,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """A scoring metric of evaluation on a test dataset."""
    return cls(metric_name, MetricType.EVAL_SCORING_METRICS, dataset_name,
               sub_experiment_id=sub_experiment_id, aggregator=aggregator)

  @classmethod
  def decode(
      cls,
      metric_name: str,
      dataset_name: str | None = None,
      sub_experiment_id: str | None = None,
      aggregator: str | MetricAggregationFn | None = None,
  ) -> Metric:
    """A metric of decoding a dataset."""
    return cls(metric_name, MetricType.DECODE_METRICS, dataset_name,
               sub_experiment_id=sub_experiment_id, aggregator=aggregator)


def _hyper_property(attr: str, hyper: pg.hyper.HyperPrimitive) -> property:
  """A property that re-creates `hyper` (named `attr` if unnamed) on read.

  Creating the primitive anew on every read is what lets a PyGlove
  `DynamicEvaluationContext` collect it (and later substitute its decision).

  Args:
    attr: The class attribute.
    hyper: The primitive assigned to it.

  Returns:
    The property; assigning to it on an instance overrides it there.
  """
  init_args = dict(hyper.sym_init_args)
  if init_args.get('name') is None:
    init_args['name'] = attr
  hyper_cls = type(hyper)
  slot = f'_PROPERTY_{attr}'

  def read(self):
    if slot in vars(self):
      return vars(self)[slot]
    return hyper_cls(**init_args)

  def write(self, value):
    setattr(self, slot, value)

  return property(read, write)


def enable_class_level_hyper_primitives(cls: Type[Any]) -> None:
  """Makes the hyper primitives in class attributes of `cls` searchable.

  Every attribute of `cls` (own or inherited) holding a PyGlove hyper
  primitive (`pg.oneof`, `pg.floatv`, a `pg.hyper.CustomHyper`...) becomes a
  property that creates the primitive on each read, named after the
  attribute unless it has a name.

  Args:
    cls: A class, usually a `BaseExperiment` subclass.
  """
  if not inspect.isclass(cls):
    raise TypeError(f'`cls` must be a class, got {cls!r}.')
  hypers = inspect.getmembers(
      cls, lambda v: isinstance(v, pg.hyper.HyperPrimitive)
  )
  for attr, hyper in hypers:
    setattr(cls, attr, _hyper_property(attr, hyper))
