"""Quantized embedding and softmax layers.

Public: `Embedding`, `SharedEmbeddingSoftmax`,
`NClassMajorSharedEmbeddingSoftmax` (twins of
`praxis.layers.embedding_softmax`'s layers with a `quantization` field).

Tables are quantized per row (per class): one scale (and zero point) per id.
"""

from __future__ import annotations

import copy
from typing import Any

from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers.quantization import _materialize
from praxis.layers.quantization import linears as quantized_linears
from praxis.layers.quantization import operations
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer

QuantizationMode = quantization_hparams.QuantizationMode
QuantizationType = quantization_hparams.QuantizationType
QuantizationParams = quantization_hparams.QuantizationParams
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
instance_field = base_layer.instance_field
template_field = base_layer.template_field

# The lookup as an einsum of a one-hot activation with the [class, dim] table.
_ROW_EQN = 'xy,zy->xz'


def _fake_quant_table(layer: Any, table: JTensor, eqn: str) -> JTensor:
  """The float table as training sees it (FQ / FQ_VN), else unchanged."""
  q = layer.quantization
  wp = q.weight_params
  if q.quantization_type == QuantizationType.FQ:
    return operations.fakequant_einsum(
        eqn, table, bits=wp.precision, use_symmetric=wp.use_symmetric,
        calculation_dtype=wp.calculation_dtype,
    )
  if q.quantization_type == QuantizationType.FQ_VN:
    if wp.use_step_count:
      raise NotImplementedError(
          'use_step_count is not supported yet for Embedding.'
      )
    return operations.fakequant_vn(
        eqn, table, layer.next_prng_key(), wp, None, layer.do_eval,
        bits=wp.precision, calculation_dtype=wp.calculation_dtype,
        use_symmetric=wp.use_symmetric,
    )
  return table


def _lookup_rows(layer: Any, table, scale, zp, ids) -> JTensor:
  """Rows of a (maybe int) table, times their scale, minus their zero point."""
  if jnp.issubdtype(table.dtype, jnp.integer) and layer.lookup_style != 'index':
    table = table.astype(layer.fprop_dtype)
  embs = embedding_softmax.embedding_lookup(table, ids, layer.lookup_style)
  if scale is not None:
    embs = embs * scale[ids][..., None]
    if zp is not None:
      embs = embs - zp[ids][..., None]
  return embs


def _create_weight_quantizer(layer: Any) -> None:
  if layer.quantization.quantization_type == QuantizationType.AQT:
    layer.create_child('weight_quantizer', quantizer.create_tensor_quantizer(
        'weight_quantizer', layer.quantization.weight_params))


def _row_pspecs(layer: Any, name: str, w_mapping, scale_mapping) -> dict:
  return _materialize.named_pspecs(layer, name, w_mapping, scale_mapping, 2)


