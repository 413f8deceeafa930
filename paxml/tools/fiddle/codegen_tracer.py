"""Named values ("tracers") that let codegen see an experiment's settings.

Public names: BoolTracer, make_tracer, TracerMixin, make_subclass_mixin,
remove_tracers.

An experiment's high-level settings (class constants and properties such as
`NUM_LAYERS`) end up as plain numbers in its config. Run under
`make_subclass_mixin(ExpCls)`, every such attribute read returns a tracer: a
value of a subclass of its type (bool: a `BoolTracer`) that also carries
`__highlevel_name__`, so code generation can write `self.num_layers` where
the config holds the traced value. `remove_tracers` turns them back into
plain values.

Example:

  traced = codegen_tracer.make_subclass_mixin(MyExperiment)()
  task = traced.task()           # Fields hold tracers where settings went.
  task = codegen_tracer.remove_tracers(task)
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, TypeVar

from fiddle import daglish
from paxml import base_experiment

_T = TypeVar('_T')
_TRACEABLE = (bool, int, float, str, list, tuple)


@dataclasses.dataclass(frozen=True)
class BoolTracer:
  """A named bool (bool cannot be subclassed)."""

  name: str
  value: bool

  @property
  def __highlevel_name__(self) -> str:
    return self.name

  def __bool__(self) -> bool:
    return self.value

  def __eq__(self, other: Any) -> bool:
    if isinstance(other, bool):
      return self.value == other
    return super().__eq__(other)

  def __hash__(self) -> int:
    return hash(self.value)


@functools.lru_cache(maxsize=None)
def _tracer_type(base: type[Any], name: str) -> type[Any]:
  return type(f'Wrapped{base.__name__}_{name}', (base,),
              {'__highlevel_name__': name})


def make_tracer(name: str, value: Any,
                allowed_types: tuple[type[Any], ...] = _TRACEABLE) -> Any:
  """`value` as a tracer named `name`.

  Args:
    name: The setting's name (`__highlevel_name__`).
    value: Its value.
    allowed_types: Types that may be traced.

  Returns:
    A `BoolTracer` for a bool, else an instance of a subclass of
    `type(value)` equal to `value`.

  Raises:
    ValueError: for a value of another type.
  """
  typ = type(value)
  if not issubclass(typ, allowed_types):
    raise ValueError(f'Cannot trace setting {name!r} of type {typ}: only '
                     f'{[t.__name__ for t in allowed_types]} are traced.')
  if typ is bool:
    return BoolTracer(name, value)
  return _tracer_type(typ, name)(value)


class TracerMixin:
  """Makes attribute reads of traceable values return tracers.

  Enum members (themselves often ints or strs) come back unchanged. The
  names read are collected in `__trace_names__`.
  """

  __trace_names__: set[str]

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    object.__setattr__(self, '__trace_names__', set())

  def __getattribute__(self, name: str) -> Any:
    value = super().__getattribute__(name)
    if name == '__trace_names__' or isinstance(value, enum.Enum):
      return value
    if isinstance(value, _TRACEABLE):
      self.__trace_names__.add(name)
      return make_tracer(name, value)
    return value


def make_subclass_mixin(
    experiment_cls: type[base_experiment.BaseExperiment]) -> type[Any]:
  """A subclass of `experiment_cls` whose settings read as tracers."""
  if not (isinstance(experiment_cls, type)
          and issubclass(experiment_cls, base_experiment.BaseExperiment)):
    raise TypeError('Please pass a subclass of BaseExperiment, got '
                    f'{experiment_cls!r}.')
  return type(f'{experiment_cls.__name__}Traced',
              (experiment_cls, TracerMixin), {})


def _plain(value: Any) -> Any:
  """A traced value as a value of its plain type."""
  if isinstance(value, BoolTracer):
    return value.value
  if hasattr(type(value), '__highlevel_name__'):
    return type(value).__bases__[0](value)
  return value


def remove_tracers(root: _T) -> _T:
  """A copy of `root` with every tracer (at any depth) made plain again."""
  return daglish.MemoizedTraversal.run(
      lambda value, state: state.map_children(_plain(value)), root)
