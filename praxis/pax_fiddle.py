"""Fiddle configs for Pax layers and every other configurable Pax class.

Public names:
  Config (= PaxConfig), Partial (= PaxPartial), ArgFactory, instantiate, build,
  template_field, instance_field, field (= fdl_field), auto_config,
  wrap_templates, copy_inheritable_base_layer_params, empty_flax_module_stack,
  build_with_empty_flax_module_stack, TemplateWrapper, DoNotBuild,
  field_has_tag, field_metadata, FieldMetadata, update_callable,
  template_argument_names, CloneAndSetMixin, BasicTraversal,
  MemoizedTraversal, iterate, register_hparams_traverser; and re-exports of
  fiddle's tagging and mutation helpers (`add_tag`, `assign`, `cast`, ...).

A new config of a dataclass receives the tags of its `field(tags=...)`s and,
for each unset field with a config default (`instance_field`,
`template_field`, `field(default_factory=<auto_config'd function>)` or
`configurable_factory=True`), that default as a config; in a `Partial` those
defaults become `ArgFactory`s so that every call gets fresh objects.

The file is past 800 lines because the config classes, the field helpers
that fill them and `build` call each other; split, they would import in a
cycle.

Three kinds of dataclass fields are recognised when a config is built:

* plain values (`input_dims: int = 0`);
* template fields (`template_field(Linear)`, `sub_config_field(...)`, or any
  field annotated with `pax_fiddle.Config[...]`): the value stays a `Config`
  after building; the owner clones it and calls `create_child` in `setup`;
* instance fields (`instance_field(Linear)`): built together with the owner,
  so the owner receives a ready object.

Example:

  cfg = pax_fiddle.Config(layers.Linear, name='proj', input_dims=4,
                          output_dims=8)
  cfg.input_dims = 16
  layer = pax_fiddle.instantiate(cfg)
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import copy
import dataclasses
import difflib
import dis
import functools
import inspect
import types
import typing
from typing import Any, Callable, Generic, TypeVar

import fiddle as fdl
from fiddle import daglish
from fiddle import history
from fiddle import signatures
from fiddle.experimental import auto_config as fdl_auto_config
from fiddle.experimental import auto_config_policy
from flax.linen import module as flax_module
from praxis import _fiddle_type_hints

T = TypeVar('T')

# fiddle 0.3.1 re-evaluates a class's type hints for every config of it.
_fiddle_type_hints.install()

# Field histories name the caller of Config.__setattr__, not this file.
history.add_exclude_location('praxis/pax_fiddle.py')

# Re-exports of fiddle, as praxis.pax_fiddle offers them.
add_tag = fdl.add_tag
assign = fdl.assign
Buildable = fdl.Buildable
cast = fdl.cast
clear_tags = fdl.clear_tags
copy_with = fdl.copy_with
deepcopy_with = fdl.deepcopy_with
get_callable = fdl.get_callable
get_tags = fdl.get_tags
NO_VALUE = fdl.NO_VALUE
ordered_arguments = fdl.ordered_arguments
remove_tag = fdl.remove_tag
set_tags = fdl.set_tags
materialize_defaults = fdl.materialize_defaults
set_tagged = fdl.set_tagged
Tag = fdl.Tag
TaggedValue = fdl.TaggedValue

# Keys of the dataclass field metadata that Pax fields carry.
_FIELD_KIND = 'pax_field_kind'  # 'template' or 'instance'.
_CONFIG_FACTORY = 'pax_config_factory'  # Makes the default as a Config.
_TAGS = 'pax_tags'


class DoNotBuild(fdl.Tag):
  """Tag kept for compatibility: marks an argument whose value is a template."""


class CloneAndSetMixin:
  """`clone()`, `set(**kwargs)` and `Set(**kwargs)` for Buildables."""

  def clone(self: T) -> T:
    """Returns a deep copy of this config."""
    return copy.deepcopy(self)

  def set(self: T, **kwargs: Any) -> T:
    """Sets several arguments at once and returns self (chainable)."""
    for name, value in kwargs.items():
      setattr(self, name, value)
    return self

  Set = set


def _closest_names(name: str, buildable: fdl.Buildable) -> str:
  names = list(buildable.__signature_info__.valid_param_names)
  close = difflib.get_close_matches(name, names, n=3)
  return f' Did you mean {" or ".join(map(repr, close))}?' if close else ''


def _class_name(fn_or_cls: Any) -> str:
  return getattr(fn_or_cls, '__qualname__', repr(fn_or_cls))


# What fiddle keeps in a Buildable's `__dict__` (fiddle 0.3).
_BUILDABLE_STATE = frozenset({
    '__fn_or_cls__', '__signature_info__', '__arguments__',
    '__argument_history__', '__argument_tags__'})


class _PaxBuildableMixin(CloneAndSetMixin):
  """What Pax adds to fiddle's Config and Partial."""

  def __init__(self, fn_or_cls, /, *args, **kwargs):
    try:
      super().__init__(fn_or_cls, *args, **kwargs)
    except TypeError as e:
      valid = set(signatures_of(fn_or_cls))
      unknown = [k for k in kwargs if valid and k not in valid]
      if not unknown:
        raise
      hints = ''.join(
          f' Did you mean {", ".join(map(repr, close))} for {k!r}?'
          for k in unknown
          if (close := difflib.get_close_matches(k, sorted(valid), n=3))
      )
      raise TypeError(
          f'{_class_name(fn_or_cls)} has no field(s) '
          f'{", ".join(map(repr, unknown))}.{hints}'
      ) from e
    _apply_field_metadata(self)

  def __deepcopy__(self, memo: dict[int, Any]) -> Any:
    # The copy shares the signature information (fiddle shares the
    # signature already, and no one changes either after construction):
    # copying it was about a third of `clone()` for a transformer's config.
    state = self.__dict__
    if (state.keys() != _BUILDABLE_STATE or
        type(state['__argument_tags__']) is not collections.defaultdict):
      # Not as fiddle 0.3 keeps it: fiddle's copy of the whole `__dict__`.
      memo[id(self.__signature_info__)] = self.__signature_info__
      return super().__deepcopy__(memo)
    # The same copy as fiddle's, without copy.deepcopy's generic walk of
    # the bookkeeping: history entries are immutable (fiddle's deepcopy of
    # one returns it) and tags are classes, so their lists and sets are
    # copied shallowly; argument values are deep-copied, through `memo`
    # (a config shared by two fields stays shared in the copy). A layer
    # clones its templates in `setup`, at every trace of the model.
    result = object.__new__(type(self))
    memo[id(self)] = result
    history_copy = type(state['__argument_history__'])(
        {name: list(entries)
         for name, entries in state['__argument_history__'].items()})
    tags = state['__argument_tags__']
    tags_copy = type(tags)(tags.default_factory,
                           {name: set(t) for name, t in tags.items()})
    result.__dict__.update(
        __fn_or_cls__=copy.deepcopy(state['__fn_or_cls__'], memo),
        __signature_info__=state['__signature_info__'],
        __arguments__={name: copy.deepcopy(value, memo)
                       for name, value in state['__arguments__'].items()},
        __argument_history__=history_copy,
        __argument_tags__=tags_copy)
    return result

  def __setattr__(self, name: str, value: Any) -> None:
    if name == 'cls':
      update_callable(self, value)
      return
    try:
      super().__setattr__(name, value)
    except AttributeError as e:
      raise AttributeError(
          f'{_class_name(self.__fn_or_cls__)} has no field {name!r}.'
          f'{_closest_names(name, self)} ({e})'
      ) from e

  @property
  def cls(self) -> Any:
    """The class (or function) this config builds."""
    return self.__fn_or_cls__

  @property
  def mesh_shape(self) -> list[int] | None:
    """`ici_mesh_shape` times `dcn_mesh_shape`, elementwise (layers only)."""
    ici = getattr(self, 'ici_mesh_shape', None)
    if ici is None:
      return None
    dcn = getattr(self, 'dcn_mesh_shape', None)
    if dcn is None:
      return list(ici)
    return [i * d for i, d in zip(ici, dcn)]

  def Instantiate(self, **kwargs: Any) -> Any:  # pylint: disable=invalid-name
    """Builds this config (with `kwargs` overriding its arguments)."""
    return instantiate(self, **kwargs)

  def copy_fields_from(
      self, source: Any, missing_fields_in_self: typing.Container[str] = ()
  ) -> None:
    """Copies the dataclass fields of `source` (a config) into this config.

    Set values are deep-copied; a field unset in `source` takes its plain
    default, or is unset here too when both classes share its default
    factory. `parent` is never copied.

    Args:
      source: A `Config` of a dataclass.
      missing_fields_in_self: Names of `source` fields this config may lack
        (skipped); any other field it lacks raises ValueError.

    Raises:
      TypeError: `source` is not a Pax config.
      ValueError: A field cannot be copied (see above), or `source` leaves a
        required field unset, or its default comes from a different factory.
    """
    if not isinstance(source, _PaxBuildableMixin):
      raise TypeError(
          'copy_fields_from: source must be a pax_fiddle.Config, got '
          f'{type(source).__name__}.'
      )
    source = source.clone()
    source_fields = _init_fields(source.__fn_or_cls__)
    own_fields = _init_fields(self.__fn_or_cls__)
    for name in source_fields:
      if name not in own_fields and name not in missing_fields_in_self:
        raise ValueError(f'Copying incompatible HParams: {name!r} not in self')
    for name, own in own_fields.items():
      theirs = source_fields.get(name)
      if theirs is None:
        continue
      if name in source.__arguments__:
        setattr(self, name, source.__arguments__[name])
      elif theirs.default is not dataclasses.MISSING:
        setattr(self, name, theirs.default)
      elif theirs.default_factory is dataclasses.MISSING:
        raise ValueError(
            "Can't copy from missing required value "
            f'{_class_name(source.__fn_or_cls__)}.{name}'
        )
      elif theirs.default_factory == own.default_factory:
        self.__arguments__.pop(name, None)
      else:
        raise ValueError(
            "Can't copy from default_factory "
            f'{_class_name(source.__fn_or_cls__)}.{name}'
        )


