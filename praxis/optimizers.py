"""Optimizers: optax gradient transformations, configured the Pax way.

Public names:
  ShardedGradientTransformation, GeneralGradientTransformation, Optimizer,
  partition_params, partition_spec_like_state, sharded_chain, sharded_masked,
  count_init_fn, count_init_partition_spec_fn, to_quantized, to_float,
  sharded_sgd, sharded_adagrad, sharded_adam, sharded_lion,
  sharded_adafactor, sharded_static_accumulation, apply_lp_regularizer,
  apply_decoupled_weight_decay, apply_ewc_regularization, apply_ema_weights,
  extract_ema, adafactor_decay_rate_adam, adafactor_decay_rate_pow,
  reduce_mean, reduce_rms, BaseOptimizer, OptaxOptimizer, Sgd, ShardedSgd,
  Adam, Lion, Lamb, Lars, Adagrad, ShardedAdagrad, Adafactor,
  ShardedAdafactor, ShardedAdafactorState, ShardedStaticAccumulator.

Every optimizer is an `optax.chain` of optax transforms. An optimizer object
(`BaseOptimizer` and subclasses) is configured with `pax_fiddle.Config` and
turned into one transformation by `get_grad_transformation()`, whose state
is Pax's tuple:

  (L1, L2, the optimizer's own transformation scaled by
  `learning_rate * lr_schedule.value_at(count)`, decoupled weight decay)
  then EWC and the EMA of the weights if enabled.

L1, L2 and the decay are always there (a `NestedMap(count=...)` state), so
the layout does not depend on the weights. The optimizers' own states have
Pax's layout too, so checkpoints name every slot as Pax does and resume
either way: Adam `NestedMap(count, m, v)` (Pax's bias-corrected moments,
see `_sharded_adam`), Lion `NestedMap(count, m)`, ShardedAdafactor
`ShardedAdafactorState`; Sgd, Adagrad and OptaxOptimizer keep optax's
states, as Pax. Gradient clipping
(`clip_gradient_norm_to_value`, ...) is applied by the learner
(`paxml.learners.Learner.scale_gradients`), as in Pax.

Sharding: the `init_partition_spec(var_weight_hparams)` of a
`ShardedGradientTransformation` maps the `WeightHParams` of the trainable
variables to a tree of `WeightHParams` with Pax's layout (a chain's specs
wrapped in `optax.MaskedState`); `partition_spec_like_state(tx, ...)` gives
them in the exact structure of the state. A state leaf that mirrors a
variable gets the variable's sharding; a factored statistic with one axis
fewer keeps the sharding of the remaining axes; the rest (step counts, ...)
is replicated. `base_layer.var_partition_specs(specs, mesh_shape,
mesh_axis_names)` gives the `PartitionSpec`s. The specs are derived from
`jax.eval_shape(tx.init, ...)` (see `partition_params`), so any optax
transformation can be sharded. The machinery lives in the private sibling
`_optimizer_transforms`.

Example:

  opt = pax_fiddle.Config(optimizers.Adam, learning_rate=1e-3,
                          lr_schedule=pax_fiddle.Config(schedules.Constant))
  tx = base_hyperparams.instantiate(opt).get_grad_transformation()
  state = tx.init(params)
  updates, state = tx.update(grads, state, params)
  params = optax.apply_updates(params, updates)

Not provided: DistributedShampoo / ShardedDistributedShampoo (they need
`optax_shampoo`), HeroLion.

Past STYLE.md's 800 lines: this public path holds Pax's configurable
optimizers (3,000 lines upstream); a third of it documents upstream fields.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import re
from typing import Any
from typing import Protocol
from typing import runtime_checkable

from absl import logging
import fiddle as fdl
import jax
import jax.numpy as jnp
import optax

from praxis import _optimizer_transforms
from praxis import _pax_states
from praxis import _sharded_adam
from praxis import base_hyperparams
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis import schedules

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
NestedWeightHParams = Any  # A tree of WeightHParams.
InitPartitionSpecFn = Callable[[NestedWeightHParams], Any]
Schedule = Callable[[Any], Any]  # An optax schedule: step -> value.

instantiate = base_hyperparams.instantiate

# Re-exports: the sharded-transformation machinery.
ShardedGradientTransformation = (
    _optimizer_transforms.ShardedGradientTransformation)
GeneralGradientTransformation = (
    _optimizer_transforms.GeneralGradientTransformation)
partition_params = _optimizer_transforms.partition_params
partition_spec_like_state = _optimizer_transforms.partition_spec_like_state
sharded_chain = _optimizer_transforms.sharded_chain
sharded_masked = _optimizer_transforms.sharded_masked
ShardedAdafactorState = _pax_states.ShardedAdafactorState
count_init_fn = _optimizer_transforms.count_init_fn
count_init_partition_spec_fn = (
    _optimizer_transforms.count_init_partition_spec_fn)
to_quantized = _optimizer_transforms.to_quantized
to_float = _optimizer_transforms.to_float
apply_lp_regularizer = _optimizer_transforms.apply_lp_regularizer
apply_decoupled_weight_decay = (
    _optimizer_transforms.apply_decoupled_weight_decay)
apply_ewc_regularization = _optimizer_transforms.apply_ewc_regularization
apply_ema_weights = _optimizer_transforms.apply_ema_weights
extract_ema = _optimizer_transforms.extract_ema
_sharded = _optimizer_transforms._sharded
_partition_spec_fn = _optimizer_transforms._partition_spec_fn
_inf_to_nan = _optimizer_transforms._inf_to_nan
_is_weight_hparams = _optimizer_transforms._is_weight_hparams


# --- Optimizer transformations ---


def sharded_sgd(
    learning_rate_fn: Schedule,
    momentum: float | None = None,
    nesterov: bool = False,
) -> ShardedGradientTransformation:
  """`optax.sgd`: -lr * g, with optional (Nesterov) momentum."""
  return _sharded(optax.sgd(learning_rate_fn, momentum, nesterov))


def sharded_adagrad(
    learning_rate_fn: Schedule,
    initial_accumulator_value: float,
    epsilon: float,
) -> ShardedGradientTransformation:
  """`optax.adagrad`."""
  return _sharded(optax.adagrad(
      learning_rate_fn, initial_accumulator_value, eps=epsilon))


def _cap_decay_and_scale(
    learning_rate_fn: Schedule, update_capping: float, weight_decay: float
) -> list[optax.GradientTransformation]:
  """Caps each variable's update RMS, adds weight_decay * v, times -lr."""
  txs = []
  if update_capping > 0:
    txs.append(optax.clip_by_block_rms(update_capping))
  if weight_decay > 0:
    txs.append(optax.add_decayed_weights(weight_decay))
  txs.append(optax.scale_by_learning_rate(learning_rate_fn))
  return txs


