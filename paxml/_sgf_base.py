"""The gradient-function interface, behind `paxml.sgf`.

Public names (re-exported by `sgf`): GradAuxInfo, BaseStochasticGradient,
StandardGradient.
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