class Embedding(embedding_softmax.Embedding, quantizer.QuantizationLayer):
  """Quantized `Embedding`: `emb_var` int8 with one scale per class."""

  def _do_static_activation_quantization(self) -> bool:
    return False

  def setup(self) -> None:
    embedding_softmax._require_positive(self, 'num_classes', 'input_dims')  # pylint: disable=protected-access
    embedding_softmax._require_lookup_style(self)  # pylint: disable=protected-access
    hp = WeightHParams(
        shape=[self.num_classes, self.input_dims],
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
    )
    if self.quantization.mode == QuantizationMode.INFERENCE:
      self.create_quantized_variable(
          'emb_var', hp, [self.num_classes], dtype=jnp.int8,
          use_symmetric=self.quantization.weight_params.use_symmetric,
      )
    else:
      self.create_variable('emb_var', hp)
    _create_weight_quantizer(self)

  def _table(self) -> tuple[JTensor, JTensor | None, JTensor | None]:
    q = self.quantization
    if q.mode == QuantizationMode.INFERENCE:
      return self.get_quantized_weight(
          'emb_var', use_symmetric=q.weight_params.use_symmetric
      )
    table = self.theta.emb_var
    if q.quantization_type == QuantizationType.AQT:
      return self.weight_quantizer.quantize(
          table, operations.eqn_to_weight_contract_dims(_ROW_EQN),
          squeeze_scale=True, quantized_dtype=table.dtype,
      )
    return _fake_quant_table(self, table, _ROW_EQN), None, None

  def emb_lookup(self, ids: JTensor) -> JTensor:
    """Maps integer `ids` [...] to embeddings [..., input_dims]."""
    if self.quantization.act_params is not None:
      raise NotImplementedError(
          'Input id quantization is not implemented for the Embedding layer.'
      )
    table, scale, zp = self._table()
    embs = _lookup_rows(self, table, scale, zp, ids)
    if self.set_nan_for_oob_id:
      embs = jnp.where(ids[..., None] < self.num_classes, embs, jnp.nan)
    return embedding_softmax._scale_and_shard_embeddings(self, embs)  # pylint: disable=protected-access

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    return {base_layer.PARAMS: _row_pspecs(
        self, 'emb_var', wt, None if wt is None else [wt[0]])}

  def quantize_weight(self) -> NestedJTensor:
    """`emb_var` quantized per class (row)."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, self.theta.emb_var,
        operations.eqn_to_weight_contract_dims(_ROW_EQN),
    )
    return {base_layer.PARAMS: _materialize.named(
        'emb_var', q_w, q_s, zp, q.weight_params.use_symmetric)}


class SharedEmbeddingSoftmax(embedding_softmax.SharedEmbeddingSoftmax):
  """Quantized `SharedEmbeddingSoftmax`: its projection is a quantized
  `Linear`, whose [dims, classes] weight is also the embedding table.

  Attributes:
    quantization: Quantization of the projection and the lookups.
  """

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def setup(self) -> None:
    embedding_softmax._require_lookup_style(self)  # pylint: disable=protected-access
    if self.feed_forward_tpl is None:
      raise ValueError(
          f'SharedEmbeddingSoftmax {self.name!r}: `feed_forward_tpl` is '
          'needed (its weight is the embedding table).'
      )
    ff_p = embedding_softmax._feed_forward_config(  # pylint: disable=protected-access
        self, self.feed_forward_tpl, self.bias_init
    )
    linear_p = pax_fiddle.Config(
        quantized_linears.Linear, quantization=copy.deepcopy(self.quantization)
    )
    linear_p.copy_fields_from(ff_p.linear_tpl)
    ff_p.linear_tpl = linear_p
    self.create_child('logits_ffn', ff_p)
    if self.bi_tempered_loss_tpl is not None:
      self.create_child('bi_tempered_loss', self.bi_tempered_loss_tpl)
    _create_weight_quantizer(self)

  def _table(self) -> tuple[JTensor, JTensor | None, JTensor | None]:
    """[dims, classes] table with per-class scale and zero point."""
    q = self.quantization
    linear = self.logits_ffn.linear
    if q.mode == QuantizationMode.INFERENCE:
      return linear.get_quantized_weight(
          'w', use_symmetric=q.weight_params.use_symmetric
      )
    eqn = 'xy,yz->xz'
    table = linear.theta.w
    if q.quantization_type == QuantizationType.AQT:
      return self.weight_quantizer.quantize(
          table, operations.eqn_to_weight_contract_dims(eqn),
          squeeze_scale=True, quantized_dtype=table.dtype,
      )
    return _fake_quant_table(self, table, eqn), None, None

  def emb_lookup(self, ids: JTensor) -> JTensor:
    """Maps ids [...] to rows of the transposed projection [..., dims]."""
    table, scale, zp = self._table()
    embs = _lookup_rows(self, jnp.transpose(table), scale, zp, ids)
    return embedding_softmax._scale_and_shard_embeddings(self, embs)  # pylint: disable=protected-access


class NClassMajorSharedEmbeddingSoftmax(
    embedding_softmax.SharedEmbeddingSoftmax, quantizer.QuantizationLayer
):
  """Shared embedding-softmax whose quantized table is [classes, dims].

  MATERIALIZE holds the float [dims, classes] weight `w`; INFERENCE holds
  `w` int [classes, dims] with one scale per class.

  Attributes:
    activation_tpl: Activation applied to the logits.
    use_bias: Add a bias (child `bias`) to the logits.
  """

  activation_tpl: pax_fiddle.Config[Any] = template_field(
      embedding_softmax.activations.Identity
  )
  use_bias: bool = True
  _PACK_4BIT_DIM = 1

  def _unsupported_mode(self) -> ValueError:
    return ValueError(
        f'{self.quantization.mode} not supported in quantized'
        ' NClassMajorSharedEmbeddingSoftmax.'
    )

  def _transposed_mapping(self):
    wt = self.weight_split_dims_mapping.wt
    return None if wt is None else [wt[1], wt[0]]

  def setup(self) -> None:
    q = self.quantization
    if q.mode == QuantizationMode.INFERENCE:
      self.set_up_weights(
          weight_name='w',
          weight_params=WeightHParams(
              shape=[self.num_classes, self.input_dims],
              mesh_shape=self.mesh_shape,
              tensor_split_dims_mapping=self._transposed_mapping()),
          scale_shape=[self.num_classes],
      )
    elif q.mode == QuantizationMode.MATERIALIZE:
      self.create_variable('w', WeightHParams(
          shape=[self.input_dims, self.num_classes],
          mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=self.weight_split_dims_mapping.wt))
      _create_weight_quantizer(self)
    else:
      raise self._unsupported_mode()
    if self.use_bias:
      bias_p = pax_fiddle.Config(
          linears.Bias, dims=self.num_classes, bias_init=self.bias_init
      )
      ap_out = self.activation_split_dims_mapping.out
      if self.mesh_shape is not None and ap_out is not None:
        bias_p.weight_split_dims_mapping.wt = [ap_out[-1]]
      self.create_child('bias', bias_p)
    self.create_child('activation', self.activation_tpl.clone())
    if self.bi_tempered_loss_tpl is not None:
      self.create_child('bi_tempered_loss', self.bi_tempered_loss_tpl)

  def _project(self, inputs: JTensor) -> JTensor:
    q = self.quantization
    if q.mode == QuantizationMode.MATERIALIZE:
      if q.act_params is not None:
        raise NotImplementedError(
            'Activation quantization is not implemented for'
            ' NClassMajorSharedEmbeddingSoftmax in MATERIALIZE mode'
        )
      return jnp.einsum('...y,yz->...z', inputs, self.theta.w)
    if q.mode != QuantizationMode.INFERENCE:
      raise self._unsupported_mode()
    eqn = '...y,zy->...z'
    scale_act = zp_act = None
    ap = q.act_params
    if ap is not None:
      inputs, scale_act, zp_act = operations.reduce_einsum_activation_precision(
          eqn, inputs, bits=ap.precision, per_channel=ap.per_channel,
          symmetric=ap.symmetric, percentile=ap.clipping_coeff,
      )
    w, s, zp = self.get_quantized_weight(
        'w', use_symmetric=q.weight_params.use_symmetric
    )
    return operations.einsum(eqn, inputs, w, s, zp=zp, scale_act=scale_act,
                             zp_act=zp_act)

  def get_logits(
      self, inputs: JTensor, input_ids: JTensor | None = None
  ) -> JTensor:
    """Logits [..., num_classes] of inputs [..., input_dims]."""
    del input_ids
    out = self._project(inputs)
    out = base_layer.maybe_shard(
        out,
        linears.step_sharding(self.activation_split_dims_mapping, out.ndim),
        self.mesh_axis_names,
    )
    if self.use_bias:
      out = self.bias(out)
    return embedding_softmax.soft_cap(self.activation(out),
                                      self.soft_cap_logits)

  def emb_lookup(self, ids: JTensor) -> JTensor:
    q = self.quantization
    if q.mode == QuantizationMode.INFERENCE:
      table, scale, zp = self.get_quantized_weight(
          'w', use_symmetric=q.weight_params.use_symmetric
      )
    elif q.mode == QuantizationMode.MATERIALIZE:
      table, scale, zp = jnp.transpose(self.theta.w), None, None
    else:
      raise self._unsupported_mode()
    embs = _lookup_rows(self, table, scale, zp, ids)
    return embedding_softmax._scale_and_shard_embeddings(self, embs)  # pylint: disable=protected-access

  def quantized_partition_specs(self) -> Any:
    wt = self.weight_split_dims_mapping.wt
    specs = super().quantized_partition_specs()
    specs[base_layer.PARAMS].update(_row_pspecs(
        self, 'w', self._transposed_mapping(),
        None if wt is None else [wt[1]]))
    return specs

  def quantize_weight(self) -> NestedJTensor:
    """`w` transposed to [classes, dims] and quantized per class."""
    q = _materialize.require_quantization(self, 'quantize_weight')
    q_w, q_s, zp = _materialize.quantize_tensor(
        self, jnp.transpose(self.theta.w),
        operations.eqn_to_weight_contract_dims(_ROW_EQN),
        pack_dim=self._PACK_4BIT_DIM,
    )
    result = super().quantize_weight()
    result[base_layer.PARAMS].update(_materialize.named(
        'w', q_w, q_s, zp, q.weight_params.use_symmetric))
    return result