sharded_adam = _sharded_adam.sharded_adam

# Field of a chained optax sub-state -> field of Pax's `NestedMap(count, m)`.
_LION_FIELDS = {'count': 'count', 'mu': 'm'}


def sharded_lion(
    learning_rate_fn: Schedule,
    beta1: float,
    beta2: float,
    m_dtype: Any,
    update_capping: float,
    weight_decay: float,
) -> ShardedGradientTransformation:
  """Lion (sign of interpolated momentum), with capping and weight decay.

  Args:
    learning_rate_fn: The learning rate schedule.
    beta1, beta2, m_dtype, weight_decay: As the fields of `Lion`.
    update_capping: `Lion.clip_threshold`.

  Returns:
    The transformation; its state is Pax's `NestedMap(count, m)`.
  """
  txs = [_inf_to_nan(), optax.scale_by_lion(beta1, beta2, mu_dtype=m_dtype)]
  txs += _cap_decay_and_scale(learning_rate_fn, update_capping, weight_decay)
  return _sharded(_pax_states.pax_layout(
      optax.chain(*txs), NestedMap, _LION_FIELDS))


def adafactor_decay_rate_adam(beta2: float, step_counter: JTensor) -> JTensor:
  """Adam-like second-moment decay with the bias correction folded in."""
  t = jnp.asarray(step_counter, jnp.float32) + 1.0
  return beta2 * (1.0 - beta2 ** (t - 1.0)) / (1.0 - beta2**t)


def adafactor_decay_rate_pow(exponent: float, step_counter: JTensor) -> JTensor:
  """Second-moment decay 1 - (step + 1)**-exponent."""
  return 1.0 - (jnp.asarray(step_counter, jnp.float32) + 1.0) ** -exponent


def reduce_mean(array: JTensor) -> JTensor:
  """The mean of all elements."""
  return jnp.mean(array)


