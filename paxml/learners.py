"""Learners: turn gradients into new variables with an optimizer.

Public names: Learner, MultiOptimizerLearner, NO_PREFIX_KEY.

A learner owns an optimizer (an optax transformation with sharding, see
`praxis.optimizers`) and what surrounds it in a Pax training step:
gradient-norm summaries, clipping, skipping bad steps, and applying the
update to the trainable variables only:

  learner = base_hyperparams.instantiate(pax_fiddle.Config(
      learners.Learner, name='learner', loss_name='loss',
      optimizer=pax_fiddle.Config(optimizers.Adam, learning_rate=1e-3)))
  opt_state = learner.get_grad_tx(var_weight_hparams).init(mdl_vars)
  updates, opt_state = learner.update_states(
      grads, opt_state, mdl_vars, var_weight_hparams)
  mdl_vars = learner.apply_gradient(mdl_vars, updates, var_weight_hparams)

A step is skipped (updates zero, optimizer state unchanged) when the raw
gradient norm is not finite or exceeds `skip_step_gradient_norm_value`, or,
with `skip_zero_gradients`, when every gradient is zero. Summaries go to the
current `base_layer.JaxContext`, if any (`learning/lr`,
`learning/raw_grad_norm`, `learning/is_valid_step`, `learning/grad_scale`,
`learning/clipped_grad_norm`, `learning/applied_grad_norm`,
`learning/var_norm`).

The optimizer's own transformation clips too (`praxis.optimizers` puts the
clipping in the chain); clipping twice changes nothing (up to rounding), so
the learner's clipping only adds its summaries.

Variables stacked by repeated layers (a `repeat_prefix` in their
`WeightHParams`) are optimized layer by layer (`jax.vmap` over the prefix,
see `praxis.optimizer_prefix_vectorization`), so factored optimizers factor
each layer's matrix.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from paxml import sgf
from praxis import base_hyperparams
from praxis import base_layer
from praxis import optimizer_prefix_vectorization as opt_vec
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import trees

NestedMap = py_utils.NestedMap
SummaryType = base_layer.SummaryType
WeightHParams = base_layer.WeightHParams
instantiate = base_hyperparams.instantiate

NO_PREFIX_KEY = opt_vec.NO_PREFIX_KEY


def _is_float(x: Any) -> bool:
  return jnp.issubdtype(x.dtype, jnp.inexact)


def _global_norm(tree: Any) -> jax.Array:
  squares = [jnp.sum(jnp.square(x.astype(jnp.float32)))
             for x in jax.tree.leaves(tree) if _is_float(x)]
  return jnp.sqrt(sum(squares, jnp.float32(0.0)))


def _summary(name: str, value: Any) -> None:
  """Records a summary in the current JaxContext (none: dropped)."""
  if base_layer.JaxContext.has_context():
    base_layer.add_global_summary(name, value, SummaryType.AGGREGATE_SCALAR)


# ----------------------------------------------------------------------------
# Learners.
# ----------------------------------------------------------------------------


def _var_init_scale(hp: WeightHParams, name: str) -> float:
  """The standard deviation a variable was initialized with (Pax's rule)."""
  if len(hp.shape) <= 1:
    return 1.0
  init = hp.init
  if init is None or init.method not in (
      'gaussian', 'gaussian_sqrt_fanin', 'xavier'):
    raise ValueError(
        f'scale_update_by_var_norm: variable {name!r} has init '
        f"{getattr(init, 'method', None)!r}; only 'gaussian', "
        "'gaussian_sqrt_fanin' and 'xavier' inits have a known scale.")
  if init.method == 'gaussian':
    return init.scale
  fan_in, fan_out = base_layer.get_fan_in_fan_out(
      hp.shape, hp.fan_in_axes, hp.fan_out_axes)
  if init.method == 'gaussian_sqrt_fanin':
    return init.scale / math.sqrt(fan_in)
  return init.scale * math.sqrt(6.0 / (fan_in + fan_out))


def _is_masked(x: Any) -> bool:
  return py_utils.is_bprop_masked_node(x) or py_utils.is_optax_masked_node(x)


def _keep_if_valid(valid: jax.Array, new: Any, old: Any) -> Any:
  return jax.tree.map(lambda n, o: jnp.where(valid, n, o), new, old)


class Learner(base_hyperparams.FiddleBaseParameterizable):
  """Optimizes the variables with `optimizer` (see the module doc).

  Attributes:
    optimizer: The optimizer (built from its config); required.
    loss_name: The metric (from `compute_loss`) to minimize, unless the task
      sets a loss aggregator.
    stochastic_gradient: How to compute gradients (None: plain gradients).
    skip_zero_gradients: If set, a step whose gradients are all zero is
      skipped: variables and optimizer state stay unchanged.
    grad_norm_summary: Summarize the gradient norms.
    grad_norm_individual_vars: Also summarize each variable's gradient norm.
    var_norm_summary: Summarize the norm of all variables.
    var_norm_individual_vars: Also summarize each variable's norm.
    check_valid_step: Skip steps with a non-finite gradient norm (or one
      above skip_step_gradient_norm_value).
    vectorize_on_repeat_prefix: Optimize stacked variables layer by layer.
    force_repeat_prefix_structure: Keep the state grouped by repeat prefix
      even without stacked variables (old checkpoints).
    skip_step_gradient_norm_value: If > 0, skip steps whose gradient norm
      is at least this.
    enable_skip_step_on_gradient_anomalies: Actually skip invalid steps
      (else only report them).
    bprop_variable_exclusion: Regexes (full match on the '/'-joined path,
      e.g. 'params/encoder/.*') of variables kept fixed.
    bprop_variable_inclusion: Regexes of the only variables trained (not
      together with bprop_variable_exclusion).
    repeat_prefix_sep: Separator in the names of stacked-variable groups.
    keep_optimizer_state_for_excluded_vars: Keep optimizer states (and
      gradients) for variables excluded by regex.
    scale_update_by_var_norm: Multiply each update by its variable's init
      scale (1 for rank <= 1; 'gaussian', 'gaussian_sqrt_fanin' and 'xavier'
      inits only).
  """

  optimizer: optimizers.Optimizer | None = None
  loss_name: str | None = None
  stochastic_gradient: sgf.BaseStochasticGradient | None = None
  skip_zero_gradients: bool | None = None
  grad_norm_summary: bool = True
  grad_norm_individual_vars: bool = False
  var_norm_summary: bool = True
  var_norm_individual_vars: bool = False
  check_valid_step: bool = True
  vectorize_on_repeat_prefix: bool = True
  force_repeat_prefix_structure: bool = False
  skip_step_gradient_norm_value: float = 0.0
  enable_skip_step_on_gradient_anomalies: bool = True
  bprop_variable_exclusion: str | Sequence[str] = pax_fiddle.instance_field(
      list)
  bprop_variable_inclusion: str | Sequence[str] = pax_fiddle.instance_field(
      list)
  repeat_prefix_sep: str = '#'
  keep_optimizer_state_for_excluded_vars: bool = False
  scale_update_by_var_norm: bool = False

  def __post_init__(self):
    name = f'{type(self).__name__} {self.name!r}'
    if self.optimizer is None:
      raise ValueError(f'{name}: the field `optimizer` must be set.')
    if self.bprop_variable_exclusion and self.bprop_variable_inclusion:
      raise ValueError(f'{name}: set bprop_variable_exclusion or '
                       'bprop_variable_inclusion, not both.')
    if self.force_repeat_prefix_structure and not (
        self.vectorize_on_repeat_prefix):
      raise ValueError(f'{name}: force_repeat_prefix_structure needs '
                       'vectorize_on_repeat_prefix=True.')

  def plot_learning_rate(self, step: jax.Array) -> None:
    """Summarizes the learning rate at `step` (`lr`, `learning/lr`)."""
    lr = self.optimizer.get_learning_rate(step)
    _summary('lr', lr)
    _summary('learning/lr', lr)

  def get_grad_tx(self, var_weight_hparams: Any) -> Any:
    """The optimizer's transformation for these variables."""
    return self._vectorized(
        self.optimizer.get_grad_transformation(var_weight_hparams),
        var_weight_hparams)

  def _vectorized(self, tx: Any, var_weight_hparams: Any) -> Any:
    if not self.vectorize_on_repeat_prefix:
      return tx
    return opt_vec.get_transformations_with_vectorized_repeat_prefix(
        tx, var_weight_hparams, self.repeat_prefix_sep,
        self.force_repeat_prefix_structure)

  def _is_valid_step(self, raw_grads: Any, raw_grad_norm: jax.Array):
    valid = jnp.array(True)
    if self.check_valid_step:
      valid = jnp.isfinite(raw_grad_norm)
      if self.skip_step_gradient_norm_value:
        valid &= raw_grad_norm < self.skip_step_gradient_norm_value
    if self.skip_zero_gradients:
      nonzero = [jnp.any(g != 0) for g in jax.tree.leaves(raw_grads)]
      valid &= jnp.any(jnp.stack(nonzero)) if nonzero else False
    return valid

  def summarize_norms(self, summary_prefix: str, tensors: Any) -> None:
    """Summarizes each tensor's L2 norm as '<summary_prefix>/<its path>'."""
    keys = py_utils.extract_prefixed_keys_from_nested_map(tensors)

    def one(key, x):
      if not _is_masked(x):
        _summary(f'{summary_prefix}/{key}', _global_norm(x))

    jax.tree.map(one, keys, tensors, is_leaf=_is_masked)

  def scale_gradients(
      self,
      raw_grads: Any,
      optimizer_name: str | None = None,
      clip_gradient_norm_to_value: float | None = None,
      clip_gradient_single_norm_to_value: float | None = None,
  ) -> tuple[Any, jax.Array]:
    """Clips the gradients and tells whether the step is valid.

    Args:
      raw_grads: The gradients.
      optimizer_name: Inserted in the summary names ('learning/<name>/...').
      clip_gradient_norm_to_value: Global-norm clip (None: the optimizer's).
      clip_gradient_single_norm_to_value: Per-variable clip (None: the
        optimizer's).

    Returns:
      (clipped gradients, whether the step is valid), see the module doc.
    """
    prefix = f'learning/{optimizer_name}/' if optimizer_name else 'learning/'
    if clip_gradient_norm_to_value is None:
      clip_gradient_norm_to_value = self.optimizer.clip_gradient_norm_to_value
    if clip_gradient_single_norm_to_value is None:
      clip_gradient_single_norm_to_value = (
          self.optimizer.clip_gradient_single_norm_to_value)
    if self.grad_norm_individual_vars:
      group = f'/{optimizer_name}' if optimizer_name else ''
      self.summarize_norms(f'per_var_grad_norm{group}', raw_grads)
    raw_norm = _global_norm(raw_grads)
    if self.grad_norm_summary:
      _summary(prefix + 'raw_grad_norm', raw_norm)
    valid = self._is_valid_step(raw_grads, raw_norm)
    _summary(prefix + 'is_valid_step', valid.astype(jnp.float32))
    scale = jnp.float32(1.0)
    grads = raw_grads
    if clip_gradient_norm_to_value:
      scale = jnp.minimum(1.0, clip_gradient_norm_to_value / raw_norm)
      grads = jax.tree.map(lambda g: (g * scale).astype(g.dtype), raw_grads)
    elif clip_gradient_single_norm_to_value:
      grads = jax.tree.map(
          lambda g: (g * jnp.minimum(
              1.0, clip_gradient_single_norm_to_value / _global_norm(g))
                     ).astype(g.dtype), raw_grads)
    _summary(prefix + 'grad_scale', scale)
    if self.grad_norm_summary:
      _summary(prefix + 'clipped_grad_norm', _global_norm(grads))
    return grads, valid

  def update_states(
      self, grads: Any, states: Any, old_vars: Any, var_weight_hparams: Any
  ) -> tuple[Any, Any]:
    """Runs the optimizer; an invalid step gives zero updates, old states.

    Args:
      grads: The gradients (masked where variables are excluded).
      states: The optimizer state.
      old_vars: The variables before the step (same structure as grads).
      var_weight_hparams: Their `WeightHParams`.

    Returns:
      (updates to add to the variables, new optimizer state).
    """
    grads, valid = self.scale_gradients(grads)
    tx = self.get_grad_tx(var_weight_hparams)
    updates, new_states = tx.update(grads, states, old_vars)
    if self.enable_skip_step_on_gradient_anomalies or self.skip_zero_gradients:
      updates = jax.tree.map(lambda u: jnp.where(valid, u, 0), updates)
      new_states = _keep_if_valid(valid, new_states, states)
    if self.grad_norm_summary:
      _summary('learning/applied_grad_norm', _global_norm(updates))
    return updates, new_states

  def apply_gradient(
      self, old_vars: Any, transformed_grads: Any, var_weight_hparams: Any
  ) -> Any:
    """`old + update` for trainable variables; the others are returned as is.

    Args:
      old_vars: The variables.
      transformed_grads: Updates from `update_states`.
      var_weight_hparams: The variables' `WeightHParams`.

    Returns:
      The new variables.
    """
    if self.var_norm_summary:
      _summary('learning/var_norm', _global_norm(old_vars))
    if self.var_norm_individual_vars:
      self.summarize_norms('per_var_norm', old_vars)

    def one(old, update, hp, name):
      if base_layer.var_not_trainable(hp):
        return old
      if base_layer.var_overwrite_with_gradient(hp):
        return update
      if self.scale_update_by_var_norm:
        update = update * _var_init_scale(hp, name)
      return (old + update).astype(old.dtype)

    names = trees.to_path_tree(old_vars)
    return jax.tree.map(one, old_vars, transformed_grads, var_weight_hparams,
                        names)


class MultiOptimizerLearner(Learner):
  """A learner with auxiliary optimizers for variables matching regexes.

  Variables whose path matches `auxiliary_regex[i]` (Python `re.match`) are
  optimized by `auxiliary_optimizers[i]`; the rest by `optimizer`. The EMA
  of the main optimizer (if any) covers all variables.

  Attributes:
    auxiliary_optimizers: Configs of the extra optimizers.
    auxiliary_regex: One regex per extra optimizer (non-overlapping).
    auxiliary_names: One name per extra optimizer, for summaries.
    apply_separate_scaling: Clip each optimizer's gradients separately, with
      its own clipping settings.
  """

  auxiliary_optimizers: Sequence[pax_fiddle.Config[Any]] = ()
  auxiliary_regex: Sequence[str] = ()
  auxiliary_names: Sequence[str] = ()
  apply_separate_scaling: bool = False

  def __post_init__(self):
    super().__post_init__()
    n = len(self.auxiliary_optimizers)
    if n != len(self.auxiliary_regex) or n != len(self.auxiliary_names):
      raise ValueError(
          f'MultiOptimizerLearner {self.name!r}: auxiliary_optimizers, '
          'auxiliary_regex and auxiliary_names must have the same length, '
          f'got {n}, {len(self.auxiliary_regex)} and '
          f'{len(self.auxiliary_names)}.')
    self._auxiliary_optimizer_insts = [
        o if not isinstance(o, pax_fiddle.Config) else instantiate(o)
        for o in self.auxiliary_optimizers]

  def plot_learning_rate(self, step: jax.Array) -> None:
    _summary('learning/lr_main', self.optimizer.get_learning_rate(step))
    for name, opt in zip(self.auxiliary_names, self._auxiliary_optimizer_insts):
      _summary(f'learning/lr_{name}', opt.get_learning_rate(step))

  def get_masks(self, var_weight_hparams: Any) -> tuple[list[Any], Any]:
    """(one bool mask per auxiliary optimizer, mask of the main one)."""
    names = trees.to_path_tree(var_weight_hparams)
    masks = [jax.tree.map(lambda n, r=r: bool(re.match(r, n)), names)
             for r in self.auxiliary_regex]

    def main(*matches):
      if sum(matches) > 1:
        raise ValueError(f'MultiOptimizerLearner {self.name!r}: the '
                         'auxiliary_regex patterns overlap.')
      return not any(matches)

    return masks, jax.tree.map(main, *masks) if masks else jax.tree.map(
        lambda _: True, names)

  def get_grad_tx(self, var_weight_hparams: Any) -> Any:
    masks, main_mask = self.get_masks(var_weight_hparams)
    chain = []
    if self.optimizer.ema_decay > 0.0:
      chain.append(optimizers.apply_ema_weights(self.optimizer.ema_decay))
    pairs = [(self.optimizer, main_mask)] + list(
        zip(self._auxiliary_optimizer_insts, masks))
    for opt, mask in pairs:
      tx = opt.get_grad_transformation(var_weight_hparams, include_ema=False)
      chain.append(optimizers.sharded_masked(tx, mask))
    return self._vectorized(optimizers.sharded_chain(*chain),
                            var_weight_hparams)

  def update_states(self, grads, states, old_vars, var_weight_hparams):
    if not self.apply_separate_scaling:
      return super().update_states(grads, states, old_vars, var_weight_hparams)
    total, valid = self.scale_gradients_by_optimizer(grads, var_weight_hparams)
    tx = self.get_grad_tx(var_weight_hparams)
    updates, new_states = tx.update(total, states, old_vars)
    if self.enable_skip_step_on_gradient_anomalies or self.skip_zero_gradients:
      updates = jax.tree.map(lambda u: jnp.where(valid, u, 0), updates)
      new_states = _keep_if_valid(valid, new_states, states)
    return updates, new_states

  def scale_gradients_by_optimizer(
      self, raw_grads: Any, var_weight_hparams: Any
  ) -> tuple[Any, jax.Array]:
    """Clips each optimizer's gradients with its own settings, then sums.

    Args:
      raw_grads: The gradients of all variables.
      var_weight_hparams: Their `WeightHParams` (for the regex masks).

    Returns:
      (the summed clipped gradients, whether every part is valid).
    """
    masks, main_mask = self.get_masks(var_weight_hparams)
    total, valid = self._scale_masked(raw_grads, main_mask, self.optimizer,
                                      'main')
    for name, mask, opt in zip(self.auxiliary_names, masks,
                               self._auxiliary_optimizer_insts):
      scaled, ok = self._scale_masked(raw_grads, mask, opt, name)
      total = jax.tree.map(jnp.add, total, scaled)
      valid &= ok
    return total, valid

  def _scale_masked(self, grads, mask, opt, name):
    masked = jax.tree.map(lambda g, m: g * m, grads, mask)
    return self.scale_gradients(
        masked, name, opt.clip_gradient_norm_to_value,
        opt.clip_gradient_single_norm_to_value)

