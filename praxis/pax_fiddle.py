"""Fiddle configs for Pax layers and every other configurable Pax class.

Public names:
  Config (= PaxConfig), Partial (= PaxPartial), ArgFactory, instantiate, build,
  template_field, instance_field, field (= fdl_field), auto_config,
  wrap_templates, copy_inheritable_base_layer_params, empty_flax_module_stack,
  build_with_empty_flax_module_stack, TemplateWrapper, DoNotBuild,
  field_has_tag, CloneAndSetMixin; and re-exports of fiddle's tagging and
  mutation helpers (`add_tag`, `assign`, `cast`, `copy_with`, ...).

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

import contextlib
import copy
import dataclasses
import difflib
import functools
import inspect
import typing
from typing import Any, Callable, Generic, TypeVar

import fiddle as fdl
from fiddle import daglish
from fiddle.experimental import auto_config as fdl_auto_config
from flax.linen import module as flax_module

T = TypeVar('T')

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
update_callable = fdl.update_callable
BasicTraversal = daglish.BasicTraversal
MemoizedTraversal = daglish.MemoizedTraversal
iterate = daglish.iterate

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
    _expand_pax_field_defaults(self)

  def __setattr__(self, name: str, value: Any) -> None:
    if name == 'cls':
      fdl.update_callable(self, value)
      _expand_pax_field_defaults(self)
      return
    try:
      super().__setattr__(name, value)
    except AttributeError as e:
      raise AttributeError(
          f'{_class_name(self.__fn_or_cls__)} has no field {name!r}.'
          f'{_closest_names(name, self)}'
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
    """Copies every field of `source` (a config) that this config also has.

    Args:
      source: A config whose argument values are copied (deep-copied).
      missing_fields_in_self: Names present in `source` but absent here that
        may be skipped silently; any other absent name raises ValueError.
    """
    own = set(self.__signature_info__.valid_param_names)
    for name, value in _arguments_with_defaults(source).items():
      if name in ('name', 'parent'):
        continue
      if name not in own:
        if name in missing_fields_in_self:
          continue
        raise ValueError(
            f'copy_fields_from: {_class_name(self.__fn_or_cls__)} has no '
            f'field {name!r} of {_class_name(source.__fn_or_cls__)}.'
        )
      setattr(self, name, copy.deepcopy(value))


class PaxConfig(Generic[T], _PaxBuildableMixin, fdl.Config[T]):
  """A `fdl.Config` with Pax's conveniences (see module docstring)."""


class PaxPartial(Generic[T], _PaxBuildableMixin, fdl.Partial[T]):
  """A `fdl.Partial` with Pax's conveniences."""


PaxArgFactory = fdl.ArgFactory
Config = PaxConfig
Partial = PaxPartial
ArgFactory = PaxArgFactory


def signatures_of(fn_or_cls: Any) -> list[str]:
  """Names of the keyword parameters of `fn_or_cls` (empty if unknown)."""
  try:
    return list(inspect.signature(fn_or_cls).parameters)
  except (TypeError, ValueError):
    return []


def _arguments_with_defaults(buildable: fdl.Buildable) -> dict[str, Any]:
  """Every named argument of `buildable`: set values, then known defaults."""
  result = {}
  for name, param in buildable.__signature_info__.parameters.items():
    if name in buildable.__arguments__:
      result[name] = buildable.__arguments__[name]
    elif param.default is not param.empty:
      result[name] = param.default
  return result


# ----------------------------------------------------------------------------
# Pax dataclass fields.
# ----------------------------------------------------------------------------


def field(
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    tags: Any = (),
    metadata: dict[str, Any] | None = None,
    configurable_factory: bool = False,
    **kwargs: Any,
) -> Any:
  """A dataclass field whose default a Pax config can hold as a `Config`.

  Args:
    default_factory: Makes the default value.
    tags: Fiddle tags for the argument.
    metadata: Extra dataclass metadata.
    configurable_factory: If True, `default_factory` is itself configured: the
      config's default is `Config(default_factory)`.
    **kwargs: Passed to `dataclasses.field`.

  Returns:
    A `dataclasses.Field`.
  """
  metadata = dict(metadata or {})
  metadata[_TAGS] = tags
  if configurable_factory:
    metadata[_CONFIG_FACTORY] = functools.partial(Config, default_factory)
    metadata.setdefault(_FIELD_KIND, 'instance')
  return dataclasses.field(
      default_factory=default_factory, metadata=metadata, **kwargs
  )


fdl_field = field


def template_field(template: Any = dataclasses.MISSING, tags: Any = ()) -> Any:
  """A field whose value stays a `Config` (a template) after building.

  Example:

    class FeedForward(base_layer.BaseLayer):
      linear_tpl: pax_fiddle.Config[Linear] = template_field(Linear)

  Args:
    template: The class or function configured by the default template, or a
      config to copy as the default; None makes the default None; MISSING
      makes the field required.
    tags: Fiddle tags for the argument.

  Returns:
    A `dataclasses.Field`.
  """
  metadata = {_FIELD_KIND: 'template', _TAGS: tags}
  if template is dataclasses.MISSING:
    return dataclasses.field(metadata=metadata)
  if template is None:
    return dataclasses.field(default=None, metadata=metadata)
  if isinstance(template, fdl.Buildable):
    factory = functools.partial(copy.deepcopy, template)
  else:
    factory = functools.partial(Config, template)
  metadata[_CONFIG_FACTORY] = factory
  return dataclasses.field(default_factory=factory, metadata=metadata)


