"""Quantized `Conv2D` (the twin of `praxis.layers.convolutions.Conv2D`).

Public: `Conv2D`. The filter [H, W, I, O] is quantized per output channel.
"""

from __future__ import annotations

from praxis import base_layer
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import convolutions
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor

_CONTRACT_DIMS = [0, 1, 2]  # H, W, I of an HWIO filter.


class Conv2D(convolutions.Conv2D, quantizer.QuantizationLayer):
  """Conv2D with an int filter in INFERENCE (SAME/VALID/causal padding)."""

  _PACK_4BIT_DIM = 0

  def setup(self) -> None:
    convolutions._check_conv_config(self, 2)  # pylint: disable=protected-access
    self.set_up_weights(
        weight_name='w',
        weight_params=WeightHParams(
            shape=list(self.filter_shape), mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
            dtype=self.dtype, init=self.kernel_init),
        scale_shape=[self.filter_shape[-1]],
    )
    if self.bias:
      self.create_variable('b', WeightHParams(
          shape=[self.filter_shape[-1]], init=self.bias_init,
          dtype=self.dtype))
    wn = self.weight_norm_tpl.clone().set(dim=self.filter_shape[-1])
    self.create_child('weight_norm', wn)

  def _groups(self, inputs: JTensor) -> int:
    in_channels, filter_in = inputs.shape[3], self.filter_shape[2]
    if in_channels % filter_in:
      raise ValueError(
          f'Input features {in_channels} must be a multiple of filter input '
          f'dim {filter_in} (inputs {inputs.shape}, filter '
          f'{tuple(self.filter_shape)}).'
      )
    groups = in_channels // filter_in
    if self.filter_shape[3] % groups:
      raise ValueError(
          f'Filter output dim {self.filter_shape[3]} must be a multiple of '
          f'feature group count {groups}.'
      )
    return groups

  def __call__(self, inputs: JTensor) -> JTensor:
    """Convolves `inputs` [B, H, W, C_in] to [B, H', W', C_out]."""
    q = self.quantization
    if q is None or q.mode != QuantizationMode.INFERENCE:
      if q is not None and q.quantization_type == QuantizationType.FQ:
        return self._fake_quant_call(inputs)
      return super().__call__(inputs)
    padding = convolutions.conv_padding(
        self.filter_shape[:-2], self.dilations, self.padding,
        self.tf_equivalent_padding, self.is_causal,
    )
    groups = self._groups(inputs)
    inputs = self._shard(inputs.astype(self.fprop_dtype))
    out = quantizer.quantized_conv(
        self, inputs, padding, ('NHWC', 'HWIO', 'NHWC'), groups
    )
    out = self._shard(out)
    return _bias_add.add_bias(out, self.theta.b) if self.bias else out

  def _fake_quant_call(self, inputs: JTensor) -> JTensor:
    wp = self.quantization.weight_params
    padding = convolutions.conv_padding(
        self.filter_shape[:-2], self.dilations, self.padding,
        self.tf_equivalent_padding, self.is_causal,
    )
    inputs = self._shard(inputs.astype(self.fprop_dtype))
    w = self.weight_norm(self.theta.w)
    # 'HWIO' filter: quantized per output channel O.
    w = operations.fakequant_einsum(
        'nhwi,hwio->nhwo', w, bits=wp.precision,
        use_symmetric=wp.use_symmetric,
        calculation_dtype=wp.calculation_dtype,
    )
    out = convolutions.conv(inputs, w, self.filter_stride, padding,
                            self.dilations)
    out = self._shard(out)
    return _bias_add.add_bias(out, self.theta.b) if self.bias else out

  def quantize_weight(self) -> NestedJTensor:
    """The int filter (per output channel), its scale and the bias."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    if not q.weight_params.use_symmetric:
      raise ValueError(
          'Conv2D supports only symmetric weight quantization '
          '(quantization.weight_params.use_symmetric=True).'
      )
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, self.theta.w, _CONTRACT_DIMS
    )
    params = _materialize.named('w', q_w, q_s, zp, True)
    if self.bias:
      params['b'] = self.theta.b
    return {base_layer.PARAMS: params}


# Names Pax 1.4's module also has (aliases of other modules' names).
QuantizationParams = quantization_hparams.QuantizationParams
