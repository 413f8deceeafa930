"""Online Bregman PCA: a pass-through layer that learns to compress its input.

Public names: ActivationType, BregmanPCA.

Bregman PCA (https://cseweb.ucsd.edu/~dasgupta/papers/pca.pdf) fits a mean
and K principal components to the representation that flows through the
layer, with the squared loss replaced by the Bregman divergence matched to
the activation that produced the representation (identity: squared loss;
leaky ReLU; softmax: KL). The layer returns its inputs unchanged and their
K coefficients under the current components; in training it also updates
the mean (an EMA) and the components (momentum SGD on normalised gradients;
unlike Pax, the momentum is kept from step to step).
"""

from __future__ import annotations

import enum
import functools
from typing import Callable, Sequence

import jax
from jax import numpy as jnp
import jax.scipy.special as jsp
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
_MEAN_SYNC = base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC


def _predict(coefficients: JTensor, components: JTensor,
             mean: JTensor) -> JTensor:
  """[B, K] x [K, ...] + [1, ...] -> [B, ...]: pre-activation predictions."""
  return jnp.tensordot(coefficients, components, 1) + mean


def _flat(x: JTensor) -> JTensor:
  return jnp.reshape(x, (x.shape[0], -1))


def _squared_loss(coefficients, components, mean, labels) -> JTensor:
  """Mean over the batch of 0.5 * ||prediction - labels||^2."""
  preds = _flat(_predict(coefficients, components, mean))
  labels = jax.lax.stop_gradient(_flat(labels))
  return jnp.mean(jnp.sum(0.5 * jnp.square(preds - labels), axis=1))


def _leaky_relu_loss(coefficients, components, mean, labels,
                     negative_slope: float) -> JTensor:
  """The Bregman divergence of the leaky ReLU's potential.

  With a = leaky_relu (slope s) and its inverse a^-1 (slope 1 / s), for
  prediction z (pre-activation) and label y: 0.5 * (z * a(z) - a^-1(y) * y) -
  y * (z - a^-1(y)), summed over features, averaged over the batch.
  """
  labels = jax.lax.stop_gradient(_flat(labels))
  labels_pre = jax.nn.leaky_relu(labels, negative_slope=1.0 / negative_slope)
  preds_pre = _flat(_predict(coefficients, components, mean))
  preds = jax.nn.leaky_relu(preds_pre, negative_slope=negative_slope)
  loss = 0.5 * (preds_pre * preds - labels_pre * labels) - labels * (
      preds_pre - labels_pre)
  return jnp.mean(jnp.sum(loss, axis=1))


def _softmax_loss(coefficients, components, mean, labels) -> JTensor:
  """KL(labels || softmax(prediction)) over the last axis, averaged."""
  logits = _predict(coefficients, components, mean)
  logits = jnp.reshape(logits, (-1, logits.shape[-1]))
  labels = jax.lax.stop_gradient(jnp.reshape(labels, (-1, labels.shape[-1])))
  entropy_term = labels * (jnp.log(jnp.maximum(labels, 1e-6)) - logits)
  return jnp.mean(jsp.logsumexp(logits, axis=1) + jnp.sum(entropy_term, 1))


def _inverse_softmax(probs: JTensor) -> JTensor:
  """Centred log-probabilities: a softmax pre-image of `probs`."""
  logs = jnp.log(jnp.maximum(probs, 1e-6))
  return logs - jnp.mean(logs, axis=-1, keepdims=True)


@enum.unique
class ActivationType(str, enum.Enum):
  """The activations whose Bregman divergence the layer can use."""

  IDENTITY = 'IDENTITY'
  LEAKY_RELU = 'LEAKY_RELU'
  SOFTMAX = 'SOFTMAX'


def _normalized(grad: JTensor) -> JTensor:
  """grad scaled to norm sqrt(size) (so each entry is O(1))."""
  norm = jnp.maximum(jnp.linalg.norm(grad), 1e-6)
  return grad / norm * jnp.sqrt(jnp.size(grad))


