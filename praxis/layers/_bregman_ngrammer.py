"""Bregman-PCA N-grammer layers (private sibling of `praxis.layers.ngrammer`).

Public (re-exported by `ngrammer`): BregmanCompression, BregmanNgrammer.

Shape letters: B batch, L length, N heads, H depth per head, C compression
components, V n-gram vocabulary.
"""

from __future__ import annotations

from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _ngrammer_ops as ops
from praxis.layers import bregman

JTensor = pytypes.JTensor
WeightHParams = base_layer.WeightHParams
_MEAN_SYNC = base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC

# The BregmanPCA fields both layers pass through to it.
_PCA_FIELDS = (
    'activation_type', 'negative_slope', 'mean_beta', 'coefficients_lr',
    'coefficients_beta', 'coefficients_steps', 'components_lr',
    'components_beta', 'start_step', 'end_step', 'constant_lr_schedule',
)


def _pca_kwargs(layer: base_layer.BaseLayer) -> dict:
  return {name: getattr(layer, name) for name in _PCA_FIELDS}


def bigram_correlations(coeffs: JTensor, correlation: JTensor) -> JTensor:
  """[B, L, V]: prev^T correlation[:, :, v] curr for each position.

  `prev` is the previous position's coefficients (position 0 uses its own).

  Args:
    coeffs: [B, L, C] coefficients of one head.
    correlation: [C, C, V] of that head.
  """
  prev = jnp.concatenate([coeffs[:, :1], coeffs[:, :-1]], axis=1)
  inner = jnp.einsum('BLC,CKV->BLKV', prev, correlation)
  return jnp.einsum('BLC,BLCV->BLV', coeffs, inner)


class BregmanCompression(base_layer.BaseLayer):
  """Per-head Bregman PCA: the C compression coefficients of each head.

  Head i is compressed by the child `bregman_layers_<i>` (a BregmanPCA over
  H features, trained online unless evaluating).

  Attributes:
    num_heads: N.
    dim_per_head: H.
    num_components: C.
    activation_type: The activation whose Bregman divergence is used.
    negative_slope: Negative slope of the leaky ReLU.
    mean_beta: EMA constant of the mean.
    coefficients_lr: Learning rate of the coefficients.
    coefficients_beta: EMA constant of the coefficient updates.
    coefficients_steps: Steps of the coefficient solver.
    components_lr: Learning rate of the components.
    components_beta: EMA constant of the component updates.
    start_step: First step that updates the components.
    end_step: Step after which they are no longer updated.
    constant_lr_schedule: Constant (else linearly decaying) components LR.
  """

  num_heads: int = 0
  dim_per_head: int = 0
  num_components: int = 0
  activation_type: bregman.ActivationType = bregman.ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def setup(self) -> None:
    ops.require_positive(self, 'dim_per_head')
    pca = pax_fiddle.Config(
        bregman.BregmanPCA, num_components=self.num_components,
        input_dims=self.dim_per_head, **_pca_kwargs(self))
    self.create_children('bregman_layers', [pca] * self.num_heads)

  def __call__(self, inputs: JTensor,
               paddings: JTensor | None = None) -> JTensor:
    """Coefficients [B, L, N, C] of inputs [B, L, N, H] or [B, L, D].

    Args:
      inputs: The representation to compress.
      paddings: Optional [B, L], passed to the PCAs as their mask.
    """
    inputs = self._cast_to_fprop_dtype(inputs)
    b, l = inputs.shape[:2]
    flat = jnp.reshape(inputs, [b * l, self.num_heads, self.dim_per_head])
    mask = None if paddings is None else jnp.reshape(paddings, [-1, 1])
    coeffs = []
    for i in range(self.num_heads):
      _, head = self.bregman_layers[i](flat[:, i, :], mask)
      coeffs.append(jnp.reshape(head, [b, l, 1, self.num_components]))
    return jnp.concatenate(coeffs, axis=2)