def reduce_rms(array: JTensor) -> JTensor:
  """The root mean square of all elements."""
  return jnp.sqrt(jnp.mean(jnp.square(array)))


def _names_matching_last(patterns: list[str], params: Any) -> list[Any]:
  """For each pattern, a mask of the variables whose last match it is."""
  names = py_utils.extract_prefixed_keys_from_nested_map(params)

  def last_match(name):
    matched = [i for i, pat in enumerate(patterns) if re.match(pat, name)]
    return matched[-1] if matched else None

  owner = jax.tree.map(last_match, names)
  return [jax.tree.map(lambda o, i=i: o == i, owner) for i in
          range(len(patterns))]


def _adafactor_weight_decay(
    learning_rate_fn: Schedule, weight_decay: float | dict[str, float]
) -> list[optax.GradientTransformation]:
  """Adds weight_decay * lr * v; a dict maps variable-name regexes to rates."""
  if not isinstance(weight_decay, dict):
    return [optax.add_decayed_weights(
        lambda count: weight_decay * learning_rate_fn(count))]
  patterns = list(weight_decay)
  return [
      optax.add_decayed_weights(
          lambda count, w=weight_decay[pat]: w * learning_rate_fn(count),
          mask=lambda params, i=i: _names_matching_last(patterns, params)[i],
      )
      for i, pat in enumerate(patterns)
  ]


def _adafactor_decay(
    decay_method: str, decay_adam: float, decay_pow: float
) -> tuple[float, Callable[[Any, float], Any]]:
  """(rate, rate function) of the second-moment decay.

  As in Pax, the method is checked when the transformation is built and a
  non-positive rate when it first updates (building the state and its
  sharding needs no rate).
  """
  if decay_method not in ('adam', 'pow'):
    raise ValueError(
        "ShardedAdafactor: decay_method must be 'adam' or 'pow', got "
        f'{decay_method!r}.')
  rate = decay_adam if decay_method == 'adam' else decay_pow
  decay = (adafactor_decay_rate_adam if decay_method == 'adam'
           else adafactor_decay_rate_pow)

  def decay_fn(step, rate):
    if rate <= 0:
      raise ValueError(
          f'ShardedAdafactor: decay_{decay_method} must be > 0 with '
          f"decay_method={decay_method!r}, got {rate}.")
    return decay(rate, step)

  return rate, decay_fn


def sharded_adafactor(
    learning_rate_fn: Schedule,
    weight_decay: float | dict[str, float] | None = None,
    layerwise_adaptation: bool = False,
    decay_method: str = 'adam',
    decay_adam: float = 0.99,
    decay_pow: float = 0.0,
    beta1: float = 0.0,
    clip_threshold: float | None = 1.0,
    factored: bool = True,
    epsilon1_grad_sq_reg: float = 1e-30,
    quantized_dtype: Any = jnp.int8,
    sort_factored_second_moment_dims: bool = False,
    min_dim_size_to_factor: int = 128,
    multiply_by_parameter_scale: bool = False,
    epsilon2_param_scale_reg: float = 1e-3,
    maybe_inf_to_nan: bool = True,
    **kwargs: Any,
) -> ShardedGradientTransformation:
  """Pax's Adafactor from optax's building blocks.

  x = g / sqrt(V) with V the (factored) second moment of g**2 + epsilon1,
  clipped to an RMS of clip_threshold; u = lr * (rms(v) if
  multiply_by_parameter_scale) * x; with beta1, u is an EMA of those; then
  weight_decay * lr * v is added and the update is -u. See
  `ShardedAdafactor` for the fields and what differs from Pax.

  Args:
    learning_rate_fn: The learning rate schedule.
    **kwargs: The fields of `ShardedAdafactor` of the same names (with
      quantized_dtype a dtype); the ones it ignores are accepted.

  Returns:
    The transformation.
  """
  del kwargs  # Fields accepted and ignored.
  if layerwise_adaptation:
    raise NotImplementedError(
        'ShardedAdafactor: layerwise_adaptation=True is not supported.')
  decay_rate, decay_fn = _adafactor_decay(decay_method, decay_adam, decay_pow)
  txs = [_inf_to_nan()] if maybe_inf_to_nan else []
  txs.append(optax.scale_by_factored_rms(
      factored=factored, decay_rate=decay_rate,
      min_dim_size_to_factor=(
          min_dim_size_to_factor if sort_factored_second_moment_dims else 1),
      epsilon=epsilon1_grad_sq_reg, decay_rate_fn=decay_fn))
  if clip_threshold:
    txs.append(optax.clip_by_block_rms(clip_threshold))
  txs.append(optax.scale_by_learning_rate(learning_rate_fn, flip_sign=False))
  if multiply_by_parameter_scale:
    txs.append(optax.scale_by_param_block_rms(epsilon2_param_scale_reg))
  if beta1:
    m_dtype = quantized_dtype
    if m_dtype is None or not jnp.issubdtype(m_dtype, jnp.floating):
      m_dtype = jnp.float32
    txs.append(optax.ema(beta1, debias=False, accumulator_dtype=m_dtype))
  if weight_decay:
    txs += _adafactor_weight_decay(learning_rate_fn, weight_decay)
  txs.append(optax.scale(-1.0))
  return _sharded(_pax_states.pax_layout(
      optax.chain(*txs), ShardedAdafactorState, _pax_states.ADAFACTOR_FIELDS,
      _pax_states.adafactor_defaults))


