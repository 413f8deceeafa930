"""Learning-rate schedules: multipliers of an optimizer's learning rate.

Public names:
  BaseSchedule, Constant, Polynomial, Linear, Exponential, Cosine,
  DelayedCosine, LinearRampupPolynomialDecay, LinearRampupCosineDecay,
  LinearRampupExponentialDecay, LinearRampupPiecewiseConstant,
  PiecewiseConstant, PiecewiseSchedule, CycleSchedule, Transformer, SqrtDecay,
  LinearRampupSqrtDecay, ContinuousSchedule, instantiate.

A schedule is a configurable object whose `value_at(step)` gives a float32
scalar for an integer step (a Python int or a scalar int array); it can be
traced by `jax.jit`. `BaseOptimizer` multiplies its `learning_rate` by it.
Where optax has the formula (polynomial, exponential and cosine decays,
joining pieces end to end) the schedule is that optax schedule; the rest are a
few lines of `jnp`. Bad fields fail when the schedule is built, with a message
naming the class and the field.

Example:

  cfg = pax_fiddle.Config(schedules.LinearRampupCosineDecay,
                          warmup_steps=100, decay_start=100, decay_end=1000,
                          max=1.0)
  schedule = schedules.instantiate(cfg)
  schedule.value_at(jnp.array(50))  # 0.5
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any

import fiddle as fdl
import jax
import jax.numpy as jnp
import optax

from praxis import base_hyperparams
from praxis import pytypes

JTensor = pytypes.JTensor
Schedule = Callable[[Any], Any]  # An optax schedule: step -> value.

instantiate = base_hyperparams.instantiate


# --- Formulas, as optax schedules where optax has them ---


def _polynomial(
    start: Sequence[float], limit: Sequence[float], power: float, origin: str
) -> Schedule:
  """(x0, y0) -> (x1, y1) by a polynomial; y0 before x0, y1 after x1.

  With r = (x - x0) / (x1 - x0), origin 'start' gives y0 + (y1 - y0) * r**p
  and origin 'limit' gives y1 + (y0 - y1) * (1 - r)**p (they agree for p=1).

  Args:
    start: (x0, y0).
    limit: (x1, y1), with x1 > x0.
    power: The power p.
    origin: 'start' or 'limit'.

  Returns:
    An optax schedule.
  """
  (x0, y0), (x1, y1) = start, limit
  if origin == 'limit':
    decay = optax.polynomial_schedule(y0, y1, power, x1 - x0)
    return lambda step: decay(step - x0)
  # The 'start' curve is optax's polynomial read backwards from x1.
  decay = optax.polynomial_schedule(y1, y0, power, x1 - x0)
  return lambda step: decay(x1 - step)


def _exponential(start: Sequence[float], limit: Sequence[float]) -> Schedule:
  """(x0, y0) -> (x1, y1) geometrically: y0 * (y1 / y0)**r, clamped."""
  (x0, y0), (x1, y1) = start, limit
  decay = optax.exponential_decay(
      init_value=y0, transition_steps=x1 - x0, decay_rate=y1 / y0,
      end_value=y1,
  )
  return lambda step: decay(step - x0)


def _cosine(y0: float, y1: float, steps: float) -> Schedule:
  """y1 + (y0 - y1) * (1 + cos(pi * min(x, steps) / steps)) / 2."""
  half_cosine = optax.cosine_decay_schedule(1.0, steps)
  return lambda step: y1 + (y0 - y1) * half_cosine(step)


def _piecewise_constant(
    boundaries: Sequence[int], values: Sequence[float]
) -> Schedule:
  """values[i] for boundaries[i-1] <= step < boundaries[i]."""
  values = jnp.asarray(values, jnp.float32)
  if not boundaries:
    return lambda step: values[0]
  edges = jnp.asarray(boundaries)
  return lambda step: values[jnp.searchsorted(edges, step, side='right')]


def _check(ok: bool, owner: Any, message: str) -> None:
  if not ok:
    raise ValueError(f'{type(owner).__name__}: {message}')


def _built(schedule: Any) -> BaseSchedule:
  """A schedule instance from an instance or a config of one."""
  if isinstance(schedule, fdl.Buildable):
    schedule = instantiate(schedule)
  if not isinstance(schedule, BaseSchedule):
    raise TypeError(f'Expected a schedule, got {schedule!r}.')
  return schedule


# --- Schedules ---


class BaseSchedule(base_hyperparams.FiddleBaseParameterizable):
  """Base of every schedule.

  Subclasses either return an optax schedule from `_schedule()` (checked when
  the object is built) or override `value_at`.
  """

  def __post_init__(self):
    self._fn = self._schedule()

  def _schedule(self) -> Schedule | None:
    return None

  def value_at(self, step: JTensor | int) -> JTensor:
    """The value of the schedule at `step`, a float32 scalar.

    Args:
      step: The step, an int or a scalar integer array (an unsigned step is
        read as int32, so that `x1 - step` past x1 is negative, not huge).

    Returns:
      A float32 array.
    """
    fn = getattr(self, '_fn', None)
    if fn is None:
      raise NotImplementedError(
          f'{type(self).__name__} must define value_at or _schedule.'
      )
    return jnp.asarray(fn(_signed(step)), jnp.float32)


def _signed(step: JTensor | int) -> JTensor:
  """`step` as an array; unsigned integers as int32."""
  step = jnp.asarray(step)
  if jnp.issubdtype(step.dtype, jnp.unsignedinteger):
    step = step.astype(jnp.int32)
  return step


class Constant(BaseSchedule):
  """A constant.

  Attributes:
    value: The constant value.
  """

  value: float = 1.0

  def _schedule(self) -> Schedule:
    return optax.constant_schedule(self.value)


class Polynomial(BaseSchedule):
  """A polynomial from (x0, y0) to (x1, y1), constant outside [x0, x1].

  Attributes:
    power: The polynomial power.
    start: (x0, y0).
    limit: (x1, y1).
    origin: 'start': y0 + (y1 - y0) * r**power; 'limit': y1 + (y0 - y1) *
      (1 - r)**power, where r = (x - x0) / (x1 - x0).
  """

  power: int = 1
  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 1.0)
  origin: str = 'start'

  def _schedule(self) -> Schedule:
    _check(len(self.start) == 2, self, f'start={self.start} must be (x0, y0).')
    _check(len(self.limit) == 2, self, f'limit={self.limit} must be (x1, y1).')
    _check(self.start[0] < self.limit[0], self,
           f'start[0]={self.start[0]} must be < limit[0]={self.limit[0]}.')
    _check(self.origin in ('start', 'limit'), self,
           f"origin must be 'start' or 'limit', got {self.origin!r}.")
    return _polynomial(self.start, self.limit, self.power, self.origin)


class Linear(Polynomial):
  """A line from (x0, y0) to (x1, y1), constant outside [x0, x1].

  Attributes:
    power: 1 (a `Polynomial` of power 1).
  """

  power: int = 1


class Exponential(BaseSchedule):
  """Geometric interpolation from (x0, y0) to (x1, y1): y0 * (y1 / y0)**r.

  Attributes:
    start: (x0, y0), with y0 > 0.
    limit: (x1, y1), with y1 > 0.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)

  def _schedule(self) -> Schedule:
    (x0, y0), (x1, y1) = self.start, self.limit
    _check(x0 < x1, self, f'start[0]={x0} must be < limit[0]={x1}.')
    _check(y0 > 0 and y1 > 0, self,
           f'start[1]={y0} and limit[1]={y1} must be > 0.')
    return _exponential(self.start, self.limit)


