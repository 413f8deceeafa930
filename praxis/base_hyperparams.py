"""Hyper-parameters of configurable Pax classes, old style and new.

Public names:
  instantiate, nested_struct_to_text, visit_nested_struct,
  FiddleBaseParameterizable, FiddleHParamsClassStub, BaseHyperParams,
  sub_config_field, SubConfigFactory, HParamsView, ConfigError.

Pax classes are dataclasses configured with `pax_fiddle.Config`. Code written
for the older Pax API instead declares hyper-parameters in a nested class and
builds them with `X.HParams(...)`; both styles work here:

  class Linear(base_layer.BaseLayer):
    class HParams(base_layer.BaseLayer.HParams):
      input_dims: int = 0

  p = Linear.HParams(name='proj', input_dims=4)  # a pax_fiddle.Config(Linear)
  layer = p.Instantiate()

The fields of a nested `HParams` class become fields of its owner, and every
configurable class answers `X.HParams(...)`, `X.HParams.config(...)` and
`X.HParams.partial(...)` with configs of `X`.
"""

from __future__ import annotations

import abc
import collections.abc
import dataclasses
import enum
import functools
import inspect
import re
from typing import Any, Callable

import fiddle as fdl
from flax import linen as nn
import numpy as np
from praxis import _dataclass_hparams
from praxis import pax_fiddle


# ----------------------------------------------------------------------------
# Nested `HParams` classes (the older Pax style).
# ----------------------------------------------------------------------------


class ConfigError(ValueError):
  """A configured value that cannot work (raised when a class checks it).

  Its message names the object, the field, the value and what was expected;
  `paxml.main` prints it as one line, without a traceback.
  """


def _owner_of(stub: type[Any]) -> type[Any] | None:
  for klass in stub.__mro__:
    owner = klass.__dict__.get('_owner')
    if owner is not None:
      return owner
  return None


