"""Quantized multi-query attention layers.

Public: `OneHeadedAttentionProjection`, the quantized twin of
`praxis.layers.multi_query_attention.OneHeadedAttentionProjection` ([D, H]
weight quantized per output channel H; int4 values packed along D).
"""

from __future__ import annotations

from typing import Any

from praxis import base_layer
from praxis.layers import _bias_add
from praxis.layers import multi_query_attention
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis import pytypes

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor


class OneHeadedAttentionProjection(  # pytype: disable=signature-mismatch
    multi_query_attention.OneHeadedAttentionProjection,
    quantizer.QuantizationLayer,
):
  """Quantized [..., D] -> [..., H] projection (field `quantization`)."""

  _PACK_4BIT_DIM = 0
  _EQN = '...D,DH->...H'

  def setup(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    if self.mesh_shape is not None and wt is None:
      raise ValueError(
          f'{type(self).__name__}({self.name!r}): a mesh_shape needs '
          'weight_split_dims_mapping.wt for the weight.')
    hp = WeightHParams(shape=[self.input_dim, self.output_dim],
                       mesh_shape=self.mesh_shape,
                       tensor_split_dims_mapping=wt)
    self.set_up_weights(weight_name='w', weight_params=hp,
                        scale_shape=[self.output_dim])
    if self.use_bias:
      self.create_variable('b', WeightHParams(
          shape=[self.output_dim], init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=(
              [wt[1]] if self.mesh_shape is not None else None)))

  def __call__(self, inputs: JTensor) -> JTensor:
    """[..., D] -> [..., H] through the quantized einsum."""
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
          f'{type(self).__name__}({self.name!r}): inputs {inputs.shape} must '
          f'end in input_dim={self.input_dim}.')
    inputs = self._cast_to_fprop_dtype(inputs)
    out = self.quantized_einsum(eqn=self._EQN, x=inputs, w=self.theta.w,
                                reshape=[])
    return _bias_add.add_bias(out, self.theta.b) if self.use_bias else out

  def quantized_partition_specs(self) -> Any:
    """Partition specs of the int weight and its scale (and zero point)."""
    wt = self.weight_split_dims_mapping.wt
    specs = _materialize.named_pspecs(
        self, 'w', wt, None if wt is None else [wt[1]], 2, 1)
    return {base_layer.PARAMS: specs}

  def quantize_weight(self) -> NestedJTensor:
    """The int weight (per output channel) and its scale (and zero point)."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, self.theta.w, [0], pack_dim=self._PACK_4BIT_DIM)
    return {base_layer.PARAMS: _materialize.named(
        'w', q_w, q_s, zp, q.weight_params.use_symmetric)}


# Names Pax 1.4's module also has (aliases of other modules' names).
QuantizationMode = quantization_hparams.QuantizationMode
QuantizationParams = quantization_hparams.QuantizationParams
QuantizationType = quantization_hparams.QuantizationType