class Cosine(BaseSchedule):
  """Half a cosine from initial_value (step 0) to final_value (total_steps).

  Attributes:
    initial_value: The value at step 0.
    final_value: The value from total_steps on.
    total_steps: Steps of the decay (> 0).
  """

  initial_value: float = 1.0
  final_value: float = 0.0
  total_steps: int = 0

  def _schedule(self) -> Schedule:
    _check(self.total_steps > 0, self,
           f'total_steps must be > 0, got {self.total_steps}.')
    return _cosine(self.initial_value, self.final_value, self.total_steps)


class DelayedCosine(BaseSchedule):
  """Half a cosine from (x0, y0) to (x1, y1), constant outside [x0, x1].

  Attributes:
    start: (x0, y0), with y0 > 0.
    limit: (x1, y1), with y1 >= 0.
  """

  start: tuple[int, float] = (0, 1.0)
  limit: tuple[int, float] = (1, 0.5)

  def _schedule(self) -> Schedule:
    (x0, y0), (x1, y1) = self.start, self.limit
    _check(x0 < x1, self, f'start[0]={x0} must be < limit[0]={x1}.')
    _check(y0 > 0 and y1 >= 0, self,
           f'need start[1]={y0} > 0 and limit[1]={y1} >= 0.')
    cosine = _cosine(y0, y1, x1 - x0)
    return lambda step: cosine(jnp.maximum(step - x0, 0))


