"""Stochastic gradient functions: how a learner turns a loss into gradients.

Public names: GradAuxInfo, BaseStochasticGradient, StandardGradient, and
the differentially private variants (DPGradAuxInfo, DpSgdStochasticGradient,
MicrobatchDpSgdStochasticGradient, AugMulDpSgdStochasticGradient,
PerLayerDpSgdStochasticGradient, GhostClippingDpSgdStochasticGradient,
PercoreClippedDpSgdGradient) from the private sibling `_dp_sgf`.

A loss function takes `(vars_with_grad, (vars_without_grad, inputs),
prng_key)` and returns `(loss, GradAuxInfo)`; a gradient function returns
`((loss, aux), grads)` with grads shaped like `vars_with_grad`.
"""

from __future__ import annotations

import abc
from typing import Any, Callable

from flax import struct
import jax
from praxis import base_hyperparams


@struct.dataclass
class GradAuxInfo:
  """What a loss function returns beside the loss.

  Attributes:
    aux_info: Anything (metrics, updated variables, summaries, ...).
    loss_weight: The weight of the loss (None where no single weight applies).
  """

  aux_info: Any
  loss_weight: Any = 1.0


class BaseStochasticGradient(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta):
  """Computes a loss and its gradients."""

  def process_aux_info(self, aux_info: GradAuxInfo) -> GradAuxInfo:
    """Post-processes the loss function's auxiliary output (identity)."""
    return aux_info

  @abc.abstractmethod
  def grad_fn(
      self,
      loss_fn: Callable[..., tuple[Any, GradAuxInfo]],
      mdl_vars_grad: Any,
      mdl_vars_nograd_and_inputs: tuple[Any, Any],
      prng_key: jax.Array,
  ) -> tuple[tuple[Any, GradAuxInfo], Any]:
    """((loss, aux), gradients w.r.t. `mdl_vars_grad`).

    Args:
      loss_fn: `loss_fn(mdl_vars_grad, mdl_vars_nograd_and_inputs, key)`.
      mdl_vars_grad: The variables to differentiate.
      mdl_vars_nograd_and_inputs: The other variables and the batch.
      prng_key: Randomness for the loss function.
    """


class StandardGradient(BaseStochasticGradient):
  """The plain gradient, `jax.value_and_grad`."""

  def grad_fn(self, loss_fn, mdl_vars_grad, mdl_vars_nograd_and_inputs,
              prng_key):
    value_and_grad = jax.value_and_grad(loss_fn, has_aux=True, allow_int=True)
    (loss, aux), grads = value_and_grad(
        mdl_vars_grad, mdl_vars_nograd_and_inputs, prng_key)
    return (loss, self.process_aux_info(aux)), grads


# The DP-SGD variants live in a private sibling that builds on the classes
# above, so they are imported last.
from paxml import _dp_sgf  # pylint: disable=g-import-not-at-top,wrong-import-position

DPGradAuxInfo = _dp_sgf.DPGradAuxInfo
DpSgdStochasticGradient = _dp_sgf.DpSgdStochasticGradient
MicrobatchDpSgdStochasticGradient = _dp_sgf.MicrobatchDpSgdStochasticGradient
AugMulDpSgdStochasticGradient = _dp_sgf.AugMulDpSgdStochasticGradient
PerLayerDpSgdStochasticGradient = _dp_sgf.PerLayerDpSgdStochasticGradient
GhostClippingDpSgdStochasticGradient = (
    _dp_sgf.GhostClippingDpSgdStochasticGradient)
PercoreClippedDpSgdGradient = _dp_sgf.PercoreClippedDpSgdGradient