def instance_field(default_factory: Any, tags: Any = ()) -> Any:
  """A field whose `Config` default is built together with its owner.

  Args:
    default_factory: The class or function making the default instance; a
      Pax config holds it as `Config(default_factory)`, so its arguments can be
      changed before building. None makes the default None.
    tags: Fiddle tags for the argument.

  Returns:
    A `dataclasses.Field`.
  """
  metadata = {_FIELD_KIND: 'instance', _TAGS: tags}
  if default_factory is None:
    return dataclasses.field(default=None, metadata=metadata)
  metadata[_CONFIG_FACTORY] = functools.partial(Config, default_factory)
  return dataclasses.field(default_factory=default_factory, metadata=metadata)


def _dataclass_fields(fn_or_cls: Any) -> dict[str, dataclasses.Field]:
  if isinstance(fn_or_cls, type) and dataclasses.is_dataclass(fn_or_cls):
    return {f.name: f for f in dataclasses.fields(fn_or_cls)}
  return {}


def _expand_pax_field_defaults(buildable: fdl.Buildable) -> None:
  """Puts the `Config` default of each unset Pax field into `buildable`."""
  for name, fld in _dataclass_fields(buildable.__fn_or_cls__).items():
    if name in buildable.__arguments__ or not fld.init:
      continue
    factory = fld.metadata.get(_CONFIG_FACTORY)
    if factory is not None:
      buildable.__arguments__[name] = factory()


def field_has_tag(fld: dataclasses.Field, tag: Any) -> bool:
  """Whether a Pax dataclass field was declared with `tag`."""
  tags = fld.metadata.get(_TAGS, ())
  tags = tags if isinstance(tags, (tuple, list, set)) else (tags,)
  return tag in tags


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
  return any(_annotation_mentions_config(a) for a in typing.get_args(annotation))


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
    if kind == 'template' or (
        kind is None and _annotation_mentions_config(hints.get(name, fld.type))
    ):
      names.add(name)
  return frozenset(names)


# ----------------------------------------------------------------------------
# Building.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TemplateWrapper:
  """A callable that returns its template unbuilt (see `wrap_templates`)."""

  template: Any

  def __call__(self) -> Any:
    return self.template


def _is_template_argument(buildable: fdl.Buildable, name: Any) -> bool:
  fn_or_cls = buildable.__fn_or_cls__
  if not isinstance(name, str) or not isinstance(fn_or_cls, type):
    return False
  if name in template_field_names(fn_or_cls):
    return True
  return DoNotBuild in buildable.__argument_tags__.get(name, ())


def _contains_buildable(value: Any) -> bool:
  return any(
      isinstance(v, fdl.Buildable) for v, _ in daglish.iterate(value)
  )


def wrap_templates(root: Any) -> Any:
  """Returns a copy of `root` whose template arguments build to themselves.

  Configs and containers are copied; other objects passed as arguments (e.g.
  an already built model) are shared, not copied.

  Args:
    root: A config tree.

  Returns:
    The copy.
  """
  memo = {
      id(value): value
      for value, _ in daglish.iterate(root)
      if not isinstance(value, (fdl.Buildable, list, tuple, dict))
  }
  root = copy.deepcopy(root, memo)

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


def copy_inheritable_base_layer_params(root: Any) -> None:
  """Copies base hparams (dtype, mesh, ...) from each layer config to its kids.

  Applies `copy_base_hparams(parent, child)` of the parent's class to every
  layer config nested inside another layer config, parents first.

  Args:
    root: A config tree, changed in place.
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

  visit(root, None)


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


def build_with_empty_flax_module_stack(root: Any) -> Any:
  """Builds the arguments of `root` unparented, then `root` itself.

  Nested layers are created outside any flax module so that the layer that
  receives them adopts them; the top object is created under the current
  module (so `p.Instantiate()` inside `setup` makes a child of that layer).

  Args:
    root: A Buildable or a structure of them.

  Returns:
    The built object.
  """
  if not isinstance(root, fdl.Buildable):
    if not _contains_buildable(root):
      return root
    with empty_flax_module_stack():
      return fdl.build(root)
  arguments = dict(root.__arguments__)
  if _contains_buildable(arguments):
    with empty_flax_module_stack():
      arguments = fdl.build(arguments)
  args, kwargs = root.__signature_info__.transform_to_args_kwargs(arguments)
  try:
    return root.__build__(*args, **kwargs)
  except TypeError as e:
    raise TypeError(
        f'Cannot build {_class_name(root.__fn_or_cls__)}: {e}'
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
  wrapped = wrap_templates(buildable)
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


auto_config = functools.partial(
    fdl_auto_config.auto_config,
    experimental_allow_dataclass_attribute_access=True,
    experimental_config_types=fdl_auto_config.ConfigTypes(
        config_cls=PaxConfig,
        partial_cls=PaxPartial,
        arg_factory_cls=PaxArgFactory,
    ),
)
auto_config.__doc__ = (
    'fiddle.experimental.auto_config, producing Pax configs (`Config`).'
)
exempt = fdl_auto_config.exempt
