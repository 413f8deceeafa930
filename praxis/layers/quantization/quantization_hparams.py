"""Hyper-parameters of quantization: types, modes and per-tensor settings.

Public: `QuantizationType`, `QuantizationMode`, `TransformerLayer`,
`ActQuantizationParams`, `WeightQuantizationParams`,
`QuantizedTrainingParams`, `QuantizationParams` (Pax's names and fields).

A layer with `quantization=QuantizationParams(...)` trains with fake quant
(`quantization_type=FQ`, `mode=TRAINING`), is turned into integer weights and
scales by `MATERIALIZE`, and serves those with `mode=INFERENCE`.
"""

from __future__ import annotations

import dataclasses
import enum

import jax.numpy as jnp

# Precisions (bits) a weight or activation may be quantized to: 1..32.
MIN_PRECISION, MAX_PRECISION = 1, 32


@enum.unique
class QuantizationType(str, enum.Enum):
  """How quantization is applied.

  PTQ: post-training quantization. AQT: accurate quantized training (QAT
  through `TensorQuantizer`s). FQ: fake quantization (QAT). FQ_VN: variational
  noise in place of quantization noise. FR: calibration based quantization.
  """

  PTQ = 'ptq'
  AQT = 'aqt'
  FQ = 'fq'
  FQ_VN = 'fq_vn'
  FR = 'fr'


@enum.unique
class QuantizationMode(str, enum.Enum):
  """Where a quantized layer is in its life.

  TRAINING: float weights, quantization simulated. MATERIALIZE: float weights
  that `quantize_weight` turns into integer weights and scales. INFERENCE:
  integer weights and scales are the variables. QT: quantized training with
  custom gradients. CALIB: calibration statistics are collected.
  """

  TRAINING = 'training'
  MATERIALIZE = 'materialize'
  INFERENCE = 'inference'
  QT = 'qt'
  CALIB = 'calib'


@enum.unique
class TransformerLayer(str, enum.Enum):
  """Parts of a transformer, for mixed precision rewrites."""

  LINEAR = 'linear'
  LINEAR_ACT = 'linear_activation'
  ATTENTION = 'attention'
  ATTENTION_ACT = 'attention_activation'
  EMBEDDING_SOFTMAX = 'embedding_softmax'
  EMBEDDING_SOFTMAX_ACT = 'embedding_softmax_activation'
  EMBEDDING_NGRAMMER = 'embedding_ngrammer'


def _check_precision(owner: str, precision: int | None) -> None:
  if precision is None:
    return
  if (
      isinstance(precision, bool)
      or not isinstance(precision, int)
      or not MIN_PRECISION <= precision <= MAX_PRECISION
  ):
    raise ValueError(
        f'{owner}.precision must be an int number of bits in '
        f'[{MIN_PRECISION}, {MAX_PRECISION}], got {precision!r}.'
    )


@dataclasses.dataclass
class ActQuantizationParams:
  """Activation quantization settings.

  Attributes:
    precision: Bits of the quantized activation.
    unsigned_int_bounds: Clip to [0, 2**precision - 1] instead of signed.
    clipping_coeff: Fraction of the min/max range kept (1.0: hard min/max).
    stop_scale_gradient: Stop the gradient through the scale.
    fp16: Clip the output to float16's range instead (QAT).
    per_channel: One scale per token (else one per tensor).
    symmetric: Symmetric (else with a zero point).
    override_quantizer_cls: A `TensorQuantizer` subclass to use instead.
  """

  precision: int = 8
  unsigned_int_bounds: bool = False
  clipping_coeff: float = 1.0
  # Static activation statistics; None: dynamic quantization.
  stats_config = None
  stop_scale_gradient: bool = False
  fp16: bool = False
  per_channel: bool = True
  symmetric: bool = True
  override_quantizer_cls: type | None = None

  def __post_init__(self):
    _check_precision('ActQuantizationParams', self.precision)


