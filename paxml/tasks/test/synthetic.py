"""Synthetic experiments used by the registry and runner tests.

Public names: SyntheticClassifier, SharedNameExperiment.
"""

from paxml import base_experiment
from paxml import experiment_registry
from praxis import pax_fiddle
from praxis.layers import activations


@experiment_registry.register
class SyntheticClassifier(base_experiment.BaseExperiment):
  """The smallest experiment: no data, an identity 'task'."""

  def datasets(self):
    return []

  def task(self):
    return pax_fiddle.Config(activations.Identity)


@experiment_registry.register
class SharedNameExperiment(SyntheticClassifier):
  """A second experiment, to test lookups by name."""