def _init_fields(fn_or_cls: Any) -> dict[str, dataclasses.Field]:
  """The `__init__` dataclass fields of `fn_or_cls` but `parent`."""
  return {
      name: fld
      for name, fld in _dataclass_fields(fn_or_cls).items()
      if fld.init and name != 'parent'
  }


class PaxConfig(Generic[T], _PaxBuildableMixin, fdl.Config[T]):
  """A `fdl.Config` with Pax's conveniences (see module docstring)."""


class PaxPartial(Generic[T], _PaxBuildableMixin, fdl.Partial[T]):
  """A `fdl.Partial` with Pax's conveniences."""


class PaxArgFactory(Generic[T], _PaxBuildableMixin, fdl.ArgFactory[T]):
  """A `fdl.ArgFactory` with Pax's conveniences."""


Config = PaxConfig
Partial = PaxPartial
ArgFactory = PaxArgFactory


def signatures_of(fn_or_cls: Any) -> list[str]:
  """Names of the keyword parameters of `fn_or_cls` (empty if unknown)."""
  try:
    return list(inspect.signature(fn_or_cls).parameters)
  except (TypeError, ValueError):
    return []


# ----------------------------------------------------------------------------
# Pax dataclass fields.
# ----------------------------------------------------------------------------


def _tag_tuple(tags: Any) -> tuple[Any, ...]:
  """`tags` (one tag or a collection of them) as a tuple."""
  if isinstance(tags, type) and issubclass(tags, fdl.Tag):
    return (tags,)
  return tuple(tags)


