"""A chain of layers, each fed the outputs of the one before.

Public names: Sequential.

  seq = pax_fiddle.Config(sequential.Sequential, name='seq', layers=[
      pax_fiddle.Config(linears.Linear, input_dims=4, output_dims=8),
      pax_fiddle.Config(activations.ReLU),
  ])

The layers are instances (built with the Sequential); they become its
children `layers_0`, `layers_1`, ...
"""

from __future__ import annotations

from typing import Any, Sequence

from praxis import base_layer


def call_chain(layers: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
  """Calls `layers` in turn; the first gets `args`/`kwargs`.

  A tuple output is passed on as positional arguments, a dict (or NestedMap)
  as keyword arguments, anything else as the single argument.

  Args:
    layers: Callables.
    *args: Positional inputs of the first.
    **kwargs: Keyword inputs of the first.

  Returns:
    The outputs of the last.
  """
  outputs = layers[0](*args, **kwargs)
  for layer in layers[1:]:
    if isinstance(outputs, tuple):
      outputs = layer(*outputs)
    elif isinstance(outputs, dict):
      outputs = layer(**outputs)
    else:
      outputs = layer(outputs)
  return outputs


class Sequential(base_layer.BaseLayer):
  """Applies `layers` one after another (see `call_chain`).

  Attributes:
    layers: The layers (instances), in order.
  """

  layers: Sequence[base_layer.BaseLayer] | None = None

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    if not self.layers:
      raise ValueError(
          f'{type(self).__name__} ({self.name}): layers is empty.'
      )
    return call_chain(self.layers, *args, **kwargs)
