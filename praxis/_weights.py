"""Variables of Pax layers: declaration, initialisation and sharding metadata.

Re-exported by `praxis.base_layer`; import it from there. Public names:
  WeightInit, WeightHParams, WeightHParamsCollection, BoxedParam,
  default_param_init, is_default_param_init, get_fan_in_fan_out, init_var,
  scaled_orthogonal, scaled_delta_orthogonal, var_init_scale,
  maybe_unbox_value, unbox_meta,
  to_partition_spec, var_partition_specs, var_not_trainable,
  var_requires_mean_sync, var_requires_sum_sync,
  var_disallow_bfloat16_conversion, var_skip_lp_regularization,
  var_overwrite_with_gradient.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Sequence

from absl import logging
from flax import struct
from flax.core import meta
import jax
import jax.numpy as jnp
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping


@dataclasses.dataclass(frozen=True)
class WeightInit:
  """How a variable is initialised: a method name and a scale.

  Use the constructors, e.g. `WeightInit.Gaussian(0.02)`; `init_var` holds
  the math of each method.
  """

  method: str
  scale: float

  @staticmethod
  def Gaussian(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('gaussian', scale)

  @staticmethod
  def Uniform(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('uniform', scale)

  @staticmethod
  def Xavier(scale: float = 1.000001) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('xavier', scale)

  @staticmethod
  def XavierWithFixupParams(  # pylint: disable=invalid-name
      scale: float = 1.0,
      depth: float = 1.0,
      layers_per_residual_block: float = 1.0,
  ) -> WeightInit:
    scale = scale * math.pow(depth, (-1.0 / (2 * layers_per_residual_block)))
    return WeightInit('xavier', scale)

  @staticmethod
  def Constant(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('constant', scale)

  @staticmethod
  def TruncatedGaussian(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('truncated_gaussian', scale)

  @staticmethod
  def GaussianSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('gaussian_sqrt_dim', scale)

  @staticmethod
  def GaussianSqrtFanIn(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('gaussian_sqrt_fanin', scale)

  @staticmethod
  def GaussianSqrtFanOut(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('gaussian_sqrt_fanout', scale)

  @staticmethod
  def GaussianSqrtFanAvg(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('gaussian_sqrt_fanavg', scale)

  @staticmethod
  def UniformSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('uniform_sqrt_dim', scale)

  @staticmethod
  def UniformSqrtFanAvg(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('uniform_sqrt_fanavg', scale)

  @staticmethod
  def UniformUnitScaling(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('uniform_unit_scaling', scale)

  @staticmethod
  def TruncatedGaussianSqrtDim(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('truncated_gaussian_sqrt_dim', scale)

  @staticmethod
  def TruncatedGaussianSqrtFanIn(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('truncated_gaussian_sqrt_fanin', scale)

  @staticmethod
  def TruncatedGaussianSqrtFanOut(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('truncated_gaussian_sqrt_fanout', scale)

  @staticmethod
  def ScaledDeltaOrthogonal(scale: float = 1.0) -> WeightInit:  # pylint: disable=invalid-name
    return WeightInit('delta_orthogonal', scale)


_DEFAULT_XAVIER_SCALE = 1.000001  # Marks the default (as in Pax).


@pax_fiddle.auto_config
def default_param_init() -> WeightInit:
  """The initialiser a layer uses unless configured otherwise.

  `auto_config`'d, as in Pax: a layer config holds
  `Config(WeightInit, 'xavier', 1.000001)`, a layer the `WeightInit`.
  """
  return WeightInit('xavier', _DEFAULT_XAVIER_SCALE)


def is_default_param_init(p: Any) -> bool:
  """Whether `p` (a `WeightInit` or a config of one) is the default."""
  method = getattr(p, 'method', None)
  scale = getattr(p, 'scale', None)
  return (
      method == 'xavier'
      and isinstance(scale, (int, float))
      and abs(scale - _DEFAULT_XAVIER_SCALE) < 1e-7
  )


class WeightHParamsCollection:
  """Names of the collections a variable can belong to."""

  SKIP_LP_REGULARIZATION = '__lingvo_jax_skip_regularization'
  NON_TRAINABLE = '_lingvo_jax_non_trainable'
  REQUIRES_MEAN_SYNC = '_requires_mean_sync'
  REQUIRES_SUM_SYNC = '_requires_sum_sync'
  DISALLOW_BFLOAT16_CONVERSION = '_disallow_bfloat16_conversion'
  OVERWRITE_WITH_GRADIENT = '_overwrite_with_gradient'


@dataclasses.dataclass
class WeightHParams:
  """The declaration of one variable.

  Attributes:
    shape: Shape of the variable (without `repeat_prefix`).
    init: Initialiser; None takes the layer's `params_init`.
    dtype: Data type; None takes the layer's `dtype`.
    collections: Collections the variable belongs to (WeightHParamsCollection).
    mesh_shape: Shape of the device mesh the variable is sharded over.
    tensor_split_dims_mapping: For each dimension, the mesh axis it is split
      over (an index or name into the mesh axes), or -1/None for replicated.
    repeat_prefix: Leading dimensions added by stacking repeated layers.
    repeat_prefix_split_dims_mapping: Sharding of the `repeat_prefix` dims.
    repeat_optimizer_dims_mapping: Sharding of the prefix dims in the
      optimizer state.
    fan_in_axes: Axes counted as fan-in by the fan-based initialisers.
    fan_out_axes: Axes counted as fan-out by the fan-based initialisers.
  """

  shape: Sequence[int]
  init: WeightInit | None = None
  dtype: Any = None
  collections: Sequence[str] | None = None
  mesh_shape: Sequence[int] | None = None
  tensor_split_dims_mapping: SplitDimsMapping = None
  repeat_prefix: Sequence[int] | None = None
  repeat_prefix_split_dims_mapping: SplitDimsMapping = None
  repeat_optimizer_dims_mapping: SplitDimsMapping = None
  fan_in_axes: Sequence[int] | None = None
  fan_out_axes: Sequence[int] | None = None

  def __post_init__(self):
    if self.collections is None:
      self.collections = []
    if self.mesh_shape is not None and self.tensor_split_dims_mapping is None:
      self.tensor_split_dims_mapping = (-1,) * len(self.shape)
    if self.tensor_split_dims_mapping is not None and len(
        self.tensor_split_dims_mapping
    ) != len(self.shape):
      raise ValueError(
          f'tensor_split_dims_mapping {self.tensor_split_dims_mapping} has '
          f'{len(self.tensor_split_dims_mapping)} entries for a variable of '
          f'shape {self.shape}; expected one per dimension.'
      )

  @property
  def full_shape(self) -> list[int]:
    """`repeat_prefix + shape`."""
    return list(self.repeat_prefix or []) + list(self.shape)

  @property
  def full_split_dims_mapping(self) -> SplitDimsMapping:
    """Sharding of `full_shape`, or None if the variable is unsharded."""
    if self.tensor_split_dims_mapping is None:
      return None
    prefix = self.repeat_prefix_split_dims_mapping
    if prefix is None:
      prefix = (-1,) * len(self.repeat_prefix or [])
    return tuple(prefix) + tuple(self.tensor_split_dims_mapping)


def get_fan_in_fan_out(
    shape: Sequence[int],
    fan_in_axes: Sequence[int] | None = None,
    fan_out_axes: Sequence[int] | None = None,
) -> tuple[int | None, int | None]:
  """(fan_in, fan_out) of a weight of `shape`, as TensorFlow counts them.

  By default the last two axes are in and out, the others the receptive field.

  Args:
    shape: The weight's shape.
    fan_in_axes: If given, fan-in is the product of these axes.
    fan_out_axes: If given, fan-out is the product of these axes.

  Returns:
    The two fans; (None, None) for a scalar.
  """
  if not shape:
    return None, None
  if len(shape) == 1:
    fan_in = fan_out = shape[0]
  else:
    receptive = math.prod(shape[:-2])
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
  if fan_in_axes is not None:
    fan_in = math.prod(shape[a] for a in fan_in_axes)
  if fan_out_axes is not None:
    fan_out = math.prod(shape[a] for a in fan_out_axes)
  return fan_in, fan_out


def scaled_orthogonal(
    key: JTensor, shape: Sequence[int], dtype: Any = jnp.float32
) -> JTensor:
  """An orthogonal matrix scaled by max(sqrt(rows / cols), 1)."""
  scale = max(math.sqrt(float(shape[-2]) / shape[-1]), 1.0)
  init = jax.nn.initializers.orthogonal(scale=scale, column_axis=-1)
  return init(key, tuple(shape), dtype)


def scaled_delta_orthogonal(
    key: JTensor, shape: Sequence[int], dtype: Any = jnp.float32
) -> JTensor:
  """A conv kernel that is zero but for an orthogonal matrix at its centre."""
  if len(shape) not in (3, 4, 5):
    raise ValueError(
        f'delta_orthogonal needs a 3-D, 4-D or 5-D shape, got {shape}.'
    )
  centre = tuple((k - 1) // 2 for k in shape[:-2])
  ortho = scaled_orthogonal(key, shape[-2:], dtype)
  return jnp.zeros(shape, dtype).at[centre].set(ortho)


def _scale_for(method: str, scale: float, var_p: WeightHParams) -> float:
  """The scale of `method`, after the dim- and fan-based adjustments."""
  shape = var_p.shape
  fan_in, fan_out = get_fan_in_fan_out(
      shape, var_p.fan_in_axes, var_p.fan_out_axes
  )
  if method.endswith('_sqrt_dim'):
    return scale / math.sqrt(shape[0] if shape else 1)
  if method.endswith('_sqrt_fanin') and fan_in is not None:
    return scale / math.sqrt(fan_in)
  if method.endswith('_sqrt_fanout') and fan_out is not None:
    return scale / math.sqrt(fan_out)
  if method.endswith('_sqrt_fanavg') and fan_in is not None:
    return scale * math.sqrt(2.0 / (fan_in + fan_out))
  return scale


def init_var(
    var_p: WeightHParams, prng_key: JTensor, var_full_name: str
) -> JTensor:
  """The initial value of the variable `var_full_name` declared by `var_p`.

  Args:
    var_p: Its declaration, with `init` and `dtype` set.
    prng_key: Randomness for it alone.
    var_full_name: The variable's path, for messages.

  Returns:
    An array of `var_p.shape` and `var_p.dtype`.
  """
  method, shape, dtype = var_p.init.method, tuple(var_p.shape), var_p.dtype
  if any(d <= 0 for d in shape):
    raise ValueError(f'Variable {var_full_name} has a bad shape {shape}.')
  if var_p.repeat_prefix:
    raise ValueError(f'{var_full_name}: repeat_prefix is added by Repeat.')
  logging.vlog(
      1, 'Creating %s: shape=%s dtype=%s init=%s', var_full_name, shape,
      dtype, var_p.init,
  )
  scale = _scale_for(method, var_p.init.scale, var_p)
  if method == 'delta_orthogonal':
    if len(shape) < 2:
      return scale * jax.random.normal(prng_key, shape, dtype)
    if len(shape) == 2:
      return scaled_orthogonal(prng_key, shape, dtype)
    return scaled_delta_orthogonal(prng_key, shape, dtype)
  if method.startswith('gaussian'):
    return scale * jax.random.normal(prng_key, shape, dtype)
  if method.startswith('truncated_gaussian'):
    return scale * jax.random.truncated_normal(
        prng_key, -2.0, 2.0, shape, dtype
    )
  if method in ('uniform', 'uniform_sqrt_dim', 'uniform_sqrt_fanavg'):
    return scale * _symmetric_uniform(prng_key, shape, dtype)
  if method == 'constant':
    return jnp.full(shape, scale, dtype)
  if method == 'xavier':
    fan_in, fan_out = get_fan_in_fan_out(
        shape, var_p.fan_in_axes, var_p.fan_out_axes
    )
    fan_in, fan_out = fan_in or 1, fan_out or 1
    limit = scale * math.sqrt(6.0 / (fan_in + fan_out))
    return limit * _symmetric_uniform(prng_key, shape, dtype)
  if method == 'uniform_unit_scaling':
    input_size = max(float(math.prod(shape[:-1])), 1.0)
    limit = scale * math.sqrt(3.0 / input_size)
    return limit * _symmetric_uniform(prng_key, shape, dtype)
  raise ValueError(f'Variable {var_full_name}: unknown init method {method!r}.')


def var_init_scale(
    var_p: WeightHParams, var_key: str | None = None
) -> float:
  """The standard scale `init_var` gives a variable (for optimizers).

  Supports the 'gaussian', 'gaussian_sqrt_fanin' and 'xavier' methods (for
  'xavier', the bound of the uniform draw).

  Args:
    var_p: The variable's declaration, with `init` set.
    var_key: Its name, for the error message.

  Returns:
    The scale.
  """
  method, scale = var_p.init.method, var_p.init.scale
  fan_in, fan_out = get_fan_in_fan_out(
      var_p.shape, var_p.fan_in_axes, var_p.fan_out_axes
  )
  if method == 'gaussian':
    return scale
  if method == 'gaussian_sqrt_fanin':
    return scale / math.sqrt(fan_in)
  if method == 'xavier':
    return scale * math.sqrt(6.0 / (fan_in + fan_out))
  raise NotImplementedError(
      f'var_init_scale({var_key or "variable"}): init method {method!r} is '
      "not supported (only 'gaussian', 'gaussian_sqrt_fanin', 'xavier')."
  )


def _symmetric_uniform(key: JTensor, shape: tuple[int, ...], dtype: Any):
  return jax.random.uniform(key, shape, dtype, minval=-1.0, maxval=1.0)


class BoxedParam(struct.PyTreeNode, meta.AxisMetadata):
  """A variable's value together with its declaration (`WeightHParams`).

  Flax unboxes it on read; `nn.scan` (used by `Repeat`) calls `add_axis`,
  which records the stacked dimension in the declaration's `repeat_prefix`.
  """

  value: Any
  meta: WeightHParams = struct.field(pytree_node=False)

  def unbox(self, apply_constraint: bool = True) -> Any:
    del apply_constraint  # As Pax: no sharding constraint here.
    return self.value

  def replace_boxed(self, val: Any) -> BoxedParam:
    return self.replace(value=val)

  def add_axis(self, index: int,
               metadata_params: dict[str, Any]) -> BoxedParam:
    if index != 0:
      raise ValueError('Pax variables are only stacked on their first axis.')
    hp = copy.deepcopy(self.meta)
    size = metadata_params.get('x_times')
    if size is None:
      size = self.value.shape[0] if hasattr(self.value, 'shape') else 1
    inner = hp.repeat_prefix_split_dims_mapping or (-1,) * len(
        hp.repeat_prefix or [])
    hp.repeat_prefix = [size] + list(hp.repeat_prefix or [])
    sub = metadata_params.get('sub_weight_split_dims_mapping') or (-1,)
    hp.repeat_prefix_split_dims_mapping = tuple(sub) + tuple(inner)  # As Pax.
    opt = metadata_params.get('optimizer_dims_mapping')
    if opt is not None:
      hp.repeat_optimizer_dims_mapping = tuple(opt) + tuple(
          hp.repeat_optimizer_dims_mapping or ()
      )
    if hp.fan_in_axes is not None:
      hp.fan_in_axes = [a + 1 for a in hp.fan_in_axes]
    if hp.fan_out_axes is not None:
      hp.fan_out_axes = [a + 1 for a in hp.fan_out_axes]
    return self.replace(meta=hp)

  def remove_axis(self, index: int,
                  metadata_params: dict[str, Any]) -> BoxedParam:
    if index != 0:
      raise ValueError('Pax variables are only stacked on their first axis.')
    hp = copy.deepcopy(self.meta)
    hp.repeat_prefix = list(hp.repeat_prefix or [])[1:] or None
    if hp.repeat_prefix_split_dims_mapping is not None:
      rest = tuple(hp.repeat_prefix_split_dims_mapping)[1:]
      hp.repeat_prefix_split_dims_mapping = rest or None
    if hp.repeat_optimizer_dims_mapping is not None:
      rest = tuple(hp.repeat_optimizer_dims_mapping)[1:]
      hp.repeat_optimizer_dims_mapping = rest or None
    if hp.fan_in_axes is not None:
      hp.fan_in_axes = [a - 1 for a in hp.fan_in_axes]
    if hp.fan_out_axes is not None:
      hp.fan_out_axes = [a - 1 for a in hp.fan_out_axes]
    return self.replace(meta=hp)


def _is_boxed(x: Any) -> bool:
  return isinstance(x, BoxedParam)


def maybe_unbox_value(tree: Any) -> Any:
  """`tree` with every `BoxedParam` replaced by its value."""
  return jax.tree.map(
      lambda x: x.value if _is_boxed(x) else x, tree, is_leaf=_is_boxed
  )


def unbox_meta(tree: Any) -> Any:
  """`tree` with every leaf replaced by its `WeightHParams` declaration.

  Boxed variables give their declaration as made (layers fill in its
  dtype); other arrays a plain declaration of their shape and dtype.

  Args:
    tree: Variables, usually as returned by `jax.eval_shape` of `init`.

  Returns:
    The same structure holding `WeightHParams`.
  """

  def to_meta(x: Any) -> WeightHParams:
    if _is_boxed(x):
      return copy.deepcopy(x.meta)
    return WeightHParams(shape=list(x.shape), dtype=x.dtype)

  return jax.tree.map(to_meta, tree, is_leaf=_is_boxed)


def to_partition_spec(
    split_dims_mapping: SplitDimsMapping, mesh_axis_names: Sequence[str]
) -> jax.sharding.PartitionSpec:
  """The `PartitionSpec` of a split-dims mapping over named mesh axes.

  Entries are mesh-axis indices, names, tuples of them, or -1/None (not
  split).

  Args:
    split_dims_mapping: One entry per tensor dimension.
    mesh_axis_names: Names of the mesh axes, indexed by integer entries.

  Returns:
    The partition spec.
  """

  def one(entry: Any) -> Any:
    if entry is None or entry == -1:
      return None
    if isinstance(entry, int):
      return mesh_axis_names[entry]
    if isinstance(entry, (list, tuple)):
      names = tuple(n for n in (one(e) for e in entry) if n is not None)
      return names or None
    return entry

  if split_dims_mapping is None:
    return jax.sharding.PartitionSpec()
  return jax.sharding.PartitionSpec(*(one(e) for e in split_dims_mapping))


def var_partition_specs(
    var_specs: Any,
    mesh_shape: Sequence[int] | None,
    device_axis_names: Sequence[str],
) -> Any:
  """The partition spec of every variable in a tree of `WeightHParams`."""
  del mesh_shape  # The names carry what is needed.

  def spec(hp: WeightHParams) -> jax.sharding.PartitionSpec:
    mapping = hp.full_split_dims_mapping
    if mapping is None:
      mapping = (-1,) * len(hp.full_shape)
    return to_partition_spec(mapping, device_axis_names)

  return jax.tree.map(
      spec, var_specs, is_leaf=lambda x: isinstance(x, WeightHParams)
  )


def _in_collection(name: str):
  def check(var_hparams: WeightHParams) -> bool:
    return name in (var_hparams.collections or ())

  check.__doc__ = f'Whether a variable is in the collection {name!r}.'
  return check


var_not_trainable = _in_collection(WeightHParamsCollection.NON_TRAINABLE)
var_requires_mean_sync = _in_collection(
    WeightHParamsCollection.REQUIRES_MEAN_SYNC
)
var_requires_sum_sync = _in_collection(WeightHParamsCollection.REQUIRES_SUM_SYNC)
var_disallow_bfloat16_conversion = _in_collection(
    WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION
)


def var_skip_lp_regularization(var_params: WeightHParams) -> bool:
  """Whether a variable is left out of Lp regularization (Pax's argument
  name, `var_params`)."""
  return _in_collection(WeightHParamsCollection.SKIP_LP_REGULARIZATION)(
      var_params)


var_overwrite_with_gradient = _in_collection(
    WeightHParamsCollection.OVERWRITE_WITH_GRADIENT
)