@dataclasses.dataclass(frozen=True)
class FieldMetadata:
  """What a Pax dataclass field tells the configs of its class.

  Attributes:
    tags: Fiddle tags given to the field's argument in every config.
    buildable_initializer: Makes the argument's value in a new config when it
      is not given (e.g. `Config(Linear)` for `instance_field(Linear)`), or
      None to leave the argument unset.
  """

  tags: tuple[Any, ...]
  buildable_initializer: Callable[[], Any] | None


def field_metadata(dc_field: dataclasses.Field) -> FieldMetadata | None:
  """The `FieldMetadata` of a dataclass field, or None for a plain field."""
  md = dc_field.metadata
  if _TAGS not in md and _CONFIG_FACTORY not in md:
    return None
  return FieldMetadata(
      tags=_tag_tuple(md.get(_TAGS, ())),
      buildable_initializer=md.get(_CONFIG_FACTORY),
  )


def field(
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    tags: Any = (),
    metadata: typing.Mapping[Any, Any] | None = None,
    configurable_factory: bool = False,
    **kwargs: Any,
) -> Any:
  """A dataclass field with tags, whose default a config can hold as a config.

  Example:

    @dataclasses.dataclass
    class Model:
      init: WeightInit = pax_fiddle.field(default_factory=default_init)

  Args:
    default_factory: Makes the default value. If it is `auto_config`'d, a
      config of the class holds `default_factory.as_buildable()` instead.
    tags: One fiddle tag or a collection of them, put on the argument.
    metadata: Extra dataclass metadata.
    configurable_factory: If True, a config holds `Config(default_factory)`,
      so the factory's own arguments can be changed (not for `auto_config`'d
      factories).
    **kwargs: Passed to `dataclasses.field`.

  Returns:
    A `dataclasses.Field`.

  Raises:
    ValueError: `configurable_factory` with an `auto_config`'d factory, or
      with a factory that has no signature.
  """
  metadata = dict(metadata or {})
  metadata[_TAGS] = _tag_tuple(tags)
  if fdl_auto_config.is_auto_config(default_factory):
    if configurable_factory:
      raise ValueError(
          "configurable_factory should not be used with auto_config'ed "
          'functions.'
      )
    metadata[_CONFIG_FACTORY] = default_factory.as_buildable
  elif configurable_factory:
    if not (default_factory and signatures.has_signature(default_factory)):
      raise ValueError(
          'configurable_factory needs default_factory to be a function or '
          f'class with a signature, got {default_factory!r}.'
      )
    metadata[_CONFIG_FACTORY] = functools.partial(Config, default_factory)
    metadata.setdefault(_FIELD_KIND, 'instance')
  return dataclasses.field(
      default_factory=default_factory, metadata=metadata, **kwargs
  )


