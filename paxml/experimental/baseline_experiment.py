"""Baseline experiments: high-level settings that lower to a full config.

Public names: BaselineExperiment, lower.

A baseline is a dataclass whose fields are high-level settings (a model
width, a learning rate) and whose `experiment_fixture()` returns the whole
`ParameterizedExperiment` config derived from them. Two views of it:

* `highlevel_config(**settings)`: a config whose fields are the settings;
  building it builds the experiment.
* `lowlevel_config(**settings)` (= `lower(highlevel_config(...))`): the
  experiment config itself, with every low-level field editable, e.g. from
  the command line:

    --fdl_config=my.module.MyBaseline.lowlevel_config(width=1024) \
    --fdl_set=task.train.learner.optimizer.learning_rate=1e-4

Example:

  @dataclasses.dataclass
  class MyBaseline(baseline_experiment.BaselineExperiment):
    width: int = 128

    def experiment_fixture(self):
      return pax_fiddle.Config(ParameterizedExperiment, task=...)
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import inspect
from typing import Any

import fiddle as fdl
from paxml import parameterized_experiment
from praxis import pax_fiddle

_ExperimentConfig = pax_fiddle.Config[
    parameterized_experiment.ParameterizedExperiment]


@dataclasses.dataclass
class BaselineExperiment(metaclass=abc.ABCMeta):
  """A dataclass of high-level settings (see the module docstring).

  Subclasses are dataclasses too (decorate them) and define
  `experiment_fixture`.
  """

  @abc.abstractmethod
  def experiment_fixture(self) -> _ExperimentConfig:
    """The experiment's config, derived from this instance's settings."""

  @classmethod
  def make_experiment(
      cls, **highlevel_settings: Any
  ) -> parameterized_experiment.ParameterizedExperiment:
    """The built experiment of these settings (the high-level config's fn)."""
    return pax_fiddle.build(cls(**highlevel_settings).experiment_fixture())

  @classmethod
  def highlevel_config(cls, **highlevel_settings: Any) -> pax_fiddle.Config:
    """A config of `make_experiment`: its fields are the settings."""
    return pax_fiddle.Config(cls.make_experiment, **highlevel_settings)

  @classmethod
  def lowlevel_config(cls, **highlevel_settings: Any) -> _ExperimentConfig:
    """The experiment config of these settings, every field editable."""
    return lower(cls.highlevel_config(**highlevel_settings))


def lower(config: pax_fiddle.Config) -> _ExperimentConfig:
  """The experiment config that a high-level config stands for.

  Args:
    config: A config of `SomeBaseline.make_experiment` (from
      `highlevel_config`), its fields being the baseline's settings.

  Returns:
    `SomeBaseline(**settings).experiment_fixture()`, sub-configs among the
    settings built first.

  Raises:
    ValueError: if `config` is not a config of a baseline's `make_experiment`.
  """
  fn = fdl.get_callable(config)
  owner = getattr(fn, '__self__', None)
  if not (inspect.ismethod(fn) and isinstance(owner, type)
          and issubclass(owner, BaselineExperiment)):
    raise ValueError('Expected config of BaselineExperiment.make_experiment() '
                     f'classmethod, got {config}')
  settings = copy.deepcopy(config)
  pax_fiddle.update_callable(settings, owner)
  return pax_fiddle.build(settings).experiment_fixture()