class _HParamsStubMeta(type):
  """Calling `X.HParams(...)` gives `pax_fiddle.Config(X, ...)`."""

  def __call__(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    return cls.config(**kwargs)

  def __instancecheck__(cls, obj: Any) -> bool:
    owner = _owner_of(cls)
    if owner is None or not isinstance(obj, fdl.Buildable):
      return False
    built = obj.__fn_or_cls__
    return isinstance(built, type) and issubclass(built, owner)


class FiddleHParamsClassStub(metaclass=_HParamsStubMeta):
  """The `HParams` attribute of a configurable class `X`.

  `X.HParams(**kw)` and `X.HParams.config(**kw)` return
  `pax_fiddle.Config(X, **kw)`; `X.HParams.partial(**kw)` a `Partial`;
  `isinstance(cfg, X.HParams)` tells whether `cfg` configures `X` (or a
  subclass). Subclassing `X.HParams` inside a class body declares fields.
  """

  _pax_hparams_stub = True
  _owner: type[Any] | None = None

  @classmethod
  def config(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    return pax_fiddle.Config(cls._checked_owner(), **kwargs)

  @classmethod
  def partial(cls, **kwargs: Any) -> pax_fiddle.Partial[Any]:
    return pax_fiddle.Partial(cls._checked_owner(), **kwargs)

  @classmethod
  def __to_sub_config_field__(cls) -> Any:
    return pax_fiddle.template_field(cls._checked_owner())

  @classmethod
  def _checked_owner(cls) -> type[Any]:
    owner = _owner_of(cls)
    if owner is None:
      raise TypeError(
          f'{cls.__qualname__} is not attached to a configurable class; '
          'declare it inside a class body (class HParams(Base.HParams): ...).'
      )
    return owner


def absorb_nested_hparams(cls: type[Any]) -> None:
  """Moves the fields of a nested `class HParams` onto `cls` itself.

  Must run before `cls` is turned into a dataclass.

  Args:
    cls: A class whose body may declare `class HParams(Base.HParams)`.
  """
  declared = cls.__dict__.get('HParams')
  if declared is None or not getattr(declared, '_pax_hparams_stub', False):
    return
  if declared.__dict__.get('_owner') is not None:
    return  # An alias of another class's stub, e.g. `HParams = Other.HParams`.
  own = cls.__dict__.get('__annotations__')
  if own is None:
    own = {}
    cls.__annotations__ = own
  for name, annotation in declared.__dict__.get('__annotations__', {}).items():
    if name.startswith('_'):
      continue
    if name in own:
      raise TypeError(
          f'{cls.__qualname__}: field {name!r} is declared both in the class '
          'body and in its nested HParams class.'
      )
    own[name] = annotation
    if name in declared.__dict__:
      setattr(cls, name, declared.__dict__[name])


def install_hparams_stub(cls: type[Any]) -> None:
  """Gives `cls` its own `HParams` stub (see `FiddleHParamsClassStub`)."""
  base = cls.__dict__.get('HParams') or getattr(
      cls, 'HParams', FiddleHParamsClassStub
  )
  stub = _HParamsStubMeta(
      'HParams',
      (base,),
      {
          '_owner': cls,
          '__module__': cls.__module__,
          '__qualname__': f'{cls.__qualname__}.HParams',
          '__doc__': f'Configs of {cls.__qualname__} (legacy HParams style).',
      },
  )
  cls.HParams = stub


class HParamsView:
  """A read-only view of the hyper-parameters of a built object.

  `obj.hparams.field` reads a field; assigning raises; `clone()` returns a
  `pax_fiddle.Config` that would build an equal object; `cls` is its class.
  """

  def __init__(self, obj: Any):
    object.__setattr__(self, '_obj', obj)

  def _field_names(self) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(self._obj)
        if f.init and f.name != 'parent'
    ]

  def __getattr__(self, name: str) -> Any:
    if name in self._field_names():
      return getattr(self._obj, name)
    raise AttributeError(
        f'{type(self._obj).__qualname__} has no hyper-parameter {name!r}.'
    )

  def __setattr__(self, name: str, value: Any) -> None:
    raise AttributeError(
        f'{type(self._obj).__qualname__}.hparams is read-only (setting '
        f'{name!r}); change the config before instantiating instead.'
    )

  def __dir__(self) -> list[str]:
    return self._field_names() + ['clone', 'cls', 'to_text']

  @property
  def cls(self) -> type[Any]:
    return type(self._obj)

  def clone(self) -> pax_fiddle.Config[Any]:
    """A config of the object's class with the object's field values."""
    cfg = pax_fiddle.Config(type(self._obj))
    for name in self._field_names():
      value = getattr(self._obj, name)
      if isinstance(value, fdl.Buildable):
        value = value.clone() if hasattr(value, 'clone') else value
      setattr(cfg, name, value)
    return cfg

  def to_text(self) -> str:
    return nested_struct_to_text(self.clone())

  def __repr__(self) -> str:
    fields = ', '.join(
        f'{n}={getattr(self._obj, n)!r}' for n in self._field_names()
    )
    return f'{type(self._obj).__qualname__}.HParams({fields})'


# ----------------------------------------------------------------------------
# FiddleBaseParameterizable: the base of inputs, optimizers, schedules, tasks.
# ----------------------------------------------------------------------------


class FiddleBaseParameterizable:
  """Base of every configurable Pax class that is not a layer.

  Subclasses are keyword-only dataclasses; configure them with
  `pax_fiddle.Config(Cls, ...)`, `Cls.config(...)` or `Cls.HParams(...)`.

  Attributes:
    name: The object's name.
  """

  HParams = FiddleHParamsClassStub

  def __init_subclass__(cls, **kwargs: Any):
    super().__init_subclass__(**kwargs)
    absorb_nested_hparams(cls)
    _check_overrides_are_annotated(cls)
    dataclasses.dataclass(cls, kw_only=True)
    cls.__init__ = _keyword_only_init(cls)
    install_hparams_stub(cls)

  @classmethod
  def config(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    return pax_fiddle.Config(cls, **kwargs)

  @property
  def hparams(self) -> HParamsView:
    """The read-only hyper-parameters of this object."""
    return HParamsView(self)

  @property
  def _hparams(self) -> HParamsView:
    return HParamsView(self)


def _check_overrides_are_annotated(cls: type[Any]) -> None:
  """A class attribute replacing an inherited field must be annotated."""
  own = cls.__dict__.get('__annotations__', {})
  for base in cls.__mro__[1:]:
    for field in getattr(base, '__dataclass_fields__', {}).values():
      if field.name in cls.__dict__ and field.name not in own:
        raise TypeError(
            f'Class attribute `{cls.__qualname__}.{field.name}` overrides a '
            'dataclass field, but is missing a type annotation. This is '
            f'likely a bug. Consider adding the type annotation {field.type}.'
        )


def _keyword_only_init(cls: type[Any]) -> Callable[..., None]:
  """`cls.__init__`, failing clearly on positional arguments."""
  init = cls.__init__

  @functools.wraps(init)
  def keyword_only(self, *args: Any, **kwargs: Any) -> None:
    if args:
      raise TypeError(
          f'Only keyword arguments are supported when constructing {cls}. '
          f'Received {args} as positional arguments.'
      )
    init(self, **kwargs)

  return keyword_only


FiddleBaseParameterizable.__annotations__ = {'name': str}
FiddleBaseParameterizable.name = ''
dataclasses.dataclass(FiddleBaseParameterizable, kw_only=True)
install_hparams_stub(FiddleBaseParameterizable)
FiddleBaseParameterizableBase = FiddleBaseParameterizable


BaseHyperParams = _dataclass_hparams.BaseHyperParams
BaseParameterizable = _dataclass_hparams.BaseParameterizable
SubConfigFactory = _dataclass_hparams.SubConfigFactory
OverrideSubConfigFieldProtocol = (
    _dataclass_hparams.OverrideSubConfigFieldProtocol
)


def sub_config_field(
    sub_config_cls: Any = None, *, lazy_ref: Callable[[], Any] | None = None
) -> Any:
  """A field holding a nested config (a template), in the older style.

  Example:

    class HParams(BaseLayer.HParams):
      linear_tpl: BaseLayer.HParams = sub_config_field(Linear.HParams)

  Args:
    sub_config_cls: A class's `HParams` stub, a configurable class, an object
      with `__to_sub_config_field__`, or None (default None). A
      `BaseHyperParams` dataclass gives a field holding an instance of it.
    lazy_ref: A function returning `sub_config_cls`, for forward references.

  Returns:
    A `dataclasses.Field`.
  """
  if lazy_ref is not None:
    if sub_config_cls is not None:
      raise ValueError('sub_config_field: give sub_config_cls or lazy_ref.')
    return pax_fiddle.field(
        default_factory=lambda: _sub_config_default(lazy_ref()),
        metadata={'pax_field_kind': 'template'},
    )
  if hasattr(sub_config_cls, '__to_sub_config_field__'):
    return sub_config_cls.__to_sub_config_field__()
  if isinstance(sub_config_cls, type) and issubclass(
      sub_config_cls, BaseHyperParams
  ):
    return dataclasses.field(
        default_factory=SubConfigFactory(lambda: sub_config_cls)
    )
  if sub_config_cls is None:
    return pax_fiddle.template_field(None)
  return pax_fiddle.template_field(_configured_class(sub_config_cls))


def _configured_class(sub_config_cls: Any) -> Any:
  if getattr(sub_config_cls, '_pax_hparams_stub', False):
    owner = _owner_of(sub_config_cls)
    if owner is None:
      raise TypeError(f'{sub_config_cls!r} has no owning class.')
    return owner
  return sub_config_cls


def _sub_config_default(sub_config_cls: Any) -> pax_fiddle.Config[Any]:
  return pax_fiddle.Config(_configured_class(sub_config_cls))


# ----------------------------------------------------------------------------
# Instantiation and text form.
# ----------------------------------------------------------------------------


def instantiate(config: Any, **kwargs: Any) -> Any:
  """Builds a config (a `pax_fiddle.Config`, or an `X.HParams(...)`).

  Args:
    config: What to build: a config, or the HParams of a (legacy)
      `BaseParameterizable`.
    **kwargs: Arguments overriding those of `config`.

  Returns:
    The built object.
  """
  if isinstance(config, BaseParameterizable.HParams):
    return config.Instantiate(**kwargs)
  if not isinstance(config, fdl.Buildable):
    raise TypeError(
        'instantiate expects a pax_fiddle.Config (or BaseParameterizable '
        f'HParams), got {type(config)!r}.'
    )
  return pax_fiddle.instantiate(config, **kwargs)


def _is_named_tuple(value: Any) -> bool:
  return isinstance(value, tuple) and hasattr(value, '_fields')


class StrOverride(abc.ABC):
  """A value written to the text form as its `str()`."""

  @abc.abstractmethod
  def __str__(self) -> str:
    """The text of the value."""


def _sub_key(key: str, name: Any) -> str:
  return f'{key}.{name}' if key else str(name)


def _children(key: str, value: Any) -> list[tuple[str, Any]] | None:
  """(key, child) pairs of a container `value`; None for a leaf."""
  if isinstance(value, collections.abc.Mapping):
    return [(_sub_key(key, k), v) for k, v in value.items()]
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    fields = dataclasses.fields(value)
    if isinstance(value, nn.Module):
      fields = [f for f in fields if f.name != 'parent']
    return [(_sub_key(key, f.name), getattr(value, f.name)) for f in fields]
  if _is_named_tuple(value):
    return [(f'{key}[{k}]', v) for k, v in value._asdict().items()]
  if isinstance(value, (list, tuple, range)):
    return [(f'{key}[{i}]', v) for i, v in enumerate(value)]
  if isinstance(value, fdl.Buildable):
    return _buildable_children(key, value)
  return None


def _buildable_children(key: str, value: fdl.Buildable):
  args = fdl.ordered_arguments(value, include_defaults=True)
  if type(args.get('parent')).__name__ == '_Sentinel':
    args.pop('parent')
  items = []
  if not key.endswith('_split_dims_mapping'):
    items.append((_sub_key(key, 'cls'), fdl.get_callable(value)))
  for name, arg in args.items():
    arg = _default_factory_value(value, name, arg)
    items.append((_sub_key(key, name), arg))
  return items


def visit_nested_struct(
    obj_to_visit: Any,
    visit_fn: Callable[[str, Any], None],
    enter_fn: Callable[[str, Any], bool] | None = None,
    exit_fn: Callable[[str, Any], None] | None = None,
) -> None:
  """Walks a nested structure of configs, dicts, lists and dataclasses.

  Keys are `a.b` inside configs, mappings and dataclasses (the `parent` of a
  Flax module is skipped), `a[1]` inside lists and tuples, and `a[field]`
  inside named tuples; a config also yields its `cls`. `visit_fn(key, value)`
  is called on every leaf, and on every container that `enter_fn(key,
  value)` declines to enter.

  Args:
    obj_to_visit: The structure.
    visit_fn: Called on leaves.
    enter_fn: Decides whether to walk into a container (default: always).
    exit_fn: Called after a container's children.

  Raises:
    ValueError: If the structure contains itself.
  """
  enter_fn = enter_fn or (lambda key, value: True)
  exit_fn = exit_fn or (lambda key, value: None)
  visiting: set[int] = set()

  def visit(key: str, value: Any) -> None:
    if id(value) in visiting:
      raise ValueError(
          f'A circular reference chain is detected. Current key: {key}'
      )
    visiting.add(id(value))
    items = _children(key, value)
    if items is None or not enter_fn(key, value):
      visit_fn(key, value)
    else:
      for child_key, child in items:
        visit(child_key, child)
      exit_fn(key, value)
    visiting.remove(id(value))

  visit('', obj_to_visit)


def _default_factory_value(buildable: fdl.Buildable, name: str, value: Any):
  """The value a dataclass default factory would give an unset argument."""
  if type(value).__name__ != '_HAS_DEFAULT_FACTORY_CLASS':
    return value
  fields = {f.name: f for f in dataclasses.fields(buildable.__fn_or_cls__)}
  return fields[name].default_factory()


def _quote_string(s: str) -> str:
  quote = "'" if s.count("'") <= s.count('"') else '"'
  escaped = re.sub(r'([%s\\])' % quote, r'\\\1', s)
  return quote + escaped + quote


class _SortedDict(dict):
  """A dict whose repr lists the keys in order."""

  def __repr__(self) -> str:
    items = sorted(self.items())
    return '{' + ', '.join('%r: %r' % item for item in items) + '}'


def _is_tf_dtype(value: Any) -> bool:
  """A TensorFlow dtype, recognised without importing TensorFlow."""
  cls = type(value)
  return cls.__name__ == 'DType' and cls.__module__.startswith('tensorflow')


def _module_name(value: Any) -> str:
  module = inspect.getmodule(value)
  return module.__name__ if module else '?'


def _value_repr(value: Any) -> Any:
  """The text form of one leaf of `nested_struct_to_text`."""
  if isinstance(value, collections.abc.Mapping):
    return _SortedDict({k: _value_repr(v) for k, v in value.items()})
  if isinstance(value, np.ndarray):
    return np.array2string(value, separator=', ')
  if isinstance(value, BaseHyperParams):
    return _SortedDict({f.name: _value_repr(getattr(value, f.name))
                        for f in dataclasses.fields(value)})
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return str(value)
  if _is_named_tuple(value):
    return _SortedDict({k: _value_repr(v) for k, v in value._asdict().items()})
  if isinstance(value, (list, tuple)):
    return type(value)(_value_repr(v) for v in value)
  if isinstance(value, (bool, int, float, str, enum.Enum)):
    return value
  if _is_tf_dtype(value):
    return value.name
  if isinstance(value, StrOverride):
    return str(value)
  if isinstance(value, type):
    return f'type/{_module_name(value)}/{value.__qualname__}'
  if callable(value) and hasattr(value, '__qualname__'):
    return f'callable/{_module_name(value)}/{value.__qualname__}'
  if isinstance(value, fdl.Buildable):
    return repr(value)
  return type(value).__name__


def _enter_for_text(key: str, value: Any) -> bool:
  """Which containers the text form walks into (others are one line)."""
  del key
  if isinstance(value, (list, tuple)) and not _is_named_tuple(value):
    return bool(value) and all(
        isinstance(v, (fdl.Buildable, BaseHyperParams)) for v in value
    )
  if isinstance(value, range):
    return False
  return _children('', value) is not None or isinstance(value, StrOverride)


def nested_struct_to_text(
    obj_to_visit: Any, include_types: bool = False, separator: str = ':'
) -> str | tuple[str, dict[str, str]]:
  """The `key : value` text form of a config, one line per leaf, sorted.

  This is the format of the `model_params.txt` file of a Pax run: strings are
  quoted, classes read `type/<module>/<qualname>`, functions
  `callable/<module>/<qualname>`, other objects their type name.

  Args:
    obj_to_visit: A config (or nested structure of them).
    include_types: Also return a dict from key to the leaf's type name.
    separator: Between key and value.

  Returns:
    The text, or (text, types) when `include_types`.
  """
  lines: dict[str, str] = {}
  types: dict[str, str] = {}

  def visit(key: str, value: Any) -> None:
    if isinstance(value, str):
      lines[key] = _quote_string(value)
    else:
      lines[key] = str(_value_repr(value))
    types[key] = type(value).__name__

  visit_nested_struct(obj_to_visit, visit, enter_fn=_enter_for_text)
  text = ''.join(f'{k} {separator} {v}\n' for k, v in sorted(lines.items()))
  return (text, types) if include_types else text