class BregmanPCA(base_layer.BaseLayer):
  """Online Bregman PCA of the representation passing through.

  Shapes: B = batch, K = `num_components`, input [B, *input_dims].

  Attributes:
    num_components: K.
    input_dims: The input's shape without the batch dim.
    activation_type: The activation that produced the inputs (its Bregman
      divergence is the loss).
    negative_slope: The leaky ReLU's negative slope.
    mean_beta: EMA decay of the mean.
    coefficients_lr: Learning rate of the coefficient solver.
    coefficients_beta: Momentum of the coefficient solver.
    coefficients_steps: Steps of the coefficient solver.
    components_lr: Learning rate of the components.
    components_beta: Momentum of the components.
    start_step: First training step that updates the mean and components.
    end_step: First step that no longer does (must be > start_step).
    constant_lr_schedule: Constant components learning rate (else linear
      decay from start_step to end_step).
  """

  num_components: int = 0
  input_dims: int | Sequence[int] = 0
  activation_type: ActivationType = ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def _check(self) -> None:
    where = f'{type(self).__name__} {self.name!r}'
    if self.num_components <= 0:
      raise ValueError(f'{where}: num_components={self.num_components} must '
                       'be positive.')
    if not self.input_dims:
      raise ValueError(f'{where}: input_dims must be set.')
    if self.end_step <= self.start_step:
      raise ValueError(f'{where}: end_step={self.end_step} must be greater '
                       f'than start_step={self.start_step}.')
    if (self.activation_type == ActivationType.LEAKY_RELU
        and not self.negative_slope):
      raise ValueError(f'{where}: LEAKY_RELU needs a non-zero '
                       'negative_slope.')

  def _functions(self) -> tuple[Callable, Callable, Callable]:
    """(activation, its inverse, the Bregman loss) for activation_type."""
    kind = ActivationType(self.activation_type)
    if kind == ActivationType.IDENTITY:
      return (lambda x: x), (lambda x: x), _squared_loss
    if kind == ActivationType.LEAKY_RELU:
      slope = self.negative_slope
      return (functools.partial(jax.nn.leaky_relu, negative_slope=slope),
              functools.partial(jax.nn.leaky_relu, negative_slope=1 / slope),
              functools.partial(_leaky_relu_loss, negative_slope=slope))
    return jax.nn.softmax, _inverse_softmax, _softmax_loss

  def setup(self) -> None:
    self._check()
    dims = self.input_dims
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    k = self.num_components
    (self.activation_fn, self.inv_activation_fn,
     self.bregman_loss_fn) = self._functions()
    self.coefficients_grad_fn = jax.grad(self.bregman_loss_fn, argnums=0)
    self.components_grad_fn = jax.grad(self.bregman_loss_fn, argnums=1)
    zeros = WeightInit.Constant(0.0)
    for name, shape, init, dtype in (
        ('step', [], zeros, jnp.float32),
        ('mean', [1] + dims, zeros, None),
        ('components', [k] + dims, None, None),
        ('components_momentum', [k] + dims, zeros, None)):
      self.create_variable(name, WeightHParams(
          shape=shape, init=init, dtype=dtype, collections=[_MEAN_SYNC]),
                           trainable=False)

  def base_learning_rate(self, step: JTensor) -> tuple[JTensor, JTensor]:
    """(components LR factor, 1.0 if step updates else 0.0) at `step`."""
    active = jnp.where((step >= self.start_step) & (step < self.end_step),
                       1.0, 0.0)
    if self.constant_lr_schedule:
      return active, active
    decay = 1.0 - (step - self.start_step) / (self.end_step - self.start_step)
    return jnp.maximum(decay, 0.0) * active, active

  def reconstruct(self, coefficients: JTensor) -> JTensor:
    """The representation [B, ...] that coefficients [B, K] stand for."""
    return self.activation_fn(_predict(
        coefficients, self.get_var('components'), self.get_var('mean')))

  def _solve_coefficients(self, inputs, components, mean) -> JTensor:
    """Momentum descent on the loss over the coefficients, LR decaying to 0."""

    def body(i, carry):
      coeffs, momentum = carry
      grad = _normalized(
          self.coefficients_grad_fn(coeffs, components, mean, inputs))
      momentum = (self.coefficients_beta * momentum
                  + (1.0 - self.coefficients_beta) * grad)
      lr = (1.0 - i / self.coefficients_steps) * self.coefficients_lr
      return coeffs - lr * momentum, momentum

    coeffs = jnp.zeros((inputs.shape[0], self.num_components), inputs.dtype)
    coeffs, _ = jax.lax.fori_loop(0, self.coefficients_steps, body,
                                  (coeffs, jnp.zeros_like(coeffs)))
    return jax.lax.stop_gradient(coeffs)

  def __call__(self, inputs: JTensor, mask: JTensor | None = None
               ) -> tuple[JTensor, JTensor]:
    """(inputs, their coefficients [B, K]); trains the PCA unless in eval.

    Args:
      inputs: [B, *input_dims].
      mask: [B, K] (broadcastable); zero coefficients are left out of the
        components' update.
    """
    mean = self.get_var('mean')
    components = self.get_var('components')
    inputs = self._cast_to_fprop_dtype(inputs)
    if not self.do_eval:
      step = self.get_var('step')
      lr, active = self.base_learning_rate(step)
      self.update_var('step', step + 1)
      beta = 1.0 - active * (1.0 - self.mean_beta)
      batch_mean = self.inv_activation_fn(
          jnp.mean(inputs, axis=0, keepdims=True))
      mean = beta * mean + (1.0 - beta) * batch_mean
    coefficients = self._solve_coefficients(inputs, components, mean)
    if not self.do_eval:
      masked = coefficients if mask is None else coefficients * mask
      grad = _normalized(
          self.components_grad_fn(masked, components, mean, inputs))
      momentum = (self.components_beta * self.get_var('components_momentum')
                  + (1.0 - self.components_beta) * grad * active)
      components = components - lr * self.components_lr * momentum
      self.update_var('mean', mean)
      self.update_var('components', components)
      self.update_var('components_momentum', momentum)
    self.add_summary('bregman_loss', self.bregman_loss_fn(
        coefficients, components, mean, inputs))
    return inputs, coefficients
