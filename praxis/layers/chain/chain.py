"""`Chain`: calls its layers in turn, treating the arguments as a stack.

Public names: Chain, call_chain, call_chained_layer, ensure_tuple.

Each layer takes as many leading arguments as its `__call__` requires
(parameters without defaults), plus the keyword arguments it names; its
outputs replace those leading arguments, and the rest of the stack stays:

  outs = layer(*args[:n], **matching_kwargs)
  args = outs + args[len(outs):]

So a layer of `(inputs, paddings) -> outputs` followed by one of
`(inputs, paddings) -> (outputs, paddings)` sees the paddings passed along.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from praxis import base_layer


def ensure_tuple(x: Any) -> tuple[Any, ...]:
  """`x` if it is a tuple, else `(x,)`."""
  return x if isinstance(x, tuple) else (x,)


def _name(layer: Any) -> str:
  return getattr(layer, 'name', '') or ''


def _required_count(signature: inspect.Signature,
                    kwargs: dict[str, Any]) -> int | None:
  """Leading required positional parameters (None: the layer is variadic)."""
  count = 0
  for name, param in signature.parameters.items():
    if name in kwargs or param.default is not inspect.Parameter.empty:
      break
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
      return None
    count += 1
  return count


def call_chained_layer(layer: Callable[..., Any], *args: Any,
                       **kwargs: Any) -> Any:
  """Calls `layer` on the leading arguments it requires; returns the new stack.

  Args:
    layer: The layer (or any callable).
    *args: The argument stack.
    **kwargs: Keyword arguments; passed when `layer` names them (all of them
      to a variadic layer).

  Returns:
    The stack with the leading arguments replaced by the outputs: a tuple, or
    the single remaining value.
  """
  signature = inspect.signature(layer.__call__)
  count = _required_count(signature, kwargs)
  if count is None:
    outs = layer(*args, **kwargs)
  else:
    if count > len(args):
      raise ValueError(
          f'Layer name={_name(layer)} needs {count} positional arguments but '
          f'the chain has {len(args)} (signature {signature}).'
      )
    matching = {k: v for k, v in kwargs.items()
                if k in signature.parameters}
    outs = layer(*args[:count], **matching)
  outs = [] if outs is None else list(ensure_tuple(outs))
  stack = outs + list(args[len(outs):])
  return tuple(stack) if len(stack) > 1 else stack[0]


def call_chain(layers: Sequence[Callable[..., Any] | None], *args: Any,
               **kwargs: Any) -> list[Any]:
  """Calls `layers` (None entries skipped) in turn; each one's outputs.

  Args:
    layers: The layers.
    *args: The initial argument stack.
    **kwargs: Passed to every layer that names them.

  Returns:
    The stack after each layer (the inputs alone if there is no layer).
  """
  outputs = []
  stack = args
  for i, layer in enumerate(l for l in layers if l is not None):
    try:
      out = call_chained_layer(layer, *stack, **kwargs)
    except Exception as e:
      raise type(e)(f'{e} (chain layer index={i} name={_name(layer)})') from e
    outputs.append(out)
    stack = ensure_tuple(out)
  if not outputs:
    return [args if len(args) > 1 else args[0]]
  return outputs


class Chain(base_layer.BaseLayer):
  """Calls `layers` in turn, passing the argument stack (see `call_chain`).

  Attributes:
    preserve_adopted_names: Keep the names the layers were configured with.
    layers: The layers (instances built with the Chain).
  """

  preserve_adopted_names: bool = True
  layers: Sequence[base_layer.BaseLayer] | None = None

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    """The last layer's outputs."""
    return self.call_chain(*args, **kwargs)[-1]

  def call_chain(self, *args: Any, **kwargs: Any) -> list[Any]:
    """Every layer's outputs, in order."""
    return call_chain(self.layers or [], *args, **kwargs)
