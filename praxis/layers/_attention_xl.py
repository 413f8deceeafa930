"""Transformer-XL attention: relative position terms in the logits.

Public names (re-exported by `attentions`):
create_relative_positional_embedding, DotProductAttentionXL,
LocalSelfAttentionXL.

The logit of query i and key j (https://arxiv.org/abs/1901.02860, 3.3) is

  (q_i + u) . k_j + (q_i + v) . P(i - j),

with q the scaled query, u and v learned [N, H] biases (when `use_bias`), and
P(d) the projection (`pos_proj`, [E] -> [N, H]) of the sinusoidal embedding
(`pos_emb`, E = `rel_pos_emb_dim`) of the distance d.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _local_attention
from praxis.layers import attentions
from praxis.layers import embedding_softmax

JTensor = pytypes.JTensor
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


def create_relative_positional_embedding(layer: base_layer.BaseLayer) -> None:
  """Creates `pos_emb`, `pos_proj` and (with `use_bias`) `u`, `v` on layer."""
  if layer.rel_pos_emb_dim <= 0:
    raise ValueError(f'{type(layer).__name__} {layer.name!r}: '
                     f'rel_pos_emb_dim={layer.rel_pos_emb_dim} must be '
                     'positive.')
  layer.create_child('pos_emb', pax_fiddle.Config(
      embedding_softmax.PositionalEmbedding,
      embedding_dims=layer.rel_pos_emb_dim))
  proj = layer.proj_tpl.clone().set(
      input_dim=layer.rel_pos_emb_dim, num_heads=layer.num_heads,
      dim_per_head=layer.head_dim, use_bias=False)
  proj.weight_split_dims_mapping.wt = layer.weight_split_dims_mapping.proj
  layer.create_child('pos_proj', proj)
  if layer.use_bias:
    shape = [layer.num_heads, layer.head_dim]
    for name in ('u', 'v'):
      layer.create_variable(
          name, WeightHParams(shape=shape, init=WeightInit.Constant(0.0)))


def _projected_distances(layer: base_layer.BaseLayer,
                         distances: np.ndarray) -> JTensor:
  """P(d) for each d: [len(distances), N, H]."""
  emb = layer.pos_emb(position=jnp.asarray(distances)[None])
  return layer.pos_proj(emb)[0]


def _biased(layer: base_layer.BaseLayer, query: JTensor,
            name: str) -> JTensor:
  return query + layer.theta[name] if layer.use_bias else query


class DotProductAttentionXL(attentions.DotProductAttention):
  """Self-attention with Transformer-XL relative position logits.

  Attributes:
    rel_pos_emb_dim: E, the depth of the sinusoidal distance embedding.
  """

  rel_pos_emb_dim: int = 0

  def setup(self) -> None:
    super().setup()
    create_relative_positional_embedding(self)

  def _attend(self, query, key, value, atten_mask, relative_bias, dropout):
    t = query.shape[1]
    if key.shape[1] != t:
      raise NotImplementedError(
          f'{type(self).__name__}: only self-attention is supported (the '
          f'queries and keys the same {t} positions; decode with '
          'extend_step).')
    query = self._scale_query(query)
    # P for distances -(T - 1) ... T - 1; query i, key j reads i - j + T - 1.
    table = _projected_distances(self, np.arange(-(t - 1), t))
    by_distance = jnp.einsum('BTNH,LNH->BNTL', _biased(self, query, 'v'),
                             table)
    idx = np.arange(t)[:, None] - np.arange(t)[None, :] + t - 1
    position = jnp.take_along_axis(
        by_distance, jnp.broadcast_to(jnp.asarray(idx), by_distance.shape[:2]
                                      + idx.shape), axis=3)
    return self._attend_with_position(query, key, value, atten_mask,
                                      position, relative_bias, dropout)

  def _attend_with_position(self, query, key, value, atten_mask, position,
                            relative_bias, dropout):
    """Attention of the scaled `query` with the position term [B, N, T, S]
    and, with `use_bias`, the content bias u . k added to the logits."""
    bias = position
    if self.use_bias:
      bias = bias + jnp.einsum('NH,BSNH->BNS', self.theta.u, key)[:, :, None]
    if relative_bias is not None:
      bias = bias + relative_bias
    return self._attend_scaled(query, key, value, atten_mask, bias, dropout)

  def _attend_step(self, query, key, value, atten_mask, relative_bias,
                   time_step):
    """The query [B, 1, N, H] at `time_step` over the cached keys: key j is
    `time_step - j` before it."""
    if time_step is None:
      raise ValueError(f'{type(self).__name__} {self.name!r}: a decoding step '
                       'needs its time_step.')
    query = self._scale_query(query)
    table = _projected_distances(
        self, jnp.asarray(time_step) - jnp.arange(key.shape[1]))
    position = jnp.einsum('BTNH,SNH->BNTS', _biased(self, query, 'v'), table)
    return self._attend_with_position(query, key, value, atten_mask,
                                      position, relative_bias, dropout=False)


class LocalSelfAttentionXL(_local_attention.LocalSelfAttention):
  """Block-local self-attention with Transformer-XL relative position logits.

  Attributes:
    rel_pos_emb_dim: E, the depth of the sinusoidal distance embedding.
  """

  rel_pos_emb_dim: int = 0

  def setup(self) -> None:
    super().setup()
    if self.simulated:
      raise ValueError(f'{type(self).__name__} {self.name!r}: simulated is '
                       'not supported.')
    create_relative_positional_embedding(self)

  def _local_logits(self, query: JTensor, key: JTensor) -> JTensor:
    w, c = query.shape[2], key.shape[2]
    left, right = self.left_context, self.right_context
    content = jnp.einsum('buwnh,bucnh->bnuwc', _biased(self, query, 'u'), key)
    # Slot f of the table is the distance L - 1 - f (L - 1 down to -R); query
    # w and context slot c are that far apart for f = c - w.
    table = _projected_distances(self, np.arange(left - 1, -right - 1, -1))
    by_distance = jnp.einsum('buwnh,fnh->bnuwf', _biased(self, query, 'v'),
                             table)
    f = np.arange(c)[None, :] - np.arange(w)[:, None]
    valid = (f >= 0) & (f < table.shape[0])
    idx = jnp.asarray(np.clip(f, 0, table.shape[0] - 1))
    position = jnp.take_along_axis(
        by_distance, jnp.broadcast_to(idx, by_distance.shape[:3] + idx.shape),
        axis=4)
    return content + jnp.where(jnp.asarray(valid), position, 0.0)

  def extend_step(self, query_vec, *, atten_mask, time_step, segment_pos,
                  is_cross_attention=False):
    raise NotImplementedError(f'{type(self).__name__}: extend_step is not '
                              'supported.')
