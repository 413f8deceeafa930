"""Losses of VQ-VAE / VQ-GAN video tokenizers.

Public names: r1_gradient_penalty, VQGANLoss.

`VQGANLoss` combines the generator loss (reconstruction, adversarial,
quantizer) and the discriminator loss (non-saturating GAN loss, R1 gradient
penalty, LeCam regularization https://arxiv.org/abs/2104.03310, which keeps
EMAs of the mean real and fake logits as non-trainable variables).

Example:

  logits, penalty = losses.r1_gradient_penalty(
      videos, functools.partial(discriminator.apply, variables))
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import base_model
from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap


def r1_gradient_penalty(
    inputs: JTensor,
    logits_fn: Callable[[JTensor], JTensor],
    grad_penalty_cost: float = 10.0,
) -> tuple[JTensor, JTensor]:
  """The logits of `inputs` and the R1 penalty on their input gradient.

  Args:
    inputs: [B, ...] real samples.
    logits_fn: Maps `inputs` to logits.
    grad_penalty_cost: Weight of the penalty.

  Returns:
    (logits, cost * mean over B of |d sum(logits) / d inputs_b|^2).
  """
  logits, vjp_fn = jax.vjp(logits_fn, inputs)
  grad = vjp_fn(jnp.ones_like(logits))[0]
  flat = jnp.asarray(grad.reshape((inputs.shape[0], -1)), jnp.float32)
  penalty = jnp.mean(jnp.sum(jnp.square(flat), axis=-1)) * grad_penalty_cost
  return logits, penalty


def _discriminator_loss(logits_real: JTensor, logits_fake: JTensor) -> JTensor:
  """Non-saturating discriminator loss."""
  return (jnp.mean(jax.nn.softplus(-logits_real))
          + jnp.mean(jax.nn.softplus(logits_fake)))


def _generator_loss(logits_fake: JTensor) -> JTensor:
  """Non-saturating generator loss."""
  return jnp.mean(jax.nn.softplus(-logits_fake))


def _ema(value: JTensor, average: JTensor, decay: float) -> JTensor:
  return value * (1 - decay) + average * decay


class VQGANLoss(base_layer.BaseLayer):
  """Generator and discriminator losses of a VQ-GAN.

  Called with `predictions` (`reconstructed`, `logits_real`, `logits_fake`,
  `r1_gradient_penalty`, `quantizer_loss`) and `input_batch.video`; returns
  a NestedMap of scalars: grad_penalty, lecam_loss, d_adversarial_loss,
  g_adversarial_loss, reconstruction_loss, perceptual_loss (0),
  quantizer_loss (0 in eval), d_loss and g_loss. Updates the
  non-trainable `ema_real_pred` and `ema_fake_pred`.

  Attributes:
    g_adversarial_loss_weight: Weight of the generator's adversarial loss.
    reconstruction_loss_weight: Weight of the mean squared reconstruction
      error.
    polyak_decay: Decay of the logit EMAs.
    lecam_weight: Weight of the LeCam regularization.
  """

  g_adversarial_loss_weight: float = 0.1
  reconstruction_loss_weight: float = 5.0
  polyak_decay: float = 0.999
  lecam_weight: float = 0.001

  def setup(self) -> None:
    ema = base_layer.WeightHParams(
        shape=[],
        init=base_layer.WeightInit.Constant(0.0),
        dtype=jnp.float32,
        collections=[base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC],
    )
    self.create_variable('ema_real_pred', ema, trainable=False)
    self.create_variable('ema_fake_pred', ema, trainable=False)

  def lecam_loss(self, real_pred: JTensor, fake_pred: JTensor) -> JTensor:
    """LeCam regularization of the predictions against the stored EMAs."""
    ema_fake = self.get_var('ema_fake_pred')
    ema_real = self.get_var('ema_real_pred')
    return (jnp.mean(jnp.square(jax.nn.relu(real_pred - ema_fake)))
            + jnp.mean(jnp.square(jax.nn.relu(ema_real - fake_pred))))

  def _update_emas(self, logits_real: JTensor, logits_fake: JTensor) -> None:
    decay = self.polyak_decay
    for name, logits in (('ema_fake_pred', logits_fake),
                         ('ema_real_pred', logits_real)):
      self.update_var(
          name, _ema(jnp.mean(logits), self.get_var(name), decay)
      )

  def __call__(
      self, predictions: base_model.Predictions, input_batch: NestedMap
  ) -> NestedMap:
    logits_real = predictions['logits_real']
    logits_fake = predictions['logits_fake']
    self._update_emas(logits_real, logits_fake)
    losses = NestedMap()
    losses.grad_penalty = predictions['r1_gradient_penalty']
    losses.lecam_loss = (
        self.lecam_loss(logits_real, logits_fake) * self.lecam_weight
    )
    losses.d_adversarial_loss = _discriminator_loss(logits_real, logits_fake)
    losses.g_adversarial_loss = (
        _generator_loss(logits_fake) * self.g_adversarial_loss_weight
    )
    diff = jnp.asarray(
        input_batch.video - predictions['reconstructed'], jnp.float32
    )
    losses.reconstruction_loss = (
        jnp.mean(jnp.square(diff)) * self.reconstruction_loss_weight
    )
    losses.perceptual_loss = jnp.array(0.0, dtype=jnp.float32)
    if self.do_eval:
      losses.quantizer_loss = jnp.zeros_like(losses.reconstruction_loss)
    else:
      losses.quantizer_loss = predictions['quantizer_loss']
    losses.d_loss = (
        losses.d_adversarial_loss + losses.grad_penalty + losses.lecam_loss
    )
    losses.g_loss = (
        losses.reconstruction_loss + losses.g_adversarial_loss
        + losses.perceptual_loss + losses.quantizer_loss
    )
    return losses