def sharded_static_accumulation(
    num_sub_batches: int,
    base_tx: GeneralGradientTransformation,
    accumulation_use_cond_op: bool = False,
) -> ShardedGradientTransformation:
  """Applies `base_tx` to the mean gradient of every num_sub_batches steps.

  `optax.MultiSteps`: the other steps return zero updates and leave the
  base state alone, so N sub-batches give the update of one N-times-larger
  batch.

  Args:
    num_sub_batches: Steps accumulated per update.
    base_tx: The transformation applied to the accumulated mean.
    accumulation_use_cond_op: Accepted for Pax compatibility; ignored.

  Returns:
    The transformation; its state is an `optax.MultiStepsState`.
  """
  del accumulation_use_cond_op
  multi = optax.MultiSteps(base_tx, every_k_schedule=num_sub_batches)
  tx = multi.gradient_transformation()

  def init_partition_spec(var_weight_hparams):
    specs = partition_params(tx, var_weight_hparams)
    return specs._replace(
        inner_opt_state=_partition_spec_fn(base_tx)(var_weight_hparams))

  return _sharded(tx, init_partition_spec)


# --- Configurable optimizers ---


@runtime_checkable
class Optimizer(Protocol):
  """What a learner needs from an optimizer."""

  clip_gradient_norm_to_value: float
  clip_gradient_single_norm_to_value: float
  ema_decay: float

  def get_grad_transformation(
      self, var_weight_hparams: Any = None, include_ema: bool = True
  ) -> GeneralGradientTransformation:
    ...

  def get_learning_rate(self, step_count: JTensor) -> JTensor:
    ...


def _built_schedule(schedule: Any) -> schedules.BaseSchedule:
  if schedule is None:
    return schedules.Constant(value=1.0)
  if isinstance(schedule, fdl.Buildable):
    return instantiate(schedule)
  return schedule


