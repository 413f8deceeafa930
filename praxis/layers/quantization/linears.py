"""Quantized (and optionally low-rank or LoRA) linear layers.

Public: `Linear`, `LinearLoRA`, `LinearActScaling`; drop-in twins of
`praxis.layers.linears.Linear` with a `quantization` field.

Example (int8 weight-only, from trained float weights):

  p = pax_fiddle.Config(Linear, name='l', input_dims=8, output_dims=4,
      quantization=QuantizationParams(mode=QuantizationMode.MATERIALIZE))
  int_vars = layer.apply(float_vars, method=layer.quantize_weight)
  # Serve with mode=INFERENCE and `int_vars`.
"""

from __future__ import annotations

from typing import Any

from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers.quantization import _lora
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer
from praxis.layers.quantization.sparsity import sparsifier

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = base_layer.template_field

_EQN = '...y,yz->...z'


def _sub_channel_shape(shape: list[int], block_size: int, dim: int):
  return operations.get_sub_channel_shape(shape, block_size, [dim])[0]


class Linear(
    linears.Linear, quantizer.QuantizationLayer, sparsifier.SparsityBaseLayer
):
  """Quantized linear layer without bias, optionally factorized.

  Attributes:
    rank: Factorize `w` into `w_a` [in, rank] and `w_b` [rank, out]
      (-1: off).
  """

  rank: int = -1
  _PACK_4BIT_DIM = 0

  def _block_size(self) -> int:
    if self.quantization is not None:
      return self.quantization.weight_params.block_size
    return 0

  def _get_weight_hparams(
      self, using_sub_channel: bool
  ) -> tuple[WeightHParams, WeightHParams]:
    """(weight, scale) declarations; sub-channel weights are [s, c, out]."""
    wt = self.weight_split_dims_mapping.wt
    shape = [self.input_dims, self.output_dims]
    scale_shape = [self.output_dims]
    if using_sub_channel:
      shape = _sub_channel_shape(shape, self._block_size(), 0)
      scale_shape = [shape[0], shape[2]]
      w_sharding = None if wt is None else [wt[0], None, *wt[1:]]
      s_sharding = None if wt is None else list(wt)
    else:
      w_sharding = wt
      s_sharding = [wt[1]] if wt is not None and len(wt) > 1 else None
    return (
        WeightHParams(shape=shape, mesh_shape=self.mesh_shape,
                      tensor_split_dims_mapping=w_sharding),
        WeightHParams(shape=scale_shape, mesh_shape=self.mesh_shape,
                      tensor_split_dims_mapping=s_sharding),
    )

  def _setup_factorized(self) -> None:
    wt = self.weight_split_dims_mapping.wt
    for name, shape in (('w_a', [self.input_dims, self.rank]),
                        ('w_b', [self.rank, self.output_dims])):
      hp = WeightHParams(shape=shape, mesh_shape=self.mesh_shape,
                         tensor_split_dims_mapping=wt)
      self.set_up_weights(weight_name=name, weight_params=hp,
                          scale_shape=[shape[1]])
      self.create_sparsity_variables(name, hp, scale_shape=[shape[1]])

  def setup(self) -> None:
    linears._check_positive(  # pylint: disable=protected-access
        self, input_dims=self.input_dims, output_dims=self.output_dims
    )
    if self.rank > 0:
      self._setup_factorized()
      return
    using_sub_channel = False
    if self._block_size() > 0:
      self._PACK_4BIT_DIM = 1
      using_sub_channel = self.quantization.mode == QuantizationMode.INFERENCE
    weight_hp, scale_hp = self._get_weight_hparams(using_sub_channel)
    self.set_up_weights(weight_name='w', weight_params=weight_hp,
                        scale_hparams=scale_hp)
    self.create_sparsity_variables('w', weight_hp,
                                   scale_shape=[self.output_dims])

  def _sub_channel_einsum_args(self, inputs, w) -> tuple[JTensor, dict]:
    """Inputs [..., s, c] and the einsums over sub channels s of size c."""
    block = self._block_size()
    inputs = jnp.reshape(
        inputs, _sub_channel_shape(list(inputs.shape), block, inputs.ndim - 1)
    )
    args = {'scale_eqn': '...sz,sz->...z', 'zp_eqn': '...sc,sz->...z'}
    if self.quantization.act_params is not None:
      args.update(eqn='...sc,scz->...sz', swap_xw=False)
    else:
      args.update(eqn='scz,...sc->...sz', swap_xw=True)
    if w.ndim == 2:
      args['reshape'] = _sub_channel_shape(list(w.shape), block, 0)
    return inputs, args

  def __call__(self, inputs: JTensor) -> JTensor:
    """Projects `inputs` [..., input_dims] to [..., output_dims]."""
    if self.rank > 0:
      out = inputs
      for name in ('w_a', 'w_b'):
        w = self.sparsifiy(self.theta[name], inputs=inputs, name=name)
        out = self.quantized_einsum(eqn=_EQN, x=out, w=w, weight_name=name)
    else:
      w = self.sparsifiy(self.theta.w, inputs=inputs, name='w')
      args = {'eqn': _EQN}
      q = self.quantization
      if (
          q is not None
          and self._block_size() > 0
          and (q.mode == QuantizationMode.INFERENCE
               or q.quantization_type == QuantizationType.AQT)
      ):
        inputs, args = self._sub_channel_einsum_args(inputs, w)
      out = self.quantized_einsum(x=inputs, w=w, **args)
    return base_layer.maybe_shard(
        out,
        linears.step_sharding(self.activation_split_dims_mapping, out.ndim),
        self.mesh_axis_names,
    )

  def quantized_partition_specs(self) -> Any:
    """Partition specs of `quantize_weight`'s output."""
    block = self._block_size()
    weight_hp, scale_hp = self._get_weight_hparams(block > 0)
    specs = _materialize.named_pspecs(
        self, 'w', weight_hp.tensor_split_dims_mapping,
        scale_hp.tensor_split_dims_mapping, len(weight_hp.shape),
        0 if block == 0 else len(scale_hp.shape))
    return {base_layer.PARAMS: specs}

  def quantize_weight(self) -> NestedJTensor:
    """{'params': {'w': int w, 'w_quantized_scale': ..., ['w_quantized_zp']}}."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    w = self.theta.w
    contract_dims = [0]
    if self._block_size() > 0:
      w = jnp.reshape(w, _sub_channel_shape(list(w.shape), self._block_size(),
                                            0))
      contract_dims = [1]
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, w, contract_dims, pack_dim=self._PACK_4BIT_DIM
    )
    return {base_layer.PARAMS: _materialize.named(
        'w', q_w, q_s, zp, q.weight_params.use_symmetric)}


class LinearLoRA(Linear):
  """Quantized linear layer plus a float low-rank (LoRA) residual.

  Attributes:
    lora_rank: Rank of the LoRA factors (0: none).
    init_method: 'one_zero' (w_left ~ N(0, 1), w_right = 0) or 'output_dim'.
    norm_tpl: Normalization of the LoRA path.
    norm_order: None, 'pre', 'mid' or 'post' (where the norm applies).
  """

  lora_rank: int = 0
  init_method: str = 'one_zero'
  norm_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_order: str | None = None

  def setup(self) -> None:
    super().setup()
    _lora.setup_lora(self, [self.input_dims, self.output_dims], _EQN,
                     self.lora_rank, self.input_dims, self.output_dims)

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs) + _lora.lora_output(self, inputs)
    ap_out = self.activation_split_dims_mapping.out
    if ap_out is not None and len(ap_out) == 3 and out.ndim == 2:
      ap_out = [ap_out[0], ap_out[2]]
    return base_layer.maybe_shard(out, ap_out, self.mesh_axis_names)


class LinearActScaling(Linear):
  """Quantized linear layer whose input is scaled per channel first
  (`w_per_channel_act_max`, e.g. from SmoothQuant-like calibration)."""

  def setup(self) -> None:
    super().setup()
    self.create_variable('w_per_channel_act_max', WeightHParams(
        shape=[self.input_dims], init=WeightInit.Constant(0.0)))

  def __call__(self, inputs: JTensor) -> JTensor:
    return super().__call__(inputs * self.theta.w_per_channel_act_max)
