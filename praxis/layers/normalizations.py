"""Normalization layers.

Public names: compute_moments, layer_norm, rms_norm, batch_norm,
group_norm_moments, BaseNormalization, IdentityNorm, BatchNorm, LayerNorm,
RmsNorm, RmsNormNoScale, GroupNorm, WeightNormL2, SpectralNorm.

Every layer maps `__call__(inputs, paddings=None)` to an output shaped like
`inputs`, normalizing over the last dimension (`dim`). The math lives in the
module-level functions; the layers declare variables and pick the functions.

Example:

  ln = base_layer.instantiate(
      pax_fiddle.Config(normalizations.LayerNorm, name='ln', dim=8))
  variables = ln.init(jax.random.PRNGKey(0), x)
  y = ln.apply(variables, x)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
WeightHParamsCollection = base_layer.WeightHParamsCollection

# BatchNorm adds this to the variance before the rsqrt (as praxis does).
_BATCH_NORM_EPSILON = 1e-3


# ----------------------------------------------------------------------------
# Math.
# ----------------------------------------------------------------------------


def compute_moments(
    inputs: JTensor,
    padding: JTensor,
    reduce_over_dims: Sequence[int],
    cumulative_axis: int | None = None,
    keepdims: bool = False,
) -> tuple[JTensor, JTensor]:
  """Mean and variance of `inputs` over its non-padded entries.

  Args:
    inputs: The values.
    padding: 1.0 where an entry is padding, 0.0 where it counts; same rank as
      `inputs` and broadcastable to it.
    reduce_over_dims: Dimensions to reduce over.
    cumulative_axis: If set, the sums are accumulated along this axis (of the
      reduced result), so each position sees itself and earlier ones.
    keepdims: Keep the reduced dimensions (as size 1).

  Returns:
    (mean, variance); the count is clamped to at least 1.
  """
  if inputs.ndim != padding.ndim:
    raise ValueError(
        f'compute_moments: inputs of rank {inputs.ndim} need a padding of the '
        f'same rank, got shape {padding.shape}.'
    )
  reduce_over_dims = list(reduce_over_dims)
  for dim in reduce_over_dims:
    if not 0 <= dim < inputs.ndim:
      raise ValueError(
          f'compute_moments: reduce dim {dim} is out of range for rank '
          f'{inputs.ndim}.'
      )
  mask = 1.0 - padding

  def reduce(x):
    total = jnp.sum(x, axis=reduce_over_dims, keepdims=keepdims)
    if cumulative_axis is not None:
      total = jnp.cumsum(total, axis=cumulative_axis)
    return total

  count = jnp.maximum(reduce(jnp.ones_like(inputs) * mask), 1.0)
  mean = reduce(inputs * mask) / count
  if not keepdims:
    expanded_mean = jnp.expand_dims(mean, reduce_over_dims)
  else:
    expanded_mean = mean
  variance = reduce(jnp.square(inputs - expanded_mean) * mask) / count
  return mean, variance


def layer_norm(
    inputs: JTensor,
    scale: JTensor | None = None,
    bias: JTensor | None = None,
    epsilon: float = 1e-6,
    reductions_in_fp32: bool = False,
) -> JTensor:
  """(x - mean) / sqrt(var + epsilon) over the last axis, then * scale + bias.

  Args:
    inputs: [..., dim].
    scale: The multiplier (already including any +1), or None.
    bias: The offset, or None.
    epsilon: Added to the variance.
    reductions_in_fp32: Compute the statistics in float32.

  Returns:
    The normalized values, shaped and typed like `inputs`.
  """
  dtype = inputs.dtype
  x = inputs.astype(jnp.float32) if reductions_in_fp32 else inputs
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  out = ((x - mean) * jax.lax.rsqrt(var + epsilon)).astype(dtype)
  if scale is not None:
    out = out * scale
  if bias is not None:
    out = out + bias
  return out


def rms_norm(
    inputs: JTensor,
    epsilon: float = 1e-6,
    compute_dtype: Any = None,
) -> JTensor:
  """x / sqrt(mean(x**2) + epsilon) over the last axis (no scale).

  Args:
    inputs: [..., dim].
    epsilon: Added to the mean square.
    compute_dtype: If set, the computation runs in this dtype.

  Returns:
    The normalized values, in `compute_dtype` or the inputs' dtype.
  """
  x = inputs if compute_dtype is None else inputs.astype(compute_dtype)
  mean_square = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
  return x * jax.lax.rsqrt(mean_square + epsilon)


def batch_norm(
    inputs: JTensor,
    mean: JTensor,
    variance: JTensor,
    beta: JTensor | float,
    gamma: JTensor | float,
    epsilon: float = _BATCH_NORM_EPSILON,
) -> JTensor:
  """(x - mean) * gamma / sqrt(variance + epsilon) + beta."""
  return (inputs - mean) * (gamma * jax.lax.rsqrt(variance + epsilon)) + beta


def group_norm_moments(
    grouped: JTensor,
    paddings: JTensor | None,
    cumulative: bool,
) -> tuple[JTensor, JTensor]:
  """Per-group mean and variance of `grouped` ([B, T, ..., groups, size]).

  Without paddings and not cumulative, the statistics cover every axis but
  batch and groups. With `cumulative`, time step t sees steps 0..t only.

  Args:
    grouped: The inputs with their channels split into [groups, size].
    paddings: [B, T] (1.0 = padded), or None.
    cumulative: Accumulate the statistics over time (axis 1).

  Returns:
    (mean, variance), broadcastable against `grouped`.
  """
  rank = grouped.ndim
  dims = list(range(rank))
  if paddings is None and not cumulative:
    reduce_dims = dims[1:-2] + dims[-1:]
    mean = jnp.mean(grouped, axis=reduce_dims, keepdims=True)
    centred = grouped - jax.lax.stop_gradient(mean)
    variance = jnp.mean(jnp.square(centred), axis=reduce_dims, keepdims=True)
    return mean, variance
  if paddings is None:
    paddings = jnp.zeros(grouped.shape[:2], grouped.dtype)
  reduce_dims = dims[2:-2] + dims[-1:] if cumulative else dims[1:-2] + dims[-1:]
  padding = jnp.reshape(paddings, list(grouped.shape[:2]) + [1] * (rank - 2))
  return compute_moments(
      grouped,
      padding.astype(grouped.dtype),
      reduce_dims,
      cumulative_axis=1 if cumulative else None,
      keepdims=True,
  )


# ----------------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------------


def _check_dim(layer: BaseNormalization) -> None:
  if layer.dim <= 0:
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: field `dim` must be set to a '
        f'positive int, got {layer.dim}.'
    )


def _check_last_dim(layer: BaseNormalization, inputs: JTensor) -> None:
  # A last dim of 1 broadcasts against the [dim] variables, as in Pax.
  if inputs.shape[-1] not in (layer.dim, 1):
    raise ValueError(
        f'{type(layer).__name__} {layer.name!r}: inputs of shape '
        f'{inputs.shape} do not end in `dim`={layer.dim}.'
    )


class BaseNormalization(base_layer.BaseLayer):
  """Base class of the normalization layers.

  Attributes:
    dim: Size of the last (normalized) dimension of inputs and outputs.
  """

  dim: int = 0

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    raise NotImplementedError(f'{type(self).__name__} must define __call__.')


class IdentityNorm(BaseNormalization):
  """Returns its inputs unchanged (a no-op with the normalization interface)."""

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    del paddings
    return inputs


class BatchNorm(BaseNormalization):
  """Batch normalization, statistics over all but the last axis.

  Training uses the batch statistics of the non-padded positions and moves
  `moving_mean`/`moving_variance` towards them by `1 - decay`; eval uses the
  moving statistics. The scale is `1 + gamma` (gamma starts at 0).

  Attributes:
    decay: Decay of the moving averages.
    use_moving_avg_in_training: Normalize with the moving statistics in
      training too (and without beta/gamma).
    set_padded_output_to_zero: Zero the outputs at padded positions.
    force_eval_mode: Always behave as in eval (moving stats not updated).
    gamma_init: Initializer of gamma (the scale is 1 + gamma).
  """

  decay: float = 0.999
  use_moving_avg_in_training: bool = False
  set_padded_output_to_zero: bool = True
  force_eval_mode: bool = False
  gamma_init: WeightInit = dataclasses.field(
      default_factory=lambda: WeightInit.Constant(0.0)
  )

  def setup(self) -> None:
    _check_dim(self)
    if not 0.0 <= self.decay <= 1.0:
      raise ValueError(
          f'BatchNorm {self.name!r}: field `decay` must be in [0, 1], got '
          f'{self.decay}.'
      )
    shape = [self.dim]
    self.create_variable(
        'beta', WeightHParams(shape=shape, init=WeightInit.Constant(0.0))
    )
    self.create_variable(
        'gamma', WeightHParams(shape=shape, init=self.gamma_init)
    )
    for name, value in (('moving_mean', 0.0), ('moving_variance', 1.0)):
      self.create_variable(
          name,
          WeightHParams(
              shape=shape,
              init=WeightInit.Constant(value),
              collections=[WeightHParamsCollection.REQUIRES_MEAN_SYNC],
          ),
          trainable=False,
      )

  def _moments(
      self, inputs: JTensor, paddings: JTensor
  ) -> tuple[JTensor, JTensor]:
    """The statistics to normalize with; updates the moving ones in training.

    Summaries (verbosity 4, as Pax): `moving_mean` and `moving_variance`
    (after the update), and in training the batch's `mean` and `variance`.
    """
    moving_mean = self.get_var('moving_mean')
    moving_variance = self.get_var('moving_variance')
    if self.do_eval or self.force_eval_mode:
      self._summarize_moving_stats(moving_mean, moving_variance)
      return moving_mean, moving_variance
    reduce_dims = list(range(inputs.ndim - 1))
    mean, variance = compute_moments(inputs, paddings, reduce_dims)
    new_mean = moving_mean * self.decay + mean * (1.0 - self.decay)
    new_variance = moving_variance * self.decay + variance * (1.0 - self.decay)
    self.update_var('moving_mean', new_mean)
    self.update_var('moving_variance', new_variance)
    self.add_summary('mean', mean, verbosity=4)
    self.add_summary('variance', variance, verbosity=4)
    self._summarize_moving_stats(self.get_var('moving_mean'),
                                 self.get_var('moving_variance'))
    if self.use_moving_avg_in_training:
      return self.get_var('moving_mean'), self.get_var('moving_variance')
    return mean, variance

  def compute_and_update_moments(
      self, inputs: JTensor, paddings: JTensor
  ) -> tuple[JTensor, JTensor, JTensor, JTensor]:
    """(mean, variance, beta, gamma) that normalize `inputs` [..., dim]
    (`paddings` [..., 1]); in training, also updates the moving statistics.

    Without `use_moving_avg_in_training`, beta and gamma are the learned
    shift and 1 + the learned scale; with it, 0 and 1.
    """
    mean, variance = self._moments(inputs, paddings)
    if self.use_moving_avg_in_training:
      return mean, variance, 0.0, 1.0
    return mean, variance, self.theta.beta, 1.0 + self.theta.gamma

  def _summarize_moving_stats(self, mean: JTensor, variance: JTensor) -> None:
    self.add_summary('moving_mean', mean, verbosity=4)
    self.add_summary('moving_variance', variance, verbosity=4)

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes `inputs` [..., dim]; `paddings` is [...] (1.0 = padded)."""
    _check_last_dim(self, inputs)
    inputs = self._cast_to_fprop_dtype(inputs)
    if paddings is None:
      paddings = jnp.zeros(inputs.shape[:-1] + (1,), inputs.dtype)
    elif paddings.ndim != inputs.ndim - 1:
      raise ValueError(
          f'BatchNorm {self.name!r}: paddings of shape {paddings.shape} must '
          f'have one dim less than inputs of shape {inputs.shape}.'
      )
    else:
      paddings = jnp.expand_dims(paddings, -1).astype(inputs.dtype)
    mean, variance, beta, gamma = self.compute_and_update_moments(
        inputs, paddings)
    outputs = batch_norm(inputs, mean, variance, beta, gamma)
    if self.set_padded_output_to_zero:
      outputs = outputs * (1.0 - paddings)
    return outputs


