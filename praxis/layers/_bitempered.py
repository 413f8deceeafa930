"""The bi-tempered logistic loss (https://arxiv.org/abs/1906.03361) in JAX.

Private to praxis.layers.losses. Follows the numerics of the
`jax_bitempered_loss` package that Pax uses (5 normalization iterations,
the same epsilons, the same custom gradient), so that this project does not
need that package. Temperatures may be traced values (Pax schedules them).

  log_t(u, t) = (u^(1-t) - 1) / (1-t)        (log when t == 1)
  exp_t(u, t) = max(1 + (1-t) u, 0)^(1/(1-t)) (exp when t == 1)
  p = exp_t(a - Z(a), t2), with Z so that sum(p) == 1
  loss = sum(y (log_t(y) - log_t(p)) - (y^(2-t1) - p^(2-t1)) / (2-t1)), t1
"""

import functools

import jax
from jax import lax
from jax import numpy as jnp

_NUM_ITERS = 5


def _is_one(t):
  return jnp.abs(t - 1.0) < 1e-15


def log_t(u, t):
  """The tempered logarithm."""
  t = jnp.asarray(t, jnp.float32)
  return lax.cond(_is_one(t), jnp.log,
                  lambda v: (jnp.power(v, 1.0 - t) - 1.0) / (1.0 - t), u)


def exp_t(u, t):
  """The tempered exponential."""
  t = jnp.asarray(t, jnp.float32)
  return lax.cond(
      _is_one(t), jnp.exp,
      lambda v: jnp.power(jnp.maximum(1.0 + (1.0 - t) * v, 0.0),
                          1.0 / (1.0 - t)), u)


def _normalization_fixed_point(activations, t):
  """Z for t > 1 by fixed-point iteration."""
  mu = jnp.max(activations, -1, keepdims=True)
  a0 = activations - mu

  def body(_, a):
    partition = jnp.sum(exp_t(a, t), -1, keepdims=True)
    return a0 * jnp.power(partition, 1.0 - t)

  a = lax.fori_loop(0, _NUM_ITERS, body, a0)
  partition = jnp.sum(exp_t(a, t), -1, keepdims=True)
  return -log_t(1.0 / partition, t) + mu


def _normalization_binary_search(activations, t):
  """Z for t < 1 (finite support) by bisection."""
  mu = jnp.max(activations, -1, keepdims=True)
  a = activations - mu
  support = jnp.sum((a > -1.0 / (1.0 - t)).astype(jnp.int32), -1,
                    keepdims=True).astype(jnp.float32)
  lower = jnp.zeros(support.shape)
  upper = -log_t(1.0 / support, t) * jnp.ones(support.shape)

  def body(_, bounds):
    lo, hi = bounds
    mid = (lo + hi) / 2.0
    below = (jnp.sum(exp_t(a - mid, t), -1, keepdims=True) < 1.0).astype(
        jnp.float32)
    return lo * below + (1.0 - below) * mid, hi * (1.0 - below) + below * mid

  lower, upper = lax.fori_loop(0, _NUM_ITERS, body, (lower, upper))
  return (lower + upper) / 2.0 + mu


def compute_normalization(activations, t):
  """The normalizer Z [..., 1] of the tempered softmax."""
  tempered = functools.partial(
      lax.cond, t < 1.0, _normalization_binary_search,
      _normalization_fixed_point)
  return lax.cond(
      _is_one(t), functools.partial(jax.nn.logsumexp, axis=-1, keepdims=True),
      lambda a: tempered(a, t), activations)


def tempered_softmax(activations, t):
  """Probabilities exp_t(a - Z, t)."""
  return exp_t(activations - compute_normalization(activations, t), t)


def _smooth(labels, label_smoothing):
  k = labels.shape[-1]
  smoothed = ((1.0 - k / (k - 1) * label_smoothing) * labels
              + label_smoothing / (k - 1))
  return jnp.where(label_smoothing > 0.0, smoothed, labels)


@jax.jit
def _fwd(activations, labels, t1, t2, label_smoothing):
  t1, t2 = jnp.asarray(t1, jnp.float32), jnp.asarray(t2, jnp.float32)
  labels = _smooth(labels, label_smoothing)
  probs = tempered_softmax(activations, t2)

  def cross_entropy(a):
    return jnp.sum(labels * (jnp.log(labels + 1e-15)
                             - jax.nn.log_softmax(a)), -1)

  def tempered(_):
    per_class = labels * (log_t(labels + 1e-10, t1) - log_t(probs, t1)) - (
        jnp.power(labels, 2.0 - t1) - jnp.power(probs, 2.0 - t1)) / (2.0 - t1)
    return jnp.sum(per_class, -1)

  loss = lax.cond(jnp.logical_and(_is_one(t1), _is_one(t2)), cross_entropy,
                  tempered, activations)
  return loss, (labels, t1, t2, probs)


@jax.jit
def _bwd(res, d_loss):
  labels, t1, t2, probs = res
  forget = (probs - labels) * jnp.power(probs, t2 - t1)
  escorts = jnp.power(probs, t2)
  escorts = escorts / jnp.sum(escorts, -1, keepdims=True)
  grad = forget - escorts * jnp.sum(forget, -1, keepdims=True)
  if d_loss.ndim < grad.ndim:
    d_loss = d_loss[..., None]
  return d_loss * grad, None, None, None, None


@jax.custom_vjp
def bi_tempered_logistic_loss(activations, labels, t1, t2,
                              label_smoothing=0.0):
  """Per-example loss [...] of activations and labels [..., num_classes]."""
  return _fwd(activations, labels, t1, t2, label_smoothing)[0]


bi_tempered_logistic_loss.defvjp(_fwd, _bwd)
