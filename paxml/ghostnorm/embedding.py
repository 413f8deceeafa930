"""An Embedding layer that follows the ghost-norm protocol (see `base`).

Public names: make_index_lookup, EmbeddingGhostNorm.
"""

from typing import Callable

import jax
import jax.numpy as jnp
from paxml.ghostnorm import _norms
from paxml.ghostnorm import base
from paxml.ghostnorm import linears as ghostnorm_linears
from praxis import base_layer
from praxis import pytypes
from praxis.layers import base_ops
from praxis.layers import embedding_softmax

JTensor = pytypes.JTensor


def make_index_lookup(
    array_lookup: base_ops.ArrayLookup | Callable[..., JTensor],
    einsum: base_ops.EinsumOp | Callable[..., JTensor] | None = None,
) -> Callable[[JTensor, JTensor], JTensor]:
  """`(table, ids) -> table[ids]`, with the ghost-norm backward rule.

  Args:
    array_lookup: The gather op.
    einsum: Unused; accepted for Pax's signature.

  Returns:
    A function of (table [rows, dims] or ParamWithAux, ids [batch, ...]).
  """
  del einsum

  @jax.custom_vjp
  def lookup(weights, ids):
    return array_lookup(base.get_param(weights), ids)

  def forward(weights, ids):
    table = base.get_param(weights)
    out, vjp_fn = jax.vjp(array_lookup, table, ids)
    return out, (vjp_fn, ids, table.shape[0], base.get_aux(weights))

  def backward(residuals, g):
    vjp_fn, ids, num_rows, scales = residuals
    if scales is None:
      return vjp_fn(g)
    weighted_g = _norms.weight_per_example(scales, g)
    d_table, d_ids = vjp_fn(weighted_g)
    sq_norms = _norms.lookup_sq_norms(
        ids, weighted_g * weighted_g.shape[0], num_rows
    )
    return base.ParamWithAux(d_table, sq_norms), d_ids

  lookup.defvjp(forward, backward)
  return lookup


class EmbeddingGhostNorm(embedding_softmax.Embedding):
  """`Embedding` whose table gradient also yields per-example norms.

  Attributes:
    use_softmax_shared_embedding_shape_weights: Store the table as
      [input_dims, num_classes], the layout of `SharedEmbeddingSoftmax`'s
      weights, so that such a checkpoint loads into a separate embedding.
  """

  use_softmax_shared_embedding_shape_weights: bool = False

  def setup(self) -> None:
    if not self.use_softmax_shared_embedding_shape_weights:
      super().setup()
    else:
      embedding_softmax._require_positive(self, 'num_classes', 'input_dims')  # pylint: disable=protected-access
      self.create_variable(
          'emb_var',
          base_layer.WeightHParams(
              shape=[self.input_dims, self.num_classes],
              mesh_shape=self.mesh_shape,
              tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
          ),
      )
    self._index_lookup = make_index_lookup(self.array_lookup)
    self._projector = ghostnorm_linears.make_last_dim_projector(self.einsum)

  def _table(self):
    table = self.theta.emb_var
    if self.use_softmax_shared_embedding_shape_weights:
      table = table.transpose()
    return table

  def emb_lookup(self, ids: JTensor) -> JTensor:
    table = self._table()
    if self.lookup_style == 'index':
      embs = self._index_lookup(table, ids)
    elif self.lookup_style == 'matmul':
      one_hot = jax.nn.one_hot(ids, self.num_classes, dtype=self.fprop_dtype)
      embs = self._projector(one_hot, table)
    else:
      raise ValueError(
          f'{type(self).__name__}: lookup_style must be "index" or "matmul", '
          f'got {self.lookup_style!r}.'
      )
    if self.set_nan_for_oob_id:
      embs = jnp.where(ids[..., None] < self.num_classes, embs, jnp.nan)
    return embedding_softmax._scale_and_shard_embeddings(self, embs)  # pylint: disable=protected-access