class BregmanNgrammer(base_layer.BaseLayer):
  """An N-grammer over Bregman-PCA coefficients instead of discrete ids.

  Each head's bi-gram embedding is `sum_v corr_v * embedding_table[v]`,
  where corr_v correlates the previous and current positions' coefficients
  through `correlation[:, :, v]` (see `bigram_correlations`); it is
  layer-normed (`ngram_layer_norm_<i>`) and merged with the per-head
  layer-normed input (`emb_layer_norm_<i>`) as in `Ngrammer`.

  Variables: `correlation` [C, C, V, N], `embedding_table` [V, H', N].

  Attributes:
    ngram_vocab_size: V.
    ngram_emb_dim: H', depth of the bi-gram embeddings.
    concat_ngrams: Concatenate (True) or add the bi-gram embeddings.
    num_heads: N.
    dim_per_head: H.
    num_components: C.
    activation_type: See BregmanCompression (and the fields below).
    negative_slope: Negative slope of the leaky ReLU.
    mean_beta: EMA constant of the mean.
    coefficients_lr: Learning rate of the coefficients.
    coefficients_beta: EMA constant of the coefficient updates.
    coefficients_steps: Steps of the coefficient solver.
    components_lr: Learning rate of the components.
    components_beta: EMA constant of the component updates.
    start_step: First step that updates the components.
    end_step: Step after which they are no longer updated.
    constant_lr_schedule: Constant (else linearly decaying) components LR.
  """

  ngram_vocab_size: int = 768 * 256
  ngram_emb_dim: int = 8
  concat_ngrams: bool = True
  num_heads: int = 0
  dim_per_head: int = 0
  num_components: int = 0
  activation_type: bregman.ActivationType = bregman.ActivationType.IDENTITY
  negative_slope: float = 0.0
  mean_beta: float = 0.99
  coefficients_lr: float = 0.01
  coefficients_beta: float = 0.9
  coefficients_steps: int = 20
  components_lr: float = 0.01
  components_beta: float = 0.9
  start_step: int = 0
  end_step: int = 0
  constant_lr_schedule: bool = True

  def setup(self) -> None:
    ops.require_positive(self, 'dim_per_head', 'num_heads', 'num_components')
    if self.num_components > self.dim_per_head:
      raise ValueError(
          f'BregmanNgrammer ({self.name}): num_components='
          f'{self.num_components} must be at most dim_per_head='
          f'{self.dim_per_head}.')
    ops.check_emb_dims(self)
    self.create_children(
        'emb_layer_norm', ops.layer_norms(self.dim_per_head, self.num_heads))
    self.create_children(
        'ngram_layer_norm',
        ops.layer_norms(self.ngram_emb_dim, self.num_heads))
    c, v, n = self.num_components, self.ngram_vocab_size, self.num_heads
    for name, shape in (('correlation', [c, c, v, n]),
                        ('embedding_table', [v, self.ngram_emb_dim, n])):
      self.create_variable(name, WeightHParams(
          shape=shape, init=self.params_init,
          tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
          collections=[_MEAN_SYNC]))
    self.create_child('bregman_compression_layer', pax_fiddle.Config(
        BregmanCompression, params_init=self.params_init,
        num_heads=self.num_heads, dim_per_head=self.dim_per_head,
        num_components=self.num_components, **_pca_kwargs(self)))

  def __call__(
      self,
      input_ids: JTensor | None,
      input_embs: JTensor,
      paddings: JTensor | None = None,
      merge_heads: bool = True,
      **kwargs,
  ) -> JTensor:
    """The embeddings with bi-gram embeddings, [B, L, D] or [B, L, N, H].

    Args:
      input_ids: Unused (kept for the N-grammer interface).
      input_embs: [B, L, D].
      paddings: Optional [B, L]; padded positions become zero.
      merge_heads: Return [B, L, D] (else [B, L, N, H]).
      **kwargs: Unused.
    """
    del input_ids, kwargs
    input_embs = self._cast_to_fprop_dtype(input_embs)
    b, l = input_embs.shape[:2]
    input_embs = jnp.reshape(input_embs, [b, l, self.num_heads, -1])
    coeffs = self.bregman_compression_layer(input_embs, paddings)
    ngram_embs = []
    for i in range(self.num_heads):
      corr = bigram_correlations(
          coeffs[:, :, i, :], self.theta.correlation[..., i])
      embs = jnp.einsum('BLV,VH->BLH', corr,
                        self.theta.embedding_table[..., i])
      ngram_embs.append(self.ngram_layer_norm[i](embs))
    ngram_embs = jnp.stack(ngram_embs, axis=2)
    input_embs = ops.per_head_layer_norm(self.emb_layer_norm, input_embs)
    outputs = ops.merge_ngram_embs(input_embs, ngram_embs, self.concat_ngrams)
    return ops.finish_embs(outputs, paddings, merge_heads)
