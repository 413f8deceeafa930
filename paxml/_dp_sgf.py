"""Differentially private stochastic gradients (DP-SGD), behind `paxml.sgf`.

Public names (re-exported by `paxml.sgf`): DPGradAuxInfo, DpSgdStochasticGradient,
MicrobatchDpSgdStochasticGradient, AugMulDpSgdStochasticGradient,
PerLayerDpSgdStochasticGradient, GhostClippingDpSgdStochasticGradient,
PercoreClippedDpSgdGradient.

DP-SGD bounds each example's influence: the gradient of every example (or
microbatch of examples) is clipped to L2 norm `l2_norm_clip`, the clipped
gradients are averaged, and Gaussian noise of standard deviation
`noise_multiplier * l2_norm_clip / batch` is added to the average.

  learner.stochastic_gradient = pax_fiddle.Config(
      sgf.DpSgdStochasticGradient, l2_norm_clip=1.0, noise_multiplier=1.1)

The loss function is called once per example, under `jax.vmap`, on a batch of
one (or of one microbatch); the loss and its auxiliary outputs are averaged
over the examples.
"""

from __future__ import annotations

from typing import Any

from flax import struct
import jax
import jax.numpy as jnp
import optax
from paxml import _sgf_base
from paxml.ghostnorm import base as ghostnorm_base
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor
PARAMS = base_layer.PARAMS


@struct.dataclass
class DPGradAuxInfo(_sgf_base.GradAuxInfo):
  """`GradAuxInfo` plus DP statistics (`frac_clipped`, ...) in `dp_aux_info`."""

  dp_aux_info: Any = None


def _add_noise(grads: Any, stddev: JTensor | float, key: JTensor) -> Any:
  """grads + N(0, stddev^2), an independent draw per leaf."""
  leaves, treedef = jax.tree_util.tree_flatten(grads)
  keys = jax.random.split(key, max(len(leaves), 1))
  noisy = [
      x + stddev * jax.random.normal(k, x.shape, x.dtype)
      for x, k in zip(leaves, keys)
  ]
  return jax.tree_util.tree_unflatten(treedef, noisy)


def _mean_over_examples(tree: Any) -> Any:
  return jax.tree_util.tree_map(lambda x: jnp.mean(x, axis=0), tree)


def _check_positive_clip(sg: Any) -> None:
  if sg.l2_norm_clip is None or sg.l2_norm_clip <= 0:
    raise ValueError(
        f'{type(sg).__name__}: l2_norm_clip={sg.l2_norm_clip} must be '
        'positive.'
    )
  if sg.use_loss_weight_scaling and sg.noise_multiplier != 0.0:
    raise ValueError(
        f'{type(sg).__name__}: use_loss_weight_scaling needs '
        f'noise_multiplier=0 (got {sg.noise_multiplier}).'
    )