fdl_field = field


@dataclasses.dataclass(frozen=True)
class _ConfigOf:
  """`_ConfigOf(cls)()` is `Config(cls)`, or `cls()` for a builtin `cls`."""

  cls: Any

  def __call__(self) -> Any:
    if auto_config_policy.latest(self.cls):
      return self.cls()
    return Config(self.cls)


@dataclasses.dataclass(frozen=True)
class _Construct:
  """`_Construct(cls)()` is `cls()`, the plain Python default of a field."""

  cls: Any

  def __call__(self) -> Any:
    return self.cls()


def _config_factory(fn_or_cls: Any) -> tuple[Any, Any]:
  """(makes a config of `fn_or_cls()`, makes the value of `fn_or_cls()`).

  A class makes `Config(cls)` (builtins such as `list` are called); a
  function's body is read with `auto_config`, so `lambda: Linear(dims=2)`
  makes `Config(Linear, dims=2)`.

  Args:
    fn_or_cls: A class, or a function taking no arguments.
  """
  if isinstance(fn_or_cls, type):
    return _ConfigOf(fn_or_cls), _Construct(fn_or_cls)
  if fdl_auto_config.is_auto_config(fn_or_cls):
    return fn_or_cls.as_buildable, fn_or_cls
  if _calls_only_exempt(fn_or_cls):
    return fn_or_cls, fn_or_cls  # What auto_config would make, but cheaply.
  lazy = _AutoConfigOnUse(fn_or_cls)
  return lazy.as_buildable, fn_or_cls


def _calls_only_exempt(fn: Any) -> bool:
  """Whether every callable `fn` can reach is one auto_config runs as is.

  Then `auto_config(fn).as_buildable()` is just `fn()`, and reading the
  source (for a lambda, fiddle parses its whole module) is skipped. Only
  simple functions qualify: no attribute access, no nested code.

  Args:
    fn: A function.
  """
  code = getattr(fn, '__code__', None)
  if code is None or any(isinstance(c, types.CodeType) for c in code.co_consts):
    return False
  if any('ATTR' in i.opname or 'METHOD' in i.opname
         for i in dis.get_instructions(code)):
    return False
  values = [cell.cell_contents for cell in fn.__closure__ or ()]
  for name in code.co_names:
    if name in fn.__globals__:
      values.append(fn.__globals__[name])
    elif hasattr(builtins, name):
      values.append(getattr(builtins, name))
    else:
      return False
  return all(not callable(v) or auto_config_policy.latest(v) for v in values)


class _AutoConfigOnUse:
  """`auto_config(fn)`, made on first use (reading source takes time)."""

  def __init__(self, fn: Any):
    self.fn = fn
    self._made = None

  def as_buildable(self) -> Any:
    if self._made is None:
      self._made = auto_config(self.fn)
    return self._made.as_buildable()


def template_field(template: Any = dataclasses.MISSING, tags: Any = ()) -> Any:
  """A field whose value stays a `Config` (a template) after building.

  Example:

    class FeedForward(base_layer.BaseLayer):
      linear_tpl: pax_fiddle.Config[Linear] = template_field(Linear)

  Args:
    template: The class configured by the default template; a function whose
      body makes the default (read by `auto_config`, so `lambda: Linear(
      dims=2)` gives `Config(Linear, dims=2)`); a config to copy as the
      default; None makes the default None; MISSING makes the field required.
    tags: One fiddle tag or a collection of them.

  Returns:
    A `dataclasses.Field`.
  """
  metadata = {_FIELD_KIND: 'template', _TAGS: _tag_tuple(tags)}
  if template is dataclasses.MISSING:
    return dataclasses.field(metadata=metadata)
  if template is None:
    return dataclasses.field(default=None, metadata=metadata)
  if isinstance(template, fdl.Buildable):
    factory = functools.partial(copy.deepcopy, template)
  else:
    factory, _ = _config_factory(template)
  metadata[_CONFIG_FACTORY] = factory
  return dataclasses.field(default_factory=factory, metadata=metadata)


def instance_field(default_factory: Any, tags: Any = ()) -> Any:
  """A field whose `Config` default is built together with its owner.

  Example:

    class Decoder(base_layer.BaseLayer):
      sampler: Sampler = pax_fiddle.instance_field(Sampler)

  Args:
    default_factory: The class making the default instance (a config holds
      `Config(default_factory)`, a builtin such as `list` its value), or a
      function whose body makes it (read by `auto_config`). None makes the
      default None.
    tags: One fiddle tag or a collection of them.

  Returns:
    A `dataclasses.Field`.
  """
  metadata = {_FIELD_KIND: 'instance', _TAGS: _tag_tuple(tags)}
  if default_factory is None:
    return dataclasses.field(default=None, metadata=metadata)
  metadata[_CONFIG_FACTORY], value_factory = _config_factory(default_factory)
  return dataclasses.field(default_factory=value_factory, metadata=metadata)


