"""When sparsity masks are (re)computed: training, one-shot, few-shot, ....

Public: `BaseSparsityScheduleMode`, `TrainingMode`, `OneShotMode`,
`FewShotMode`, `MaterializeMode`, `InferenceMode`.
"""

from __future__ import annotations

import abc
import dataclasses

from jax import numpy as jnp
from praxis import pytypes

JTensor = pytypes.JTensor


@dataclasses.dataclass
class BaseSparsityScheduleMode(abc.ABC):
  """Decides at which steps the masks are updated."""

  @abc.abstractmethod
  def update_cond(self, step: int, mask_update_times: int) -> JTensor:
    """Whether to update the mask at `step` after `mask_update_times`."""

  @abc.abstractmethod
  def get_num_shots(self) -> int:
    """Number of mask updates (-1: unlimited, 0: none)."""


@dataclasses.dataclass
class TrainingMode(BaseSparsityScheduleMode):
  """Updates the mask at every step from `target_step` on."""

  target_step: int = 0

  def update_cond(self, step, mask_update_times):
    del mask_update_times
    return jnp.greater_equal(step, self.target_step)

  def get_num_shots(self) -> int:
    return -1


@dataclasses.dataclass
class OneShotMode(BaseSparsityScheduleMode):
  """Updates the mask once, at `target_step`."""

  target_step: int = 0

  def update_cond(self, step, mask_update_times):
    return jnp.logical_and(jnp.equal(step, self.target_step),
                           jnp.less(mask_update_times, 1))

  def get_num_shots(self) -> int:
    return 1


@dataclasses.dataclass
class MaterializeMode(BaseSparsityScheduleMode):
  """Never updates the mask (masks are being materialized)."""

  def update_cond(self, step, mask_update_times):
    del step, mask_update_times
    return jnp.bool_(False)

  def get_num_shots(self) -> int:
    return -1


@dataclasses.dataclass
class InferenceMode(BaseSparsityScheduleMode):
  """Never updates the mask (serving)."""

  def update_cond(self, step, mask_update_times):
    del step, mask_update_times
    return jnp.bool_(False)

  def get_num_shots(self) -> int:
    return 0


@dataclasses.dataclass
class FewShotMode(BaseSparsityScheduleMode):
  """Updates the mask `num_shots` times, every `mask_update_interval` steps
  from `target_step`.

  Attributes:
    num_shots: Number of updates (> 1).
    mask_update_interval: Steps between two updates.
    target_step: Step of the first update.
    next_target_step: Step of the next update.
  """

  num_shots: int = 0
  mask_update_interval: int = 1
  target_step: int = 0
  next_target_step: int = 0

  def __post_init__(self):
    if self.num_shots <= 1:
      raise ValueError(
          f'FewShotMode.num_shots must be > 1, got {self.num_shots}.')
    self.next_target_step = self.target_step

  def update_cond(self, step, mask_update_times):
    return jnp.logical_and(jnp.equal(step, self.next_target_step),
                           jnp.less(mask_update_times, self.num_shots))

  def increment_target_step(self, mask_update_times: int) -> None:
    self.next_target_step = (
        self.target_step + mask_update_times * self.mask_update_interval)

  def get_num_shots(self) -> int:
    return self.num_shots
