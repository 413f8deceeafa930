"""BaseLayer: the Pax layer, a `flax.linen.Module` configured with Fiddle.

Public names: BaseLayer, BaseLayerApi, instantiate, instantiate_layer,
template_field, instance_field, sub_config_field, maybe_shard,
is_sublayer_template_or_instance, Theta, WrappedHParams, BoxedPartitionSpec,
the collection and RNG-stream names (PARAMS, NON_TRAINABLE, SUMMARIES,
AUX_LOSS, ...), Pax's type aliases (JTensorOrPartitionSpec, NestedJTensor,
DecodeStateTransformFn, ...), and, re-exported from private siblings, the
variable declarations (`WeightInit`, `WeightHParams`, `init_var`, ...), the
context (`JaxContext`, `SummaryType`, ...) and the quantized-variable helpers
(`_layer_quantization`).

The file passes 800 lines because BaseLayer is one class whose public
methods are Pax's API (configuration, children, variables, summaries,
running, abstract init); the math and bookkeeping live in the siblings.

A layer declares its hyper-parameters as dataclass fields, its variables and
children in `setup`, and its computation in `__call__` (or `fprop`):

  class Linear(base_layer.BaseLayer):
    input_dims: int = 0
    output_dims: int = 0

    def setup(self):
      self.create_variable(
          'w', base_layer.WeightHParams(shape=[self.input_dims,
                                                self.output_dims]))

    def __call__(self, x):
      return jnp.matmul(x, self.theta.w)

  layer = base_layer.instantiate(
      pax_fiddle.Config(Linear, name='lin', input_dims=2, output_dims=3))
  variables = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
  y = layer.apply(variables, jnp.ones((1, 2)))
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import typing
from typing import Any, Callable, Sequence
import weakref

import fiddle as fdl
from flax import core as flax_core
from flax import linen as nn
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
from praxis import _jax_context
from praxis import _layer_quantization
from praxis import _weights
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
ParamsT = pytypes.HParamsT
JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey
JTensorOrPartitionSpec = pytypes.JTensorOrPartitionSpec
NpTensor = pytypes.NpTensor
SummaryDict = pytypes.SummaryDict
Nested = pytypes.Nested
NestedJTensor = pytypes.NestedJTensor
NestedBool = pytypes.NestedBool
NestedHParams = pytypes.NestedHParams
NestedJTensorOrPartitionSpec = pytypes.NestedJTensorOrPartitionSpec
NestedPartitionSpec = pytypes.NestedPartitionSpec
SplitDimsMapping = pytypes.SplitDimsMapping
AxisMetadata = flax_core.meta.AxisMetadata
TAxisMetadata = flax_core.meta.TAxisMetadata
BaseLayerT = typing.TypeVar('BaseLayerT', bound='BaseLayer')
# A function (state, batch_dim, time_dim) -> state applied to decode caches.
DecodeStateTransformFn = Callable[[JTensor, int, int | None], JTensor]

# Variable collections and RNG streams.
PARAMS = 'params'
AUX_LOSS = 'aux_loss'
SUMMARIES = 'summaries'
NON_TRAINABLE = 'non_trainable'
DECODE_CACHE = 'decoder_cache'
PREFIX_DECODE_CACHE = 'prefix_decoder_cache'
INTERMEDIATES = 'intermediates'
HYPER_PARAMS = 'hyper_params'
NON_PAX_VAR_COLLECTION = ['batch_stats', 'params_axes']
DEFAULT_INIT_MUTABLE_LIST = [PARAMS, NON_TRAINABLE] + NON_PAX_VAR_COLLECTION
RANDOM = 'random'
NON_PAX_RNG_KEY = 'dropout'
QUANTIZED_SCALE_NAME_POSTFIX = _layer_quantization.QUANTIZED_SCALE_NAME_POSTFIX
QUANTIZED_ZP_NAME_POSTFIX = _layer_quantization.QUANTIZED_ZP_NAME_POSTFIX
SPARSITY_NAME_POSTFIX = _layer_quantization.SPARSITY_NAME_POSTFIX
PMAP_PARALLEL_AXIS_NAME = 'batch'

# Re-exports: variables.
WeightInit = _weights.WeightInit
WeightHParams = _weights.WeightHParams
WeightHParamsCollection = _weights.WeightHParamsCollection
BoxedParam = _weights.BoxedParam
default_param_init = _weights.default_param_init
is_default_param_init = _weights.is_default_param_init
get_fan_in_fan_out = _weights.get_fan_in_fan_out
init_var = _weights.init_var
scaled_orthogonal = _weights.scaled_orthogonal
scaled_delta_orthogonal = _weights.scaled_delta_orthogonal
var_init_scale = _weights.var_init_scale
NestedWeightHParams = pytypes.Nested[WeightHParams]
maybe_unbox_value = _weights.maybe_unbox_value
unbox_meta = _weights.unbox_meta
to_partition_spec = _weights.to_partition_spec
var_partition_specs = _weights.var_partition_specs
var_not_trainable = _weights.var_not_trainable
var_requires_mean_sync = _weights.var_requires_mean_sync
var_requires_sum_sync = _weights.var_requires_sum_sync
var_disallow_bfloat16_conversion = _weights.var_disallow_bfloat16_conversion
var_skip_lp_regularization = _weights.var_skip_lp_regularization
var_overwrite_with_gradient = _weights.var_overwrite_with_gradient
# Re-exports: context and summaries.
JaxContext = _jax_context.JaxContext
cur_jax_context = _jax_context.cur_jax_context
SummaryType = _jax_context.SummaryType
SummaryVerbosity = _jax_context.SummaryVerbosity
get_summary_base_type = _jax_context.get_summary_base_type
get_summary_type_suffix = _jax_context.get_summary_type_suffix
get_summary_type_from_key = _jax_context.get_summary_type_from_key
trim_summary_type_from_key = _jax_context.trim_summary_type_from_key
transpose_one_axis = _jax_context.transpose_one_axis
maybe_transpose_mesh_axes = _jax_context.maybe_transpose_mesh_axes
add_global_summary = _jax_context.add_global_summary
clear_global_summary = _jax_context.clear_global_summary
all_global_summaries = _jax_context.all_global_summaries
# The public classes above are shown (repr, model_params.txt, pickles) under
# this module, as in Pax.
for _cls in (WeightInit, WeightHParams, WeightHParamsCollection, BoxedParam,
             JaxContext, SummaryType, SummaryVerbosity):
  _cls.__module__ = __name__
del _cls
# Re-exports: configuration.
instantiate = base_hyperparams.instantiate
template_field = pax_fiddle.template_field
instance_field = pax_fiddle.instance_field
sub_config_field = base_hyperparams.sub_config_field


@struct.dataclass
class AuxLossStruct:
  """An auxiliary loss and its weight, summed over the layers that add it."""

  value: JTensor
  weight: JTensor


def maybe_shard(
    x: JTensor,
    split_dims_mapping: SplitDimsMapping,
    mesh_axis_names: Sequence[str] | None,
    unconstrained_dims: Sequence[int] | None = None,
) -> JTensor:
  """Constrains the sharding of activation `x`; a no-op without a mapping.

  Args:
    x: The activation.
    split_dims_mapping: One entry per dimension of `x` (see
      `to_partition_spec`), or None.
    mesh_axis_names: Names of the mesh axes, or None.
    unconstrained_dims: Dimensions left to the compiler.

  Returns:
    `x`, constrained when a mesh is active.
  """
  if split_dims_mapping is None or mesh_axis_names is None:
    return x
  if len(split_dims_mapping) != x.ndim:
    raise ValueError(
        f'Sharding {split_dims_mapping} has {len(split_dims_mapping)} entries '
        f'for an activation of shape {x.shape}.'
    )
  names = _jax_context.transpose_mesh_axes(list(mesh_axis_names))
  spec = list(to_partition_spec(split_dims_mapping, names))
  for d in unconstrained_dims or ():
    spec[d] = jax.sharding.PartitionSpec.UNCONSTRAINED
  return py_utils.with_sharding_constraint(
      x, jax.sharding.PartitionSpec(*spec)
  )


def _shared_layer_cache() -> weakref.WeakKeyDictionary:
  return _SHARED_LAYERS


_SHARED_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def instantiate_layer(layer_p: pax_fiddle.Config, scope: Any,
                      owned: bool = False) -> Any:
  """Builds a child layer; layers with a `shared_weight_layer_id` are shared.

  Within one `init`/`apply` (one root scope), the first config with a given
  `shared_weight_layer_id` builds the layer at the top of the variable tree,
  as `<shared_weight_layer_id>/...` (as Pax places it, whoever creates it);
  every later config with that id gets the same layer, so all of them use
  the same variables.

  Args:
    layer_p: The child's config.
    scope: The root scope of the current `init`/`apply`.
    owned: `layer_p` is a copy made for this call, built in place (see
      `pax_fiddle.build_owned`).

  Returns:
    The layer.
  """
  shared_id = getattr(layer_p, 'shared_weight_layer_id', None)
  if not shared_id or scope is None:
    if owned:
      return pax_fiddle.build_owned(layer_p)
    return pax_fiddle.instantiate(layer_p)
  cache = _shared_layer_cache().setdefault(scope, {})
  if shared_id in cache:
    layer, first_p, _ = cache[shared_id]
    if fdl.get_callable(first_p) is not fdl.get_callable(layer_p):
      raise ValueError(
          f'Layers sharing weights as {shared_id!r} must be of one class: '
          f'{fdl.get_callable(first_p).__name__} vs '
          f'{fdl.get_callable(layer_p).__name__}.'
      )
    return layer
  wrapped_p = layer_p.clone()
  wrapped_p.shared_weight_layer_id = None
  wrapper = pax_fiddle.instantiate(
      pax_fiddle.Config(_SharedLayerHolder, name=shared_id, cld_tpl=wrapped_p),
      parent=scope,
  )
  layer = wrapper.cld
  # Flax holds parents weakly: the cache keeps the holder alive.
  cache[shared_id] = (layer, layer_p, wrapper)
  return layer


def _check_template(layer: BaseLayer, name: str, params: Any) -> None:
  if isinstance(params, fdl.Buildable):
    return
  hint = ''
  if isinstance(params, BaseLayer):
    hint = (
        ' This may be caused by an incorrect type annotation on a field that '
        'contains a Fiddle Config.'
    )
  raise ValueError(
      f'{type(layer).__name__}.create_child({name!r}): Expected templates for '
      f'`create_child` to be Fiddle Configs; got {type(params).__name__}.'
      f'{hint}'
  )


def _check_unique_name(layer: BaseLayer, name: str, what: str) -> None:
  field_names = {f.name for f in dataclasses.fields(layer)}
  if name in field_names:
    raise ValueError(
        f'{type(layer).__name__}: cannot create {what} {name!r}: a field of '
        'the layer has that name.'
    )


class Theta:
  """`layer.theta.w` / `layer.theta['w']`: the layer's trainable variables.

  Values are read as arrays in the layer's `fprop_dtype` (variables in the
  DISALLOW_BFLOAT16_CONVERSION collection keep their dtype under bfloat16).
  """

  def __init__(self, layer: BaseLayer):
    object.__setattr__(self, '_layer', layer)

  def __getattr__(self, name: str) -> JTensor:
    return self._layer._read_param(name)  # pylint: disable=protected-access

  def __getitem__(self, name: str) -> JTensor:
    return self._layer._read_param(name)  # pylint: disable=protected-access

  def __contains__(self, name: str) -> bool:
    return self._layer.has_variable(PARAMS, name)


class ThetaDescriptor:
  """Makes `layer.theta` a `Theta` of the layer."""

  def __get__(self, layer: BaseLayer | None, owner: type[Any]) -> Any:
    return self if layer is None else Theta(layer)


@struct.dataclass
class WrappedHParams:
  """A layer's config stored in the `hyper_params` collection (no leaves)."""

  meta: pax_fiddle.Config = struct.field(pytree_node=False)


