"""Quantized `Einsum`: the twin of `praxis.layers.einsum.Einsum`.

Public: `Einsum` (fields of the float layer plus `quantization`).
"""

from __future__ import annotations

from praxis import base_layer
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import einsum
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantizer

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor


class Einsum(einsum.Einsum, quantizer.QuantizationLayer):
  """`einsum(eqn, inputs, w) (+ b)` with a quantized `w`.

  The scale has the weight's output-only dims (those of the bias).
  """

  _PACK_4BIT_DIM = 0

  def _terms(self) -> tuple[str, str, str]:
    try:
      return einsum._parse(self.eqn)  # pylint: disable=protected-access
    except ValueError as e:
      raise ValueError(f'{self._where()}: eqn: {e}') from None

  def _w_hparams(self) -> base_layer.WeightHParams:
    fan_in, fan_out = einsum.einsum_fan_axes(self.eqn)
    return base_layer.WeightHParams(
        shape=list(self.w_shape),
        fan_in_axes=fan_in,
        fan_out_axes=fan_out,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
    )

  def setup(self) -> None:
    x, w, out = self._terms()
    if len(w) != len(self.w_shape):
      raise ValueError(
          f'{self._where()}: w_shape {tuple(self.w_shape)} has '
          f'{len(self.w_shape)} dims but the weight term {w!r} of eqn has '
          f'{len(w)}.'
      )
    out_only = [d for d in out if d in w and d not in x]
    self.set_up_weights(
        weight_name='w',
        weight_params=self._w_hparams(),
        scale_shape=[self.w_shape[w.index(d)] for d in out_only],
    )
    if self.use_bias:
      self._create_bias(x, w, out, self.weight_split_dims_mapping.wt)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns `einsum(eqn, inputs, w) (+ b)`, quantized as configured."""
    ret = self.quantized_einsum(eqn=self.eqn, x=inputs, w=self.theta.w)
    if self.use_bias:
      ret = _bias_add.add_bias(ret, self.theta.b)
    return base_layer.maybe_shard(
        ret, self.activation_split_dims_mapping.out, self.mesh_axis_names
    )

  def quantize_weight(self) -> NestedJTensor:
    """The int weight, its scale (and zero point) and the float bias."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    dims = operations.eqn_to_weight_contract_dims(self.eqn)
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, self.theta.w, dims, pack_dim=self._PACK_4BIT_DIM
    )
    params = _materialize.named('w', q_w, q_s, zp,
                                q.weight_params.use_symmetric)
    if self.use_bias:
      params['b'] = self.theta.b
    return {base_layer.PARAMS: params}