def _dataclass_fields(fn_or_cls: Any) -> dict[str, dataclasses.Field]:
  if isinstance(fn_or_cls, type) and dataclasses.is_dataclass(fn_or_cls):
    return {f.name: f for f in dataclasses.fields(fn_or_cls)}
  return {}


def _as_arg_factories(value: Any) -> Any:
  """`value` with each `Config` outside a `Partial` cast to `ArgFactory`."""

  def visit(node: Any, state: daglish.State) -> Any:
    if not isinstance(node, fdl.Partial):
      node = state.map_children(node)
    if isinstance(node, fdl.Config):  # fdl.cast, without its warning.
      node = PaxArgFactory.__unflatten__(*node.__flatten__())
    return node

  return daglish.MemoizedTraversal.run(visit, value)


def _has_partial_holding_config(value: Any) -> bool:
  return any(
      isinstance(node, (fdl.Partial, fdl.ArgFactory))
      and any(isinstance(v, fdl.Config) for v, _ in daglish.iterate(node))
      for node, _ in daglish.iterate(value)
  )


def _apply_field_metadata(buildable: fdl.Buildable) -> None:
  """Adds field tags and the config defaults of unset Pax fields.

  In a `Partial` or `ArgFactory`, which may build many objects, defaults are
  `ArgFactory`s so that each object gets its own.

  Args:
    buildable: A new (or re-targeted) config, changed in place.

  Raises:
    ValueError: A default holds a `Partial` that holds a `Config`: no config
      can say which objects its built values would share.
  """
  for name, fld in _dataclass_fields(buildable.__fn_or_cls__).items():
    meta = field_metadata(fld)
    if meta is None or not fld.init:
      continue
    for tag in meta.tags:
      fdl.add_tag(buildable, name, tag)
    if name in buildable.__arguments__ or meta.buildable_initializer is None:
      continue
    initializer = meta.buildable_initializer
    value = initializer()
    # A class's own config cannot hold such a Partial: its defaults were
    # checked when it was made (the walk is skipped, it is costly).
    if not isinstance(initializer, _ConfigOf) and _has_partial_holding_config(
        value
    ):
      raise ValueError(
          f'Unable to safely replace {_class_name(buildable.__fn_or_cls__)}.'
          f'{name} with a config: its default factory makes a Partial that '
          'holds a Config, and no config can say which built objects share '
          'it. Set the field explicitly instead.'
      )
    if isinstance(value, fdl.Config) and isinstance(
        buildable, (fdl.Partial, fdl.ArgFactory)
    ):
      value = _as_arg_factories(value)
    buildable.__arguments__[name] = value


def update_callable(
    buildable: fdl.Buildable, new_callable: Any, drop_invalid_args: bool = False
) -> None:
  """`fdl.update_callable`, then the new class's field tags and defaults.

  Args:
    buildable: The config to re-target, changed in place.
    new_callable: The class or function it builds from now on.
    drop_invalid_args: Drop arguments the new callable lacks (instead of
      raising).
  """
  fdl.update_callable(buildable, new_callable, drop_invalid_args)
  _apply_field_metadata(buildable)


def field_has_tag(dc_field: dataclasses.Field, tag: Any) -> bool:
  """Whether a Pax dataclass field was declared with `tag`."""
  meta = field_metadata(dc_field)
  return meta is not None and tag in meta.tags


def _annotation_mentions_config(annotation: Any) -> bool:
  """Whether a type annotation is (or contains) `pax_fiddle.Config[...]`."""
  if isinstance(annotation, str):
    return 'Config[' in annotation or annotation.endswith('HParams')
  if getattr(annotation, '_pax_hparams_stub', False):
    return True
  origin = typing.get_origin(annotation)
  if origin is not None and isinstance(origin, type):
    if issubclass(origin, fdl.Buildable):
      return True
  if isinstance(annotation, type) and issubclass(annotation, fdl.Buildable):
    return True
  if origin is typing.Literal:
    return False
  return any(
      _annotation_mentions_config(a) for a in typing.get_args(annotation)
  )