@struct.dataclass
class BoxedPartitionSpec:
  """A `PartitionSpec` (in `meta`) as a pytree leaf-free box."""

  meta: Any = struct.field(pytree_node=False)


def is_sublayer_template_or_instance(val: Any) -> bool:
  """Whether `val` is a layer, a layer config, or a container of them."""
  if isinstance(val, BaseLayer):
    return True
  if isinstance(val, pax_fiddle.Config):
    cls = fdl.get_callable(val)
    return isinstance(cls, type) and issubclass(cls, BaseLayer)
  if isinstance(val, collections.abc.Mapping):
    if all(isinstance(k, str) for k in val):
      return is_sublayer_template_or_instance(list(val.values()))
    return False
  if isinstance(val, (list, tuple)):
    layers = [is_sublayer_template_or_instance(v) for v in val]
    return any(layers) and all(
        is_layer or v is None for is_layer, v in zip(layers, val)
    )
  return False


# Fields copied from a parent layer to the children it creates (when unset).
_INHERITED_IF_NONE = (
    'fprop_dtype',
    'skip_lp_regularization',
    'ici_mesh_shape',
    'dcn_mesh_shape',
    'contiguous_submeshes',
    'mesh_axis_names',
)


def _config_of(layer: BaseLayer) -> pax_fiddle.Config[Any]:
  kwargs = {}
  for f in dataclasses.fields(layer):
    if f.init and f.name != 'parent':
      value = getattr(layer, f.name)
      kwargs[f.name] = value.hparams if isinstance(value, BaseLayer) else value
  return pax_fiddle.Config(type(layer), **kwargs)


