"""Op layers: small wrappers that other layers call instead of raw jnp ops.

Public names: EinsumOp, EinsumGatedOp, ArrayLookup.

A layer that holds its einsum (or lookup) as a child, built from a template
field, lets a config swap in another implementation (a quantized or sparse
einsum, say) without forking the layer:

  class Linear(base_layer.BaseLayer):
    einsum_tpl: pax_fiddle.Config[base_ops.EinsumOp] = (
        base_layer.template_field(base_ops.EinsumOp))

    def setup(self):
      self.create_child('einsum', self.einsum_tpl.clone())

    def __call__(self, x):
      return self.einsum('...y,yz->...z', x, self.theta.w)

The default ops have no variables and no fields of their own.
"""

import jax.numpy as jnp
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor


def gated_einsum(
    equation: str, x: JTensor, kernel: JTensor, gate_kernel: JTensor
) -> tuple[JTensor, JTensor]:
  """The same einsum of `x` with two kernels: (x . kernel, x . gate_kernel)."""
  return (
      jnp.einsum(equation, x, kernel),
      jnp.einsum(equation, x, gate_kernel),
  )


class EinsumOp(base_layer.BaseLayer):
  """`jnp.einsum(equation, *operands)` as a replaceable layer."""

  def __call__(self, equation: str, *args: JTensor) -> JTensor:
    return jnp.einsum(equation, *args)


class EinsumGatedOp(base_layer.BaseLayer):
  """Two einsums sharing one input, as in a gated feed-forward layer.

  Called as `op(equation, x, kernel, gate_kernel)`; returns the pair
  `(einsum(equation, x, kernel), einsum(equation, x, gate_kernel))`.
  """

  def __call__(
      self, equation: str, *args: JTensor
  ) -> tuple[JTensor, JTensor]:
    if len(args) != 3:
      raise ValueError(
          f'{type(self).__name__} ({self.name}) takes three operands '
          f'(x, kernel, gate_kernel); got {len(args)}.'
      )
    return gated_einsum(equation, *args)


class ArrayLookup(base_layer.BaseLayer):
  """`x[idx]` (as used by embedding lookups) as a replaceable layer."""

  def __call__(self, x: JTensor, idx: JTensor) -> JTensor:
    return x[idx]
