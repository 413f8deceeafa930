"""Plain Flax modules as Pax layers.

Public names: DirectFlaxModuleAdapter, FlaxModuleAdapterBase,
FlaxModuleAdapter, EncoderDecoderFlaxModuleAdaptor.

  layer_p = pax_fiddle.Config(
      flax_adapter.DirectFlaxModuleAdapter, name='cnn', cld=CNN())
  layer_p = pax_fiddle.Config(
      flax_adapter.FlaxModuleAdapter, name='cnn', module_factory_method=CNN)

The wrapped module (`cld`) is the layer's child, so its variables sit under
`cld` in the layer's tree. At initialisation they are boxed as Pax variables
(`flax_utils.convert_to_boxed_params`): `params` are trainable; other
collections (e.g. BatchNorm's `batch_stats`) are non-trainable; logical axes
annotated with flax.linen.partitioning are mapped to mesh axes by
`logical_axes_rules`.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
from flax.linen import partitioning as flax_partitioning
from praxis import base_layer
from praxis import flax_utils
from praxis import pax_fiddle
from praxis import pytypes

LogicalAxisRules = pytypes.LogicalAxisRules


class _FlaxAdapterBase(base_layer.BaseLayer):
  """Calls the Flax module `cld`, boxing its variables when they are made.

  Attributes:
    logical_axes_rules: Logical-to-mesh axis rules for the module's axis
      annotations, e.g. [('input', 'mdl'), ('output', 'data')].
    var_collection_map: WeightHParams collections of the variables of named
      Flax collections, e.g. {'cache': [WeightHParamsCollection.NON_TRAINABLE]}.
  """

  logical_axes_rules: LogicalAxisRules | None = None
  var_collection_map: dict[str, list[Any]] = dataclasses.field(
      default_factory=dict)

  def setup(self) -> None:
    if not isinstance(self.cld, nn.Module):
      raise TypeError(f'{type(self).__name__} {self.name!r}: cld must be a '
                      f'flax.linen.Module, got {type(self.cld).__name__}.')

  def _call_wrapped(self, unbound_method: Callable[..., Any], *args: Any,
                    **kwargs: Any) -> Any:
    """Runs `unbound_method(cld, ...)` under the axis rules."""

    def call(module, *a, **k):
      with flax_partitioning.axis_rules(self.logical_axes_rules or ()):
        return unbound_method(module, *a, **k)

    if not self.is_initializing():
      return call(self.cld, *args, **kwargs)
    boxing = nn.map_variables(
        call, mapped_collections=True, mutable=True,
        trans_in_fn=base_layer.maybe_unbox_value,
        trans_out_fn=functools.partial(
            flax_utils.convert_to_boxed_params,
            logical_axes_rules=self.logical_axes_rules,
            mesh_shape=self.mesh_shape,
            var_collection_map=self.var_collection_map))
    return boxing(self.cld, *args, **kwargs)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return self._call_wrapped(type(self.cld).__call__, *args, **kwargs)

  def call_method(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
    """Calls the wrapped module's method `method_name`."""
    return self._call_wrapped(getattr(type(self.cld), method_name), *args,
                              **kwargs)


class DirectFlaxModuleAdapter(_FlaxAdapterBase):
  """Wraps the Flax module instance given as `cld` (the preferred adapter).

  Attributes:
    cld: The Flax module.
  """

  cld: nn.Module | None = pax_fiddle.instance_field(None)


class FlaxModuleAdapterBase(_FlaxAdapterBase, metaclass=abc.ABCMeta):
  """Wraps the Flax module that `_build_wrapped_module` builds in `setup`."""

  def setup(self) -> None:
    self.cld = self._build_wrapped_module()
    super().setup()

  @abc.abstractmethod
  def _build_wrapped_module(self) -> nn.Module:
    """The Flax module to wrap."""


class FlaxModuleAdapter(FlaxModuleAdapterBase):
  """Wraps the Flax module that `module_factory_method()` returns.

  Attributes:
    module_factory_method: Builds the module.
  """

  module_factory_method: Callable[[], nn.Module] | None = None

  def _build_wrapped_module(self) -> nn.Module:
    if self.module_factory_method is None:
      raise ValueError(f'{type(self).__name__} {self.name!r}: '
                       'module_factory_method must be set.')
    return self.module_factory_method()


class EncoderDecoderFlaxModuleAdaptor(FlaxModuleAdapter):
  """`FlaxModuleAdapter` that also exposes encode, decode, compute_logits."""

  def encode(self, *args: Any, **kwargs: Any) -> Any:
    return self.call_method('encode', *args, **kwargs)

  def decode(self, *args: Any, **kwargs: Any) -> Any:
    return self.call_method('decode', *args, **kwargs)

  def compute_logits(self, *args: Any, **kwargs: Any) -> Any:
    return self.call_method('compute_logits', *args, **kwargs)
