"""Linear and Bias layers that follow the ghost-norm protocol (see `base`).

Public names: make_last_dim_projector, LinearGhostNorm, bias_add,
BiasGhostNorm.
"""

from typing import Callable

import jax
import jax.numpy as jnp
from paxml.ghostnorm import _norms
from paxml.ghostnorm import base
from praxis import pytypes
from praxis.layers import base_ops
from praxis.layers import linears

JTensor = pytypes.JTensor


def make_last_dim_projector(
    einsum: base_ops.EinsumOp | Callable[..., JTensor],
) -> Callable[[JTensor, JTensor], JTensor]:
  """`(x, w) -> x @ w` over the last dim, with the ghost-norm backward rule.

  Args:
    einsum: The einsum op that computes the projection.

  Returns:
    A function of (inputs [..., in], weights [in, out] or ParamWithAux).
  """

  def project(x, w):
    return einsum('...y,yz->...z', x, w)

  @jax.custom_vjp
  def projector(inputs, weights):
    return project(inputs, base.get_param(weights))

  def forward(inputs, weights):
    w = base.get_param(weights)
    out, vjp_fn = jax.vjp(project, inputs, w)
    return out, (vjp_fn, inputs, base.get_aux(weights))

  def backward(residuals, g):
    vjp_fn, inputs, scales = residuals
    d_inputs, d_w = vjp_fn(g)
    if scales is None:
      return d_inputs, d_w
    weighted_g = _norms.weight_per_example(scales, g)
    _, d_w = vjp_fn(weighted_g)
    # The loss is a batch mean: one example's own gradient is batch times its
    # share of the mean.
    sq_norms = _norms.projection_sq_norms(
        inputs, weighted_g * weighted_g.shape[0]
    )
    return d_inputs, base.ParamWithAux(d_w, sq_norms)

  projector.defvjp(forward, backward)
  return projector


class LinearGhostNorm(linears.Linear):
  """`linears.Linear` whose weight gradient also yields per-example norms."""

  def setup(self) -> None:
    super().setup()
    self._projector = make_last_dim_projector(self.einsum)

  def __call__(self, inputs: JTensor) -> JTensor:
    return self._projector(inputs, self.theta.w)


@jax.custom_vjp
def bias_add(inputs: JTensor, bias) -> JTensor:
  """`inputs + bias` with the ghost-norm backward rule for `bias`."""
  return inputs + base.get_param(bias)


def _bias_add_forward(inputs, bias):
  return inputs + base.get_param(bias), base.get_aux(bias)


def _bias_add_backward(scales, g):
  leading = tuple(range(g.ndim - 1))
  if scales is None:
    return g, jnp.sum(g, axis=leading)
  weighted_g = _norms.weight_per_example(scales, g)
  # Each example's own gradient (batch times its share of the mean loss).
  per_example = jnp.sum(weighted_g, axis=tuple(range(1, g.ndim - 1)))
  per_example = per_example * g.shape[0]
  sq_norms = jnp.sum(per_example * per_example, axis=1)
  d_bias = jnp.sum(weighted_g, axis=leading)
  return g, base.ParamWithAux(d_bias, sq_norms)


bias_add.defvjp(_bias_add_forward, _bias_add_backward)


class BiasGhostNorm(linears.Bias):
  """`linears.Bias` whose gradient also yields per-example norms."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return bias_add(inputs, self.theta.b)
