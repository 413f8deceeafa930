"""Quantization of a layer's einsums: `QuantizationLayer` and its helpers.

Public (Pax's names): `QuantizationLayer` (the mixin-like base of quantized
layers: `set_up_weights`, `quantized_einsum`, `get_quantized_weight`),
`TensorQuantizer`, `create_tensor_quantizer`, `quantized_conv`,
`do_static_activation_quantization`.

A quantized layer declares its weight with `set_up_weights` (float in
TRAINING/MATERIALIZE, int + scale in INFERENCE) and computes with
`quantized_einsum(eqn=..., x=..., w=...)`, which dispatches on
`quantization.mode` and `quantization.quantization_type`.
"""

from __future__ import annotations

from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers.quantization import _tensor_quantizer
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import utils

WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
ActQuantizationParams = quantization_hparams.ActQuantizationParams
QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightQuantizationParams = quantization_hparams.WeightQuantizationParams
TensorQuantizer = _tensor_quantizer.TensorQuantizer
instance_field = base_layer.instance_field


def _is_fp8(dtype: Any) -> bool:
  return jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits == 8


def do_static_activation_quantization(
    act_params: ActQuantizationParams | None,
) -> bool:
  """True when activations use static statistics (`stats_config`)."""
  return act_params is not None and act_params.stats_config is not None


def create_tensor_quantizer(
    name: str,
    quant_params: ActQuantizationParams | WeightQuantizationParams | None,
) -> pax_fiddle.Config[TensorQuantizer]:
  """The config of the `TensorQuantizer` that applies `quant_params`."""
  tq = pax_fiddle.Config(TensorQuantizer, name=name)
  if quant_params is None:
    return tq
  if quant_params.override_quantizer_cls is not None:
    tq.cls = quant_params.override_quantizer_cls
  tq.precision = quant_params.precision
  tq.stop_scale_gradient = quant_params.stop_scale_gradient
  tq.unsigned_int_bounds = quant_params.unsigned_int_bounds
  if isinstance(quant_params, ActQuantizationParams):
    tq.use_symmetric = quant_params.symmetric
  if isinstance(quant_params, WeightQuantizationParams):
    for field in ('min_clipping', 'num_optimize_clipping', 'add_scale_eps',
                  'use_symmetric', 'quant_loss_weight', 'kurt_loss_weight',
                  'kurt', 'optimize_clipping_per_channel', 'sub_channels'):
      setattr(tq, field, getattr(quant_params, field))
    coeff = quant_params.clipping_coeff
    tq.clipping_coeff = None if coeff == 1.0 else coeff
  return tq


