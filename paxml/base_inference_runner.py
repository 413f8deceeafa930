"""The interface of inference runners: infer a batch, serialize the outputs.

Public names: BaseInferenceRunner.

A runner holds a model and defines `infer` (a pure, jittable function of the
train state, a PRNG key, the variables' metadata and an input batch) and
`output_schema`, a NestedMap of `tfds.features` connectors describing one
output example. `serialize_outputs` splits a batch of outputs into examples
and serializes each with that schema (needs tensorflow_datasets, imported
when called).

Example:

  class Logprobs(base_inference_runner.BaseInferenceRunner):
    output_schema = NestedMap(logprobs=tfds.features.Tensor(...))

    def infer(self, train_state, prng_key, var_weight_hparams, input_batch):
      return NestedMap(logprobs=...)
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import Any

from paxml import train_states
from praxis import base_hyperparams
from praxis import base_model
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
# Nested base_layer.WeightHParams (the variables' metadata).
NestedWeightHParams = Any
PRNGKey = pytypes.PRNGKey
TrainState = train_states.TrainState


class BaseInferenceRunner(base_hyperparams.FiddleBaseParameterizable,
                          abc.ABC):
  """Runs inference with `model` and serializes its outputs (see module).

  Attributes:
    model: The model to infer with.
  """

  _model: Any = dataclasses.field(init=False, repr=False)
  model: base_model.BaseModel = None

  def __post_init__(self):
    self._model = self.model

  @abc.abstractmethod
  def infer(self, train_state: TrainState, prng_key: PRNGKey,
            var_weight_hparams: NestedWeightHParams,
            input_batch: NestedMap) -> NestedMap:
    """A batch of outputs for `input_batch` (jittable)."""

  @property
  @abc.abstractmethod
  def output_schema(self) -> NestedMap:
    """A NestedMap of `tfds.features` connectors for one output example."""

  def serialize_outputs(self, outputs: NestedMap) -> list[bytes]:
    """The outputs, split along the batch axis, each serialized as schema'd."""
    tfds = importlib.import_module('tensorflow_datasets')
    features = tfds.features.FeaturesDict(self.output_schema)
    return [features.serialize_example(example)
            for example in py_utils.tree_unstack(outputs, 0)]