@functools.cache
def template_field_names(cls: type[Any]) -> frozenset[str]:
  """Names of the template fields of a dataclass `cls` (see module doc)."""
  names = set()
  try:
    hints = typing.get_type_hints(cls)
  except Exception:  # pylint: disable=broad-except
    hints = {}
  for name, fld in _dataclass_fields(cls).items():
    kind = fld.metadata.get(_FIELD_KIND)
    hint = hints.get(name, fld.type)
    if kind is None and _annotation_mentions_config(hint):
      _check_template_annotation(hint, f'{_class_name(cls)}.{name}')
    if kind == 'template' or (
        kind is None and _annotation_mentions_config(hint)
    ):
      names.add(name)
  return frozenset(names)


_SEQUENCE_ORIGINS = frozenset(
    typing.get_origin(t) for t in (list[int], tuple[int], typing.Sequence[int])
)
_MAPPING_ORIGINS = frozenset(
    typing.get_origin(t) for t in (dict[int, int], typing.Mapping[int, int])
)


def _is_config_type(annotation: Any) -> bool:
  if getattr(annotation, '_pax_hparams_stub', False):
    return True
  annotation = typing.get_origin(annotation) or annotation
  return isinstance(annotation, type) and issubclass(annotation, fdl.Buildable)


def _supported_template_type(annotation: Any) -> bool:
  """Config, or list/tuple/Sequence/dict/Mapping/Union/Optional of it."""
  if _is_config_type(annotation):
    return True
  origin, args = typing.get_origin(annotation), typing.get_args(annotation)
  if origin in _SEQUENCE_ORIGINS:
    return all(_supported_template_type(a) or a is Ellipsis for a in args)
  if origin in _MAPPING_ORIGINS:
    return len(args) == 2 and _supported_template_type(args[1])
  if origin is typing.Union or origin is types.UnionType:
    return all(
        _supported_template_type(a) or a is type(None) for a in args
    )
  return False


def _check_template_annotation(annotation: Any, where: str) -> None:
  """Rejects a resolved annotation that hides configs in other types."""
  if isinstance(annotation, str) or _supported_template_type(annotation):
    return
  raise ValueError(
      f'Unsupported type {annotation!r} in field {where}: a type holding '
      'pax_fiddle.Config may only combine it with list, tuple, dict, '
      'Mapping, Sequence and Union (build leaves such fields unbuilt).'
  )


# ----------------------------------------------------------------------------
# Building.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TemplateWrapper:
  """A callable that returns its template unbuilt (see `wrap_templates`)."""

  template: Any

  def __call__(self) -> Any:
    return self.template


def _annotated_template_names(fn_or_cls: Any) -> frozenset[str]:
  """Parameters of any callable annotated with `Config` (or containers)."""
  hints = signatures.get_type_hints(fn_or_cls)
  if not hints:  # Unresolvable annotations: read them as strings.
    try:
      params = inspect.signature(fn_or_cls).parameters.values()
    except (TypeError, ValueError):
      params = ()
    hints = {
        p.name: p.annotation for p in params if isinstance(p.annotation, str)
    }
  names = set()
  for name, hint in hints.items():
    if _annotation_mentions_config(hint):
      _check_template_annotation(hint, f'{_class_name(fn_or_cls)}.{name}')
      names.add(name)
  return frozenset(names)


_cached_template_names = functools.cache(_annotated_template_names)


def template_argument_names(fn_or_cls: Any) -> frozenset[str]:
  """Names of the arguments of `fn_or_cls` that `build` leaves unbuilt.

  They are the template fields of a dataclass, and for any callable the
  parameters annotated with `Config[...]` or a container of it.

  Args:
    fn_or_cls: A class or function.
  """
  if isinstance(fn_or_cls, type) and dataclasses.is_dataclass(fn_or_cls):
    return template_field_names(fn_or_cls)
  try:
    return _cached_template_names(fn_or_cls)
  except TypeError:  # Unhashable.
    return _annotated_template_names(fn_or_cls)


def _is_template_argument(buildable: fdl.Buildable, name: Any) -> bool:
  if not isinstance(name, str):
    return False
  if name in template_argument_names(buildable.__fn_or_cls__):
    return True
  return DoNotBuild in buildable.__argument_tags__.get(name, ())


def _contains_buildable(value: Any) -> bool:
  return any(
      isinstance(v, fdl.Buildable) for v, _ in daglish.iterate(value)
  )


def wrap_templates(buildable: Any) -> Any:
  """Returns a copy of `buildable` whose template arguments build to themselves.

  Configs and containers are copied; other objects passed as arguments (e.g.
  an already built model) are shared, not copied.

  Args:
    buildable: A config tree.

  Returns:
    The copy.
  """
  memo = {
      id(value): value
      for value, _ in daglish.iterate(buildable)
      if not isinstance(value, (fdl.Buildable, list, tuple, dict))
  }
  return _wrap_templates_in_place(copy.deepcopy(buildable, memo))