class _RampupHoldDecay(BaseSchedule):
  """Linear ramp 0 -> max, hold max, then decay to max * min_ratio.

  Attributes:
    warmup_steps: Steps of the linear ramp from 0 to max.
    decay_start: Step at which the decay starts (>= warmup_steps).
    decay_end: Step at which the decay ends (> decay_start).
    min_ratio: The value after decay_end is max * min_ratio.
    max: The peak value (> 0).
  """

  warmup_steps: int = 0
  decay_start: int = 0
  decay_end: int = 0
  min_ratio: float = 0.01
  max: float = 0.0

  def _decay(self) -> Schedule:
    """max -> max * min_ratio over [0, decay_end - decay_start]."""
    raise NotImplementedError

  def _schedule(self) -> Schedule:
    _check(self.decay_start >= self.warmup_steps, self,
           f'decay_start={self.decay_start} must be >= '
           f'warmup_steps={self.warmup_steps}.')
    _check(self.decay_end > self.decay_start, self,
           f'decay_end={self.decay_end} must be > '
           f'decay_start={self.decay_start}.')
    _check(self.max > 0, self, f'max must be set (> 0), got {self.max}.')
    pieces, boundaries = [], []
    if self.warmup_steps > 0:
      pieces.append(optax.linear_schedule(0.0, self.max, self.warmup_steps))
      boundaries.append(self.warmup_steps)
    if self.decay_start > self.warmup_steps:
      pieces.append(optax.constant_schedule(self.max))
      boundaries.append(self.decay_start)
    pieces.append(self._decay())
    return optax.join_schedules(pieces, boundaries)


class LinearRampupPolynomialDecay(_RampupHoldDecay):
  """Linear ramp-up to max, hold, then polynomial decay (see the base).

  Attributes:
    power: Power of the polynomial decay.
  """

  power: int = 1

  def _decay(self) -> Schedule:
    span = self.decay_end - self.decay_start
    return _polynomial((0, self.max), (span, self.max * self.min_ratio),
                       self.power, 'start')


class LinearRampupCosineDecay(_RampupHoldDecay):
  """Linear ramp-up to max, hold, then half-cosine decay (see the base)."""

  def _decay(self) -> Schedule:
    span = self.decay_end - self.decay_start
    return _cosine(self.max, self.max * self.min_ratio, span)


class LinearRampupExponentialDecay(_RampupHoldDecay):
  """Linear ramp-up to max, hold, then exponential decay (see the base)."""

  def _decay(self) -> Schedule:
    _check(self.min_ratio > 0, self,
           f'min_ratio must be > 0, got {self.min_ratio}.')
    span = self.decay_end - self.decay_start
    return _exponential((0, self.max), (span, self.max * self.min_ratio))


class PiecewiseConstant(BaseSchedule):
  """values[i] on [boundaries[i-1], boundaries[i]); values[-1] at the end.

  Attributes:
    boundaries: Sorted steps at which the value changes.
    values: One more value than boundaries.
  """

  boundaries: Sequence[int] | None = None
  values: Sequence[float] | None = None

  def _schedule(self) -> Schedule:
    _check(self.boundaries is not None and self.values is not None, self,
           'boundaries and values must be set.')
    _check(len(self.values) == len(self.boundaries) + 1, self,
           f'needs len(values)={len(self.values)} == len(boundaries) + 1 = '
           f'{len(self.boundaries) + 1}.')
    _check(list(self.boundaries) == sorted(self.boundaries), self,
           f'boundaries={self.boundaries} must be sorted.')
    return _piecewise_constant(self.boundaries, self.values)


class LinearRampupPiecewiseConstant(BaseSchedule):
  """Linear ramp 0 -> values[0] until boundaries[0], then piecewise constant.

  From boundaries[i] to boundaries[i+1] the value is values[i]; after
  boundaries[-1] it is values[-1].

  Attributes:
    boundaries: Sorted steps; boundaries[0] > 0 ends the ramp.
    values: One value per boundary.
  """

  boundaries: Sequence[int] | None = None
  values: Sequence[float] | None = None

  def _schedule(self) -> Schedule:
    _check(bool(self.boundaries) and self.values is not None
           and len(self.boundaries) == len(self.values), self,
           'needs at least one boundary and one value per boundary.')
    _check(self.boundaries[0] > 0, self,
           f'boundaries[0]={self.boundaries[0]} must be > 0.')
    first = self.boundaries[0]
    ramp = optax.linear_schedule(0.0, self.values[0], first)
    steps = _piecewise_constant(
        [b - first for b in self.boundaries[1:]], self.values
    )
    return optax.join_schedules([ramp, steps], [first])


class PiecewiseSchedule(BaseSchedule):
  """Sub-schedules one after another, each given steps relative to its start.

  Attributes:
    boundaries: Sorted steps between the sub-schedules.
    schedules: len(boundaries) + 1 schedules (or configs of them);
      schedules[i] runs on [boundaries[i-1], boundaries[i]).
  """

  boundaries: Sequence[int] | None = None
  schedules: Sequence[BaseSchedule] | None = None

  def _schedule(self) -> Schedule:
    _check(self.boundaries is not None and self.schedules is not None, self,
           'boundaries and schedules must be set.')
    _check(list(self.boundaries) == sorted(self.boundaries), self,
           f'boundaries={self.boundaries} must be sorted.')
    _check(len(self.schedules) == len(self.boundaries) + 1, self,
           f'needs len(schedules)={len(self.schedules)} == len(boundaries) '
           f'+ 1 = {len(self.boundaries) + 1}.')
    self._subs = [_built(s) for s in self.schedules]
    return optax.join_schedules([s.value_at for s in self._subs],
                                list(self.boundaries))


