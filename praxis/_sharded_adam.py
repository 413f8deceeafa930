"""Pax's Adam, whose state is `NestedMap(count, m, v)` (private).

`praxis.optimizers.sharded_adam` is `sharded_adam` here. The state has Pax's
layout and meaning, so that a state restored from a Pax checkpoint continues
as Pax would: `count` is the number of updates so far, and `m`, `v` (trees of
the variables' structure) are the bias-corrected moments, i.e. optax's
`mu / (1 - beta1**count)` and `nu / (1 - beta2**count)`. Each update decays
them with the bias-corrected rate

  d(beta, t) = beta * (1 - beta**(t - 1)) / (1 - beta**t),  t = count + 1,

which keeps them equal to the corrected moments (Shazeer & Stern 2018,
https://arxiv.org/abs/1804.04235, section 7.1), and the update is
-lr(count) * cap(m / (sqrt(v + epsilon_root) + epsilon) [+ wd * variable]).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from praxis import _optimizer_transforms
from praxis import py_utils

NestedMap = py_utils.NestedMap
Schedule = Callable[[Any], Any]


def bias_corrected_decay(step: jax.Array, decay: float) -> jax.Array:
  """d(decay, step + 1) of the module doc; 0 at step 0."""
  t = step.astype(jnp.float32) + 1.0
  return decay * (1.0 - jnp.power(decay, t - 1.0)) / (
      1.0 - jnp.power(decay, t))


def inf_to_nan(x: jax.Array) -> jax.Array:
  """Infinities become NaN (which later ops cannot hide)."""
  return jnp.where(jnp.isinf(x), jnp.nan, x)


def cap_rms(update: jax.Array, cap: float) -> jax.Array:
  """`update` scaled down to an RMS of at most `cap`."""
  rms = inf_to_nan(jnp.sqrt(jnp.mean(jnp.square(update))))
  return update / jnp.maximum(1.0, rms / jnp.asarray(cap, update.dtype))


def sharded_adam(
    learning_rate_fn: Schedule,
    beta1: float,
    beta2: float,
    epsilon: float,
    epsilon_root: float,
    update_capping: float,
    weight_decay: float,
    maybe_inf_to_nan: bool = True,
) -> _optimizer_transforms.ShardedGradientTransformation:
  """Adam with Pax's state, update capping and coupled weight decay.

  Args:
    learning_rate_fn: The learning rate schedule (of the count).
    beta1: Decay of the first moment.
    beta2: Decay of the second moment.
    epsilon: Added to the denominator outside the square root.
    epsilon_root: Added to v inside the square root.
    update_capping: If > 0, each variable's update is scaled down to an RMS
      of at most this (before the weight decay and the learning rate).
    weight_decay: If > 0, adds weight_decay * variable to the update.
    maybe_inf_to_nan: Turn infinite gradients into NaNs first.

  Returns:
    The transformation; its state is `NestedMap(count, m, v)`.
  """

  def init(params):
    zeros = lambda x: jnp.zeros_like(x)  # pylint: disable=unnecessary-lambda
    return NestedMap(count=jnp.array(0, jnp.int32),
                     m=jax.tree.map(zeros, params),
                     v=jax.tree.map(zeros, params))

  def update(grads, state, params=None):
    if weight_decay > 0 and params is None:
      raise ValueError('sharded_adam: weight_decay > 0 needs params in '
                       'update().')
    if maybe_inf_to_nan:
      grads = jax.tree.map(inf_to_nan, grads)
    count = state.count
    d1 = bias_corrected_decay(count, beta1)
    d2 = bias_corrected_decay(count, beta2)
    m = jax.tree.map(lambda g, m: (1.0 - d1) * g + d1 * m, grads, state.m)
    v = jax.tree.map(lambda g, v: (1.0 - d2) * g**2 + d2 * v, grads, state.v)
    updates = jax.tree.map(
        lambda m, v: m / (jnp.sqrt(v + epsilon_root) + epsilon), m, v)
    if update_capping > 0:
      updates = jax.tree.map(lambda u: cap_rms(u, update_capping), updates)
    if weight_decay > 0:
      updates = jax.tree.map(lambda u, p: u + weight_decay * p, updates,
                             params)
    step_size = -1.0 * learning_rate_fn(count)
    updates = jax.tree.map(lambda u: step_size * u, updates)
    return updates, NestedMap(count=count + 1, m=m, v=v)

  # pylint: disable-next=protected-access
  return _optimizer_transforms._sharded(
      optax.GradientTransformation(init, update))
