"""An experiment's input specs, from its specs provider and its input.

Public names: extract_input_specs, specs_to_string.

The two should agree: the runner initializes the model from the provider's
specs and then trains on the input's batches.
"""

from __future__ import annotations

import pprint
from typing import Any

from absl import logging
import jax
from paxml import base_experiment
from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle

instantiate = base_hyperparams.instantiate


def _provider_specs(experiment: base_experiment.BaseExperiment) -> Any:
  """The provider's specs, or None when the provider just reads the input
  (or, having no training input, there is no default provider)."""
  try:
    provider_p = experiment.get_input_specs_provider_params()
  except ValueError as e:  # The default provider needs one training input.
    logging.info('No input specs provider: %s', e)
    return None
  if pax_fiddle.get_callable(provider_p) is (
      base_input.DatasetInputSpecsProvider):
    return None
  return instantiate(provider_p).get_input_specs()


def extract_input_specs(experiment_config: base_experiment.BaseExperiment
                        ) -> tuple[Any, Any]:
  """(specs from the input specs provider, specs of a training batch).

  Args:
    experiment_config: The experiment_config.

  Returns:
    Nested `jax.ShapeDtypeStruct`s; the first is None when the provider is
    the default one (which reads the training input), the second when the
    experiment_config has no training input.
  """
  from_provider = _provider_specs(experiment_config)
  train = [d for d in experiment_config.datasets() if d.is_training]
  if not train:
    return from_provider, None
  batch = instantiate(train[0].clone()).get_next_padded()
  return from_provider, jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch)


def specs_to_string(experiment_name: str, specs: tuple[Any, Any]) -> str:
  """The two specs as text, under the experiment's name."""
  from_provider, from_input = specs
  printer = pprint.PrettyPrinter(indent=2)
  return '\n'.join([experiment_name, 'From InputSpecsProvider:',
                    printer.pformat(from_provider),
                    'From training input pipeline:',
                    printer.pformat(from_input), '\n\n'])