class QuantizationLayer(base_layer.BaseLayer):
  """Base of quantized layers: weights, quantizers and the quantized einsum.

  With `quantization=None` it behaves as the float layer.

  Attributes:
    quantization: The layer's quantization (default: PTQ inference, int8).
  """

  quantization: QuantizationParams | None = instance_field(QuantizationParams)
  # The weight dim along which int4 values are packed (subclasses set it).
  _PACK_4BIT_DIM = None

  def create_tensor_quantizers(self) -> None:
    """Children `act_quantizer` and `weight_quantizer` (AQT)."""
    q = self.quantization
    self.create_child('act_quantizer', create_tensor_quantizer(
        'act_quantizer', q.act_params if q else None))
    self.create_child('weight_quantizer', create_tensor_quantizer(
        'weight_quantizer', q.weight_params if q else None))

  def _do_static_activation_quantization(self) -> bool:
    return bool(self.quantization) and do_static_activation_quantization(
        self.quantization.act_params
    )

  def _packs_int4(self) -> bool:
    wp = self.quantization.weight_params
    if wp.precision == 4 and wp.use_int4_packed_weights:
      if self._PACK_4BIT_DIM is None:
        raise ValueError(
            f'{type(self).__name__}: weight_params.use_int4_packed_weights '
            'needs the class to set _PACK_4BIT_DIM (or set '
            'use_int4_packed_weights=False).'
        )
      return True
    return False

  def _create_inference_weight(self, weight_name, weight_params, scale_shape,
                               scale_hparams):
    q = self.quantization
    dtype = q.weight_params.dtype
    if q.quantization_type == QuantizationType.FR:
      raise NotImplementedError(
          'FR quantization is not supported yet for inference.'
      )
    if self._packs_int4():
      dtype = q.weight_params.int4_packed_weights_container_dtype
      factor = 2 if dtype == jnp.int8 else 8
      weight_params.shape = utils.get_packed_shape(
          weight_params.shape, self._PACK_4BIT_DIM, packing_factor=factor
      )
    if self._do_static_activation_quantization():
      raise NotImplementedError(
          'Static activation quantization is not supported yet.'
      )
    if _is_fp8(dtype):
      dtype = jnp.int8  # Float8 weights are stored bitcast to int8.
    self.create_quantized_variable(
        weight_name, weight_params, scale_shape, scale_hparams=scale_hparams,
        dtype=dtype, use_symmetric=q.weight_params.use_symmetric,
    )

  def set_up_weights(
      self,
      *,
      weight_name: str,
      weight_params: WeightHParams,
      scale_shape: list[int] | None = None,
      scale_hparams: WeightHParams | None = None,
  ) -> None:
    """Creates the weight (float or int + scale by mode) and quantizers."""
    scale_shape = list(scale_shape or [])
    q = self.quantization
    if not q:
      self.create_variable(weight_name, weight_params)
      return
    wp = q.weight_params
    if utils.dtype_to_bits(wp.dtype) < wp.precision:
      raise ValueError(
          f'{type(self).__name__}: quantization.weight_params.dtype '
          f'{jnp.dtype(wp.dtype).name} cannot hold precision={wp.precision} '
          'bits.'
      )
    if q.mode == QuantizationMode.INFERENCE:
      self._create_inference_weight(
          weight_name, weight_params, scale_shape, scale_hparams
      )
    elif q.mode == QuantizationMode.CALIB:
      if q.quantization_type != QuantizationType.FR:
        raise ValueError('QuantizationMode.CALIB needs QuantizationType.FR.')
      self.create_variable('framestat', WeightHParams(
          shape=[1], init=base_layer.WeightInit.Constant(0),
          dtype=jnp.bfloat16), trainable=False)
      self.create_variable(weight_name, weight_params)
    else:
      self.create_variable(weight_name, weight_params)
    if q.quantization_type == QuantizationType.AQT:
      self.create_tensor_quantizers()
    if (q.mode == QuantizationMode.TRAINING
        and self._do_static_activation_quantization()):
      raise NotImplementedError(
          'Static activation quantization is not supported yet.'
      )
    if wp.use_step_count:
      self.create_variable('step_count', WeightHParams(
          shape=[], init=base_layer.WeightInit.Constant(0), dtype=jnp.int32),
                           trainable=False)

  @nn.nowrap
  def get_quantized_weight(
      self, name: str, use_symmetric: bool = True
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """(int weight, scale, zero point or None), int4 unpacked."""
    q_w, q_s, zp = super().get_quantized_weight(name, use_symmetric)
    if self.quantization is None:
      raise ValueError(
          f'{type(self).__name__}.get_quantized_weight: the layer has no '
          'quantization config; serving a quantized model needs one.'
      )
    if self._packs_int4():
      q_w = utils.unpack_4bit(
          q_w, self._PACK_4BIT_DIM, self.quantization.weight_params.dtype
      )
    if not py_utils.is_tpu() and q_w.dtype in utils.INT4_TYPES:
      q_w = q_w.astype(jnp.int8)  # (u)int4 only converts on CPU/GPU.
    return q_w, q_s, zp

  def _inference_einsum(self, eqn, x, weight_name, scale_eqn, zp_eqn,
                        swap_xw):
    q = self.quantization
    if q.quantization_type == QuantizationType.FR:
      raise NotImplementedError(
          'FR quantization is not supported yet for inference.'
      )
    w, s, zp = self.get_quantized_weight(
        weight_name, use_symmetric=q.weight_params.use_symmetric
    )
    scale_act = zp_act = None
    ap = q.act_params
    if do_static_activation_quantization(ap):
      x = x.astype(jnp.int8)  # Headroom benchmark only.
      logging.info('Static activation quantization is not supported yet.')
    elif ap is not None:
      x, scale_act, zp_act = operations.reduce_einsum_activation_precision(
          eqn, x, bits=ap.precision, per_channel=ap.per_channel,
          symmetric=ap.symmetric, percentile=ap.clipping_coeff,
      )
      if ap.precision <= 8 and ap.symmetric:
        x = x.astype(jnp.int8)
    if _is_fp8(q.weight_params.dtype):
      w = jax.lax.bitcast_convert_type(w, q.weight_params.dtype)
      w = w.astype(jnp.bfloat16)
    return operations.einsum(
        eqn, x, w, s, zp=zp, scale_act=scale_act, zp_act=zp_act,
        scale_eqn=scale_eqn, zp_eqn=zp_eqn, swap_xw=swap_xw,
    )

  def _training_einsum(self, eqn, x, w, step_count):
    q = self.quantization
    qtype = q.quantization_type
    if qtype == QuantizationType.AQT:
      if not getattr(self.act_quantizer, 'use_symmetric', True):
        raise NotImplementedError(
            'Asymmetric activation quantization is not supported for AQT.'
        )
      return operations.aqt_einsum(
          eqn, x, w, lhs_quantizer=self.act_quantizer,
          rhs_quantizer=self.weight_quantizer,
      )
    wp, ap = q.weight_params, q.act_params
    if qtype == QuantizationType.FQ:
      if ap is not None:
        x = operations.fakequant_activation(
            x, bits=ap.precision, eqn=eqn, per_channel=ap.per_channel,
            symmetric=ap.symmetric, percentile=ap.clipping_coeff,
        )
      w = operations.fakequant_einsum(
          eqn, w, bits=wp.precision, use_symmetric=wp.use_symmetric,
          calculation_dtype=wp.calculation_dtype, block_size=wp.block_size,
          quant_method=wp.quant_method,
      )
      out = jnp.einsum(eqn, x, w)
      if ap is not None and ap.fp16:
        out = operations.clip_to_fp16(out)
      return out
    if qtype == QuantizationType.FQ_VN:
      w = operations.fakequant_vn(
          eqn, w, self.next_prng_key(), wp, step_count, self.do_eval,
          bits=wp.precision, use_symmetric=wp.use_symmetric,
      )
    return jnp.einsum(eqn, x, w)

  def quantized_einsum(
      self,
      *,
      eqn: str,
      x: JTensor,
      w: JTensor,
      reshape: list[int] | None = None,
      weight_name: str = 'w',
      scale_eqn: str | None = None,
      zp_eqn: str | None = None,
      swap_xw: bool = False,
  ) -> JTensor:
    """einsum(eqn, x, w) as the layer's quantization mode and type say.

    Args:
      eqn: The einsum of activation and weight.
      x: The activation.
      w: The float weight (ignored in INFERENCE, which reads `weight_name`).
      reshape: Reshape of the float weight before the einsum.
      weight_name: The quantized variable read in INFERENCE.
      scale_eqn: Custom rescaling einsum (INFERENCE).
      zp_eqn: Custom zero point einsum (INFERENCE).
      swap_xw: einsum(eqn, w, x) instead (INFERENCE or no quantization).

    Returns:
      The einsum's result.
    """
    q = self.quantization
    if not q:
      if reshape:
        w = jnp.reshape(w, reshape)
      return jnp.einsum(eqn, w, x) if swap_xw else jnp.einsum(eqn, x, w)
    step_count = None
    if q.weight_params.use_step_count:
      step_count = self.get_var('step_count')
      if not self.do_eval:
        self.update_var('step_count', step_count + 1)
      self.add_summary('step_count', step_count)
    if q.mode == QuantizationMode.INFERENCE:
      return self._inference_einsum(
          eqn, x, weight_name, scale_eqn, zp_eqn, swap_xw
      )
    if q.mode == QuantizationMode.QT:
      return operations.custom_einsum(
          x, w, eqn=eqn, prng_key=self.next_prng_key(),
          params=quantization_hparams.QuantizedTrainingParams(),
      )
    if q.mode == QuantizationMode.CALIB:
      stat = self.get_var('framestat')
      self.update_var(
          'framestat', jnp.maximum(jnp.max(x), stat).astype(jnp.bfloat16)
      )
      return jnp.einsum(
          eqn, jax.lax.stop_gradient(x), jax.lax.stop_gradient(w)
      )
    if swap_xw:
      raise ValueError('Swapping xw is only supported in inference mode.')
    if reshape:
      w = jnp.reshape(w, reshape)
    return self._training_einsum(eqn, x, w, step_count)


def quantized_conv(
    layer: Any,
    x: JTensor,
    padding: Any,
    dimension_numbers: tuple[str, ...],
    feature_group_count: int,
) -> JTensor:
  """Convolution of `layer` with its int weight (INFERENCE only).

  Args:
    layer: A quantized conv layer (fields `filter_stride`, `dilations`).
    x: The input.
    padding: Padding of `lax.conv_general_dilated`.
    dimension_numbers: Its dimension numbers.
    feature_group_count: Its feature groups.

  Returns:
    The convolution.
  """
  q = layer.quantization
  if not q.weight_params.use_symmetric:
    raise ValueError('Conv supports only symmetric weight quantization.')
  if q.mode != QuantizationMode.INFERENCE:
    raise NotImplementedError('QAT not supported for conv.')
  w, s, _ = layer.get_quantized_weight('w')
  if do_static_activation_quantization(q.act_params):
    raise NotImplementedError(
        'Static activation quantization is not supported yet.'
    )
  if q.act_params is not None:
    if not q.act_params.symmetric:
      raise NotImplementedError(
          'Asymmetric activation quantization '
          'is not supported yet for quantized_conv.'
      )
    x, act_scale, _ = operations.reduce_precision_activation(
        x, bits=q.act_params.precision,
        percentile=q.act_params.clipping_coeff,
    )
    s = jnp.squeeze(act_scale) * s
  if _is_fp8(q.weight_params.dtype):
    w = jax.lax.bitcast_convert_type(w, q.weight_params.dtype)
    w = w.astype(jnp.bfloat16)
  out = jax.lax.conv_general_dilated(
      lhs=x, rhs=w.astype(x.dtype), window_strides=layer.filter_stride,
      padding=padding, rhs_dilation=layer.dilations,
      dimension_numbers=dimension_numbers,
      feature_group_count=feature_group_count,
  )
  return out * s
