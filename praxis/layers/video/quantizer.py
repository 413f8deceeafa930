"""Quantizers without a learned codebook, for video VQ-VAEs.

Public names: ScalarQuantizer, LookupFreeQuantizer.

`LookupFreeQuantizer` (LFQ, MAGVIT-v2, https://arxiv.org/abs/2310.05737)
maps each channel to its sign (+1 / -1); the token id of a vector is its
sign bits read as a binary number (channel i is bit i, within each of
`num_token_groups` groups). In training it returns a commitment loss and an
entropy loss that asks for confident per-sample codes and a uniform use of
the codes over the batch. `ScalarQuantizer` (FSQ,
https://arxiv.org/abs/2309.15505) bounds each channel and rounds it to one of
`dim_widths[i]` levels. Both pass gradients straight through the rounding.

Example:

  lfq = base_layer.instantiate(pax_fiddle.Config(
      quantizer.LookupFreeQuantizer, name='lfq', embedding_dim=8))
  quantized, info = lfq.apply({}, latents)  # latents [..., 8]
  ids = info.encoding_indices  # [...], in [0, 256)
"""

from __future__ import annotations

from collections.abc import Sequence
import math

import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap

_EPS = 1e-5


def _bit_weights(embedding_dim: int, group_size: int) -> JTensor:
  """2 ** (i mod group_size) for each channel i, as uint32."""
  return jnp.power(
      2, jnp.arange(embedding_dim, dtype=jnp.uint32) % group_size
  )


def _get_indices(
    bits: JTensor, bit_weights: JTensor, group_size: int
) -> JTensor:
  """Token ids [..., groups] (or [...] for one group) of 0/1 `bits` [..., D].

  Channels are cut into groups of `group_size` (the last one zero-padded);
  a group's id is the sum of its bits times `bit_weights`.
  """
  weighted = bits * bit_weights
  pad = (group_size - weighted.shape[-1] % group_size) % group_size
  weighted = jnp.concatenate(
      [weighted, jnp.zeros((*weighted.shape[:-1], pad), jnp.uint32)], axis=-1
  )
  ids = weighted.reshape(*weighted.shape[:-1], -1, group_size).sum(axis=-1)
  return ids[..., 0] if ids.shape[-1] == 1 else ids


def _sign_codebook(embedding_dim: int) -> np.ndarray:
  """All 2**D vectors of +-1; row i has +1 at channel k iff bit k of i is 1."""
  ids = np.arange(2**embedding_dim)[:, None]
  bits = (ids >> np.arange(embedding_dim)[None, :]) & 1
  return bits.astype(np.float64) * 2.0 - 1.0


def _entropy_loss(
    affinity: JTensor,
    loss_type: str = 'softmax',
    temperature: float = 1.0,
    sample_minimization_weight: float = 1.0,
    batch_maximization_weight: float = 1.0,
) -> JTensor:
  """Per-sample entropy (weighted) minus entropy of the batch-mean code.

  Args:
    affinity: [..., K] scores of the K codes (higher: closer).
    loss_type: 'softmax' (soft code probabilities) or 'argmax' (one-hot
      codes with softmax gradients).
    temperature: Divides the affinity.
    sample_minimization_weight: Weight of the mean per-sample entropy.
    batch_maximization_weight: Weight of the entropy of the mean code.

  Returns:
    The scalar loss.
  """
  flat = affinity.reshape(-1, affinity.shape[-1]) / temperature
  probs = jax.nn.softmax(flat, axis=-1)
  log_probs = jax.nn.log_softmax(flat + _EPS, axis=-1)
  if loss_type == 'softmax':
    target = probs
  elif loss_type == 'argmax':
    one_hot = jax.nn.one_hot(
        jnp.argmax(flat, axis=-1), flat.shape[-1], dtype=flat.dtype
    )
    target = probs - jax.lax.stop_gradient(probs - one_hot)
  else:
    raise ValueError(
        f"entropy_loss_type must be 'softmax' or 'argmax', got {loss_type!r}."
    )
  avg_probs = jnp.mean(target, axis=0)
  avg_entropy = -jnp.sum(avg_probs * jnp.log(avg_probs + _EPS))
  sample_entropy = -jnp.mean(jnp.sum(target * log_probs, axis=-1))
  return (sample_minimization_weight * sample_entropy
          - batch_maximization_weight * avg_entropy)


def _outer_product_probs(bit_probs: JTensor) -> JTensor:
  """[N, 2] per-bit probabilities -> the [2**N] joint (independent bits)."""
  grid = jnp.meshgrid(*bit_probs, indexing='ij')
  return jnp.prod(jnp.stack(grid), axis=0).reshape(-1)