def _check_dtype_argument(layer: BaseLayer) -> None:
  """A config passed positionally lands in `dtype`: say what to do instead."""
  try:
    if isinstance(layer.dtype, fdl.Buildable):
      raise TypeError()
    jnp.dtype(layer.dtype)
  except TypeError:
    name = f'{type(layer).__module__}.{type(layer).__qualname__}'
    raise TypeError(
        f'Expected first argument to {name} to be a dtype, but got '
        f'{layer.dtype!r} with type {type(layer.dtype)} instead.  This can '
        f'happen if you try to instantiate {name} using `{name}(layer_p)`, '
        'which is no longer supported for Fiddle-configured layers.  Please '
        'use `layer_p.Instantiate()` instead.'
    ) from None


def _declares_required_field(cls: type[Any]) -> bool:
  for name, annotation in cls.__dict__.get('__annotations__', {}).items():
    if 'ClassVar' in str(annotation) or name in cls.__dict__:
      continue
    return True
  return False


def _refuse_plain_nested_hparams(cls: type[Any]) -> None:
  """A nested `HParams` must derive from the base's (the legacy style)."""
  nested = cls.__dict__.get('HParams')
  if nested is not None and not getattr(nested, '_pax_hparams_stub', False):
    raise ValueError(
        f'For {cls}: PAX layers should no longer use nested HParams classes. '
        'Instead, add fields directly to the layer class (or derive the '
        'nested class from the base layer\'s HParams).'
    )


def _has_field(target: Any, name: str) -> bool:
  if isinstance(target, fdl.Buildable):
    return name in target.__signature_info__.parameters
  return any(f.name == name for f in dataclasses.fields(target))


def _numpy_as_jax(value: Any) -> Any:
  """`value` with numpy-array leaves turned into jax arrays."""

  def convert(x: Any) -> Any:
    return jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x

  return jax.tree.map(convert, value)


