"""Vector quantization layers (VQ-VAE and BEST-RQ random projection).

Public names: quantize_vector, VectorQuantizer, RandomVectorQuantizer.

Shapes in comments: B batch, T (or L) time, D latent dim, G codebook groups,
H = D // G per-group dim, C (or V) codebook entries per group.

Example:

  vq = base_layer.instantiate(pax_fiddle.Config(
      quantizer.VectorQuantizer, name='vq', num_latent_classes=64,
      latent_dim=16, beta=0.25))
  variables = vq.init(jax.random.PRNGKey(0), z, paddings)  # z [B, T, 16]
  out = vq.apply(variables, z, paddings)  # out.z_q, out.z_codes, out.loss
"""

from __future__ import annotations

import dataclasses
import string

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import linears
from praxis.layers import quantizer_objectives as objectives

JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams

_SKIP_LP = base_layer.WeightHParamsCollection.SKIP_LP_REGULARIZATION


def _l2_normalize(x: JTensor, axis: int, epsilon: float = 1e-12) -> JTensor:
  """x / sqrt(sum(x**2) + epsilon) along `axis`."""
  return x * jax.lax.rsqrt(jnp.sum(x * x, axis=axis, keepdims=True) + epsilon)


def quantize_vector(
    latent: JTensor, codebook: JTensor
) -> tuple[JTensor, JTensor, JTensor]:
  """Replaces each group of `latent` by its nearest codebook entry (L2).

  Args:
    latent: [..., G, H].
    codebook: [V, G, H]: V entries for each of the G groups.

  Returns:
    (quantized [..., G, H], codes [..., G] (int), one_hot [..., G, V]
    float32).
  """
  if codebook.ndim != 3:
    raise ValueError(f'codebook must be [V, G, H], got {codebook.shape}.')
  if latent.ndim < 2 or latent.shape[-2:] != codebook.shape[1:]:
    raise ValueError(
        f'latent [..., G, H] {latent.shape} does not match codebook [V, G, H] '
        f'{codebook.shape}.'
    )
  num_codes = codebook.shape[0]
  lead = string.ascii_uppercase[:latent.ndim - 2]
  # |x - c|^2 = |x|^2 - 2 x.c + |c|^2, as [..., G, V].
  cross = jnp.einsum(f'{lead}gh,vgh->{lead}gv', latent, codebook)
  distance = (
      jnp.sum(latent**2, axis=-1, keepdims=True)
      - 2 * cross
      + jnp.transpose(jnp.sum(codebook**2, axis=-1))
  )
  codes = jnp.argmin(distance, axis=-1)
  one_hot = jax.nn.one_hot(codes, num_codes, axis=-1, dtype=jnp.float32)
  quantized = jnp.einsum(f'{lead}gv,vgh->{lead}gh', one_hot, codebook)
  return quantized, codes, one_hot


def _codebook_stats(
    codes: JTensor, num_classes: int, paddings: JTensor
) -> tuple[JTensor, JTensor, JTensor]:
  """(pplx, entropy, coverage) of `codes`, summed over pmap when under it."""
  axis = None
  if base_layer.is_running_under_pmap():
    axis = base_layer.PMAP_PARALLEL_AXIS_NAME
  pplx, entropy, _ = objectives.batch_pplx_entropy_from_codes(
      codes, num_classes, paddings=paddings, data_parallel_axis=axis
  )
  coverage = objectives.batch_codebook_coverage(
      codes, num_classes, paddings=paddings, data_parallel_axis=axis
  )
  return pplx, entropy, coverage


def _apply_mask(x: JTensor, mask: JTensor) -> JTensor:
  """x * mask, with `mask` [B, T] broadcast over x's trailing dims."""
  mask = jnp.reshape(mask, mask.shape + (1,) * (x.ndim - mask.ndim))
  return x * mask.astype(x.dtype)


def _look_up(codes: JTensor, num_classes: int, codebook: JTensor) -> JTensor:
  """Codebook vectors [B, T, G * H] of `codes` [B, T, G]."""
  b, t = codes.shape[:2]
  one_hot = jax.nn.one_hot(codes, num_classes)
  latent = jnp.einsum('btgc,cgd->btgd', one_hot, codebook)
  return jnp.reshape(latent, [b, t, -1])


