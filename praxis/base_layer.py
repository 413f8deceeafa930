"""BaseLayer: the Pax layer, a `flax.linen.Module` configured with Fiddle.

Public names: BaseLayer, BaseLayerApi, instantiate, instantiate_layer,
template_field, instance_field, sub_config_field, maybe_shard, the collection
and RNG-stream names (PARAMS, NON_TRAINABLE, SUMMARIES, AUX_LOSS, ...), and,
re-exported from private siblings, the variable declarations (`WeightInit`,
`WeightHParams`, `WeightHParamsCollection`, `init_var`, ...) and the context
(`JaxContext`, `SummaryType`, ...).

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
from praxis import _jax_context
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
add_global_summary = _jax_context.add_global_summary
clear_global_summary = _jax_context.clear_global_summary
all_global_summaries = _jax_context.all_global_summaries
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


def instantiate_layer(layer_p: pax_fiddle.Config, scope_root: Any) -> Any:
  """Builds a child layer; layers with a `shared_weight_layer_id` are shared.

  Within one `init`/`apply` (one root scope), the first layer built with a
  given `shared_weight_layer_id` is returned again for every later config
  with that id, so all of them use the same variables.

  Args:
    layer_p: The child's config.
    scope_root: The root scope of the current `init`/`apply`.

  Returns:
    The layer.
  """
  shared_id = getattr(layer_p, 'shared_weight_layer_id', None)
  if not shared_id or scope_root is None:
    return pax_fiddle.instantiate(layer_p)
  cache = _shared_layer_cache().setdefault(scope_root, {})
  if shared_id in cache:
    layer, first_p = cache[shared_id]
    if fdl.get_callable(first_p) is not fdl.get_callable(layer_p):
      raise ValueError(
          f'Layers sharing weights as {shared_id!r} must be of one class: '
          f'{fdl.get_callable(first_p).__name__} vs '
          f'{fdl.get_callable(layer_p).__name__}.'
      )
    return layer
  layer = pax_fiddle.instantiate(layer_p)
  cache[shared_id] = (layer, layer_p)
  return layer


def _check_unique_name(layer: BaseLayer, name: str, what: str) -> None:
  field_names = {f.name for f in dataclasses.fields(layer)}
  if name in field_names:
    raise ValueError(
        f'{type(layer).__name__}: cannot create {what} {name!r}: a field of '
        'the layer has that name.'
    )


class _Theta:
  """`layer.theta.w` / `layer.theta['w']`: the layer's trainable variables."""

  def __init__(self, layer: BaseLayer):
    object.__setattr__(self, '_layer', layer)

  def __getattr__(self, name: str) -> JTensor:
    return self._layer._read_param(name)  # pylint: disable=protected-access

  def __getitem__(self, name: str) -> JTensor:
    return self._layer._read_param(name)  # pylint: disable=protected-access

  def __contains__(self, name: str) -> bool:
    return self._layer.has_variable(PARAMS, name)


class _ThetaDescriptor:

  def __get__(self, layer: BaseLayer | None, owner: type[Any]) -> Any:
    return self if layer is None else _Theta(layer)


# Fields copied from a parent layer to the children it creates (when unset).
_INHERITED_IF_NONE = (
    'fprop_dtype',
    'skip_lp_regularization',
    'ici_mesh_shape',
    'dcn_mesh_shape',
    'contiguous_submeshes',
    'mesh_axis_names',
)