class BaseOptimizer(base_hyperparams.FiddleBaseParameterizable):
  """Base of the optimizers; subclasses give `_get_raw_grad_transformation`.

  Attributes:
    l2_regularizer_weight: If set, adds the gradient of w / 2 * ||v||^2.
    l1_regularizer_weight: If set, adds the gradient of w * |v|_1.
    skip_lp_1d_vectors: Do not regularise (L1/L2) variables of rank <= 1.
    decoupled_weight_decay: If set, adds -lr * w * v to the update (AdamW);
      not to be mixed with L1/L2.
    clip_gradient_norm_to_value: If > 0, clip gradients to this global norm.
    clip_gradient_single_norm_to_value: If > 0, clip each variable's gradient
      to this norm. Not together with clip_gradient_norm_to_value.
    learning_rate: The base learning rate.
    lr_schedule: Config of a `schedules.BaseSchedule` multiplying
      learning_rate; None means a constant 1.
    ema_decay: If > 0 (and < 1), keep an EMA of the variables in the state.
    ewc_regularizer_weight: If > 0, elastic weight consolidation.
    ewc_weight_per_var: Optional per-variable EWC weights.
  """

  l2_regularizer_weight: float | None = None
  l1_regularizer_weight: float | None = None
  skip_lp_1d_vectors: bool = False
  decoupled_weight_decay: float | None = None
  clip_gradient_norm_to_value: float = 0.0
  clip_gradient_single_norm_to_value: float = 0.0
  learning_rate: float = 0.0
  lr_schedule: pax_fiddle.Config[schedules.BaseSchedule] | None = None
  ema_decay: float = 0.0
  ewc_regularizer_weight: float = 0.0
  ewc_weight_per_var: Any = None

  def __post_init__(self):
    name = type(self).__name__
    if self.l2_regularizer_weight and self.l1_regularizer_weight:
      raise ValueError(f'{name}: set l1_regularizer_weight or '
                       'l2_regularizer_weight, not both.')
    if self.decoupled_weight_decay and (
        self.l2_regularizer_weight or self.l1_regularizer_weight):
      raise ValueError(f'{name}: decoupled_weight_decay cannot be mixed with '
                       'l1_regularizer_weight or l2_regularizer_weight.')
    if (self.clip_gradient_norm_to_value
        and self.clip_gradient_single_norm_to_value):
      raise ValueError(f'{name}: set clip_gradient_norm_to_value or '
                       'clip_gradient_single_norm_to_value, not both.')
    if not 0.0 <= self.ema_decay < 1.0:
      raise ValueError(f'{name}: ema_decay must be in [0, 1), got '
                       f'{self.ema_decay}.')
    self._lr_schedule_inst = _built_schedule(self.lr_schedule)

  def get_learning_rate(self, step_count: JTensor) -> JTensor:
    """learning_rate * lr_schedule.value_at(step_count)."""
    return self.learning_rate * self._lr_schedule_inst.value_at(step_count)

  def get_grad_transformation(
      self,
      var_weight_hparams: NestedWeightHParams | None = None,
      include_ema: bool = True,
  ) -> ShardedGradientTransformation:
    """The whole transformation (see the module doc for its parts).

    Args:
      var_weight_hparams: `WeightHParams` of the variables; if given,
        variables in the SKIP_LP_REGULARIZATION collection are neither
        regularised nor decayed.
      include_ema: Include the EMA of the variables (if ema_decay > 0).

    Returns:
      A ShardedGradientTransformation.
    """
    mask = _skip_lp_mask(var_weight_hparams)
    return sharded_chain(
        *self._gradient_transformations(mask),
        self._get_raw_grad_transformation(self.get_learning_rate),
        *self._update_transformations(mask, include_ema),
    )

  def _gradient_transformations(self, mask: Any) -> list[Any]:
    """L1 and L2 (Pax's first two chain entries), applied to the gradients.

    Clipping is the learner's (`Learner.scale_gradients`), as in Pax.
    """
    return [apply_lp_regularizer(mask, weight, p, self.skip_lp_1d_vectors)
            for weight, p in ((self.l1_regularizer_weight, 1.0),
                              (self.l2_regularizer_weight, 2.0))]

  def _update_transformations(self, mask: Any, include_ema: bool) -> list[Any]:
    """Decoupled weight decay, EWC and EMA, applied to the updates."""
    txs = [apply_decoupled_weight_decay(
        self.get_learning_rate, mask, self.decoupled_weight_decay)]
    if self.ewc_regularizer_weight > 0.0:
      txs.append(apply_ewc_regularization(
          self.get_learning_rate, self.ewc_regularizer_weight,
          self.ewc_weight_per_var))
    if self.ema_decay > 0.0 and include_ema:
      txs.append(apply_ema_weights(self.ema_decay))
    return txs

  def _get_raw_grad_transformation(
      self, lr: Schedule) -> GeneralGradientTransformation:
    """The optimizer itself, scaled by the schedule `lr`."""
    raise NotImplementedError(
        f'{type(self).__name__} must define _get_raw_grad_transformation.')


def _skip_lp_mask(var_weight_hparams: NestedWeightHParams | None) -> Any:
  if not var_weight_hparams:
    return None
  return jax.tree.map(
      lambda hp: not base_layer.var_skip_lp_regularization(hp),
      var_weight_hparams, is_leaf=_is_weight_hparams)