def _vq_loss(z: JTensor, z_q: JTensor, mask: JTensor, beta: float) -> JTensor:
  """Codebook loss plus `beta` times commitment loss, per unpadded frame.

  Args:
    z: [B, T, D] latents (already masked).
    z_q: [B, T, D] their quantized values (already masked).
    mask: [B, T], 1 for real frames.
    beta: Weight of the commitment loss.

  Returns:
    sum_frames mean_D (z_q - sg(z))^2 / N + beta * the same with the stop
    gradient on z_q, N the number of real frames.
  """
  stop = jax.lax.stop_gradient
  normalizer = 1e-7 + jnp.sum(mask)
  commit = jnp.sum(jnp.mean((z - stop(z_q)) ** 2, -1)) / normalizer
  codebook = jnp.sum(jnp.mean((z_q - stop(z)) ** 2, -1)) / normalizer
  return codebook + beta * commit


def _check_positive(layer: base_layer.BaseLayer, *fields: str) -> None:
  for field in fields:
    value = getattr(layer, field)
    if not value or value <= 0:
      raise ValueError(
          f'{type(layer).__name__} {layer.name!r}: `{field}` must be a '
          f'positive int, got {value!r}.'
      )


class RandomVectorQuantizer(base_layer.BaseLayer):
  """BEST-RQ random-projection quantizer (https://arxiv.org/abs/2202.01855).

  The input (optionally stacked `stack_ratio` frames at a time) is projected
  by `random_proj` + `random_bias` to `projection_dim`, split into
  `num_groups` groups and quantized against `random_codebook`. All outputs
  except the codebook statistics carry no gradient: the projection and the
  codebook are meant to stay frozen.

  Attributes:
    latent_dim: Input dimension.
    projection_dim: Projection dimension.
    num_latent_classes: Codebook entries per group.
    num_groups: Number of codebook groups.
    stack_ratio: Frames stacked (and strided over) before projecting.
    codebook_init: Initializer of the codebook.
    low_rank_codebook: With one group, store the codebook as
      [num_latent_classes, projection_dim] (older checkpoints).
    plot_codebook: Add the codebook as an image summary.
    normalize_latent_vector: L2-normalize the projected vectors.
    normalize_codebook: L2-normalize the codebook vectors.
    normalize_latent_per_group: Normalize each group of the projected vector
      (else the whole vector).
  """

  latent_dim: int | None = None
  projection_dim: int = 16
  num_latent_classes: int | None = None
  num_groups: int = 1
  stack_ratio: int = 1
  codebook_init: WeightInit = dataclasses.field(
      default_factory=WeightInit.Gaussian
  )
  low_rank_codebook: bool = False
  plot_codebook: bool = False
  normalize_latent_vector: bool = False
  normalize_codebook: bool = False
  normalize_latent_per_group: bool = True

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Attributes: vgh: mesh split of the codebook [V, G, H]."""

    vgh: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Attributes: blgh: mesh split of the projected input [B, L, G, H]."""

    blgh: SplitDimsMapping = None

  @property
  def _flat_codebook(self) -> bool:
    return self.num_groups == 1 and self.low_rank_codebook

  def setup(self) -> None:
    _check_positive(self, 'latent_dim', 'num_latent_classes', 'stack_ratio')
    if self.projection_dim % self.num_groups:
      raise ValueError(
          f'RandomVectorQuantizer {self.name!r}: `projection_dim` '
          f'{self.projection_dim} must divide by `num_groups` '
          f'{self.num_groups}.'
      )
    if self.stack_ratio != 1:
      self.create_child('stack', pax_fiddle.Config(
          linears.StackingOverTime,
          left_context=0,
          right_context=self.stack_ratio - 1,
          stride=self.stack_ratio,
          padding_reduce_option='reduce_max',
      ))
    input_dim = self.latent_dim * self.stack_ratio
    self.create_variable('random_proj', WeightHParams(
        shape=[input_dim, self.projection_dim],
        init=self.params_init,
        dtype=jnp.float32,
        collections=[_SKIP_LP],
    ))
    self.create_variable('random_bias', WeightHParams(
        shape=[self.projection_dim],
        init=WeightInit.Constant(0.0),
        dtype=jnp.float32,
        collections=[_SKIP_LP],
    ))
    split = self.weight_split_dims_mapping.vgh
    if self._flat_codebook:
      shape = [self.num_latent_classes, self.projection_dim]
      if split:
        split = [s for i, s in enumerate(split) if i != 1]
    else:
      shape = [
          self.num_latent_classes,
          self.num_groups,
          self.projection_dim // self.num_groups,
      ]
    self.create_variable('random_codebook', WeightHParams(
        shape=shape,
        init=self.codebook_init,
        dtype=jnp.float32,
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=split,
        collections=[_SKIP_LP],
    ))

  def _get_codebook(self) -> JTensor:
    """The codebook as [V, G, H] (normalized if asked)."""
    codebook = self.theta.random_codebook
    if self._flat_codebook:
      codebook = codebook[:, jnp.newaxis, :]
      split = self.weight_split_dims_mapping.vgh
      if split:
        split = list(split)
        split[1] = None
      codebook = base_layer.maybe_shard(
          codebook, split, self.mesh_axis_names
      )
    if self.normalize_codebook:
      codebook = _l2_normalize(codebook, -1)
    return codebook

  def _project(self, z: JTensor) -> JTensor:
    """[B, L, D_z] -> the normalized projection [B, L, G, H]."""
    proj = jnp.einsum('dh,bld->blh', self.theta.random_proj, z)
    proj = proj + self.theta.random_bias
    per_group = self.normalize_latent_per_group
    if self.normalize_latent_vector and not per_group:
      proj = _l2_normalize(proj, -1)
    b, l, d = proj.shape
    proj = jnp.reshape(proj, [b, l, self.num_groups, d // self.num_groups])
    proj = base_layer.maybe_shard(
        proj, self.activation_split_dims_mapping.blgh, self.mesh_axis_names
    )
    if self.normalize_latent_vector and per_group:
      proj = _l2_normalize(proj, -1)
    return proj

  def __call__(self, z: JTensor, paddings: JTensor) -> NestedMap:
    """Quantizes `z` [B, L, D_z] (paddings [B, L]).

    Returns:
      NestedMap of z_q [B, L', D], z_codes [B, L', G], z_onehot
      [B, L', G, V], paddings [B, L'] (L' = L / stack_ratio, rounded up),
      codebook_coverage, codebook_num_covered_codes, pplx and entropy
      (scalars).
    """
    if self.stack_ratio > 1:
      z, paddings = self.stack(z, paddings[:, :, jnp.newaxis])
      paddings = jnp.squeeze(paddings, -1)
    proj = self._project(z)
    codebook = self._get_codebook()
    if self.plot_codebook:
      plots = jnp.einsum('cgd->gcd', codebook)
      plots = jnp.tile(plots[..., jnp.newaxis], [1, 1, 1, 3])
      self.add_summary(
          'codebook', plots, summary_type=base_layer.SummaryType.IMAGE
      )
    q, codes, onehot = quantize_vector(proj, codebook)
    b, l = q.shape[:2]
    q = jnp.reshape(q, [b, l, -1])
    pplx, entropy, coverage = _codebook_stats(
        codes, self.num_latent_classes, paddings
    )
    stop = jax.lax.stop_gradient
    return NestedMap(
        z_q=stop(q),
        z_codes=stop(codes),
        z_onehot=stop(onehot),
        paddings=stop(paddings),
        codebook_coverage=coverage,
        codebook_num_covered_codes=coverage * self.num_latent_classes,
        pplx=pplx,
        entropy=entropy,
    )

  def look_up(self, z_codes: JTensor) -> JTensor:
    """Codebook vectors [B, T, D] of `z_codes` [B, T, G] (no gradient)."""
    latent = _look_up(z_codes, self.num_latent_classes, self._get_codebook())
    return jax.lax.stop_gradient(latent)


class VectorQuantizer(base_layer.BaseLayer):
  """The VQ-VAE sequence vector quantizer (https://arxiv.org/abs/1711.00937).

  The codebook `w` is [C, G, D // G]. Padded frames quantize to zeros and
  code 0. `loss` is the codebook loss |sg(z) - z_q|^2 plus `beta` times the
  commitment loss |z - sg(z_q)|^2, each the mean over D summed over unpadded
  frames and divided by their number. `z_q` passes the gradient straight
  through to `z`.

  Attributes:
    num_latent_classes: Codebook entries (per group).
    latent_dim: Latent vector dimension D.
    beta: Weight of the commitment loss (>= 0).
    num_groups: Codebook groups G (D must divide by G).
    normalize_latent_vector: L2-normalize the latent vectors.
    normalize_codebook: L2-normalize the codebook vectors.
    normalize_latent_per_group: Normalize each group of a latent vector
      (else the whole vector).
  """

  num_latent_classes: int | None = None
  latent_dim: int | None = None
  beta: float | None = None
  num_groups: int = 1
  normalize_latent_vector: bool = True
  normalize_codebook: bool = True
  normalize_latent_per_group: bool = True
  params_init: WeightInit = base_layer.instance_field(
      WeightInit.UniformSqrtDim
  )

  def setup(self) -> None:
    _check_positive(self, 'num_latent_classes', 'latent_dim', 'num_groups')
    if self.beta is None or self.beta < 0:
      raise ValueError(
          f'VectorQuantizer {self.name!r}: `beta` must be a float >= 0, got '
          f'{self.beta!r}.'
      )
    if self.latent_dim % self.num_groups:
      raise ValueError(
          f'VectorQuantizer {self.name!r}: `latent_dim` {self.latent_dim} '
          f'must divide by `num_groups` {self.num_groups}.'
      )
    self.create_variable('w', WeightHParams(
        shape=[
            self.num_latent_classes,
            self.num_groups,
            self.latent_dim // self.num_groups,
        ],
        dtype=jnp.float32,
    ))

  def _get_latent_embedding(self) -> JTensor:
    w = self.theta.w
    return _l2_normalize(w, -1) if self.normalize_codebook else w

  def __call__(self, z: JTensor, paddings: JTensor) -> NestedMap:
    """Quantizes `z` [B, T, D] (paddings [B, T]).

    Returns:
      NestedMap of z_q [B, T, D], z_codes [B, T, G], z_onehot [B, T, G, C],
      and the scalars loss, codebook_coverage, codebook_num_covered_words,
      pplx and entropy.
    """
    b, t, d = z.shape
    g, c = self.num_groups, self.num_latent_classes
    mask = 1.0 - paddings
    z = _apply_mask(z, mask)
    per_group = self.normalize_latent_per_group
    if self.normalize_latent_vector and not per_group:
      z = _l2_normalize(z, axis=-1)
    grouped = jnp.reshape(z, [b, t, g, d // g])
    if self.normalize_latent_vector and per_group:
      grouped = _l2_normalize(grouped, axis=-1)
    z_q, z_codes, z_onehot = quantize_vector(
        grouped, self._get_latent_embedding()
    )
    z_q = _apply_mask(jnp.reshape(z_q, [b, t, d]), mask)
    z_codes = _apply_mask(z_codes, mask)
    z_onehot = _apply_mask(z_onehot, mask)
    loss = _vq_loss(z, z_q, mask, self.beta)
    z_q = z + jax.lax.stop_gradient(z_q - z)  # Straight-through estimator.
    pplx, entropy, coverage = _codebook_stats(z_codes, c, paddings)
    return NestedMap(
        z_q=z_q,
        z_codes=z_codes,
        z_onehot=z_onehot,
        loss=loss,
        codebook_coverage=coverage,
        codebook_num_covered_words=coverage * c**g,
        pplx=pplx,
        entropy=entropy,
    )

  def look_up(self, z_codes: JTensor) -> JTensor:
    """Codebook vectors [B, T, D] of `z_codes` [B, T, G]."""
    return _look_up(
        z_codes, self.num_latent_classes, self._get_latent_embedding()
    )