class DpSgdStochasticGradient(_sgf_base.BaseStochasticGradient):
  """DP-SGD: clip each example's gradient, average, add Gaussian noise.

  Attributes:
    l2_norm_clip: The clipping bound of each example's gradient.
    noise_multiplier: Noise standard deviation, in units of the bound.
    use_loss_weight_scaling: Scale the bound by the loss weight (only without
      noise: for empirical privacy).
    normalize_gradients: Divide the clipped average by `l2_norm_clip`
      (gradients of norm at most 1; the noise then has stddev
      `noise_multiplier / batch`).
    inner_batch_size: Examples whose gradients are materialised at once (the
      rest are processed sequentially); None: the whole batch. It changes the
      memory used, not the result.
  """

  l2_norm_clip: float = 0.0
  noise_multiplier: float = 0.0
  use_loss_weight_scaling: bool = False
  normalize_gradients: bool = False
  inner_batch_size: int | None = None

  def _prepare_inputs(self, inputs: Any) -> Any:
    """[batch, ...] -> [groups, group_size, ...]: the units that are clipped."""
    return jax.tree_util.tree_map(lambda x: jnp.expand_dims(x, 1), inputs)

  def process_aux_info(self, aux_info: Any) -> Any:
    return _mean_over_examples(aux_info)

  def _clip_and_sum(self, grads: Any, bound: JTensor) -> tuple[Any, dict]:
    """Sums the per-group clipped gradients; stats are summed over groups."""
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    summed, num_clipped = optax.per_example_global_norm_clip(leaves, bound)
    return (jax.tree_util.tree_unflatten(treedef, summed),
            {'frac_clipped': num_clipped})

  def _finish_stats(self, stats: dict) -> dict:
    return stats

  def _chunks(self, groups: int, group_size: int) -> int:
    """The number of sequential chunks the groups are split into."""
    if self.inner_batch_size is None:
      return 1
    inner = self.inner_batch_size
    if inner % group_size or (groups * group_size) % inner:
      raise ValueError(
          f'{type(self).__name__}: inner_batch_size={inner} must be a '
          f'multiple of the microbatch size {group_size} and divide the '
          f'batch of {groups * group_size} examples.'
      )
    return groups * group_size // inner

  def grad_fn(self, loss_fn, mdl_vars_grad, mdl_vars_nograd_and_inputs,
              prng_key):
    _check_positive_clip(self)
    nograd, inputs = mdl_vars_nograd_and_inputs
    inputs = self._prepare_inputs(inputs)
    first = jax.tree_util.tree_leaves(inputs)[0]
    groups, group_size = first.shape[0], first.shape[1]
    chunks = self._chunks(groups, group_size)
    chunked = jax.tree_util.tree_map(
        lambda x: x.reshape((chunks, groups // chunks) + x.shape[1:]), inputs)
    per_group = jax.vmap(
        jax.value_and_grad(loss_fn, has_aux=True, allow_int=True),
        in_axes=(None, (None, 0), None))

    def one_chunk(carry, xs):
      chunk_inputs, key = xs
      (loss, aux), grads = per_group(mdl_vars_grad, (nograd, chunk_inputs),
                                     key)
      scale = 1.0
      if self.use_loss_weight_scaling:
        scale = jnp.mean(aux.loss_weight)
      summed, stats = self._clip_and_sum(grads, self.l2_norm_clip * scale)
      out = (jnp.mean(loss, axis=0), self.process_aux_info(aux), summed,
             stats)
      if carry is None:
        return out, None
      return jax.tree_util.tree_map(jnp.add, carry, out), None

    keys = jax.random.split(prng_key, chunks)
    first_out, _ = one_chunk(None, (jax.tree_util.tree_map(
        lambda x: x[0], chunked), keys[0]))
    if chunks > 1:
      rest = jax.tree_util.tree_map(lambda x: x[1:], (chunked, keys))
      first_out, _ = jax.lax.scan(one_chunk, first_out, rest)
    loss, aux, summed, stats = first_out
    loss, aux = jax.tree_util.tree_map(lambda x: x / chunks, (loss, aux))
    grads = jax.tree_util.tree_map(lambda g: g / groups, summed)
    stats = jax.tree_util.tree_map(lambda s: s / groups, stats)
    if self.normalize_gradients:
      grads = jax.tree_util.tree_map(lambda g: g / self.l2_norm_clip, grads)
    if self.noise_multiplier > 0.0:
      unit = 1.0 if self.normalize_gradients else self.l2_norm_clip
      grads = _add_noise(grads, self.noise_multiplier * unit / groups,
                         prng_key)
    aux = DPGradAuxInfo(aux_info=aux.aux_info, loss_weight=aux.loss_weight,
                        dp_aux_info=self._finish_stats(stats))
    return (loss, aux), grads


class MicrobatchDpSgdStochasticGradient(DpSgdStochasticGradient):
  """DP-SGD that clips the mean gradient of each microbatch of examples.

  Attributes:
    microbatch_size: Examples per clipped microbatch (must divide the batch).
  """

  microbatch_size: int = 1

  def _prepare_inputs(self, inputs: Any) -> Any:
    m = self.microbatch_size

    def split(x):
      if m < 1 or x.shape[0] % m:
        raise ValueError(
            f'{type(self).__name__}: microbatch_size={m} must be positive '
            f'and divide the batch size {x.shape[0]}.'
        )
      return x.reshape((x.shape[0] // m, m) + x.shape[1:])

    return jax.tree_util.tree_map(split, inputs)


class AugMulDpSgdStochasticGradient(MicrobatchDpSgdStochasticGradient):
  """DP-SGD with augmentation multiplicity: each example repeated
  `microbatch_size` times (the model augments each copy differently) and the
  mean gradient of the copies clipped."""

  def _prepare_inputs(self, inputs: Any) -> Any:
    m = self.microbatch_size
    return jax.tree_util.tree_map(
        lambda x: jnp.repeat(x[:, None], m, axis=1), inputs)


class PerLayerDpSgdStochasticGradient(DpSgdStochasticGradient):
  """DP-SGD that clips each variable's per-example gradient separately.

  Attributes:
    use_uniform: Split the bound uniformly over the variables (each gets
      l2_norm_clip / sqrt(#variables)); otherwise in proportion to size.
  """

  use_uniform: bool = True

  def _clip_and_sum(self, grads: Any, bound: JTensor) -> tuple[Any, dict]:
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    summed, num_clipped = optax.per_example_layer_norm_clip(
        leaves, bound, uniform=self.use_uniform)
    norms = [
        jnp.sum(jnp.sqrt(jnp.sum(jnp.square(g.reshape(g.shape[0], -1)), 1)))
        for g in leaves
    ]
    unflatten = lambda xs: jax.tree_util.tree_unflatten(treedef, list(xs))
    return unflatten(summed), {
        'frac_clipped': unflatten(num_clipped),
        'mean_layer_grad_norms': unflatten(norms),
    }

  def _finish_stats(self, stats: dict) -> dict:
    fracs = jnp.stack(jax.tree_util.tree_leaves(stats['frac_clipped']))
    return dict(stats, mean_frac_clipped=jnp.mean(fracs),
                stdev_frac_clipped=jnp.std(fracs))


class GhostClippingDpSgdStochasticGradient(DpSgdStochasticGradient):
  """DP-SGD in two ordinary backward passes, by ghost norms.

  Every parametric layer of the model must follow the `paxml.ghostnorm`
  protocol (`ghostnorm.generic_wrapper.generate_wrapped_template` rewrites a
  model config so). Pass 1 gets each example's gradient norm; pass 2 the
  average of the gradients weighted by min(1, l2_norm_clip / norm).
  """

  def grad_fn(self, loss_fn, mdl_vars_grad, mdl_vars_nograd_and_inputs,
              prng_key):
    if self.inner_batch_size is not None:
      raise ValueError(
          f'{type(self).__name__}: inner_batch_size is not supported '
          f'(got {self.inner_batch_size}); leave it None.'
      )
    batch = jax.tree_util.tree_leaves(mdl_vars_nograd_and_inputs[1])[0]
    batch = batch.shape[0]
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True)
    is_wrapped = lambda x: isinstance(x, ghostnorm_base.ParamWithAux)

    def weighted_pass(scales):
      params = jax.tree_util.tree_map(
          lambda v: ghostnorm_base.ParamWithAux(v, scales),
          mdl_vars_grad[PARAMS])
      return value_and_grad({**mdl_vars_grad, PARAMS: params},
                            mdl_vars_nograd_and_inputs, prng_key)

    _, first = weighted_pass(jnp.ones(batch))
    norms = jnp.sqrt(sum(
        x.aux for x in jax.tree_util.tree_leaves(first[PARAMS],
                                                 is_leaf=is_wrapped)))
    scales = jnp.minimum(1.0, self.l2_norm_clip / norms)
    frac_clipped = jnp.mean(scales < 1.0)
    if self.normalize_gradients:
      scales = scales / self.l2_norm_clip
    (loss, aux), grads = weighted_pass(scales)
    grads = dict(grads)
    grads[PARAMS] = jax.tree_util.tree_map(
        lambda x: x.param, grads[PARAMS], is_leaf=is_wrapped)
    if self.noise_multiplier > 0.0:
      unit = 1.0 if self.normalize_gradients else self.l2_norm_clip
      grads = _add_noise(grads, self.noise_multiplier * unit / batch,
                         prng_key)
    aux = DPGradAuxInfo(aux_info=aux.aux_info, loss_weight=aux.loss_weight,
                        dp_aux_info={'frac_clipped': frac_clipped})
    return (loss, aux), grads


class PercoreClippedDpSgdGradient(_sgf_base.BaseStochasticGradient):
  """Clips the batch's mean gradient as a whole, then adds noise.

  Pax clips each core's mean gradient under pmap. This project runs every
  step as one program over the global batch, so the global batch is the one
  "core" whose mean gradient is clipped.

  Attributes:
    l2_norm_clip: The bound (None: no clipping).
    noise_multiplier: Noise standard deviation, in units of the bound.
    use_loss_weight_scaling: Scale the bound by the loss weight.
    normalize_gradients: Divide the clipped gradient by `l2_norm_clip`.
    adaptive_clipping_method: None, or 'min' (the bound is the gradient's own
      norm: with one core, nothing is clipped).
  """

  l2_norm_clip: float | None = 0.0
  noise_multiplier: float = 0.0
  use_loss_weight_scaling: bool = False
  normalize_gradients: bool = False
  adaptive_clipping_method: str | None = None

  def grad_fn(self, loss_fn, mdl_vars_grad, mdl_vars_nograd_and_inputs,
              prng_key):
    if self.adaptive_clipping_method not in (None, 'min'):
      raise ValueError(
          f'{type(self).__name__}: adaptive_clipping_method='
          f'{self.adaptive_clipping_method!r}; expected None or "min".'
      )
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True,
                                        allow_int=True)
    (loss, aux), grads = value_and_grad(
        mdl_vars_grad, mdl_vars_nograd_and_inputs, prng_key)
    aux = self.process_aux_info(aux)
    norm = optax.tree.norm(grads)
    scale = aux.loss_weight if self.use_loss_weight_scaling else 1.0
    bound = self.l2_norm_clip
    if self.adaptive_clipping_method == 'min':
      bound = norm / scale
    dp_info = {'per_core_grad_norm': norm}
    if bound is not None:
      divisor = jnp.maximum(norm / (scale * bound), 1.0)
      grads = jax.tree_util.tree_map(lambda g: g / divisor, grads)
      dp_info['frac_clipped'] = (divisor > 1.0).astype(jnp.float32)
      if self.normalize_gradients:
        grads = jax.tree_util.tree_map(lambda g: g / bound, grads)
      if self.noise_multiplier > 0.0:
        unit = 1.0 if self.normalize_gradients else bound
        grads = _add_noise(grads, self.noise_multiplier * unit, prng_key)
    aux = DPGradAuxInfo(aux_info=aux.aux_info, loss_weight=aux.loss_weight,
                        dp_aux_info=dp_info)
    return (loss, aux), grads
