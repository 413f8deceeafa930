"""FP8 einsums with delayed scaling, to inject into Pax layers' `einsum_tpl`.

Public: `Fp8EinsumOp`, `Fp8EinsumGatedOp`, `quantized_dot_config`.

  p = pax_fiddle.Config(linears.Linear, input_dims=32, output_dims=64,
                        einsum_tpl=pax_fiddle.Config(Fp8EinsumOp))

Inputs and kernels are quantized to float8_e4m3fn, output gradients to
float8_e5m2, each with a scale computed from the history of its absolute
maxima (variables `*_scale`, `*_amax_history`, collection
OVERWRITE_WITH_GRADIENT: the "gradient" the optimizer applies is the updated
value). The arithmetic is flax's `flax.linen.fp8_ops`: native FP8 matmuls
on GPUs that have them (H100), emulated (quantize-dequantize) elsewhere.
"""

from __future__ import annotations

from flax.linen import fp8_ops
from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor
_E4M3 = jnp.float8_e4m3fn
_E5M2 = jnp.float8_e5m2


def _fp8_meta(layer: base_layer.BaseLayer, suffix: str = '') -> None:
  """Creates the kernel / output-grad (and, without suffix, input) metas."""
  collections = [
      base_layer.WeightHParamsCollection.OVERWRITE_WITH_GRADIENT,
      base_layer.WeightHParamsCollection.DISALLOW_BFLOAT16_CONVERSION,
  ]

  def meta(shape, value):
    return base_layer.WeightHParams(
        shape=shape, init=base_layer.WeightInit.Constant(value),
        dtype=jnp.float32, mesh_shape=layer.mesh_shape,
        tensor_split_dims_mapping=None, collections=list(collections))

  names = ('kernel', 'output_grad') if suffix else (
      'input', 'kernel', 'output_grad')
  for name in names:
    layer.create_variable(f'{name}_amax_history{suffix}',
                          meta([layer.amax_history_length], 0.0))
  for name in names:
    layer.create_variable(f'{name}_scale{suffix}', meta([1], 1.0))


class Fp8EinsumOp(base_layer.BaseLayer):
  """`jnp.einsum(eqn, x, k)` with FP8 operands and delayed scaling.

  Attributes:
    amax_history_length: Steps of absolute maxima kept for the scales.
    use_direct_quant: Quantize straight into the dot (else quantize-
      dequantize the operands around a higher-precision dot).
  """

  amax_history_length: int = 1024
  use_direct_quant: bool = True

  def setup(self) -> None:
    if self.amax_history_length <= 0:
      raise ValueError(
          f'{type(self).__name__}.amax_history_length must be positive, got '
          f'{self.amax_history_length}.')
    _fp8_meta(self)

  def _check(self, x: JTensor, *kernels: JTensor) -> JTensor:
    dtype = self.fprop_dtype
    for k in kernels:
      if k.dtype != dtype:
        raise ValueError(
            f'{type(self).__name__}: kernel dtype must be the fprop_dtype '
            f'{jnp.dtype(dtype).name}, got {k.dtype}.')
    return jnp.asarray(x, dtype)

  def quantized_einsum(
      self, equation: str, x: JTensor, k: JTensor, return_quantized_x: bool
  ) -> JTensor | tuple[JTensor, JTensor]:
    """The quantize-dequantize path (use_direct_quant=False)."""
    t, dtype = self.theta, self.fprop_dtype
    x_qdq = fp8_ops.in_qdq(dtype, _E4M3, x, t.input_scale,
                           t.input_amax_history)
    k_qdq = fp8_ops.in_qdq(dtype, _E4M3, k, t.kernel_scale,
                           t.kernel_amax_history)
    y = jnp.einsum(equation, x_qdq, k_qdq,
                   _dot_general=fp8_ops.dot_general_with_precision)
    y = fp8_ops.out_qdq(dtype, _E5M2, y, t.output_grad_scale,
                        t.output_grad_amax_history)
    return (y, x_qdq) if return_quantized_x else y

  def _direct_dot_general(self, lhs, rhs, dimension_numbers, precision=None,
                          preferred_element_type=None):
    t = self.theta
    return fp8_ops.fp8_scaled_dot_general(
        lhs, rhs, dimension_numbers, precision=precision,
        preferred_element_type=preferred_element_type,
        lhs_scale=t.input_scale, rhs_scale=t.kernel_scale,
        grad_scale=t.output_grad_scale,
        lhs_amax_history=t.input_amax_history,
        rhs_amax_history=t.kernel_amax_history,
        grad_amax_history=t.output_grad_amax_history,
        quantize_compute_type=self.fprop_dtype,
    )

  def __call__(self, equation: str, *args: JTensor) -> JTensor:
    if len(args) != 2:
      raise ValueError(
          f'{type(self).__name__} takes (equation, x, k), got {len(args)} '
          'operands.')
    x, k = args
    x = self._check(x, k)
    if self.use_direct_quant:
      return jnp.einsum(equation, x, k, _dot_general=self._direct_dot_general)
    return self.quantized_einsum(equation, x, k, return_quantized_x=False)