def _has_field(target: Any, name: str) -> bool:
  if isinstance(target, fdl.Buildable):
    return name in target.__signature_info__.parameters
  return any(f.name == name for f in dataclasses.fields(target))


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

  class WeightSharding(base_hyperparams.FiddleBaseParameterizable):
    """Sharding of the layer's variables.

    Attributes:
      wt: Split-dims mapping of the main weight.
    """

    wt: SplitDimsMapping = None

  class ActivationSharding(base_hyperparams.FiddleBaseParameterizable):
    """Sharding of the layer's activations.

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

  theta = _ThetaDescriptor()

  def __init_subclass__(cls, **kwargs: Any):
    base_hyperparams.absorb_nested_hparams(cls)
    _rebind_sharding_field(
        cls, 'WeightSharding', 'weight_split_dims_mapping'
    )
    _rebind_sharding_field(
        cls, 'ActivationSharding', 'activation_split_dims_mapping'
    )
    kwargs.setdefault('kw_only', True)
    super().__init_subclass__(**kwargs)
    base_hyperparams.install_hparams_stub(cls)

  def __post_init__(self):
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
  def hparams(self) -> base_hyperparams.HParamsView:
    """The layer's hyper-parameters, read-only (`self.hparams.input_dims`)."""
    return base_hyperparams.HParamsView(self)

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

  # -- Context ---------------------------------------------------------------

  @property
  def jax_context(self) -> JaxContext | None:
    return JaxContext.top()

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
    if not isinstance(params, fdl.Buildable):
      raise TypeError(
          f'{type(self).__name__}.create_child({name!r}): expected a '
          f'pax_fiddle.Config of a layer, got {type(params).__name__}.'
      )
    _check_unique_name(self, name, 'child')
    created = self._created_names()
    if name in created:
      raise ValueError(
          f'{type(self).__name__}: child {name!r} was already created.'
      )
    p = params if skip_clone else params.clone()
    self.copy_base_hparams(self, p)
    p.name = name
    root = self.scope.root if self.scope is not None else None
    child = instantiate_layer(p, root)
    created.add(name)
    if self._state.in_setup:
      setattr(self, name, child)
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
      p = p if skip_clone else p.clone()
      self.copy_base_hparams(self, p)
      p.name = f'{name}_{i}'
      root = self.scope.root if self.scope is not None else None
      children.append(instantiate_layer(p, root))
    if self._state.in_setup:
      setattr(self, name, children)
    return children

  def _created_names(self) -> set[str]:
    try:
      return object.__getattribute__(self, '_pax_created')
    except AttributeError:
      names: set[str] = set()
      object.__setattr__(self, '_pax_created', names)
      return names

  # -- Variables -------------------------------------------------------------

  def create_variable(
      self, name: str, var_hparams: WeightHParams, trainable: bool = True
  ) -> None:
    """Declares the variable `name` (inside `setup`).

    Trainable variables live in the `params` collection, the others in
    `non_trainable`. Unset `init`/`dtype` come from the layer's
    `params_init`/`dtype`; an unset `mesh_shape` from the layer's mesh.

    Args:
      name: The variable's name.
      var_hparams: Its declaration.
      trainable: Whether the optimizer updates it.
    """
    if not (self._state.in_setup or self._state.in_compact_method):
      raise ValueError(
          f'{type(self).__name__}: create_variable({name!r}) must be called '
          'in setup() (or an @nn.compact method).'
      )
    _check_unique_name(self, name, 'variable')
    hp = self._complete_weight_hparams(var_hparams, trainable)
    path = '/'.join(self.scope.path + (name,)) if self.scope else name

    if trainable:
      self.param(
          name, lambda key: BoxedParam(init_var(path, hp, key), meta=hp)
      )
    else:
      self.variable(
          NON_TRAINABLE,
          name,
          lambda: BoxedParam(
              init_var(path, hp, self.make_rng(PARAMS)), meta=hp
          ),
      )

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

  def _read_param(self, name: str) -> JTensor:
    self._try_setup()
    if not self.has_variable(PARAMS, name):
      raise AttributeError(
          f'{type(self).__name__} has no trainable variable {name!r} (did '
          'setup() create it?).'
      )
    value = flax_core.meta.unbox(self.get_variable(PARAMS, name))
    return self._cast_to_fprop_dtype(value)

  def _cast_to_fprop_dtype(self, value: JTensor) -> JTensor:
    if self.fprop_dtype is None or not jnp.issubdtype(
        value.dtype, jnp.floating
    ):
      return value
    return value.astype(self.fprop_dtype)

  def get_var(self, name: str) -> JTensor:
    """The current value of the non-trainable variable `name`."""
    for collection in (NON_TRAINABLE, PARAMS):
      if self.has_variable(collection, name):
        return flax_core.meta.unbox(self.get_variable(collection, name))
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

  def update_decode_state(self, name: str, state: JTensor) -> None:
    """Sets the decoder-cache entry `name` (when the cache is mutable)."""
    if self.is_mutable_collection(DECODE_CACHE):
      self.put_variable(DECODE_CACHE, name, state)

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
      name: The summary's name (a number is appended if it is taken).
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
    suffix = get_summary_type_suffix(summary_type)
    full_name, i = name + suffix, 0
    while self.has_variable(SUMMARIES, full_name):
      i += 1
      full_name = f'{name}{i}{suffix}'
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
    mutable = DEFAULT_INIT_MUTABLE_LIST + list(extra_mutable_list or [])
    key = jax.random.PRNGKey(1)
    rngs = {PARAMS: key, RANDOM: key, NON_PAX_RNG_KEY: key}

    def init_fn(*inputs):
      return nn.Module.init(
          self, rngs, *inputs, method=method, mutable=mutable, **kwargs
      )

    context = JaxContext.HParams(do_eval=do_eval)
    with JaxContext.new_context(hparams=context):
      variables = jax.eval_shape(init_fn, *args)
    variables = flax_core.unfreeze(variables)
    variables.pop('params_axes', None)
    return unbox_meta(variables)


base_hyperparams.install_hparams_stub(BaseLayer)
BaseLayerApi = BaseLayer


def _rebind_sharding_field(cls: type[Any], nested: str, field: str) -> None:
  """Points `field` at the subclass's own nested sharding class."""
  sharding_cls = cls.__dict__.get(nested)
  if sharding_cls is None:
    return
  annotations = cls.__dict__.get('__annotations__')
  if annotations is None:
    annotations = {}
    cls.__annotations__ = annotations
  annotations[field] = pax_fiddle.Config[sharding_cls]
  setattr(cls, field, template_field(sharding_cls))


def assert_has_shape(t: JTensor, shape: Sequence[int]) -> None:
  """Checks `t.shape` against `shape`, where -1 matches any size."""
  if t.ndim != len(shape) or any(
      s != -1 and s != d for s, d in zip(shape, t.shape)
  ):
    raise ValueError(f'Expected a tensor of shape {shape}, got {t.shape}.')


def compatible_hparams(a: Any, b: Any) -> bool:
  """Whether two layer configs are equal but for their names."""
  a, b = copy.copy(a), copy.copy(b)
  a.name = b.name = ''
  return a == b


def get_template_fields(cls: type[Any]) -> frozenset[str]:
  """Names of the template fields of a layer class."""
  return pax_fiddle.template_field_names(cls)


def is_running_under_pmap() -> bool:
  """Always False: Pax runs every program under one `jax.jit`."""
  return False


# Type hints for code that annotates against praxis.
if typing.TYPE_CHECKING:
  LayerTpl = pax_fiddle.Config[BaseLayer]