def _wrap_templates_in_place(root: Any) -> Any:
  """`wrap_templates` without the copy: `root` itself is changed."""

  def visit(value: Any, state: daglish.State) -> Any:
    if isinstance(value, fdl.Buildable):
      for name, arg in list(value.__arguments__.items()):
        if _is_template_argument(value, name) and _contains_buildable(arg):
          value.__arguments__[name] = Config(TemplateWrapper(arg))
        else:
          state.call(arg, daglish.Attr(name))
      return value
    if state.is_traversable(value):
      state.flattened_map_children(value)
    return value

  daglish.MemoizedTraversal.run(visit, root)
  return root


def copy_inheritable_base_layer_params(buildable: Any) -> None:
  """Copies base hparams (dtype, mesh, ...) from each layer config to its kids.

  Applies `copy_base_hparams(parent, child)` of the parent's class to every
  layer config nested inside another layer config, parents first.

  Args:
    buildable: A config tree, changed in place.
  """

  def visit(value: Any, parent: Any) -> None:
    is_layer = isinstance(value, fdl.Buildable) and hasattr(
        value.__fn_or_cls__, 'copy_base_hparams'
    )
    if is_layer and parent is not None:
      parent.__fn_or_cls__.copy_base_hparams(parent, value)
    new_parent = value if is_layer else parent
    if isinstance(value, fdl.Buildable):
      children = value.__arguments__.values()
    elif isinstance(value, TemplateWrapper):
      children = [value.template]
    elif isinstance(value, dict):
      children = value.values()
    elif isinstance(value, (list, tuple)):
      children = value
    else:
      return
    for child in children:
      visit(child, new_parent)
    if isinstance(value, fdl.Buildable):
      visit(value.__fn_or_cls__, new_parent)

  visit(buildable, None)


@contextlib.contextmanager
def empty_flax_module_stack():
  """Builds inside run with no current flax module (objects stay unbound)."""
  stack = flax_module._context.module_stack  # pylint: disable=protected-access
  saved = list(stack)
  stack[:] = [None]
  try:
    yield
  finally:
    stack[:] = saved


def build_with_empty_flax_module_stack(buildable: Any) -> Any:
  """Builds the arguments of `buildable` unparented, then `buildable` itself.

  Nested layers are created outside any flax module so that the layer that
  receives them adopts them; the top object is created under the current
  module (so `p.Instantiate()` inside `setup` makes a child of that layer).

  Args:
    buildable: A Buildable or a structure of them.

  Returns:
    The built object.
  """
  if not isinstance(buildable, fdl.Buildable):
    if not _contains_buildable(buildable):
      return buildable
    with empty_flax_module_stack():
      return fdl.build(buildable)
  arguments = dict(buildable.__arguments__)
  if _contains_buildable(arguments):
    with empty_flax_module_stack():
      arguments = fdl.build(arguments)
  args, kwargs = buildable.__signature_info__.transform_to_args_kwargs(
      arguments)
  try:
    return buildable.__build__(*args, **kwargs)
  except TypeError as e:
    raise TypeError(
        f'Cannot build {_class_name(buildable.__fn_or_cls__)}: {e}'
    ) from e


def check_required_fields(root: Any) -> None:
  """Raises if a config to be built leaves a required dataclass field unset."""
  for value, path in daglish.iterate(root):
    if not isinstance(value, fdl.Buildable) or isinstance(
        value.__fn_or_cls__, TemplateWrapper
    ):
      continue
    if isinstance(value, fdl.Partial):
      continue
    for name, fld in _dataclass_fields(value.__fn_or_cls__).items():
      required = (
          fld.init
          and fld.default is dataclasses.MISSING
          and fld.default_factory is dataclasses.MISSING
      )
      if required and name not in value.__arguments__:
        where = daglish.path_str(path) or '<root>'
        raise ValueError(
            f'{_class_name(value.__fn_or_cls__)}: required field {name!r} is '
            f'not set (config at {where}).'
        )


def build(buildable: Any) -> Any:
  """Builds a Pax config: templates stay configs; base hparams are inherited.

  Args:
    buildable: A `Config`/`Partial`, or a structure holding them.

  Returns:
    The built object(s).
  """
  return _build_wrapped(wrap_templates(buildable))


def build_owned(buildable: Any) -> Any:
  """`build` of a config nothing else holds, changed in place, not copied.

  For a fresh copy made to be built (as `BaseLayer.create_child` makes of
  each child's config): building copies every config in the tree, so
  building a copy in place saves one copy of the child's whole subtree per
  layer (a sizeable part of tracing a model, which rebuilds its layers).

  Args:
    buildable: A `Config`/`Partial` (or structure of them) to build; its
      template arguments are wrapped in place.

  Returns:
    The built object(s).
  """
  return _build_wrapped(_wrap_templates_in_place(buildable))


