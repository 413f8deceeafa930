"""The dataclass `HParams` style of Pax (before Fiddle), kept for old code.

Re-exported by `praxis.base_hyperparams`; import it from there. Public names:
  BaseHyperParams, BaseParameterizable, SubConfigFactory,
  OverrideSubConfigFieldProtocol, fill_sub_config_fields.

A `BaseHyperParams` subclass is a mutable dataclass that can be frozen; a
`BaseParameterizable` subclass declares one in a nested `class HParams` and is
built from it (`p.Instantiate()`, `Cls.make(**fields)`, `Cls.config(...)`):

  class Scale(base_hyperparams.BaseParameterizable):
    _USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True

    class HParams(base_hyperparams.BaseHyperParams):
      factor: float = 2.0

    def __call__(self, x):
      return self.hparams.factor * x

  Scale.HParams(factor=3.0).Instantiate()(1.0)  # 3.0
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
from typing import Any, Callable, Sequence

from absl import logging
import fiddle as fdl
from praxis import pax_fiddle

_OVERRIDES = '_attribute_overrides'


def _sub_config_of(field: dataclasses.Field[Any]) -> fdl.Buildable | None:
  if isinstance(field.default_factory, SubConfigFactory):
    return field.default_factory.get_class().config()
  return None


def fill_sub_config_fields(
    cfg: fdl.Buildable, fields: Sequence[dataclasses.Field[Any]]
) -> None:
  """Sets every unset sub-config field of `cfg` to a config of its class."""
  for field in fields:
    if field.name in cfg.__arguments__:
      continue
    sub_config = _sub_config_of(field)
    if sub_config is not None:
      setattr(cfg, field.name, sub_config)


def _inherited_fields(cls: type[Any]) -> set[str]:
  names: set[str] = set()
  for klass in cls.__mro__[1:]:
    names.update(getattr(klass, '__dataclass_fields__', {}))
  return names


class BaseHyperParams:
  """A dataclass of hyper-parameters: settable, freezable, clonable.

  Subclasses become dataclasses. A subclass may re-declare a field of its
  base only if it lists the name in `_attribute_overrides`.
  """

  _attribute_overrides: tuple[str, ...] = ()

  def __init_subclass__(cls, **kwargs: Any):
    super().__init_subclass__(**kwargs)
    allowed = getattr(cls, _OVERRIDES)
    if not isinstance(allowed, tuple):
      raise TypeError(
          f'{cls.__qualname__}.{_OVERRIDES} must be a tuple of field names, '
          f'got {allowed!r}.'
      )
    annotations = dict(cls.__dict__.get('__annotations__', {}))
    annotations.pop(_OVERRIDES, None)
    cls.__annotations__ = annotations
    dataclasses.dataclass(cls)
    inherited = _inherited_fields(cls)
    for name in annotations:
      if name in inherited and name not in allowed:
        raise AttributeError(
            f'Attribute {name} was overridden while it is not explicitly '
            f'listed in the {_OVERRIDES} list (in {cls.__qualname__}).'
        )

  @classmethod
  def config(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    """A config of this class, with its sub-config fields configured."""
    cfg = pax_fiddle.Config(cls, **kwargs)
    fill_sub_config_fields(cfg, dataclasses.fields(cls))
    return cfg

  @classmethod
  def partial(cls, **kwargs: Any) -> pax_fiddle.Partial[Any]:
    return fdl.cast(pax_fiddle.Partial, cls.config(**kwargs))

  def __setattr__(self, name: str, value: Any) -> None:
    if getattr(self, '_internal_frozen', False):
      raise AttributeError(f'This HParam object is frozen: {self}')
    fields = {f.name: f for f in dataclasses.fields(self)}
    if name not in fields:
      raise AttributeError(
          f"Attribute {name} doesn't exist on {type(self).__qualname__}."
      )
    _warn_if_suspicious(self, fields[name], value)
    object.__setattr__(self, name, value)

  def __post_init__(self) -> None:
    object.__setattr__(self, '_internal_frozen', False)
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if isinstance(value, BaseHyperParams):
        object.__setattr__(self, field.name, value.clone())

  def _sub_params(self) -> list[BaseHyperParams]:
    values = (getattr(self, name) for name in self.__dataclass_fields__)
    return [v for v in values if isinstance(v, BaseHyperParams)]

  def freeze(self) -> None:
    """Makes this object (and nested HParams) read-only."""
    object.__setattr__(self, '_internal_frozen', True)
    for sub in self._sub_params():
      sub.freeze()

  def unfreeze(self) -> None:
    object.__setattr__(self, '_internal_frozen', False)
    for sub in self._sub_params():
      sub.unfreeze()

  def clone(self) -> BaseHyperParams:
    """A deep, unfrozen copy."""
    cloned = copy.deepcopy(self)
    cloned.unfreeze()
    return cloned

  def copy_fields_from(
      self,
      source: BaseHyperParams,
      missing_fields_in_self: Sequence[str] | None = None,
  ) -> None:
    """Copies the fields of `source` but `cls` (nested HParams are cloned).

    Args:
      source: HParams with the fields of `self`.
      missing_fields_in_self: Fields of `source` that `self` may lack.
    """
    if not isinstance(source, BaseHyperParams):
      raise TypeError(
          'copy_fields_from: the source must be a BaseHyperParams, got '
          f'{type(source).__name__}.'
      )
    for name in self.__dataclass_fields__:
      if name == 'cls' or not hasattr(source, name):
        continue
      value = getattr(source, name)
      if isinstance(value, BaseHyperParams):
        value = value.clone()
      setattr(self, name, value)
    allowed = set(missing_fields_in_self or ())
    for name in source.__dataclass_fields__:
      if not hasattr(self, name) and name not in allowed:
        raise ValueError(f'Copying incompatible HParams: {name} not in self')

  def set(self, **kwargs: Any) -> BaseHyperParams:
    """Sets fields; returns self."""
    for name, value in kwargs.items():
      setattr(self, name, value)
    return self

  def to_text(self, include_types: bool = False, separator: str = ':'):
    # pylint: disable-next=g-import-not-at-top
    from praxis import base_hyperparams
    return base_hyperparams.nested_struct_to_text(
        self, include_types=include_types, separator=separator
    )


def _warn_if_suspicious(
    params: BaseHyperParams, field: dataclasses.Field[Any], value: Any
) -> None:
  if isinstance(value, BaseParameterizable):
    logging.warning(
        'Setting the built object %r as %s.%s; a config of it was probably '
        'meant (Cls.HParams(...)).', value, type(params).__qualname__,
        field.name,
    )


@dataclasses.dataclass(frozen=True)
class SubConfigFactory:
  """The default factory of a `sub_config_field`: an HParams of a class."""

  _get_class: Callable[[], type[BaseHyperParams]]

  def get_class(self) -> type[BaseHyperParams]:
    cls = self._get_class()
    if not (isinstance(cls, type) and issubclass(cls, BaseHyperParams)):
      raise TypeError(
          f'sub_config_field: expected a BaseHyperParams subclass, got {cls!r}.'
      )
    return cls

  def __call__(self) -> BaseHyperParams:
    return self.get_class()()


class OverrideSubConfigFieldProtocol:
  """`sub_config_field(x)` returns `x.__to_sub_config_field__()`."""

  def __to_sub_config_field__(self) -> dataclasses.Field[Any]:
    raise NotImplementedError(
        f'{type(self).__name__} must define __to_sub_config_field__.'
    )


class BaseParameterizable:
  """Base of classes built from a nested `HParams` dataclass (legacy style).

  The built object keeps a frozen copy of its HParams as `self.hparams`.
  New classes derive from `FiddleBaseParameterizable` instead; a subclass of
  this one must say `_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True`.
  """

  class HParams(BaseHyperParams):
    """Hyper-parameters; `cls` is the class they build.

    Attributes:
      cls: The class built by `Instantiate`.
      name: The object's name.
    """

    cls: type[Any]
    name: str = ''

    def Instantiate(self, **kwargs: Any) -> Any:  # pylint: disable=invalid-name
      """Builds `self.cls` from these hyper-parameters."""
      return self.cls(self, **kwargs)

  # The __init__ argument that receives the HParams.
  _config_init_name_for_params_object: str = 'hparams'
  # __init__ arguments that configs may not set.
  _nonconfigurable_init_args: tuple[str, ...] = ()

  def __init__(self, hparams: BaseParameterizable.HParams) -> None:
    self._hparams = hparams.clone()
    self._hparams.freeze()

  @property
  def hparams(self) -> BaseParameterizable.HParams:
    return self._hparams

  @classmethod
  def make(cls, **kwargs: Any) -> Any:
    """Builds `cls` from HParams fields and `__init__` arguments together."""
    signature = inspect.signature(cls.HParams).parameters
    hparams_kwargs, missing = {}, []
    for name, param in signature.items():
      if name in kwargs:
        hparams_kwargs[name] = kwargs.pop(name)
      elif param.default is not param.empty:
        hparams_kwargs[name] = param.default
      else:
        missing.append(name)
    if missing:
      raise ValueError(
          f'Missing required arguments: {set(missing)} when instantiating '
          f'{cls}.'
      )
    kwargs[cls._config_init_name_for_params_object] = cls.HParams(
        **hparams_kwargs
    )
    return cls(**kwargs)

  @classmethod
  def config(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    """A config of `cls.make`, with its sub-config fields configured."""
    cfg = pax_fiddle.Config(cls.make, **kwargs)
    fill_sub_config_fields(cfg, dataclasses.fields(cls.HParams))
    return cfg

  @classmethod
  def partial(cls, **kwargs: Any) -> pax_fiddle.Partial[Any]:
    return fdl.cast(pax_fiddle.Partial, cls.config(**kwargs))

  def __init_subclass__(
      cls,
      init_params_arg_name: str | None = None,
      nonconfigurable_init_arg_names: tuple[str, ...] | None = None,
      **kwargs: Any,
  ):
    if not hasattr(cls, '_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE'):
      raise ValueError(
          f'{cls.__module__}.{cls.__qualname__}: new Pax classes derive from '
          'FiddleBaseParameterizable; to use the deprecated HParams base, set '
          '_USE_DEPRECATED_HPARAMS_BASE_PARAMETERIZABLE = True in the class.'
      )
    super().__init_subclass__(**kwargs)
    if init_params_arg_name is not None:
      cls._config_init_name_for_params_object = init_params_arg_name
    if nonconfigurable_init_arg_names is not None:
      cls._nonconfigurable_init_args = cls._nonconfigurable_init_args + tuple(
          nonconfigurable_init_arg_names
      )
    _bind_hparams_to(cls)
    _give_make_a_signature(cls)


def _bind_hparams_to(cls: type[Any]) -> None:
  """Replaces `cls.HParams` by a subclass whose `cls` field defaults to cls."""
  base = cls.HParams
  bound = dataclasses.make_dataclass(
      base.__name__,
      fields=[(_OVERRIDES, tuple[str, ...], ('cls',)), ('cls', type, cls)],
      bases=(base,),
  )
  bound.__doc__ = base.__doc__
  bound.__module__ = cls.__module__
  bound.__qualname__ = f'{cls.__qualname__}.{base.__name__}'
  cls.HParams = bound


def _give_make_a_signature(cls: type[Any]) -> None:
  """`cls.make` gets the keyword parameters of HParams and `__init__`."""
  hparams_params = inspect.signature(cls.HParams).parameters
  init_params = inspect.signature(cls).parameters
  arg_name = cls._config_init_name_for_params_object
  if arg_name not in init_params:
    raise TypeError(
        f'{cls.__qualname__}.__init__ must have a parameter named {arg_name}; '
        f'its signature is {inspect.signature(cls)}.'
    )
  hidden = set(cls._nonconfigurable_init_args) | {arg_name}
  from_init = [p for p in init_params.values() if p.name not in hidden]
  from_hparams = [p for p in hparams_params.values() if p.name != 'cls']
  duplicated = {p.name for p in from_hparams} & {p.name for p in from_init}
  if duplicated:
    raise TypeError(
        f'Duplicated parameter between `{cls}` and `{cls}.HParams`: '
        f'{duplicated}.'
    )
  params = [inspect.Parameter('cls', inspect.Parameter.POSITIONAL_OR_KEYWORD)]
  params += [
      p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
      for p in from_hparams + from_init
  ]
  if 'make' not in cls.__dict__:
    # A copy of the function, not a closure, so that configs pickle.
    fn = cls.make.__func__
    cls.make = classmethod(
        types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
            fn.__closure__,
        )
    )
  cls.make.__func__.__signature__ = inspect.Signature(
      params, return_annotation=cls
  )
  cls.make.__func__.__doc__ = cls.__doc__