def quantized_dot_config(compute_dtype, q_lhs, lhs_scale, q_rhs, rhs_scale,
                         out_grad_scale, out_grad_amax_history):
  """A decorator making a function a `dot_general` of quantized operands."""

  def decorator(func):
    del func

    def dot_general(lhs, rhs, dimension_numbers, precision=None,
                    preferred_element_type=None):
      return fp8_ops.quantized_dot(
          lhs=lhs, q_lhs=q_lhs, lhs_scale=lhs_scale, rhs=rhs, q_rhs=q_rhs,
          rhs_scale=rhs_scale, out_grad_scale=out_grad_scale,
          out_grad_amax_history=out_grad_amax_history,
          compute_dtype=compute_dtype, dimension_numbers=dimension_numbers,
          precision=precision, preferred_element_type=preferred_element_type)

    return dot_general

  return decorator


class Fp8EinsumGatedOp(Fp8EinsumOp):
  """Two FP8 einsums of one input (a gated FFN): (x.k, x.k_gated)."""

  def setup(self) -> None:
    super().setup()
    _fp8_meta(self, '_gated')

  def _direct(self, equation, x, k, k_gated):
    t, dtype = self.theta, self.fprop_dtype
    q_x, x_scale = fp8_ops.in_q(dtype, _E4M3, x, t.input_scale,
                                t.input_amax_history)
    outputs = []
    for kernel, suffix in ((k, ''), (k_gated, '_gated')):
      q_k, k_scale = fp8_ops.in_q(dtype, _E4M3, kernel,
                                  t['kernel_scale' + suffix],
                                  t['kernel_amax_history' + suffix])
      dot = quantized_dot_config(
          dtype, q_x, x_scale, q_k, k_scale, t['output_grad_scale' + suffix],
          t['output_grad_amax_history' + suffix])(None)
      y = jnp.einsum(equation, x, kernel, _dot_general=dot)
      outputs.append(fp8_ops.out_dq(dq_type=x.dtype, lhs_scale=x_scale,
                                    rhs_scale=k_scale, out=y))
    return tuple(outputs)

  def _qdq(self, equation, x, k, k_gated):
    t, dtype = self.theta, self.fprop_dtype
    y, x_qdq = self.quantized_einsum(equation, x, k, return_quantized_x=True)
    k_qdq = fp8_ops.in_qdq(dtype, _E4M3, k_gated, t.kernel_scale_gated,
                           t.kernel_amax_history_gated)
    y_gated = jnp.einsum(equation, x_qdq, k_qdq,
                         _dot_general=fp8_ops.dot_general_with_precision)
    y_gated = fp8_ops.out_qdq(dtype, _E5M2, y_gated, t.output_grad_scale_gated,
                              t.output_grad_amax_history_gated)
    return y, y_gated

  def __call__(self, equation: str, *args: JTensor) -> tuple[JTensor, JTensor]:
    if len(args) != 3:
      raise ValueError(
          f'{type(self).__name__} takes (equation, x, k, k_gated), got '
          f'{len(args)} operands.')
    x, k, k_gated = args
    x = self._check(x, k, k_gated)
    if self.use_direct_quant:
      return self._direct(equation, x, k, k_gated)
    return self._qdq(equation, x, k, k_gated)