def _build_wrapped(wrapped: Any) -> Any:
  check_required_fields(wrapped)
  copy_inheritable_base_layer_params(wrapped)
  return build_with_empty_flax_module_stack(wrapped)


def instantiate(config: Any, **kwargs: Any) -> Any:
  """Builds `config`, with `kwargs` overriding its arguments first.

  Example:

    layer = pax_fiddle.instantiate(
        pax_fiddle.Config(layers.Linear, input_dims=2, output_dims=3),
        name='proj')

  Args:
    config: A `Config` (or `Partial`).
    **kwargs: Arguments set on a copy of `config` before building.

  Returns:
    The built object.
  """
  if kwargs:
    config = copy.copy(config)
    for name, value in kwargs.items():
      setattr(config, name, value)
  return build(config)


def _exempt_from_auto_config(user_policy: Any) -> Callable[[Any], bool]:
  """An auto_config policy: calls to configs themselves run as usual."""

  def policy(fn_or_cls: Any) -> bool:
    return (
        (isinstance(fn_or_cls, type) and issubclass(fn_or_cls, fdl.Buildable))
        or getattr(fn_or_cls, '__func__', None)
        is fdl_auto_config.AutoConfig.as_buildable
        or user_policy(fn_or_cls)
    )

  return policy


def auto_config(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
  """`fiddle.experimental.auto_config`, making Pax configs.

  Calls in the body of `fn` become `Config`s (`functools.partial` a
  `Partial`); control flow is allowed, and the result need not hold a config.
  A class `cls` stands for `lambda: cls()`; an `auto_config`'d function is
  returned as is. Usable as `@auto_config` or `@auto_config(**kwargs)`.

  Example:

    @pax_fiddle.auto_config
    def make_init():
      return WeightInit('xavier', 1.0)

    make_init.as_buildable()  # Config(WeightInit, 'xavier', 1.0)
    make_init()  # WeightInit('xavier', 1.0)

  Args:
    fn: The function (or class) to read.
    **kwargs: More options of fiddle's `auto_config`.

  Returns:
    An `AutoConfig`, or a decorator making one.
  """
  user_policy = kwargs.pop(
      'experimental_exemption_policy', auto_config_policy.latest
  )
  kwargs['experimental_exemption_policy'] = _exempt_from_auto_config(
      user_policy
  )
  kwargs['experimental_allow_control_flow'] = True
  kwargs['experimental_result_must_contain_buildable'] = False
  kwargs.setdefault('experimental_allow_dataclass_attribute_access', True)
  kwargs['experimental_config_types'] = fdl_auto_config.ConfigTypes(
      config_cls=PaxConfig,
      partial_cls=PaxPartial,
      arg_factory_cls=PaxArgFactory,
  )

  def make(fn: Any) -> Any:
    if isinstance(fn, type):
      cls = fn

      def call_constructor():
        return cls()

      fn = call_constructor
    if fdl_auto_config.is_auto_config(fn):
      return fn
    return fdl_auto_config.auto_config(fn, **kwargs)

  return make if fn is None else make(fn)


exempt = fdl_auto_config.exempt


# ----------------------------------------------------------------------------
# Daglish traversals that also enter registered HParams dataclasses.
# ----------------------------------------------------------------------------

# Fiddle's own traversers, plus one per registered HParams dataclass.
_hparams_registry = daglish.NodeTraverserRegistry(use_fallback=True)


def register_hparams_traverser(cls: type[Any]) -> None:
  """Lets `iterate` and the traversals below enter instances of `cls`.

  `cls` is a dataclass of hyper-parameters (such as Pax's dataclass-style
  `BaseHyperParams`); its children are its fields, rebuilt with `cls(**...)`.
  Other dataclasses stay leaves, as in fiddle.

  Args:
    cls: A dataclass.
  """
  names = tuple(f.name for f in dataclasses.fields(cls))
  path = [daglish.Attr(name) for name in names]
  _hparams_registry.register_node_traverser(
      cls,
      flatten_fn=lambda v: (tuple(getattr(v, n) for n in names), ()),
      unflatten_fn=lambda values, _: cls(**dict(zip(names, values))),
      path_elements_fn=lambda _: list(path),
  )


_register_traversers_for_subclass = register_hparams_traverser  # Pax's name.


@dataclasses.dataclass
class BasicTraversal(daglish.BasicTraversal):
  """`daglish.BasicTraversal` that enters registered HParams dataclasses."""

  registry: daglish.NodeTraverserRegistry = _hparams_registry


@dataclasses.dataclass
class MemoizedTraversal(daglish.MemoizedTraversal):
  """`daglish.MemoizedTraversal` that enters registered HParams dataclasses."""

  registry: daglish.NodeTraverserRegistry = _hparams_registry


iterate = functools.partial(daglish.iterate, registry=_hparams_registry)