class OptaxOptimizer(BaseOptimizer):
  """Any optax transformation, with Pax's clipping and regularisers.

  Attributes:
    grad_tx: An optax GradientTransformation (with its own learning rate), a
      config building one, or a `pax_fiddle.Partial` (or other callable)
      that builds one from `learning_rate=<this optimizer's schedule>`.
  """

  grad_tx: Any = None

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    tx = self.grad_tx
    if tx is None:
      raise ValueError('OptaxOptimizer: grad_tx must be set.')
    if isinstance(tx, fdl.Buildable):
      tx = pax_fiddle.build(tx)
    if not hasattr(tx, 'update'):
      tx = tx(learning_rate=lr)
    return tx


class Sgd(BaseOptimizer):
  """`optax.sgd`.

  Attributes:
    momentum: Momentum decay; None disables momentum.
    nesterov: Use Nesterov momentum.
  """

  momentum: float | None = None
  nesterov: bool = False

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return optax.sgd(lr, self.momentum, self.nesterov)


class ShardedSgd(Sgd):
  """SGD (`sharded_sgd`); same fields as `Sgd`."""

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return sharded_sgd(lr, self.momentum, self.nesterov)


class Lamb(BaseOptimizer):
  """`optax.lamb`.

  Attributes:
    b1: Decay of the first moment.
    b2: Decay of the second moment.
    eps: Added to the denominator outside the square root.
    eps_root: Added inside the square root.
    weight_decay: Weight decay rate.
    mask: Tree (or function) of bools: where to apply weight decay.
  """

  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-6
  eps_root: float = 0.0
  weight_decay: float = 0.0
  mask: Any = None

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return optax.lamb(lr, self.b1, self.b2, self.eps, self.eps_root,
                      self.weight_decay, self.mask)


class Lars(BaseOptimizer):
  """`optax.lars`.

  Attributes:
    weight_decay: Weight decay rate.
    weight_decay_mask: Tree (or function) of bools: where to decay.
    trust_coefficient: Multiplies the trust ratio.
    eps: Added to the trust ratio's denominator.
    trust_ratio_mask: Tree (or function) of bools: where to use the ratio.
    momentum: Momentum decay.
    nesterov: Use Nesterov momentum.
  """

  weight_decay: float = 0.0
  weight_decay_mask: Any = True
  trust_coefficient: float = 0.001
  eps: float = 0.0
  trust_ratio_mask: Any = True
  momentum: float = 0.9
  nesterov: bool = False

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return optax.lars(lr, self.weight_decay, self.weight_decay_mask,
                      self.trust_coefficient, self.eps, self.trust_ratio_mask,
                      self.momentum, self.nesterov)


class Adagrad(BaseOptimizer):
  """`optax.adagrad`.

  Attributes:
    initial_accumulator_value: Initial sum of squared gradients.
    epsilon: Added to the denominator.
  """

  initial_accumulator_value: float = 0.1
  epsilon: float = 1e-10

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return optax.adagrad(lr, self.initial_accumulator_value, self.epsilon)


class ShardedAdagrad(Adagrad):
  """Adagrad (`sharded_adagrad`) with Pax's sharded defaults.

  Attributes:
    initial_accumulator_value: Initial sum of squared gradients.
    epsilon: Added to the denominator.
  """

  initial_accumulator_value: float = 1e-12
  epsilon: float = 1e-12

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return sharded_adagrad(lr, self.initial_accumulator_value, self.epsilon)


class Adam(BaseOptimizer):
  """Adam (`sharded_adam`, or plain `optax.adam` if not sharded_adam).

  Attributes:
    beta1: Decay of the first moment.
    beta2: Decay of the second moment.
    epsilon: Added to the denominator outside the square root.
    epsilon_root: Added inside the square root.
    clip_threshold: Cap on each variable's update RMS (0 disables it).
    weight_decay: Deprecated coupled weight decay (times lr); prefer
      decoupled_weight_decay.
    sharded_adam: Use `sharded_adam` (with capping and weight_decay); if
      False, `optax.adam` without them.
    maybe_inf_to_nan: Turn infinite gradients into NaNs first.
  """

  beta1: float = 0.9
  beta2: float = 0.999
  epsilon: float = 1e-6
  epsilon_root: float = 0.0
  clip_threshold: float = 1.0
  weight_decay: float = 0.0
  sharded_adam: bool = True
  maybe_inf_to_nan: bool = True

  @classmethod
  def HParamsA(cls) -> pax_fiddle.Config[Adam]:  # pylint: disable=invalid-name
    """A common Adam config (beta2=0.997, epsilon=1e-9)."""
    return pax_fiddle.Config(cls, beta1=0.9, beta2=0.997, epsilon=1e-9)

  @classmethod
  def HParamsB(cls) -> pax_fiddle.Config[Adam]:  # pylint: disable=invalid-name
    """Another common Adam config (beta2=0.98, epsilon=1e-9)."""
    return pax_fiddle.Config(cls, beta1=0.9, beta2=0.98, epsilon=1e-9)

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    if self.weight_decay:
      # Once a process: the transformation is built for each trace.
      logging.log_first_n(logging.WARNING,
                          'Adam.weight_decay is deprecated; use '
                          'decoupled_weight_decay or l2_regularizer_weight.', 1)
    if not self.sharded_adam:
      return optax.adam(lr, self.beta1, self.beta2, self.epsilon,
                        self.epsilon_root)
    return sharded_adam(lr, self.beta1, self.beta2, self.epsilon,
                        self.epsilon_root, self.clip_threshold,
                        self.weight_decay, self.maybe_inf_to_nan)