def _group_mean_entropy(bit_probs: JTensor) -> JTensor:
  """Entropy of the batch-mean joint code of one group, [batch, N, 2]."""
  joint = jax.vmap(_outer_product_probs)(bit_probs)
  avg = jnp.mean(joint, axis=0)
  return -(avg * jnp.log(avg + _EPS)).sum()


def _factorized_entropy_loss(
    affinity: JTensor,
    group_size: int,
    temperature: float,
    average_entropy_weight: float = 1.0,
) -> JTensor:
  """The entropy loss over binary channels, factorized per channel.

  The per-sample entropy factorizes exactly over channels; the entropy of
  the batch-mean code is approximated within groups of `group_size`
  channels (both contiguous and strided groups when there are several).

  Args:
    affinity: [..., D, 2] scores of the two values of each channel.
    group_size: Channels per group of the batch entropy.
    temperature: Divides the affinity.
    average_entropy_weight: Weight of the batch entropy.

  Returns:
    sample entropy - weight * mean group batch entropy.
  """
  affinity = affinity.reshape(-1, *affinity.shape[-2:]) / temperature
  probs = jax.nn.softmax(affinity, axis=-1)
  log_probs = jax.nn.log_softmax(affinity + _EPS, axis=-1)
  sample_entropy = -(probs * log_probs).sum(axis=(-1, -2)).mean()
  n = probs.shape[0]
  groups = probs.reshape(n, -1, group_size, 2)
  if groups.shape[1] > 1 and groups.shape[2] > 1:
    strided = probs.reshape(n, group_size, -1, 2).transpose((0, 2, 1, 3))
    groups = jnp.concatenate([groups, strided], axis=1)
  group_entropy = jax.vmap(_group_mean_entropy, in_axes=1)(groups)
  return sample_entropy - group_entropy.mean() * average_entropy_weight