class CycleSchedule(BaseSchedule):
  """Sub-schedules in a cycle; each is given the absolute step.

  Attributes:
    schedules: The schedules (or configs of them).
    steps: How many steps each schedule runs per cycle.
  """

  schedules: Sequence[BaseSchedule] | None = None
  steps: Sequence[int] | None = None

  def _schedule(self) -> Schedule:
    _check(self.schedules is not None and self.steps is not None
           and len(self.schedules) == len(self.steps), self,
           'needs as many steps as schedules.')
    _check(sum(self.steps) > 0, self, f'steps={self.steps} sum to 0.')
    subs = [_built(s) for s in self.schedules]
    ends = [sum(self.steps[:i + 1]) for i in range(len(self.steps))]
    self._subs = subs

    def schedule(step):
      relative = jnp.mod(step, ends[-1])
      value = subs[0].value_at(step)
      for start, sub in zip(ends[:-1], subs[1:]):
        value = jnp.where(relative < start, value, sub.value_at(step))
      return value

    return schedule


class Transformer(BaseSchedule):
  """Inverse-square-root decay after a linear warm-up (Vaswani et al.).

  value = model_dim**-0.5 * min((s + 1) * w**-1.5, (s + 1)**-0.5), with
  w = warmup_steps * worker_replicas and s clamped to decay_end.

  Attributes:
    warmup_steps: Steps of the linear warm-up.
    model_dim: Model dimension.
    worker_replicas: Multiplies warmup_steps.
    decay_end: If set, the value stays constant after this step.
  """

  warmup_steps: int = 4000
  model_dim: int = 512
  worker_replicas: int = 1
  decay_end: int | None = None

  def _schedule(self) -> Schedule:
    warmup = float(self.warmup_steps * self.worker_replicas)
    _check(warmup > 0, self, 'warmup_steps * worker_replicas must be > 0.')

    def schedule(step):
      step = step.astype(jnp.float32)
      if self.decay_end is not None:
        step = jnp.minimum(step, float(self.decay_end))
      return self.model_dim**-0.5 * jnp.minimum(
          (step + 1) * warmup**-1.5, (step + 1) ** -0.5
      )

    return schedule


class SqrtDecay(BaseSchedule):
  """multiplier / sqrt(max(step - offset, decay_start)).

  Attributes:
    decay_start: Constant until this step, then inverse-sqrt decay.
    multiplier: Scales the value.
    offset: Subtracted from the step.
  """

  decay_start: int = 10000
  multiplier: float = 1.0
  offset: float = 0.0

  def _schedule(self) -> Schedule:
    _check(self.decay_start > 0, self, 'decay_start must be > 0.')
    return lambda step: self.multiplier * jax.lax.rsqrt(
        jnp.maximum(step.astype(jnp.float32) - self.offset,
                    float(self.decay_start))
    )


class LinearRampupSqrtDecay(BaseSchedule):
  """peak * min(s / warmup_steps, sqrt(warmup_steps / s)), s = max(step, 1).

  The Transformer schedule parameterised by its peak value.

  Attributes:
    peak: The value at step warmup_steps.
    warmup_steps: Steps of the linear warm-up.
  """

  peak: float = 1.0
  warmup_steps: int = 4000

  def _schedule(self) -> Schedule:
    _check(self.warmup_steps > 0, self, 'warmup_steps must be > 0.')
    warmup = float(self.warmup_steps)

    def schedule(step):
      step = jnp.maximum(step.astype(jnp.float32), 1.0)
      return self.peak * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

    return schedule


class ContinuousSchedule(BaseSchedule):
  """initial_value, halved every half_life_steps after start_step, >= min.

  Attributes:
    initial_value: The value until start_step.
    start_step: The decay starts here.
    half_life_steps: Steps to halve the value.
    min: The smallest relative value (0 < min < 1).
  """

  initial_value: float = 1.0
  start_step: int = 400_000
  half_life_steps: int = 100_000
  min: float = 0.01

  def _schedule(self) -> Schedule:
    _check(0 < self.min < 1 and self.half_life_steps > 0, self,
           'needs 0 < min < 1 and half_life_steps > 0.')
    end = self.start_step + self.half_life_steps * math.log(
        self.min) / math.log(0.5)
    decay = _exponential((self.start_step, 1.0), (end, self.min))
    return lambda step: self.initial_value * decay(step)
