"""Quantized attention layers.

Public: `AttentionProjection`, `AttentionProjectionLoRA`,
`CombinedQKVProjectionLayer`, `DotProductAttention` (twins of
`praxis.layers.attentions`' layers with a `quantization` field).

Projections quantize their weight per output channel (per head dim for
input projections, per model dim for the output projection);
`DotProductAttention` quantizes its q.k and p.v einsums AQT-style.
"""

from __future__ import annotations

import string
from typing import Any

from absl import logging
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import attentions
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


def _batch_letters(rank: int, taken: str) -> str:
  free = ''.join(sorted(set(string.ascii_uppercase) - set(taken)))
  return free[:rank]


class AttentionProjection(
    attentions.AttentionProjection,
    quantizer.QuantizationLayer,
    sparsifier.SparsityBaseLayer,
):
  """Quantized multi-head projection ([..., D] <-> [..., N, H])."""

  _PACK_4BIT_DIM = 0

  def _block_size(self) -> int:
    if self.quantization is not None:
      return self.quantization.weight_params.block_size
    return 0

  def _get_eqn(self) -> str:
    if not self.is_output_projection:
      return 'AD,DNH->ANH'
    return 'ANH,NHD->AD' if self.use_nhd_shape else 'ANH,DNH->AD'

  def _get_weight_scale_shape(
      self, block_size: int, use_block_size: bool
  ) -> tuple[list[int], list[int], Any]:
    """(weight shape, scale shape, weight sharding)."""
    n, h, d = self.num_heads, self.dim_per_head, self.input_dim
    hd = [n * h] if self.attention_combine_dims else [n, h]
    weight_shape = hd + [d] if self._nhd else [d] + hd
    scale_shape = [d] if self.is_output_projection else hd
    if block_size > 0 and use_block_size:
      weight_shape, dims = operations.get_sub_channel_shape(
          weight_shape, block_size,
          operations.eqn_to_weight_contract_dims(self._get_eqn()),
      )
      scale_shape = operations.get_scale_shape(weight_shape, dims)
    return weight_shape, scale_shape, self._weight_sharding()

  def setup(self) -> None:
    attentions._check_positive(  # pylint: disable=protected-access
        self, input_dim=self.input_dim, num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
    )
    if self.attention_combine_dims and self.use_bias:
      raise ValueError(f'{type(self).__name__}: attention_combine_dims needs '
                       'use_bias=False.')
    use_block = (self.quantization is not None
                 and self.quantization.mode == QuantizationMode.INFERENCE)
    shape, scale_shape, self.wt = self._get_weight_scale_shape(
        self._block_size(), use_block
    )
    hp = WeightHParams(
        shape=shape, mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=_materialize.declared_mapping(
            self, self.wt, len(shape)))
    self.set_up_weights(weight_name='w', weight_params=hp,
                        scale_shape=scale_shape)
    self.create_sparsity_variables('w', hp, scale_shape=scale_shape)
    if self.use_bias:
      self._create_bias()

  def _eqn_for(self, inputs: JTensor) -> str:
    n, h, d = self.num_heads, self.dim_per_head, self.input_dim
    if self.is_output_projection:
      if inputs.shape[-2:] != (n, h):
        raise ValueError(
            f'{type(self).__name__}: inputs {inputs.shape} must end in '
            f'[{n}, {h}].'
        )
      batch = _batch_letters(inputs.ndim - 2, 'DHN')
      w = 'NHD' if self.use_nhd_shape else 'DNH'
      return f'{batch}NH,{w}->{batch}D'
    if inputs.shape[-1] != d:
      raise ValueError(
          f'{type(self).__name__}: inputs {inputs.shape} must end in '
          f'input_dim={d}.'
      )
    batch = _batch_letters(inputs.ndim - 1, 'DHN')
    return f'{batch}D,DNH->{batch}NH'

  def __call__(self, inputs: JTensor) -> JTensor:
    """[..., D] -> [..., N, H], or [..., N, H] -> [..., D] for the output."""
    inputs = self._cast_to_fprop_dtype(inputs)
    eqn = self._eqn_for(inputs)
    reshape = []
    if self.attention_combine_dims:
      n, h, d = self.num_heads, self.dim_per_head, self.input_dim
      reshape = [n, h, d] if self._nhd else [d, n, h]
    w = self.sparsifiy(self.theta.w, inputs=inputs, name='w')
    q = self.quantization
    if q is not None and q.mode == QuantizationMode.INFERENCE:
      if self._block_size() > 0:
        logging.warning('Sub-channel weights are only for materialization; '
                        'they are reshaped back.')
        w = jnp.reshape(w, self._get_weight_scale_shape(0, False)[0])
    out = self.quantized_einsum(eqn=eqn, x=inputs, w=w, reshape=reshape)
    return _bias_add.add_bias(out, self.theta.b) if self.use_bias else out

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    if wt is None:
      scale_mapping = None
    elif self.is_output_projection:
      scale_mapping = [wt[0]]
    else:
      scale_mapping = [wt[1], wt[2]]
    specs = _materialize.named_pspecs(
        self, 'w', self.wt, scale_mapping,
        len(self._get_weight_scale_shape(0, False)[0]))
    if self.use_bias:
      specs['b'] = _materialize.pspec(self, self._weight_hparams()['b'])
    return {base_layer.PARAMS: specs}

  def quantize_weight(self) -> NestedJTensor:
    """The int weight (per output channel), its scale and the bias."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    w = self.theta.w
    dims = operations.eqn_to_weight_contract_dims(self._get_eqn())
    if self._block_size() > 0:
      # As Pax: the blocked weight is reduced over the unblocked contraction
      # dims (sub-channel weights are for materialization only; serving
      # them is not supported).
      shape, _, _ = self._get_weight_scale_shape(self._block_size(), True)
      w = jnp.reshape(w, shape)
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, w, dims, pack_dim=self._PACK_4BIT_DIM
    )
    params = _materialize.named('w', q_w, q_s, zp,
                                q.weight_params.use_symmetric)
    if self.use_bias:
      params['b'] = self.theta.b
    return {base_layer.PARAMS: params}


class AttentionProjectionLoRA(AttentionProjection):
  """Quantized `AttentionProjection` plus a float LoRA residual.

  Attributes:
    lora_rank: Rank of the LoRA factors.
    init_method: 'one_zero' or 'output_dim'.
    norm_tpl: Normalization of the LoRA path.
    norm_order: None, 'pre', 'mid' or 'post'.
    max_reduction: With two contraction dims, factor only the larger.
  """

  lora_rank: int = 0
  init_method: str = 'one_zero'
  norm_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  norm_order: str | None = None
  max_reduction: bool = True

  def setup(self) -> None:
    super().setup()
    shape = self._get_weight_scale_shape(0, False)[0]
    if self.is_output_projection:
      if self.use_nhd_shape:
        eqn, dims_in, dims_out = '...NH,NHD->...D', shape[1], shape[2]
        left = max(shape[0], shape[1]) * self.lora_rank
      else:
        eqn, dims_in, dims_out = '...NH,DNH->...D', shape[2], shape[0]
        left = max(shape[1], shape[2]) * self.lora_rank
    else:
      eqn, dims_in, dims_out = '...D,DNH->...NH', shape[0], shape[1]
      left = self.lora_rank
    _lora.setup_lora(self, shape, eqn, left, dims_in, dims_out,
                     self.max_reduction)

  def __call__(self, inputs: JTensor) -> JTensor:
    inputs = self._cast_to_fprop_dtype(inputs)
    return super().__call__(inputs) + _lora.lora_output(self, inputs)


class CombinedQKVProjectionLayer(
    attentions.CombinedQKVProjectionLayer,
    quantizer.QuantizationLayer,
    sparsifier.SparsityBaseLayer,
):
  """Quantized combined [3, D, N, H] query/key/value projection."""

  _PACK_4BIT_DIM = 1

  def _hd(self) -> list[int]:
    n, h = self.num_heads, self.dim_per_head
    return [n * h] if self.attention_combine_dims else [n, h]

  def _shardings(self) -> tuple[Any, Any]:
    wt = self.weight_split_dims_mapping.wt
    if self.mesh_shape is None:
      return None, None
    if wt is None:
      raise ValueError(
          f'{type(self).__name__}: weight_split_dims_mapping.wt is needed '
          'when mesh_shape is set.'
      )
    if self.attention_combine_dims and len(wt) == 3:
      wt = [a for a in wt if a is not None]
    return [None] + list(wt), [None] + list(wt[1:])

  def setup(self) -> None:
    attentions._check_positive(  # pylint: disable=protected-access
        self, input_dim=self.input_dim, num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
    )
    w_sharding, b_sharding = self._shardings()
    hd = self._hd()
    hp = WeightHParams(shape=[3, self.input_dim] + hd, init=self.params_init,
                       dtype=self.dtype, mesh_shape=self.mesh_shape,
                       tensor_split_dims_mapping=w_sharding)
    self.set_up_weights(weight_name='w', weight_params=hp,
                        scale_shape=[3] + hd)
    self.create_sparsity_variables('w', hp, scale_shape=[3] + hd)
    if self.use_bias:
      self.create_variable('b', WeightHParams(
          shape=[3] + hd, init=WeightInit.Constant(0.0),
          mesh_shape=self.mesh_shape, tensor_split_dims_mapping=b_sharding))

  def _inference_qkv(self, eqn: str, inputs: JTensor) -> JTensor:
    q = self.quantization
    w, s, zp = self.get_quantized_weight(
        'w', use_symmetric=q.weight_params.use_symmetric
    )
    ap = q.act_params
    if ap is None:
      return operations.einsum(eqn, inputs, w, s, zp)
    if ap.stats_config is not None:
      raise NotImplementedError(
          'Static activation quantization is not supported yet.'
      )
    if not ap.symmetric:
      raise ValueError(
          f'{type(self).__name__}: quantization.act_params.symmetric=False is '
          'supported in training only.'
      )
    inputs, act_scale, _ = operations.reduce_precision_activation(
        inputs, bits=ap.precision, percentile=ap.clipping_coeff
    )
    return operations.einsum(eqn, inputs, w, jnp.squeeze(act_scale) * s)

  def __call__(self, inputs: JTensor) -> tuple[JTensor, JTensor, JTensor]:
    """[..., D] -> (query, key, value), each [..., N, H]."""
    n, h = self.num_heads, self.dim_per_head
    if inputs.shape[-1] != self.input_dim:
      raise ValueError(
          f'{type(self).__name__}: inputs {inputs.shape} must end in '
          f'input_dim={self.input_dim}.'
      )
    batch = _batch_letters(inputs.ndim - 1, 'KDHN')
    eqn = f'{batch}D,KDNH->K{batch}NH'
    q = self.quantization
    if q is not None and q.mode == QuantizationMode.INFERENCE:
      qkv = self._inference_qkv(eqn, inputs)
    else:
      w = jnp.reshape(self.theta.w, [3, self.input_dim, n, h])
      w = self.sparsifiy(w, inputs=inputs, name='w')
      qkv = self.quantized_einsum(eqn=eqn, x=inputs, w=w)
    qkv = checkpoint_name(qkv, 'combined_qkv_proj')
    if self.use_bias:
      b = jnp.reshape(self.theta.b, [3, n, h])
      qkv = qkv + jnp.expand_dims(b, tuple(range(1, inputs.ndim)))
    query, key, value = qkv
    return (checkpoint_name(query, 'query_proj'),
            checkpoint_name(key, 'key_proj'),
            checkpoint_name(value, 'value_proj'))

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    scale_mapping = None
    if wt is not None:
      scale_mapping = ([None, wt[1]] if self.attention_combine_dims
                       else [None, wt[1], wt[2]])
    w_hp = self._weight_hparams()['w']
    specs = _materialize.named_pspecs(
        self, 'w', w_hp.tensor_split_dims_mapping, scale_mapping,
        len(w_hp.shape))
    if self.use_bias:
      specs['b'] = _materialize.pspec(self, self._weight_hparams()['b'])
    return {base_layer.PARAMS: specs}

  def quantize_weight(self) -> NestedJTensor:
    """The int [3, D, N, H] weight, its [3, N, H] scale and the bias."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, self.theta.w,
        operations.eqn_to_weight_contract_dims('AD,KDNH->KANH'),
        pack_dim=self._PACK_4BIT_DIM,
    )
    params = _materialize.named('w', q_w, q_s, zp,
                                q.weight_params.use_symmetric)
    if self.use_bias:
      params['b'] = self.theta.b
    return {base_layer.PARAMS: params}


