"""`SparsityBaseLayer`: pruning masks of a layer's weights.

Public: `SparsityBaseLayer` (field `sparsity`; `create_sparsity_variables`
in `setup`, `sparsifiy(weight, name, inputs)` in `__call__`), `sr_ste`.

A sparse weight `w` gets a non-trainable boolean `w_sparsity_mask` and the
layer counters `num_shots`, `mask_update_count` and `step`. Each call
recomputes the mask when the sparsity mode says so (N:M, unstructured or
channel-wise, from `sparsity.score`) and returns `w` with pruned values 0 (or
`pruned_value`); SR-STE refines the straight-through gradient.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Sequence

import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers.quantization.sparsity import _topk_estimator
from praxis.layers.quantization.sparsity import sparsity
from praxis.layers.quantization.sparsity import sparsity_hparams
from praxis.layers.quantization.sparsity import sparsity_modes

SPARSITY_METADATA_SUFFIX = '_sparsity_metadata'
SPARSITY_NZ_SUFFIX = '_sparsity_nz'
SPARSITY_CONFIG_SUFFIX = '_sparsity_config'
SPARSITY_PRUNED_VALUE_SUFFIX = '_sparsity_mask_pruned_value'
SPARSITY_NAME_POSTFIX = base_layer.SPARSITY_NAME_POSTFIX

SparsityType = sparsity_hparams.SparsityType
SparsityHParams = sparsity_hparams.SparsityHParams
WeightSparsityParams = sparsity_hparams.WeightSparsityParams
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
InferenceMode = sparsity_modes.InferenceMode
FewShotMode = sparsity_modes.FewShotMode
OneShotMode = sparsity_modes.OneShotMode
MaterializeMode = sparsity_modes.MaterializeMode
_MEAN_SYNC = base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def sr_ste(inputs: JTensor, mask: JTensor, sparse_ste_weight: float):
  """(mask * inputs, mask, weight); the gradient of the pruned inputs gets
  `sparse_ste_weight * inputs` added (SR-STE, arXiv:2102.04010)."""
  return _sr_ste_fwd(inputs, mask, sparse_ste_weight)[0]


@functools.partial(jax.jit, static_argnums=(2,))
def _sr_ste_fwd(inputs, mask, sparse_ste_weight):
  weight = jnp.array(sparse_ste_weight)
  return (mask * inputs, mask, weight), (inputs, mask, weight)


def _sr_ste_bwd(sparsity_params, res, g):
  del sparsity_params
  inputs, mask, weight = res
  return g[0] + weight * jnp.multiply(~mask, inputs), None


sr_ste.defvjp(_sr_ste_fwd, _sr_ste_bwd)
sr_ste_fwd = _sr_ste_fwd
sr_ste_bwd = _sr_ste_bwd


def _counter(value: Any, dtype: Any = jnp.int32) -> WeightHParams:
  return WeightHParams(shape=[], init=WeightInit.Constant(value), dtype=dtype,
                       collections=[_MEAN_SYNC])


class SparsityBaseLayer(base_layer.BaseLayer):
  """Adds weight sparsity (pruning masks) to a layer.

  Attributes:
    sparsity: The layer's sparsity (`SparsityHParams`); None: dense.
  """

  sparsity: SparsityHParams | None = None

  def create_sparsity_variables(
      self,
      name: str,
      weight_hparams: WeightHParams,
      scale_shape: Sequence[int] | None = None,
  ) -> None:
    """Creates the mask (and counter) variables of weight `name`."""
    if self.sparsity is None or isinstance(self.sparsity.mode, InferenceMode):
      return
    self._create_masks_variables(name, weight_hparams, scale_shape)
    self._create_counter_variables()

  def _create_masks_variables(self, name, weight_hp, scale_shape=None):
    sp = self.sparsity
    mask_hp = copy.deepcopy(weight_hp)
    mask_hp.init = WeightInit.Constant(True)
    mask_hp.dtype = jnp.bool_
    self.create_variable(name + SPARSITY_NAME_POSTFIX, mask_hp,
                         trainable=False)
    if sp.topk_estimator_type:
      if scale_shape is None:
        raise ValueError(
            f'{type(self).__name__}: SparsityHParams.topk_estimator_type '
            'needs the scale shape of the weight.')
      self.set_up_weights(weight_name='w_mask',
                          weight_params=copy.deepcopy(weight_hp),
                          scale_shape=scale_shape)
      float_hp = copy.deepcopy(weight_hp)
      float_hp.init = WeightInit.Constant(1.0)
      float_hp.dtype = jnp.float32
      float_hp.collections = [_MEAN_SYNC]
      self.create_variable(name + SPARSITY_NAME_POSTFIX + '_float', float_hp,
                           trainable=False)
    wp = sp.weight_params
    if wp is not None and (wp.pruned_value != 0.0
                           or wp.pruned_value_trainable):
      self.create_variable(
          name + SPARSITY_PRUNED_VALUE_SUFFIX,
          WeightHParams(shape=(), init=WeightInit.Constant(wp.pruned_value),
                        dtype=jnp.float32),
          trainable=wp.pruned_value_trainable)

  def _create_counter_variables(self) -> None:
    self.create_variable('num_shots',
                         _counter(self.sparsity.mode.get_num_shots()),
                         trainable=False)
    self.create_variable('mask_update_count', _counter(0), trainable=False)
    self.create_variable('step', _counter(0), trainable=False)
    if self.sparsity.track_sad_metric:
      self.create_variable('sparse_architecture_divergence',
                           _counter(0.0, jnp.float32), trainable=False)

  def _get_sparsity_mask(self, score, mask, step, input_dtype):
    sp = self.sparsity
    wp = sp.weight_params
    if sp.sparsity_type == SparsityType.UNSTRUCTURED:
      rate = self._get_prune_rate_unstructured(step)
      if rate is None:
        return mask
      return sparsity.get_sparsity_mask_unstructured(score, mask, rate)
    if wp is None or wp.prune_rate is None:
      return mask
    if sp.sparsity_type == SparsityType.CHANNELWISE_PRUNING:
      return sparsity.get_sparsity_mask_channelwise(
          score, wp.prune_rate, sp.channelwise_pruning_dim)
    n, m = wp.prune_rate
    if (sparsity.is_optimized_offset(sp.order, wp.offset, input_dtype)
        and not sp.block_size):
      return sparsity.get_sparsity_mask_optimized_for_offset(
          score, n_sparsity=n, m_sparsity=m, order=sp.order, offset=wp.offset)
    return sparsity.get_sparsity_mask(
        score, n_sparsity=n, m_sparsity=m, order=sp.order, offset=wp.offset,
        block_size=sp.block_size)

  def _get_prune_rate_unstructured(self, step):
    sp = self.sparsity
    rate = sp.weight_params.prune_rate if sp and sp.weight_params else None
    schedule = sp.polynomial_decay_schedule if sp else None
    if schedule is None:
      return rate
    active = jax.lax.cond(jnp.greater_equal(step, schedule.begin_step),
                          lambda: 1.0, lambda: 0.0)
    progress = ((jax.lax.min(step, schedule.end_step) - schedule.begin_step)
                / (schedule.end_step - schedule.begin_step))
    return active * (
        schedule.final_sparsity
        + (schedule.initial_sparsity - schedule.final_sparsity)
        * (1 - progress) ** schedule.exponent)

  def _maybe_update_mask(self, weight, inputs, name, step) -> None:
    sp = self.sparsity
    if isinstance(sp.mode, MaterializeMode):
      return
    mask_name = name + SPARSITY_NAME_POSTFIX
    mask = self.get_var(mask_name).reshape(weight.shape)
    count = self.get_var('mask_update_count')
    if isinstance(sp.mode, FewShotMode):
      sp.mode.increment_target_step(count)

    def update(w, inputs, mask, count, step):
      score = sparsity.compute_score(w, score_func=sp.score, inputs=inputs)
      new_mask = self._get_sparsity_mask(score, mask, step, w.dtype)
      sad = None
      if sp.track_sad_metric:
        sad = jnp.sum(jnp.logical_xor(mask, new_mask)) / mask.size
      return new_mask, count + 1, sad

    def keep(w, inputs, mask, count, step):
      del w, inputs, step
      sad = jnp.zeros((), jnp.float32) if sp.track_sad_metric else None
      return mask, count, sad

    new_mask, count, sad = jax.lax.cond(
        sp.mode.update_cond(step, count), update, keep,
        weight, inputs, mask, count, step)
    self.update_var('mask_update_count', count)
    self.update_var(mask_name, new_mask)
    if sp.track_sad_metric:
      self.update_var('sparse_architecture_divergence', sad)
    if isinstance(sp.mode, (OneShotMode, FewShotMode)):
      self.add_summary('mask_update_count', count, verbosity=4)

  def sparsify_via_top_k_estimator(self, weight, name, step) -> JTensor:
    """`weight` times its learned (top-k estimated) mask."""
    weight = _topk_estimator.sparsify(self, weight, name, step,
                                      SPARSITY_NAME_POSTFIX)
    if isinstance(self.sparsity.mode, (OneShotMode, FewShotMode)):
      self.add_summary('mask_update_count',
                       self.get_var('mask_update_count'), verbosity=4)
    return weight

  def _pruned_value(self, name):
    wp = self.sparsity.weight_params
    if wp.pruned_value == 0.0 and not wp.pruned_value_trainable:
      return None
    var = name + SPARSITY_PRUNED_VALUE_SUFFIX
    return self.theta[var] if wp.pruned_value_trainable else self.get_var(var)

  def sparsifiy(
      self,
      weight: JTensor,
      name: str,
      inputs: JTensor | None = None,
      layer_idx: int | None = None,
  ) -> JTensor:
    """`weight` with its mask applied (updating the mask when due)."""
    sp = self.sparsity
    if (sp is None or isinstance(sp.mode, InferenceMode)
        or sp.weight_params is None):
      return weight
    if sp.sparsity_type == SparsityType.CHANNELWISE_PRUNING:
      raise NotImplementedError(
          'Channel-wise pruning is temporarily disabled in sparsifiy '
          '(SparsityHParams.sparsity_type).')
    step = self.get_var('step')
    skip = (sp.sparsified_layers is not None and layer_idx is not None
            and layer_idx not in sp.sparsified_layers)
    if skip:
      self.update_var('step', step + 1)
      return weight
    if sp.topk_estimator_type:
      weight = self.sparsify_via_top_k_estimator(weight, name, step)
      self.update_var('step', step + 1)
      return weight
    self._maybe_update_mask(weight, inputs, name, step)
    mask = self.get_var(name + SPARSITY_NAME_POSTFIX).reshape(weight.shape)
    if sp.weight_params.sparse_ste:
      weight, _, _ = sr_ste(weight, mask, sp.weight_params.sparse_ste_weight)
    else:
      weight = sparsity.apply_sparsity(weight, mask,
                                       pruned_value=self._pruned_value(name))
    self.update_var('step', step + 1)
    return weight
