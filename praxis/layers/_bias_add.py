"""`inputs + bias`, with a low-precision bias's gradient as a contraction.

A layer's bias `b` [*trailing] is added to every leading position of its
output [*lead, *trailing]; the gradient of `b` is the output's gradient
summed over the leading positions. Differentiating the plain broadcast add
leaves that sum to XLA as a reduction in the output's dtype. In bfloat16 on
XLA:CPU that reduction is slow and inexact: at the TinyLm's softmax (32000
classes over 1024 positions) it compiled to a windowed reduction
(`reduce-window`) that took 133 ms of a 290 ms train step, and a test
gradient came out hundreds of bfloat16 steps from the exact sum
(docs/performance.md).

For a bfloat16 or float16 output, `add_bias` computes the same forward
value (`inputs + bias`, bit for bit) and defines its tangent as
`d_inputs + ones[*lead] (outer) d_bias`. Reverse mode differentiates the
transpose of that outer product: the contraction `ones[*lead] . g`, a dot,
which accumulates in float32 (within one bfloat16 step of the exact sum)
and ran faster than the reduction at every size measured. In float32 the
plain add's reduction is exact enough and faster at all but the largest
sizes, so a float32 output keeps the plain add. Forward mode (`jax.jvp`,
`jax.jacfwd`) and higher-order derivatives work as for the plain add.
"""

from __future__ import annotations

import jax
from jax import numpy as jnp

from praxis import pytypes

JTensor = pytypes.JTensor


def add_bias(inputs: JTensor, bias: JTensor) -> JTensor:
  """`inputs + bias`, for a bias over the trailing dimensions of `inputs`.

  Args:
    inputs: [*lead, *trailing].
    bias: [*trailing], with at least one leading dimension left in `inputs`.
      Anything else (a scalar, a bias that broadcasts in another way), and
      any sum that is not a 16-bit float, is added as `inputs + bias`.

  Returns:
    `inputs + bias`, the same value as the plain add.
  """
  rank = jnp.ndim(bias)
  shape = jnp.shape(inputs)
  if not 0 < rank < len(shape) or tuple(shape[-rank:]) != jnp.shape(bias):
    return inputs + bias
  out_dtype = jnp.result_type(inputs, bias)
  if not (jnp.issubdtype(out_dtype, jnp.floating)
          and jnp.dtype(out_dtype).itemsize == 2):
    return inputs + bias
  return _add_trailing(inputs, bias)


@jax.custom_jvp
def _add_trailing(inputs: JTensor, bias: JTensor) -> JTensor:
  return inputs + bias


@_add_trailing.defjvp
def _add_trailing_jvp(primals, tangents):
  inputs, bias = primals
  d_inputs, d_bias = tangents
  lead = jnp.shape(inputs)[: jnp.ndim(inputs) - jnp.ndim(bias)]
  ones = jnp.ones(lead, jnp.result_type(d_bias))
  # The outer product: d_bias repeated at every leading position (exact).
  spread = jax.lax.dot_general(ones, d_bias, (((), ()), ((), ())))
  return inputs + bias, d_inputs + spread
