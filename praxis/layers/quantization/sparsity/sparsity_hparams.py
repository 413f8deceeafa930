"""Hyper-parameters of sparsity (pruning) of a layer's weights.

Public: `SparsityScore`, `SparsityType`, `SparsityOrder`,
`PolynomialDecayParams`, `WeightSparsityParams`, `SparsityHParams`.
"""

from __future__ import annotations

import dataclasses
import enum

from praxis.layers.quantization.sparsity import sparsity_modes

BaseSparsityScheduleMode = sparsity_modes.BaseSparsityScheduleMode


class SparsityConfigError(ValueError, AssertionError):
  """A bad sparsity setting (a ValueError; an AssertionError as in Pax)."""

InferenceMode = sparsity_modes.InferenceMode
FewShotMode = sparsity_modes.FewShotMode


@enum.unique
class SparsityScore(str, enum.Enum):
  """How weights are ranked: by magnitude, or weighted by activations."""

  MAGNITUDE = 'magnitude'
  ACTIVATION_WEIGHTED = 'activation_weighted'


@enum.unique
class SparsityType(str, enum.Enum):
  """N:M structured, unstructured, or channel-wise pruning."""

  STRUCTURED_NM = 'structured_nm'
  UNSTRUCTURED = 'unstructured'
  CHANNELWISE_PRUNING = 'channelwise_pruning'


@enum.unique
class SparsityOrder(str, enum.Enum):
  """N:M groups run down columns (C) or along rows (R)."""

  C = 'C'
  R = 'R'


@dataclasses.dataclass
class PolynomialDecayParams:
  """Polynomial schedule of the unstructured sparsity (in percent).

  sparsity(step) = final + (initial - final) *
      (1 - (step - begin_step) / (end_step - begin_step)) ** exponent
  """

  initial_sparsity: float = 10.0
  final_sparsity: float = 70.0
  begin_step: int = 0
  end_step: int = 50_000
  exponent: float = 3.0


@dataclasses.dataclass
class WeightSparsityParams:
  """Pruning of a weight.

  Attributes:
    prune_rate: None (no pruning), (N, M) for N:M sparsity, or a float rate
      for unstructured / channel-wise pruning.
    structure_decay: Decay the N:M structure over training.
    mask_decay_weight: Per-update decay of the pruned values' mask (0: off).
    sparse_ste: Use the sparse-refined straight-through estimator (SR-STE).
    sparse_ste_weight: Weight of SR-STE's refining term.
    offset: Stride between the M elements of a group (0: adjacent).
    pruned_value: Value of pruned weights (instead of 0).
    pruned_value_trainable: Learn `pruned_value`.
  """

  prune_rate: None | float | tuple[int, int]
  structure_decay: bool = False
  mask_decay_weight: float = 0.0
  sparse_ste: bool = False
  sparse_ste_weight: float = 0.0002
  offset: int = 0
  pruned_value: float = 0.0
  pruned_value_trainable: bool = False

  def __post_init__(self):
    if self.mask_decay_weight < 0.0:
      raise SparsityConfigError(
          f'WeightSparsityParams: invalid value {self.mask_decay_weight}. '
          '`mask_decay_weight` must be positive.')
    if self.sparse_ste_weight < 0.0:
      raise SparsityConfigError(
          f'WeightSparsityParams: invalid value {self.sparse_ste_weight}. '
          '`sparse_ste_weight` must be positive (uses SR-STE) or 0 (uses '
          'STE).')
    if self.sparse_ste and self.mask_decay_weight != 0.0:
      raise ValueError('SR-STE only works with non-decaying mask.')
    if self.sparse_ste and self.structure_decay:
      raise ValueError('SR-STE only works with non-decaying sparse structure.')
    if self.offset < 0:
      raise SparsityConfigError(
          f'WeightSparsityParams.offset must be >= 0, got {self.offset}.')


@dataclasses.dataclass
class SparsityHParams:
  """Sparsity of a layer.

  Attributes:
    sparsity_type: N:M structured, unstructured or channel-wise.
    weight_params: The weight's pruning (None: no weight sparsity).
    mode: When masks are updated (a `BaseSparsityScheduleMode`).
    score: How weights are ranked.
    sparsified_layers: Indices of the layers sparsified (None: all).
    polynomial_decay_schedule: Schedule of unstructured sparsity.
    order: N:M groups down columns (C, the contraction of a weight) or rows.
    track_sad_metric: Track the sparse architecture divergence metric.
    topk_estimator_type: Learned top-k mask estimator, if any.
    channelwise_pruning_dim: The dim pruned by channel-wise pruning.
    block_size: Values per block of block N:M sparsity (0: off).
  """

  sparsity_type: SparsityType = SparsityType.STRUCTURED_NM
  weight_params: WeightSparsityParams | None = None
  mode: BaseSparsityScheduleMode = dataclasses.field(
      default_factory=InferenceMode)
  score: SparsityScore = SparsityScore.MAGNITUDE
  sparsified_layers: list[int] | None = None
  polynomial_decay_schedule: PolynomialDecayParams | None = None
  order: SparsityOrder = SparsityOrder.C
  track_sad_metric: bool = False
  topk_estimator_type: str | None = None
  channelwise_pruning_dim: int = -1
  block_size: int = 0

  def __post_init__(self):
    wp = self.weight_params
    if wp is None:
      return
    rate = wp.prune_rate
    if self.sparsity_type == SparsityType.STRUCTURED_NM:
      if rate is not None and not (
          isinstance(rate, tuple) and len(rate) == 2):
        raise SparsityConfigError(
            'Prune rate must be either None for no pruning or a Tuple[int, '
            'int] for N:M structured sparsity '
            f'(WeightSparsityParams.prune_rate={rate!r}).')
      if rate is not None and not 0 <= rate[0] <= rate[1]:
        raise SparsityConfigError(
            f'WeightSparsityParams.prune_rate {rate}: N:M needs 0 <= N <= M.')
    elif self.sparsity_type in (SparsityType.UNSTRUCTURED,
                                SparsityType.CHANNELWISE_PRUNING):
      if rate is not None and not isinstance(rate, float):
        raise SparsityConfigError(
            'Prune rate must be either None or float for '
            f'{SparsityType(self.sparsity_type).value} sparsity '
            f'(WeightSparsityParams.prune_rate={rate!r}).')
      if wp.sparse_ste:
        raise ValueError('SR-STE only works with structured sparsity.')
    else:
      raise ValueError(f'Unrecognized sparsity type {self.sparsity_type}.')
    if self.order not in ('C', 'R'):
      raise ValueError(f'Index order {self.order} not supported.')
    if self.block_size < 0:
      raise SparsityConfigError(
          f'SparsityHParams.block_size must be >= 0, got {self.block_size}.')
    if self.block_size and self.sparsity_type != SparsityType.STRUCTURED_NM:
      raise ValueError(
          f'Block size {self.block_size} not supported for unstructured '
          'sparsity.')
