"""Turns a BaseExperiment subclass into a ParameterizedExperiment config.

Public names: from_legacy.

Example:

  config = make_parameterized_experiment.from_legacy(MyExperiment)
  experiment = pax_fiddle.build(config)
"""

from __future__ import annotations

from paxml import base_experiment
from paxml import parameterized_experiment
from paxml.tools.fiddle import config_normalization
from praxis import pax_fiddle


def from_legacy(
    experiment_cls: type[base_experiment.BaseExperiment],
    *,
    normalizer: config_normalization.ConfigNormalizer | None = (
        config_normalization.default_normalizer()),
    has_train_dataset: bool = True,
    has_input_specs_provider: bool = True,
) -> pax_fiddle.Config[parameterized_experiment.ParameterizedExperiment]:
  """The ParameterizedExperiment config equivalent to `experiment_cls()`.

  Args:
    experiment_cls: The experiment class.
    normalizer: Applied to the result; None leaves it as the methods gave it.
    has_train_dataset: Read `train_datasets()` (False for experiments that
      have none and may raise).
    has_input_specs_provider: Read `get_input_specs_provider_params()`.

  Returns:
    A config with `task`, `eval_datasets` and, as available,
    `train_datasets`, `input_specs_provider` and `decode_datasets`.
  """
  experiment = experiment_cls()
  config = pax_fiddle.Config(
      parameterized_experiment.ParameterizedExperiment,
      task=experiment.task(),
      eval_datasets=[d for d in experiment.datasets() if not d.is_training])
  if has_train_dataset:
    config.train_datasets = experiment.train_datasets()
  if has_input_specs_provider:
    config.input_specs_provider = experiment.get_input_specs_provider_params()
  decode = list(experiment.decode_datasets())
  if decode:
    config.decode_datasets = decode
  return normalizer(config) if normalizer else config