class LayerNorm(BaseNormalization):
  """Layer normalization over the last axis.

  Attributes:
    direct_scale: Multiply by `scale` (initialized to 1) instead of
      `1 + scale` (initialized to 0).
    epsilon: Added to the variance.
    use_scale: Learn a per-channel scale.
    use_bias: Learn a per-channel bias.
    reductions_in_fp32: Compute mean and variance in float32.
  """

  direct_scale: bool = False
  epsilon: float = 1e-6
  use_scale: bool = True
  use_bias: bool = True
  reductions_in_fp32: bool = False

  def setup(self) -> None:
    _check_dim(self)
    wt = self.weight_split_dims_mapping.wt
    inits = []
    if self.use_scale:
      inits.append(('scale', 1.0 if self.direct_scale else 0.0))
    if self.use_bias:
      inits.append(('bias', 0.0))
    for name, value in inits:
      self.create_variable(
          name,
          WeightHParams(
              shape=[self.dim],
              init=WeightInit.Constant(value),
              mesh_shape=self.mesh_shape,
              tensor_split_dims_mapping=wt,
              collections=[WeightHParamsCollection.SKIP_LP_REGULARIZATION],
          ),
      )

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes `inputs` [..., dim]; `paddings` is ignored."""
    del paddings
    _check_last_dim(self, inputs)
    scale = bias = None
    if self.use_scale:
      scale = self.theta.scale if self.direct_scale else 1 + self.theta.scale
    if self.use_bias:
      bias = self.theta.bias
    return layer_norm(
        inputs, scale, bias, self.epsilon, self.reductions_in_fp32
    )


class RmsNorm(BaseNormalization):
  """RMS normalization (https://arxiv.org/abs/1910.07467) with a scale.

  Attributes:
    epsilon: Added to the mean square.
    direct_scale: Multiply by `scale` (initialized to 1) instead of
      `1 + scale` (initialized to 0).
    intermediate_dtype: If set, the normalization is computed in this dtype.
  """

  epsilon: float = 1e-6
  direct_scale: bool = True
  intermediate_dtype: Any = None

  def setup(self) -> None:
    _check_dim(self)
    self.create_variable(
        'scale',
        WeightHParams(
            shape=[self.dim],
            init=WeightInit.Constant(1.0 if self.direct_scale else 0.0),
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes `inputs` [..., dim]; `paddings` is ignored."""
    del paddings
    _check_last_dim(self, inputs)
    normed = rms_norm(inputs, self.epsilon, self.intermediate_dtype)
    normed = normed.astype(self.fprop_dtype)
    scale = self.theta.scale if self.direct_scale else 1 + self.theta.scale
    return normed * scale


class RmsNormNoScale(BaseNormalization):
  """RMS normalization without a learned scale (statistics in float32).

  Attributes:
    epsilon: Added to the mean square.
  """

  epsilon: float = 1e-6

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes `inputs` [..., dim]; `paddings` is ignored."""
    del paddings
    return rms_norm(inputs, self.epsilon, jnp.float32).astype(inputs.dtype)


class GroupNorm(BaseNormalization):
  """Group normalization (https://arxiv.org/abs/1803.08494).

  Channels are split into groups; each group is normalized over all axes but
  batch (and, if `cumulative`, only over time steps up to the current one).
  The scale is `1 + gamma`.

  Attributes:
    num_groups: Number of groups (fewer if `min_group_size` requires).
    min_group_size: Minimum channels per group.
    cumulative: Normalize each time step by statistics of steps 0..t.
    input_rank: Rank of the inputs: 3 ([B, T, D]), 4 ([B, H, W, D]) or 5.
    epsilon: Added to the variance.
    set_padded_output_to_zero: Zero the outputs at padded positions.
    use_scale: Learn `gamma`.
    use_bias: Learn `beta`.
  """

  num_groups: int = 32
  min_group_size: int = 1
  cumulative: bool = False
  input_rank: int | None = None
  epsilon: float = 0.001
  set_padded_output_to_zero: bool = True
  use_scale: bool = True
  use_bias: bool = True

  def _check_config(self) -> None:
    _check_dim(self)
    where = f'GroupNorm {self.name!r}'
    if self.num_groups <= 0:
      raise ValueError(f'{where}: `num_groups` must be positive.')
    if not 0 < self.min_group_size <= self.dim:
      raise ValueError(
          f'{where}: `min_group_size`={self.min_group_size} must be in '
          f'[1, dim={self.dim}].'
      )
    if self.dim % self.min_group_size:
      raise ValueError(
          f'{where}: `dim`={self.dim} is not divisible by `min_group_size`='
          f'{self.min_group_size}.'
      )
    if self.dim >= self.num_groups and self.dim % self.num_groups:
      raise ValueError(
          f'{where}: `dim`={self.dim} is not divisible by `num_groups`='
          f'{self.num_groups}.'
      )
    if self.input_rank not in (3, 4, 5):
      raise ValueError(
          f'{where}: `input_rank` must be 3, 4 or 5, got {self.input_rank}.'
      )

  def setup(self) -> None:
    self._check_config()
    shape = [1] * (self.input_rank - 1) + [self.dim]
    for name, used in (('beta', self.use_bias), ('gamma', self.use_scale)):
      if used:
        self.create_variable(
            name,
            WeightHParams(
                shape=shape,
                init=WeightInit.Constant(0.0),
                collections=[WeightHParamsCollection.SKIP_LP_REGULARIZATION],
            ),
        )

  @property
  def group_size(self) -> int:
    return max(self.dim // self.num_groups, self.min_group_size)

  @property
  def effective_num_groups(self) -> int:
    return self.dim // self.group_size

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    """Normalizes `inputs` [B, T, ..., dim]; `paddings` is [B, T] or None."""
    if inputs.ndim != self.input_rank:
      raise ValueError(
          f'GroupNorm {self.name!r}: inputs of shape {inputs.shape} do not '
          f'have `input_rank`={self.input_rank}.'
      )
    inputs = self._cast_to_fprop_dtype(inputs)
    grouped = jnp.reshape(
        inputs,
        inputs.shape[:-1] + (self.effective_num_groups, self.group_size),
    )
    mean, variance = group_norm_moments(grouped, paddings, self.cumulative)
    normed = (grouped - mean) * jax.lax.rsqrt(variance + self.epsilon)
    outputs = jnp.reshape(normed, inputs.shape)
    if self.use_scale:
      outputs = outputs * (1 + self.theta.gamma)
    if self.use_bias:
      outputs = outputs + self.theta.beta
    if self.set_padded_output_to_zero and paddings is not None:
      mask = 1.0 - paddings.astype(outputs.dtype)
      outputs = outputs * jnp.reshape(
          mask, paddings.shape + (1,) * (inputs.ndim - 2)
      )
    return outputs


class WeightNormL2(BaseNormalization):
  """L2 weight normalization of the last axis (arXiv:1602.07868).

  Each output channel (last axis) is divided by its L2 norm over the other
  axes and multiplied by `1 + g` (g starts at 0).
  """

  def setup(self) -> None:
    _check_dim(self)
    self.create_variable(
        'g', WeightHParams(shape=[self.dim], init=WeightInit.Constant(0.0))
    )

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    del paddings
    axes = list(range(inputs.ndim - 1))
    return (1.0 + self.theta.g) * py_utils.l2_normalize(inputs, axes)


class SpectralNorm(BaseNormalization):
  """Divides a weight by its largest singular value (arXiv:1802.05957).

  The weight is viewed as [-1, dim]; the singular vector `u` is refined by
  power iteration and stored (non-trainable) in training.

  Attributes:
    n_power_iteration: Power-iteration steps per call.
  """

  n_power_iteration: int = 1

  def setup(self) -> None:
    _check_dim(self)
    if self.n_power_iteration < 1:
      raise ValueError(
          f'SpectralNorm {self.name!r}: `n_power_iteration` must be >= 1.'
      )
    self.create_variable(
        'u',
        WeightHParams(
            shape=[self.dim],
            init=WeightInit.Gaussian(1.0),
            collections=[WeightHParamsCollection.REQUIRES_MEAN_SYNC],
        ),
        trainable=False,
    )

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> JTensor:
    del paddings
    w = jnp.reshape(inputs, [-1, self.dim])
    u = self.get_var('u')
    for _ in range(self.n_power_iteration):
      v = py_utils.l2_normalize(w @ u)
      u = py_utils.l2_normalize(v @ w)
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    if not self.do_eval:
      self.update_var('u', u)
    sigma = v @ w @ u
    return self._cast_to_fprop_dtype(jnp.reshape(w / sigma, inputs.shape))