class Lion(BaseOptimizer):
  """Lion (`sharded_lion`), https://arxiv.org/abs/2302.06675.

  Attributes:
    beta1: Mix of momentum and gradient in the update direction.
    beta2: Decay of the momentum.
    clip_threshold: Cap on each variable's update RMS (0 disables it).
    weight_decay: Coupled weight decay (times lr).
    m_dtype: Storage dtype of the momentum.
  """

  beta1: float = 0.9
  beta2: float = 0.99
  clip_threshold: float = 1.0
  weight_decay: float = 0.0
  m_dtype: Any = jnp.bfloat16

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return sharded_lion(lr, self.beta1, self.beta2, self.m_dtype,
                        self.clip_threshold, self.weight_decay)


class Adafactor(BaseOptimizer):
  """`optax.adafactor`.

  Attributes:
    min_dim_size_to_factor: Factor only if two dims are at least this big.
    decay_rate: Second-moment decay exponent.
    decay_offset: Step offset of the decay (fine-tuning).
    multiply_by_parameter_scale: Scale updates by the variable's RMS.
    clip_threshold: Cap on the update RMS (None disables it).
    momentum: Momentum decay; None disables momentum.
    dtype_momentum: Momentum dtype name.
    weight_decay_rate: Weight decay rate (not times lr).
    eps: Added to the squared gradient.
    factored: Factor the second moment.
  """

  min_dim_size_to_factor: int = 128
  decay_rate: float = 0.8
  decay_offset: int = 0
  multiply_by_parameter_scale: bool = True
  clip_threshold: float | None = 1.0
  momentum: float | None = None
  dtype_momentum: str = 'float32'
  weight_decay_rate: float | None = None
  eps: float = 1e-30
  factored: bool = True

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return optax.adafactor(
        lr, self.min_dim_size_to_factor, self.decay_rate, self.decay_offset,
        self.multiply_by_parameter_scale, self.clip_threshold, self.momentum,
        getattr(jnp, self.dtype_momentum), self.weight_decay_rate, self.eps,
        self.factored)