class BaseLayer(nn.Module):
  """Base class of all Pax layers.

  Attributes:
    dtype: Data type of the variables.
    fprop_dtype: Data type of the activations (None: `dtype`).
    params_init: Default initialiser of the variables.
    skip_lp_regularization: Excludes the variables from L1/L2 regularisation.
    ici_mesh_shape: Device mesh shape within a slice (for sharding).
    dcn_mesh_shape: Device mesh shape across slices.
    contiguous_submeshes: Whether slices are contiguous submeshes.
    mesh_axis_names: Names of the mesh axes.
    shared_weight_layer_id: Layers with the same id share their variables.
    weight_split_dims_mapping: Sharding of the variables (`.wt`, ...).
    activation_split_dims_mapping: Sharding of the outputs (`.out`, ...).
  """

  @dataclasses.dataclass(frozen=True)
  class WeightSharding(pax_fiddle.CloneAndSetMixin):
    """Sharding of the layer's variables (a layer's subclass adds fields).

    Attributes:
      wt: Split-dims mapping of the main weight.
    """

    wt: SplitDimsMapping = None

  @dataclasses.dataclass(frozen=True)
  class ActivationSharding(pax_fiddle.CloneAndSetMixin):
    """Sharding of the layer's activations (a layer's subclass adds fields).

    Attributes:
      out: Split-dims mapping of the output.
    """

    out: SplitDimsMapping = None

  HParams = base_hyperparams.FiddleHParamsClassStub

  dtype: Any = jnp.float32
  fprop_dtype: Any = None
  params_init: WeightInit = instance_field(default_param_init)
  skip_lp_regularization: bool | None = None
  ici_mesh_shape: Sequence[int] | None = None
  dcn_mesh_shape: Sequence[int] | None = None
  contiguous_submeshes: bool | None = None
  mesh_axis_names: Sequence[str] | None = None
  shared_weight_layer_id: str | None = None
  weight_split_dims_mapping: pax_fiddle.Config[BaseLayer.WeightSharding] = (
      template_field(WeightSharding)
  )
  activation_split_dims_mapping: pax_fiddle.Config[
      BaseLayer.ActivationSharding
  ] = template_field(ActivationSharding)

  theta = ThetaDescriptor()

  def __init_subclass__(cls, **kwargs: Any):
    _refuse_plain_nested_hparams(cls)
    base_hyperparams.absorb_nested_hparams(cls)
    _rebind_sharding_field(
        cls, 'WeightSharding', 'weight_split_dims_mapping'
    )
    _rebind_sharding_field(
        cls, 'ActivationSharding', 'activation_split_dims_mapping'
    )
    # Fields follow Pax's order (`Layer(jnp.float16)` sets dtype), but a
    # class declaring a field without default makes its own fields keyword
    # only, so that it can (Python refuses it after defaulted fields).
    kwargs.setdefault('kw_only', _declares_required_field(cls))
    super().__init_subclass__(**kwargs)
    base_hyperparams.install_hparams_stub(cls)

  def __post_init__(self):
    _check_dtype_argument(self)
    super().__post_init__()
    if isinstance(self.parent, BaseLayer):
      self.copy_base_hparams(self.parent, self, assign=object.__setattr__)
    if self.fprop_dtype is None:
      object.__setattr__(self, 'fprop_dtype', self.dtype)

  # -- Configuration ---------------------------------------------------------

  @classmethod
  def config(cls, **kwargs: Any) -> pax_fiddle.Config[Any]:
    """`pax_fiddle.Config(cls, **kwargs)`."""
    return pax_fiddle.Config(cls, **kwargs)

  @property
  def hparams(self) -> pax_fiddle.Config[Any]:
    """A config that builds this layer (`self.hparams.input_dims`), as Pax.

    Child layers held in fields appear as their own `hparams`. Changing the
    config does not change the layer.
    """
    try:
      return object.__getattribute__(self, '_pax_hparams')
    except AttributeError:
      config = _config_of(self)
      object.__setattr__(self, '_pax_hparams', config)
      return config

  @staticmethod
  def copy_base_hparams(
      source: Any, target: Any, assign: Callable[..., None] = setattr
  ) -> None:
    """Copies dtype, mesh and init settings that `target` leaves at default.

    Args:
      source: A layer or layer config whose settings are inherited.
      target: A layer config (or layer, with `assign=object.__setattr__`).
      assign: How to set an attribute of `target`.
    """
    if not _has_field(target, 'dtype'):
      return
    if target.dtype == jnp.float32:
      assign(target, 'dtype', source.dtype)
    for name in _INHERITED_IF_NONE:
      if getattr(target, name) is None:
        assign(target, name, copy.deepcopy(getattr(source, name)))
    if is_default_param_init(target.params_init):
      assign(target, 'params_init', copy.deepcopy(source.params_init))

  @property
  def mesh_shape(self) -> list[int] | None:
    """`ici_mesh_shape` times `dcn_mesh_shape`, elementwise."""
    if self.ici_mesh_shape is None:
      return None
    if self.dcn_mesh_shape is None:
      return list(self.ici_mesh_shape)
    return [i * d for i, d in zip(self.ici_mesh_shape, self.dcn_mesh_shape)]

  def get_shard_count_on_dim(
      self, dim_sharding: str | Sequence[str] | None
  ) -> int:
    """The number of shards of a tensor dim split over `dim_sharding` axes."""
    if dim_sharding is None or self.mesh_axis_names is None:
      return 1
    if isinstance(dim_sharding, str):
      dim_sharding = [dim_sharding]
    count = 1
    for axis in dim_sharding:
      if axis not in self.mesh_axis_names:
        raise ValueError(
            f'{type(self).__name__}: mesh axis {axis!r} is not one of '
            f'mesh_axis_names {list(self.mesh_axis_names)}.'
        )
      i = list(self.mesh_axis_names).index(axis)
      for shape in (self.ici_mesh_shape, self.dcn_mesh_shape):
        count *= shape[i] if shape else 1
    return count

  # -- Context ---------------------------------------------------------------

  @property
  def jax_context(self) -> JaxContext | None:
    return JaxContext.top()

  @property
  def reflect_configs(self) -> bool:
    """True under `abstract_init_with_mdl_config` (layers record configs)."""
    context = JaxContext.top()
    return bool(context and context.hparams.self_reflect_configs)

  @property
  def do_eval(self) -> bool:
    """True when running under a `JaxContext` with `do_eval=True`."""
    context = JaxContext.top()
    return bool(context and context.do_eval)

  # -- Children --------------------------------------------------------------

  def create_child(
      self, name: str, params: pax_fiddle.Config, *, skip_clone: bool = False
  ) -> BaseLayer:
    """Creates the child layer `name` from its config (inside `setup`).

    The config is cloned (unless `skip_clone`), inherits this layer's dtype,
    mesh and init settings where it keeps the defaults, and is built; the
    child becomes `self.<name>`.

    Args:
      name: The child's name.
      params: Its config, a `pax_fiddle.Config` of a layer.
      skip_clone: Use `params` itself (which is then changed).

    Returns:
      The child layer.
    """
    _check_template(self, name, params)
    _check_unique_name(self, name, 'child')
    created = self._private_children()
    if name in created:
      raise ValueError(
          f'{type(self).__name__}: child {name!r} was already created.'
      )
    p = params if skip_clone else params.clone()
    self.copy_base_hparams(self, p)
    p.name = name
    root = self.scope.root if self.scope is not None else None
    child = instantiate_layer(p, root, owned=not skip_clone)
    if self._state.in_setup:
      setattr(self, name, child)
      child = getattr(self, name)  # As adopted by Flax.
    created[name] = child
    return child

  def create_children(
      self,
      name: str,
      params: Sequence[pax_fiddle.Config],
      *,
      skip_clone: bool = False,
  ) -> list[BaseLayer]:
    """Creates children `name_0`, `name_1`, ...; `self.<name>` lists them."""
    _check_unique_name(self, name, 'children')
    children = []
    for i, p in enumerate(params):
      _check_template(self, f'{name}_{i}', p)
      p = p if skip_clone else p.clone()
      self.copy_base_hparams(self, p)
      p.name = f'{name}_{i}'
      root = self.scope.root if self.scope is not None else None
      children.append(instantiate_layer(p, root, owned=not skip_clone))
    if self._state.in_setup:
      setattr(self, name, children)
      children = list(getattr(self, name))  # As adopted by Flax.
    for i, child in enumerate(children):
      self._private_children()[f'{name}_{i}'] = child
    return children

  def _private_children(self) -> dict[str, BaseLayer]:
    """The children made by create_child(ren), by name (`name_<i>` in lists)."""
    try:
      return object.__getattribute__(self, '_pax_children')
    except AttributeError:
      children: dict[str, BaseLayer] = {}
      object.__setattr__(self, '_pax_children', children)
      return children

  def _child_layers(self) -> dict[str, BaseLayer]:
    """Created children and the layers held in fields, by name."""
    children = dict(self._private_children())
    for f in dataclasses.fields(self):
      value = getattr(self, f.name) if f.name != 'parent' else None
      if isinstance(value, BaseLayer):
        children[f.name] = value
    return children

  # -- Quantized and sparse variables ---------------------------------------

  @nn.nowrap
  def create_quantized_variable(
      self,
      name: str,
      weight_hparams: WeightHParams,
      scale_shape: Sequence[int] = (),
      dtype: Any = jnp.int8,
      use_symmetric: bool = True,
      scale_hparams: WeightHParams | None = None,
  ) -> None:
    """Creates a quantized weight `name`, its scale and maybe zero point.

    The weight is zeros in `dtype`; `name_quantized_scale` (and, when not
    `use_symmetric`, `name_quantized_zp`) has `scale_shape`, or the shape and
    sharding of `scale_hparams`.
    """
    _layer_quantization.create_quantized_variable(
        self, name, weight_hparams, scale_shape, dtype, use_symmetric,
        scale_hparams,
    )

  @nn.nowrap
  def get_quantized_weight(
      self, name: str, use_symmetric: bool = True
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """(weight, scale, zero point or None) of a quantized variable."""
    return _layer_quantization.get_quantized_weight(self, name, use_symmetric)

  @nn.nowrap
  def create_sparse_variable(
      self, name: str, weight_hparams: WeightHParams
  ) -> None:
    """Creates `name` and its non-trainable `name_sparsity_mask`."""
    _layer_quantization.create_sparse_variable(self, name, weight_hparams)

  @nn.nowrap
  def get_sparse_weight(self, name: str) -> tuple[JTensor, JTensor]:
    """(weight, mask) of a sparse variable."""
    return _layer_quantization.get_sparse_weight(self, name)

  def quantize_weight(self) -> NestedJTensor:
    """This layer's variables, quantized; by default as they are.

    Quantizing layers override it; children answer for themselves. Call it
    through `apply(variables, method=layer.quantize_weight)`.
    """
    return _layer_quantization.quantize_tree(self, return_pspec=False)

  def quantized_partition_specs(self) -> Any:
    """`BoxedPartitionSpec`s of what `quantize_weight` returns."""
    return _layer_quantization.quantize_tree(self, return_pspec=True)

  # -- Variables -------------------------------------------------------------

  def create_variable(
      self, name: str, var_hparams: WeightHParams, trainable: bool = True
  ) -> JTensor:
    """Declares the variable `name` (inside `setup` or an `nn.compact` method).

    Trainable variables live in the `params` collection, the others in
    `non_trainable`. Unset `init`/`dtype` come from the layer's
    `params_init`/`dtype`; an unset `mesh_shape` from the layer's mesh.

    Args:
      name: The variable's name.
      var_hparams: Its declaration.
      trainable: Whether the optimizer updates it.

    Returns:
      Its current value (as `theta` or `get_var` read it).
    """
    if not (self._state.in_setup or self._state.in_compact_method):
      raise ValueError(
          f'{type(self).__name__}: create_variable({name!r}) must be called '
          'in setup() (or an @nn.compact method).'
      )
    _check_unique_name(self, name, 'variable')
    hp = self._complete_weight_hparams(var_hparams, trainable)
    self._weight_hparams()[name] = hp
    path = '/'.join(self.scope.path + (name,)) if self.scope else name

    if trainable:
      self.param(
          name, lambda key: BoxedParam(init_var(hp, key, path), meta=hp)
      )
      return self._read_param(name)
    self.variable(
        NON_TRAINABLE,
        name,
        lambda: BoxedParam(init_var(hp, self.make_rng(PARAMS), path), meta=hp),
    )
    return self.get_var(name)

  def _complete_weight_hparams(
      self, var_hparams: WeightHParams, trainable: bool
  ) -> WeightHParams:
    hp = copy.deepcopy(var_hparams)
    hp.init = hp.init or self.params_init
    hp.dtype = hp.dtype or self.dtype
    collections = list(hp.collections or [])
    if self.skip_lp_regularization:
      collections.append(WeightHParamsCollection.SKIP_LP_REGULARIZATION)
    if not trainable:
      collections.append(WeightHParamsCollection.NON_TRAINABLE)
    hp.collections = list(dict.fromkeys(collections))
    if hp.mesh_shape is None and self.mesh_shape is not None:
      hp.mesh_shape = self.mesh_shape
      if hp.tensor_split_dims_mapping is None:
        hp.tensor_split_dims_mapping = (-1,) * len(hp.shape)
    return hp

  def _weight_hparams(self) -> dict[str, WeightHParams]:
    """The declarations of the variables this layer created, by name."""
    try:
      return object.__getattribute__(self, '_pax_weight_hparams')
    except AttributeError:
      declared: dict[str, WeightHParams] = {}
      object.__setattr__(self, '_pax_weight_hparams', declared)
      return declared

  def _read_param(self, name: str) -> JTensor:
    self._try_setup()
    if not self.has_variable(PARAMS, name):
      raise AttributeError(
          f'{type(self).__name__} has no trainable variable {name!r} (did '
          'setup() create it?).'
      )
    # Restored checkpoints may hand numpy arrays: read them as jax arrays
    # (other leaves, e.g. ghost-norm's ParamWithAux pytrees, pass as they are).
    value = _numpy_as_jax(
        flax_core.meta.unbox(self.get_variable(PARAMS, name)))
    hp = self._weight_hparams().get(name)
    if (
        self.fprop_dtype == jnp.bfloat16
        and hp is not None
        and var_disallow_bfloat16_conversion(hp)
    ):
      return value
    return self._cast_to_fprop_dtype(value)

  def _cast_to_fprop_dtype(self, value: Any) -> Any:
    """Floating-point leaves of `value` in `fprop_dtype`."""

    def cast(x: Any) -> Any:
      if x is None or self.fprop_dtype is None:
        return x
      if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != self.fprop_dtype:
        return x.astype(self.fprop_dtype)
      return x

    return jax.tree.map(cast, value)

  def get_var(self, name: str) -> JTensor:
    """The current value of the non-trainable variable `name`."""
    for collection in (NON_TRAINABLE, PARAMS):
      if self.has_variable(collection, name):
        value = flax_core.meta.unbox(self.get_variable(collection, name))
        return _numpy_as_jax(value)
    raise ValueError(f'{type(self).__name__} has no variable {name!r}.')

  def update_var(self, name: str, new_val: JTensor) -> None:
    """Sets the non-trainable variable `name` (when `non_trainable` is mutable).

    Updates made while initialising are dropped, so `init` returns initial
    values.

    Args:
      name: The variable.
      new_val: Its new value, of the same shape.
    """
    old = self.get_var(name)
    if not self.is_mutable_collection(NON_TRAINABLE) or self.is_initializing():
      return
    if old.shape != new_val.shape:
      raise ValueError(
          f'{type(self).__name__}.update_var({name!r}): shape {new_val.shape} '
          f'differs from the variable shape {old.shape}.'
      )
    raw = self.scope.get_variable(NON_TRAINABLE, name)
    if isinstance(raw, flax_core.meta.AxisMetadata):
      new_val = raw.replace_boxed(new_val)
    self.put_variable(NON_TRAINABLE, name, new_val)

  def get_decode_state(self, name: str) -> JTensor:
    """The decoder-cache entry `name`."""
    return self.get_variable(DECODE_CACHE, name)

  def update_decode_state(self, name: str, new_state: JTensor) -> None:
    """Sets the decoder-cache entry `name` (when the cache is mutable)."""
    if self.is_mutable_collection(DECODE_CACHE):
      self.put_variable(DECODE_CACHE, name, new_state)

  # -- Summaries, auxiliary losses, randomness ------------------------------

  def add_summary(
      self,
      name: str,
      tensor: Any,
      summary_type: SummaryType = SummaryType.SCALAR,
      verbosity: int = SummaryVerbosity.INFO,
  ) -> None:
    """Records `tensor` in the `summaries` collection as `<name>_<type>`.

    Args:
      name: The summary's name; a number is appended only if `name`
        itself (unsuffixed) is taken, so repeats overwrite, as in Pax.
      tensor: Its value, or a function computing it.
      summary_type: SCALAR, IMAGE, ...; images are made 4-D, audio 3-D.
      verbosity: Recorded only if at most the context's summary verbosity.
    """
    context = JaxContext.top()
    if context is not None and verbosity > context.summary_verbosity:
      return
    if not self.is_mutable_collection(SUMMARIES):
      return
    if callable(tensor):
      tensor = tensor()
    # As Pax: the number probe looks at the name without its type suffix,
    # so a repeated name (or one fed back in from an earlier apply) is
    # overwritten as `<name>_<type>`, not renamed `<name>1_<type>`.
    full_name, i = name, 0
    while self.has_variable(SUMMARIES, full_name):
      i += 1
      full_name = f'{name}{i}'
    full_name += get_summary_type_suffix(summary_type)
    base = get_summary_base_type(summary_type)
    if base == SummaryType.IMAGE and tensor.ndim == 3:
      tensor = tensor[jnp.newaxis]
    if base == SummaryType.AUDIO and tensor.ndim == 2:
      tensor = tensor[jnp.newaxis]
    self.sow(SUMMARIES, full_name, tensor, reduce_fn=lambda _, y: y)

  def add_aux_loss(
      self, name: str, value: JTensor, weight: JTensor | None = None
  ) -> None:
    """Adds `value` (times `weight`) to the `aux_loss` collection."""
    weight = jnp.ones_like(value) if weight is None else weight
    self.sow(
        AUX_LOSS,
        name,
        AuxLossStruct(value, weight),
        init_fn=lambda: AuxLossStruct(0.0, 0.0),
        reduce_fn=lambda a, b: AuxLossStruct(
            a.value + b.value, a.weight + b.weight
        ),
    )

  def next_prng_key(self, name: str = RANDOM) -> PRNGKey:
    """A fresh key from the RNG stream `name` (default `random`)."""
    return self.make_rng(name)

  # -- Running ---------------------------------------------------------------

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    if type(self).fprop is BaseLayer.fprop:
      raise NotImplementedError(
          f'{type(self).__name__} defines neither __call__ nor fprop.'
      )
    return self.fprop(*args, **kwargs)

  def fprop(self, *args: Any, **kwargs: Any) -> Any:
    """The forward computation; layers define this or `__call__`."""
    if type(self).__call__ is BaseLayer.__call__:
      raise NotImplementedError(
          f'{type(self).__name__} defines neither __call__ nor fprop.'
      )
    return self.__call__(*args, **kwargs)

  def init(
      self,
      rngs: Any,
      *args: Any,
      method: Any = None,
      mutable: Any = None,
      capture_intermediates: Any = False,
      **kwargs: Any,
  ) -> dict[str, Any]:
    """Initialises the variables: `params` and `non_trainable` by default."""
    variables = super().init(
        rngs,
        *args,
        method=method,
        mutable=DEFAULT_INIT_MUTABLE_LIST if mutable is None else mutable,
        capture_intermediates=capture_intermediates,
        **kwargs,
    )
    return flax_core.unfreeze(maybe_unbox_value(variables))

  def apply(
      self,
      variables: Any,
      *args: Any,
      rngs: Any = None,
      method: Any = None,
      mutable: Any = False,
      capture_intermediates: Any = False,
      **kwargs: Any,
  ) -> Any:
    """Runs `method` (default `__call__`) with `variables`."""
    result = super().apply(
        variables,
        *args,
        rngs=rngs,
        method=method,
        mutable=mutable,
        capture_intermediates=capture_intermediates,
        **kwargs,
    )
    if mutable is False:
      return result
    outputs, updated = result
    return outputs, flax_core.unfreeze(maybe_unbox_value(updated))

  @nn.nowrap
  def _try_setup(self, shallow: bool = False) -> None:
    before = self._state.setup_called
    super()._try_setup(shallow=shallow)
    if before != self._state.setup_called:
      self._maybe_record_hparams()

  def _maybe_record_hparams(self) -> None:
    """Under `abstract_init_with_mdl_config`, stores this layer's config."""
    if not (self.reflect_configs and self.is_initializing()):
      return
    kwargs = {}
    for f in dataclasses.fields(self):
      if not f.init or f.name == 'parent':
        continue
      value = getattr(self, f.name)
      if is_sublayer_template_or_instance(value):
        value = None
      kwargs[f.name] = value
    config = pax_fiddle.Config(type(self), **kwargs)
    self.put_variable(HYPER_PARAMS, '_hparams', WrappedHParams(config))

  def _abstract_init(
      self,
      *args: Any,
      do_eval: bool,
      method: Any,
      extra_mutable_list: Sequence[str] | None,
      self_reflect_configs: bool = False,
      **kwargs: Any,
  ) -> dict[str, Any]:
    """`jax.eval_shape` of `init`: variables as boxes of shapes."""
    mutable = DEFAULT_INIT_MUTABLE_LIST + list(extra_mutable_list or [])
    if self_reflect_configs:
      mutable.append(HYPER_PARAMS)
    key = jax.random.PRNGKey(1)
    rngs = {PARAMS: key, RANDOM: key, NON_PAX_RNG_KEY: key}
    if self.fprop_dtype == jnp.bfloat16:
      args, kwargs = jax.tree.map(_to_bfloat16_shape, (args, kwargs))

    def init_fn(*inputs):
      return nn.Module.init(
          self, rngs, *inputs, method=method, mutable=mutable, **kwargs
      )

    context = JaxContext.HParams(
        do_eval=do_eval, self_reflect_configs=self_reflect_configs
    )
    with JaxContext.new_context(hparams=context):
      variables = jax.eval_shape(init_fn, *args)
    return flax_core.unfreeze(variables)

  def abstract_init_with_metadata(
      self,
      *args: Any,
      do_eval: bool = False,
      method: Any = None,
      extra_mutable_list: Sequence[str] | None = None,
      **kwargs: Any,
  ) -> dict[str, Any]:
    """The declarations (`WeightHParams`) of all variables, without memory.

    Args:
      *args: Inputs (arrays or `jax.ShapeDtypeStruct`s) as for `init`.
      do_eval: Initialise in eval mode.
      method: The method to trace (default `__call__`).
      extra_mutable_list: Collections to create beyond the defaults.
      **kwargs: Keyword inputs.

    Returns:
      `{'params': {...}, 'non_trainable': {...}}` of `WeightHParams`, with
      full shapes, dtypes and shardings.
    """
    variables = self._abstract_init(
        *args, do_eval=do_eval, method=method,
        extra_mutable_list=extra_mutable_list, **kwargs,
    )
    variables.pop('params_axes', None)
    return unbox_meta(variables)

  def abstract_init_with_mdl_config(
      self,
      *args: Any,
      do_eval: bool = False,
      method: Any = None,
      extra_mutable_list: Sequence[str] | None = None,
      **kwargs: Any,
  ) -> dict[str, Any]:
    """The config of every layer of the model, as built, without memory.

    Runs `init` abstractly; each layer records a `pax_fiddle.Config` of its
    fields (children and child templates set to None) under `_hparams`.

    Args:
      *args: Inputs (arrays or `jax.ShapeDtypeStruct`s) as for `init`.
      do_eval: Initialise in eval mode.
      method: The method to trace (default `__call__`).
      extra_mutable_list: Collections to create beyond the defaults.
      **kwargs: Keyword inputs.

    Returns:
      `{'_hparams': Config, '<child>': {'_hparams': Config, ...}, ...}`.
    """
    variables = self._abstract_init(
        *args, do_eval=do_eval, method=method,
        extra_mutable_list=extra_mutable_list, self_reflect_configs=True,
        **kwargs,
    )
    return jax.tree.map(
        lambda x: x.meta,
        variables.get(HYPER_PARAMS, {}),
        is_leaf=lambda x: isinstance(x, WrappedHParams),
    )


base_hyperparams.install_hparams_stub(BaseLayer)
BaseLayerApi = BaseLayer


def _rebind_sharding_field(cls: type[Any], nested: str, field: str) -> None:
  """Points `field` at the subclass's own nested sharding class."""
  sharding_cls = cls.__dict__.get(nested)
  if sharding_cls is None:
    return
  if '__setattr__' not in sharding_cls.__dict__:  # Not yet a frozen dataclass.
    dataclasses.dataclass(frozen=True)(sharding_cls)
  annotations = cls.__dict__.get('__annotations__')
  if annotations is None:
    annotations = {}
    cls.__annotations__ = annotations
  annotations[field] = pax_fiddle.Config[sharding_cls]
  setattr(cls, field, template_field(sharding_cls))


def _to_bfloat16_shape(x: Any) -> Any:
  """float32 arrays as bfloat16 shapes (for abstract init); others as is."""
  if not hasattr(x, 'dtype') or not hasattr(x, 'shape'):
    return x
  dtype = jnp.bfloat16 if x.dtype == jnp.float32 else x.dtype
  return jax.ShapeDtypeStruct(x.shape, dtype)


def assert_has_shape(t: JTensor, shape: Sequence[int]) -> None:
  """Checks `t.shape` against `shape`, where -1 matches any size."""
  if t.ndim != len(shape) or any(
      s != -1 and s != d for s, d in zip(shape, t.shape)
  ):
    raise ValueError(f'Expected a tensor of shape {shape}, got {t.shape}.')


def compatible_hparams(hparams1: Any, hparams2: Any) -> bool:
  """Whether two layer configs are equal but for their names."""
  hparams1, hparams2 = copy.copy(hparams1), copy.copy(hparams2)
  hparams1.name = hparams2.name = ''
  return hparams1 == hparams2


def get_template_fields(template: pax_fiddle.Config) -> list[str]:
  """The names of the arguments `template` (a config) can set, in order,
  defaulted and unset ones included (not `cls`); TypeError for others."""
  if not isinstance(template, pax_fiddle.Config):
    raise TypeError(f'get_template_fields takes a pax_fiddle.Config, got '
                    f'{type(template).__name__}.')
  return list(fdl.ordered_arguments(template, include_defaults=True,
                                    include_unset=True,
                                    include_positional=False))


def is_running_under_pmap() -> bool:
  """Always False: Pax runs every program under one `jax.jit`."""
  return False


class _SharedLayerHolder(BaseLayer):
  """Bound to the root scope; builds a shared layer there, as `name`."""

  cld_tpl: pax_fiddle.Config[BaseLayer] | None = template_field(None)

  def setup(self) -> None:
    self.create_child(self.name, self.cld_tpl)
    self.cld = getattr(self, self.name)


# Type hints for code that annotates against praxis.
if typing.TYPE_CHECKING:
  LayerTpl = pax_fiddle.Config[BaseLayer]