@dataclasses.dataclass
class WeightQuantizationParams:
  """Weight quantization settings.

  Attributes:
    precision: Bits of the quantized weight.
    unsigned_int_bounds: Clip to [0, 2**precision - 1] instead of signed.
    clipping_coeff: Fraction of the min/max range kept (1.0: hard min/max).
    stop_scale_gradient: Stop the gradient through the scale (also for VN).
    min_clipping: Lowest clipping value searched, in (0, 1).
    num_optimize_clipping: Number of clipping values searched.
    use_symmetric: Symmetric (else with a zero point).
    add_scale_eps: Add epsilon to the scale (else a zero scale becomes 1).
    dequant_upfront: Dequantize the weight before the matmul.
    dtype: Storage dtype of the quantized weight.
    quant_loss_weight: Weight of the quantization error auxiliary loss.
    optimize_clipping_per_channel: Search the clipping per channel.
    sub_channels: Number of sub channels of channel-wise quantization.
    calculation_dtype: Dtype of the quantization arithmetic.
    use_step_count: Keep a `step_count` non-trainable variable.
    use_int4_packed_weights: Pack int4 values into
      `int4_packed_weights_container_dtype` words.
    int4_packed_weights_container_dtype: int32 (8 values) or int8 (2 values).
    vn_scale: Scale of the variational noise.
    vn_start_step: Step from which the noise is added.
    vn_noise_type: 'uniform' or 'normal'.
    vn_weight_norm_type: 'L2', 'Linf' or 'PerChannelLinf'.
    kurt_loss_weight: Weight of the kurtosis auxiliary loss.
    kurt: Kurtosis target (1.8: uniform distribution).
    block_size: Sub-channel block size along the contraction (0: off).
    quant_method: 'default' (min/max), 'bin' or 'bin_norm' (binarization).
    override_quantizer_cls: A `TensorQuantizer` subclass to use instead.
  """

  precision: int = 8
  unsigned_int_bounds: bool = False
  clipping_coeff: float = 1.0
  stop_scale_gradient: bool = False
  min_clipping: float | None = None
  num_optimize_clipping: int | None = None
  use_symmetric: bool = True
  add_scale_eps: bool | None = True
  dequant_upfront: bool = False
  dtype: jnp.dtype = jnp.int8
  quant_loss_weight: float | None = None
  optimize_clipping_per_channel: bool = False
  sub_channels: int | None = None
  calculation_dtype: jnp.dtype = jnp.float32
  use_step_count: bool = False
  use_int4_packed_weights: bool = True
  int4_packed_weights_container_dtype: jnp.dtype = jnp.int32
  vn_scale: float | None = None
  vn_start_step: int = 0
  vn_noise_type: str = 'uniform'
  vn_weight_norm_type: str = 'PerChannelLinf'
  kurt_loss_weight: float | None = None
  kurt: float = 1.8
  block_size: int = 0
  quant_method: str = 'default'
  override_quantizer_cls: type | None = None

  def __post_init__(self):
    _check_precision('WeightQuantizationParams', self.precision)
    if self.quant_method not in ('default', 'bin', 'bin_norm'):
      raise ValueError(
          "WeightQuantizationParams.quant_method must be 'default', 'bin' or "
          f"'bin_norm', got {self.quant_method!r}."
      )
    if self.block_size < 0:
      raise ValueError(
          'WeightQuantizationParams.block_size must be >= 0 (0: off), got '
          f'{self.block_size}.'
      )


@dataclasses.dataclass
class QuantizedTrainingParams:
  """Quantized training (`QuantizationMode.QT`) settings.

  Attributes:
    bits_fwd: Bits of the forward einsum operands (None: no quantization).
    bits_bwd: Bits of the backward einsum operands (None: no quantization).
    cast_bits_fwd: Only cast the forward operands to this many bits.
    cast_bits_bwd: Only cast the backward operands to this many bits.
    random_rounding_bwd: Stochastic rounding in the backward pass.
    einsum_output_dtype: Accumulation dtype of the einsums.
    einsum_scale_output_dtype: Dtype of the scale multiplications.
    bwd_output_dtype: Cast of the outputs, if set.
  """

  bits_fwd: int | None = 8
  bits_bwd: int | None = 8
  cast_bits_fwd: int | None = None
  cast_bits_bwd: int | None = None
  random_rounding_bwd: bool = True
  einsum_output_dtype: jnp.dtype = jnp.bfloat16
  einsum_scale_output_dtype: jnp.dtype = jnp.float32
  bwd_output_dtype: jnp.dtype | None = None


@dataclasses.dataclass
class QuantizationParams:
  """Quantization of one layer.

  Attributes:
    quantization_type: How quantization is applied.
    mode: Where the layer is in its life (training, materialize, inference).
    act_params: Activation quantization; None: float activations.
    weight_params: Weight quantization.
    quantized_training_params: Settings of `QuantizationMode.QT`.
  """

  quantization_type: QuantizationType = QuantizationType.PTQ
  mode: QuantizationMode = QuantizationMode.INFERENCE
  act_params: ActQuantizationParams | None = None
  weight_params: WeightQuantizationParams = dataclasses.field(
      default_factory=WeightQuantizationParams
  )
  quantized_training_params: QuantizedTrainingParams = dataclasses.field(
      default_factory=QuantizedTrainingParams
  )