class ShardedAdafactor(BaseOptimizer):
  """Pax's Adafactor (Shazeer & Stern 2018), built by `sharded_adafactor`.

  Differences from Pax: variables of rank > 2 factor their two largest dims
  (Pax: the last two, unless sort_factored_second_moment_dims); integer
  quantized_dtype stores momentum in float32 (m_scale holds placeholders);
  per_var_learning_summary, respect_skip_lp_regularization and
  exclude_from_layerwise_adaptation are accepted and ignored;
  layerwise_adaptation=True raises. The state is Pax's
  `ShardedAdafactorState(count, m, m_scale, vr, vc, v)`.

  Attributes:
    weight_decay: Decoupled decay rate times lr, or {name regex: rate}.
    layerwise_adaptation: LAMB-style adaptation (not supported).
    exclude_from_layerwise_adaptation: Ignored.
    decay_method: 'adam' or 'pow'; must be set.
    decay_adam: beta2 for 'adam' (bias-corrected).
    decay_pow: Exponent for 'pow'.
    beta1: Momentum (0 disables it).
    clip_threshold: Cap on the RMS of the normalised update (None: off).
    factored: Factor the second moment of rank >= 2 variables.
    epsilon1_grad_sq_reg: Added to the squared gradient.
    quantized_dtype: Momentum dtype name ('bfloat16', 'float32'; integer
      names store float32).
    respect_skip_lp_regularization: Ignored.
    per_var_learning_summary: Ignored.
    sort_factored_second_moment_dims: Factor only if the second largest dim
      is >= min_dim_size_to_factor.
    min_dim_size_to_factor: See above.
    multiply_by_parameter_scale: Scale updates by the variable's RMS.
    epsilon2_param_scale_reg: Lower bound of that RMS.
    maybe_inf_to_nan: Turn infinite gradients into NaNs first.
  """

  weight_decay: float | dict[str, float] | None = None
  layerwise_adaptation: bool = False
  exclude_from_layerwise_adaptation: list[str] | None = None
  decay_method: str = ''
  decay_adam: float = 0.0
  decay_pow: float = 0.0
  beta1: float = 0.0
  clip_threshold: float | None = 1.0
  factored: bool = True
  epsilon1_grad_sq_reg: float = 1e-30
  quantized_dtype: str = 'int8'
  respect_skip_lp_regularization: bool = False
  per_var_learning_summary: bool = False
  sort_factored_second_moment_dims: bool = False
  min_dim_size_to_factor: int = 128
  multiply_by_parameter_scale: bool = False
  epsilon2_param_scale_reg: float = 1e-3
  maybe_inf_to_nan: bool = True

  @classmethod
  def HParamsAdamB(cls) -> pax_fiddle.Config:  # pylint: disable=invalid-name
    """Adam-like Adafactor: beta1=0.9, decay_adam=0.98."""
    return pax_fiddle.Config(cls, beta1=0.9, decay_method='adam',
                             decay_adam=0.98, quantized_dtype='int8')

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    inherited = {f.name for f in dataclasses.fields(BaseOptimizer)}
    fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
              if f.init and f.name not in inherited}
    fields['quantized_dtype'] = getattr(jnp, self.quantized_dtype)
    return sharded_adafactor(lr, **fields)


class ShardedStaticAccumulator(BaseOptimizer):
  """Accumulates num_sub_batches gradients, then applies one update.

  The base optimizer's own transformation runs on the mean gradient; this
  object's fields (learning_rate, lr_schedule, clipping, regularisers, EMA)
  apply, the base optimizer's are ignored. Clipping and L1/L2 act on each
  sub-batch; decoupled weight decay, EWC and EMA once per update.

  Attributes:
    optimizer_tpl: Config of the base optimizer.
    num_sub_batches: Sub-batches per update (>= 1).
    accumulation_use_cond_op: Accepted for Pax compatibility; ignored.
  """

  optimizer_tpl: pax_fiddle.Config[BaseOptimizer] | None = None
  num_sub_batches: int = 1
  accumulation_use_cond_op: bool = False

  def __post_init__(self):
    super().__post_init__()
    if self.optimizer_tpl is None:
      raise ValueError('ShardedStaticAccumulator: set optimizer_tpl.')
    if self.num_sub_batches < 1:
      raise ValueError('ShardedStaticAccumulator: num_sub_batches must be '
                       f'>= 1, got {self.num_sub_batches}.')
    base = self.optimizer_tpl.clone()
    if base.lr_schedule is None:
      base.lr_schedule = self.lr_schedule
    self.base_optimizer = instantiate(base)
    if not self.learning_rate and self.base_optimizer.learning_rate:
      raise ValueError(
          'ShardedStaticAccumulator: set learning_rate on the accumulator; '
          'the one of optimizer_tpl is not used.')

  def _base_tx(self, lr: Schedule) -> GeneralGradientTransformation:
    # pylint: disable-next=protected-access
    return self.base_optimizer._get_raw_grad_transformation(lr)

  def _get_raw_grad_transformation(self, lr: Schedule) -> Any:
    return sharded_static_accumulation(self.num_sub_batches, self._base_tx(lr))

  def get_grad_transformation(
      self,
      var_weight_hparams: NestedWeightHParams | None = None,
      include_ema: bool = True,
  ) -> ShardedGradientTransformation:
    """Like BaseOptimizer's, with the update part accumulated."""
    mask = _skip_lp_mask(var_weight_hparams)
    update = sharded_chain(self._base_tx(self.get_learning_rate),
                           *self._update_transformations(mask, include_ema))
    return sharded_chain(
        *self._gradient_transformations(mask),
        sharded_static_accumulation(self.num_sub_batches, update),
    )
