"""BaseModel: the layer at the top of a Pax model, with its loss and decoding.

Public names: BaseModel, Predictions, DecodeOut, ProcessDecodeOut,
WeightedScalars, Metrics.

A model is a layer with four entry points. Training and evaluation call the
model itself, which is `compute_loss(compute_predictions(batch), batch)`;
decoding calls `decode`, and the host post-processes its output with
`process_decode_out`. A regression model:

  class Regression(base_model.BaseModel):
    dims: int = 2

    def setup(self):
      self.create_variable('w', base_layer.WeightHParams(shape=[self.dims]))

    def compute_predictions(self, input_batch):
      return input_batch.x @ self.theta.w

    def compute_loss(self, predictions, input_batch):
      mse = jnp.mean((predictions - input_batch.y) ** 2)
      return {'loss': (mse, jnp.array(1.0))}, {'predictions': predictions}
"""

from __future__ import annotations

from typing import Any, Sequence

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
Metrics = pytypes.Metrics
Predictions = JTensor | NestedMap | dict[str, Any] | dict[int, Any]
DecodeOut = tuple[WeightedScalars, NestedMap, Metrics]
ProcessDecodeOut = tuple[WeightedScalars, Sequence[tuple[str, Any]], Metrics]


def _abstract(model: BaseModel, method: str) -> NotImplementedError:
  return NotImplementedError(
      f'{type(model).__name__} must define {method}() to be used this way.'
  )


class BaseModel(base_layer.BaseLayer):
  """The base of every Pax model; subclasses define the methods they use."""

  def compute_predictions(self, input_batch: NestedMap) -> Predictions:
    """The model's outputs for `input_batch` (logits, regression values, ...).

    Args:
      input_batch: The batch, a NestedMap of arrays.

    Returns:
      An array, a NestedMap or a dict.
    """
    raise _abstract(self, 'compute_predictions')

  def compute_loss(
      self, predictions: Predictions, input_batch: NestedMap
  ) -> tuple[WeightedScalars, dict[str, Any]]:
    """Losses and metrics of `predictions` against `input_batch`.

    Args:
      predictions: What `compute_predictions` returned.
      input_batch: The batch.

    Returns:
      (weighted scalars, per-example outputs): a dict of `(value, weight)`
      pairs, one of which the learner trains on (its `loss_name`); and a dict
      of arrays whose first dimension is the batch.
    """
    raise _abstract(self, 'compute_loss')

  def __call__(
      self, input_batch: NestedMap
  ) -> tuple[WeightedScalars, dict[str, Any]]:
    """`compute_loss(compute_predictions(input_batch), input_batch)`."""
    predictions = self.compute_predictions(input_batch)
    return self.compute_loss(predictions, input_batch)

  def decode(self, input_batch: NestedMap) -> DecodeOut:
    """Decodes a batch (runs inside the compiled decode step).

    Args:
      input_batch: The batch.

    Returns:
      (weighted scalars, results, metrics): `(value, weight)` pairs; a
      NestedMap of per-example outputs for `process_decode_out`; a dict of
      metric objects (may be empty).
    """
    raise _abstract(self, 'decode')

  def process_decode_out(
      self, input_obj: Any, decode_out: NestedMap
  ) -> ProcessDecodeOut:
    """Turns one batch of `decode` results into host-side outputs.

    Args:
      input_obj: The input (a `BaseInput`), e.g. for its tokenizer.
      decode_out: The results of `decode`, as numpy arrays.

    Returns:
      (weighted scalars, [(key, value), ...] one per example, metrics).
    """
    raise _abstract(self, 'process_decode_out')