class DotProductAttention(
    attentions.DotProductAttention, quantizer.QuantizationLayer
):
  """`DotProductAttention` whose q.k and p.v einsums are AQT-quantized
  (`quantization.quantization_type` must be AQT)."""

  def setup(self) -> None:
    super().setup()
    q = self.quantization
    if not q or q.quantization_type != QuantizationType.AQT:
      raise NotImplementedError(
          'Only AQT-style quantization is implemented for DotProductAttention'
      )
    self.create_tensor_quantizers()
    if self._do_static_activation_quantization():
      raise NotImplementedError(
          'Static activation quantization is not supported yet.'
      )

  def _aqt_einsum(self, eqn: str, lhs: JTensor, rhs: JTensor) -> JTensor:
    return operations.aqt_einsum(
        eqn, lhs, rhs, lhs_quantizer=self.act_quantizer,
        rhs_quantizer=self.act_quantizer,
    )

  def _attend_scaled(self, query, key, value, atten_mask, relative_bias,
                     dropout):
    h = query.shape[-1]
    return attentions.dot_product_attention(
        query, key, value, atten_mask,
        relative_bias=relative_bias,
        logits_scale=h**-0.5 if self.scale_logits_by_head_dims else None,
        logit_cap=self.atten_logit_cap,
        extra_logit=self.attention_extra_logit,
        probs_dropout=self.atten_dropout if dropout else None,
        zero_fully_masked=self.zero_fully_masked,
        qk_einsum=self._aqt_einsum,
        pv_einsum=self._aqt_einsum,
    )
