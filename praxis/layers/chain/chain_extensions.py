"""Configs of common chains, and the small layers they use.

Public names: chain, copy_n_times, repeat, add_residual, AddResidual,
apply_padding, ApplyPadding, dict_to_args, DictToArgs, log_args, LogArgs,
full_like, FullLike, feed_forward, kwargs_with_name.

  mlp = chain.chain(
      chain.feed_forward(2, 8, pax_fiddle.Config(activations.Swish)),
      chain.copy_n_times(3, chain.feed_forward(8, 8)),
      chain.feed_forward(8, 3),
  )
"""

from __future__ import annotations

import collections
import copy
from typing import Any, Sequence

from absl import logging
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import repeats
from praxis.layers.chain import chain as chain_lib

Config = pax_fiddle.Config
JTensor = pytypes.JTensor
LayerTpl = Config[base_layer.BaseLayer]


def kwargs_with_name(default_name: str, **kwargs: Any) -> dict[str, Any]:
  """`kwargs`, with `name=default_name` unless a name is given."""
  return kwargs if 'name' in kwargs else dict(kwargs, name=default_name)


def _unique_names(layers_tpl: Sequence[LayerTpl | None]) -> list[LayerTpl]:
  """Copies of the (non-empty) configs; repeated names get 0, 1, ... added."""
  layers_tpl = [l for l in layers_tpl if l]
  names = [l.name or 'layers' for l in layers_tpl]
  totals = collections.Counter(names)
  seen = collections.Counter()
  named = []
  for layer, name in zip(layers_tpl, names):
    suffix = str(seen[name]) if totals[name] > 1 else ''
    seen[name] += 1
    named.append(copy.deepcopy(layer).set(name=name + suffix))
  return named


def chain(*layers_tpl: Any, **kwargs: Any) -> Config[chain_lib.Chain]:
  """A `Chain` of the layers (None entries are dropped)."""
  return Config(chain_lib.Chain, layers=_unique_names(layers_tpl),
                **kwargs_with_name('chain', **kwargs))


def copy_n_times(num_times: int, *layers_tpl: Any,
                 **kwargs: Any) -> Config[chain_lib.Chain]:
  """A `Chain` of `num_times` copies of the layers (each with its own weights).

  `repeat` compiles faster when the layers keep their argument shapes.
  """
  copies = [copy.deepcopy(l) for l in layers_tpl * num_times]
  return chain(*copies, **kwargs_with_name('chain_copy_n_times', **kwargs))


def repeat(x_times: int, *layers_tpl: Any,
           **kwargs: Any) -> Config[repeats.Repeat]:
  """A `Repeat` (scan) of a `Chain` of the layers, `x_times` times."""
  return Config(repeats.Repeat, x_times=x_times, sub_tpl=chain(*layers_tpl),
                positional_args_as_scan_carry=True,
                **kwargs_with_name('chain_repeat', **kwargs))


class ApplyPadding(base_layer.BaseLayer):
  """Zeroes padded positions: `py_utils.apply_padding(inputs, paddings)`.

  Attributes:
    axis: Aligns `paddings` with `inputs` from this axis on ([B, T] paddings
      work for [B, T, D] inputs with the default 0).
  """

  axis: int = 0

  def __call__(self, inputs: JTensor, paddings: JTensor) -> JTensor:
    return py_utils.apply_padding(inputs, paddings, axis=self.axis)


def apply_padding(**kwargs: Any) -> Config[ApplyPadding]:
  """Config of `ApplyPadding` (pads the first argument by the second)."""
  return Config(ApplyPadding, **kwargs_with_name('pad', **kwargs))


class AddResidual(chain_lib.Chain):
  """A `Chain` whose first output gets the first input added."""

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    outputs = list(chain_lib.ensure_tuple(super().__call__(*args, **kwargs)))
    outputs[0] = outputs[0] + args[0]
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def add_residual(*layers: Any, **kwargs: Any) -> Config[AddResidual]:
  """Config of `AddResidual` over the layers."""
  return Config(AddResidual, layers=_unique_names(layers),
                **kwargs_with_name('add_residual', **kwargs))


class DictToArgs(base_layer.BaseLayer):
  """Turns a dict into positional arguments: its values at `keys`.

  Attributes:
    keys: The keys, in order.
  """

  keys: Sequence[str] = ()

  def __call__(self, input_batch: dict[str, JTensor]) -> Any:
    missing = [k for k in self.keys if input_batch.get(k) is None]
    if missing:
      raise ValueError(f'{type(self).__name__} {self.name!r}: keys {missing} '
                       f'not in the input (has {sorted(input_batch)}).')
    values = tuple(input_batch[k] for k in self.keys)
    return values if len(values) > 1 else values[0]


def dict_to_args(*keys: str, **kwargs: Any) -> Config[DictToArgs]:
  """Config of `DictToArgs` for `keys`."""
  return Config(DictToArgs, keys=keys,
                **kwargs_with_name('dict_to_args', **kwargs))


class LogArgs(base_layer.BaseLayer):
  """Logs its arguments (shapes, or values too) and returns nothing.

  Attributes:
    message: A heading for the log lines.
    log_values: Log the values of arrays, not only their shapes.
  """

  message: str | None = None
  log_values: bool = False

  def _describe(self, value: Any) -> str:
    if hasattr(value, 'shape') and hasattr(value, 'dtype'):
      return f'{value.shape} values=\n{value}' if self.log_values else (
          f'{value.shape}')
    return str(value)

  def __call__(self, *args: Any, **kwargs: Any) -> None:
    logging.info('---- %s len(args)=%d len(kwargs)=%d', self.message or '',
                 len(args), len(kwargs))
    for i, value in enumerate(args):
      logging.info('%d: %s', i, self._describe(value))
    for key, value in kwargs.items():
      logging.info('%s= %s', key, self._describe(value))


def log_args(message: str | None = None, log_values: bool = False,
             **kwargs: Any) -> Config[LogArgs]:
  """Config of `LogArgs`."""
  return Config(LogArgs, message=message or '', log_values=log_values,
                **kwargs_with_name('log_args', **kwargs))


class FullLike(base_layer.BaseLayer):
  """`jnp.full_like(inputs, fill_value)`.

  Attributes:
    fill_value: The value.
  """

  fill_value: float = 1.0

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.full_like(inputs, self.fill_value)


def full_like(fill_value: float, **kwargs: Any) -> Config[FullLike]:
  """Config of `FullLike`."""
  return Config(FullLike, fill_value=fill_value,
                **kwargs_with_name('full_like', **kwargs))


def feed_forward(input_dims: int, output_dims: int,
                 activation_tpl: LayerTpl | None = None,
                 **kwargs: Any) -> Config[linears.FeedForward]:
  """Config of `linears.FeedForward` (identity activation by default)."""
  return Config(linears.FeedForward, input_dims=input_dims,
                output_dims=output_dims,
                activation_tpl=activation_tpl or Config(activations.Identity),
                **kwargs_with_name('feedforward', **kwargs))


# Names Pax 1.4's module also has (aliases of other modules' names).
BaseLayer = base_layer.BaseLayer
Chain = chain_lib.Chain