class ScalarQuantizer(base_layer.BaseLayer):
  """Finite scalar quantizer: channel i rounded to `dim_widths[i]` levels.

  Each channel is bounded (sin or tanh) to about +-width/2, rounded (with a
  straight-through gradient) and centered; the id of a vector is its levels
  read as a mixed-radix number (channel 0 most significant).

  Attributes:
    embedding_dim: Channels (informational; `dim_widths` decides).
    dim_widths: Number of levels of each channel.
    bound_method: 'sine' or 'tanh'.
    eps: Shrinks the bound slightly so rounding stays in range.
  """

  embedding_dim: int = 8
  dim_widths: Sequence[int] = (8, 8, 4, 4, 4, 4, 4, 4)
  bound_method: str = 'sine'
  eps: float = 1e-3

  def _widths(self) -> JTensor:
    return jnp.asarray(self.dim_widths, np.int32)

  def _middle(self) -> JTensor:
    """Center offset: -0.5 for even widths, 0 for odd."""
    widths = self._widths()
    return (widths - widths // 2 * 2 - 1) / 2

  def _bound_embedding(self, z: JTensor) -> JTensor:
    widths = self._widths()
    half = widths * (1 - self.eps) / 2
    offset = jnp.where(widths % 2 == 1, 0.0, 0.5)
    if self.bound_method == 'sine':
      return jnp.sin(z) * half - offset
    if self.bound_method == 'tanh':
      return jnp.tanh(z) * half - offset
    raise ValueError(
        f"ScalarQuantizer {self.name!r}: `bound_method` must be 'sine' or "
        f"'tanh', got {self.bound_method!r}."
    )

  def _get_indices(self, z: JTensor) -> tuple[JTensor, JTensor]:
    """(ids [...], z clipped to each channel's level range)."""
    widths = self._widths()
    left = -(widths // 2)
    right = widths + left - 1
    clipped = jnp.clip(z, left, right)
    levels = clipped - left
    if levels.dtype != jnp.int32:
      levels = jnp.clip(jnp.round(levels).astype(jnp.int32), 0, widths - 1)
    ids = jnp.zeros(levels.shape[:-1], dtype=jnp.int32)
    for i, width in enumerate(self.dim_widths):
      ids = ids * width + levels[..., i]
    return ids, clipped

  def __call__(self, inputs: JTensor) -> tuple[JTensor, NestedMap]:
    """Quantizes [..., len(dim_widths)]; returns (quantized, info)."""
    if len(self.dim_widths) != inputs.shape[-1]:
      raise ValueError(
          f'ScalarQuantizer {self.name!r}: `dim_widths` has '
          f'{len(self.dim_widths)} entries but the inputs {inputs.shape} have '
          f'{inputs.shape[-1]} channels.'
      )
    bounded = self._bound_embedding(inputs)
    quantized = bounded + jax.lax.stop_gradient(jnp.round(bounded) - bounded)
    ids, clipped = self._get_indices(quantized)
    if self.do_eval:
      quantized = clipped
    middle = self._middle()
    info = NestedMap(
        raw=bounded - middle,
        quantized=quantized - middle,
        encoding_indices=ids,
        quantizer_loss=0.0,
    )
    return quantized - middle, info

  def decode_ids(self, ids: JTensor) -> JTensor:
    """The centered quantized vectors [..., D] of `ids` [...]."""
    if ids.dtype != jnp.int32:
      ids = jnp.round(ids).astype(jnp.int32)
    widths = self._widths()
    digits = []
    for width in self.dim_widths[::-1]:
      digits.append(jnp.mod(ids, width))
      ids = ids // width
    vals = jnp.stack(digits[::-1], axis=-1) - widths // 2
    return vals - self._middle()


class LookupFreeQuantizer(base_layer.BaseLayer):
  """Lookup-free quantizer: each channel becomes +1 or -1.

  Returns (quantized, info); info has `encodings` (= quantized),
  `encoding_indices`, `raw` (the inputs) and, in training,
  `quantizer_loss` = `e_latent_loss` + `entropy_loss`.

  Attributes:
    embedding_dim: Channels D.
    num_token_groups: Ids per vector (D split into this many groups).
    entropy_loss_ratio: Weight of the entropy loss.
    commitment_cost: Weight of the commitment loss mean((sg(q) - x)^2).
    entropy_loss_groups: 1: exact entropy over all 2**D codes; more: the
      factorized approximation with D / groups channels per group.
    entropy_loss_type: 'softmax' or 'argmax' (one group only).
    entropy_temperature: Softmax temperature of the code probabilities.
    entropy_loss_balance: Weight of the batch entropy.
  """

  embedding_dim: int = 8
  num_token_groups: int = 1
  entropy_loss_ratio: float = 0.1
  commitment_cost: float = 0.25
  entropy_loss_groups: int = 1
  entropy_loss_type: str = 'softmax'
  entropy_temperature: float = 0.01
  entropy_loss_balance: float = 1.0

  @property
  def _group_size(self) -> int:
    return int(math.ceil(self.embedding_dim / self.num_token_groups))

  def _entropy_loss(self, inputs: JTensor) -> JTensor:
    if self.entropy_loss_ratio == 0:
      return jnp.asarray(0.0, dtype=jnp.float32)
    if self.entropy_loss_groups > 1:
      if self.entropy_loss_type != 'softmax':
        raise ValueError(
            f'LookupFreeQuantizer {self.name!r}: entropy_loss_type '
            f'{self.entropy_loss_type!r} is not supported with '
            'entropy_loss_groups > 1 (only softmax).'
        )
      affinity = jnp.stack([2 * inputs, -2 * inputs], axis=-1)
      loss = _factorized_entropy_loss(
          affinity, self.embedding_dim // self.entropy_loss_groups,
          self.entropy_temperature, self.entropy_loss_balance,
      )
    else:
      codebook = jnp.asarray(_sign_codebook(self.embedding_dim).T)
      # -distance to each code, up to terms equal for all codes.
      affinity = 2 * inputs @ codebook
      loss = _entropy_loss(
          affinity,
          loss_type=self.entropy_loss_type,
          temperature=self.entropy_temperature,
          batch_maximization_weight=self.entropy_loss_balance,
      )
    return loss * self.entropy_loss_ratio

  def __call__(self, inputs: JTensor) -> tuple[JTensor, NestedMap]:
    """Quantizes [..., embedding_dim]; returns (quantized, info)."""
    info = NestedMap()
    bits = inputs >= 0
    quantized = jnp.where(bits, 1.0, -1.0)
    ids = _get_indices(
        bits, _bit_weights(self.embedding_dim, self._group_size),
        self._group_size,
    )
    if not self.do_eval:
      e_latent_loss = self.commitment_cost * jnp.mean(
          (jax.lax.stop_gradient(quantized) - inputs) ** 2
      )
      entropy_loss = self._entropy_loss(inputs)
      info.quantizer_loss = e_latent_loss + entropy_loss
      info.e_latent_loss = e_latent_loss
      info.entropy_loss = entropy_loss
      quantized = inputs + jax.lax.stop_gradient(quantized - inputs)
    info.encodings = quantized
    info.encoding_indices = ids
    info.raw = inputs
    return quantized, info

  def decode_ids(self, ids: JTensor) -> JTensor:
    """The +-1 vectors [..., embedding_dim] of `ids`."""
    weights = _bit_weights(self.embedding_dim, self._group_size)
    if self.num_token_groups == 1:
      ids = ids[..., None]
    per_channel = jnp.repeat(ids, self._group_size, axis=-1)
    per_channel = per_channel[..., :weights.shape[0]]
    return jnp.where(per_channel & weights, 1.0, -1.0)
