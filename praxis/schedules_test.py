"""Tests of praxis.schedules: each value against its formula in Python math."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import pax_fiddle
from praxis import schedules
from praxis import test_utils

STEPS = [0, 1, 3, 5, 9, 10, 11, 15, 20, 25, 30, 39, 40, 41, 60, 200]


def _clamp(x, lo, hi):
  return min(max(x, lo), hi)


def _polynomial(x, x0, y0, x1, y1, power, origin='start'):
  r = _clamp((x - x0) / (x1 - x0), 0.0, 1.0)
  if origin == 'start':
    return y0 + (y1 - y0) * r**power
  return y1 + (y0 - y1) * (1 - r) ** power


def _exponential(x, x0, y0, x1, y1):
  r = _clamp((x - x0) / (x1 - x0), 0.0, 1.0)
  return math.exp(math.log(y0) + r * (math.log(y1) - math.log(y0)))


def _cosine(x, x0, y0, x1, y1):
  r = _clamp((x - x0) / (x1 - x0), 0.0, 1.0)
  return y1 + 0.5 * (y0 - y1) * (1 + math.cos(math.pi * r))


def _ramp_hold(x, warmup, decay_start, peak, decay):
  if x < warmup:
    return peak * x / warmup
  if x < decay_start:
    return peak
  return decay(x)


def _piecewise(x, boundaries, values):
  return values[sum(1 for b in boundaries if x >= b)]


def _transformer(x, warmup, dim, decay_end=None):
  x = min(x, decay_end) if decay_end is not None else x
  return dim**-0.5 * min((x + 1) * warmup**-1.5, (x + 1) ** -0.5)


CASES = [
    ('constant', pax_fiddle.Config(schedules.Constant, value=3.0),
     lambda x: 3.0),
    ('polynomial_start',
     pax_fiddle.Config(schedules.Polynomial, power=2, start=(2, 1.0),
                       limit=(30, 0.1)),
     lambda x: _polynomial(x, 2, 1.0, 30, 0.1, 2)),
    ('polynomial_limit',
     pax_fiddle.Config(schedules.Polynomial, power=3, start=(2, 1.0),
                       limit=(30, 0.1), origin='limit'),
     lambda x: _polynomial(x, 2, 1.0, 30, 0.1, 3, 'limit')),
    ('linear',
     pax_fiddle.Config(schedules.Linear, start=(5, 0.0), limit=(25, 2.0)),
     lambda x: _polynomial(x, 5, 0.0, 25, 2.0, 1)),
    ('exponential',
     pax_fiddle.Config(schedules.Exponential, start=(5, 1.0),
                       limit=(25, 0.01)),
     lambda x: _exponential(x, 5, 1.0, 25, 0.01)),
    ('cosine',
     pax_fiddle.Config(schedules.Cosine, initial_value=1.0, final_value=0.1,
                       total_steps=30),
     lambda x: _cosine(x, 0, 1.0, 30, 0.1)),
    ('cosine_rising',
     pax_fiddle.Config(schedules.Cosine, initial_value=0.0, final_value=2.0,
                       total_steps=30),
     lambda x: _cosine(x, 0, 0.0, 30, 2.0)),
    ('delayed_cosine',
     pax_fiddle.Config(schedules.DelayedCosine, start=(10, 1.0),
                       limit=(40, 0.2)),
     lambda x: _cosine(x, 10, 1.0, 40, 0.2)),
    ('rampup_polynomial',
     pax_fiddle.Config(schedules.LinearRampupPolynomialDecay, warmup_steps=10,
                       decay_start=20, decay_end=40, power=2, min_ratio=0.1,
                       max=2.0),
     lambda x: _ramp_hold(
         x, 10, 20, 2.0, lambda x: _polynomial(x, 20, 2.0, 40, 0.2, 2))),
    ('rampup_cosine',
     pax_fiddle.Config(schedules.LinearRampupCosineDecay, warmup_steps=10,
                       decay_start=20, decay_end=40, min_ratio=0.1, max=2.0),
     lambda x: _ramp_hold(
         x, 10, 20, 2.0, lambda x: _cosine(x, 20, 2.0, 40, 0.2))),
    ('rampup_cosine_no_hold',
     pax_fiddle.Config(schedules.LinearRampupCosineDecay, warmup_steps=10,
                       decay_start=10, decay_end=40, max=1.0),
     lambda x: _ramp_hold(
         x, 10, 10, 1.0, lambda x: _cosine(x, 10, 1.0, 40, 0.01))),
    ('rampup_exponential',
     pax_fiddle.Config(schedules.LinearRampupExponentialDecay,
                       warmup_steps=10, decay_start=20, decay_end=40,
                       min_ratio=0.1, max=2.0),
     lambda x: _ramp_hold(
         x, 10, 20, 2.0, lambda x: _exponential(x, 20, 2.0, 40, 0.2))),
    ('piecewise_constant',
     pax_fiddle.Config(schedules.PiecewiseConstant, boundaries=[10, 20],
                       values=[1.0, 0.5, 0.25]),
     lambda x: _piecewise(x, [10, 20], [1.0, 0.5, 0.25])),
    ('rampup_piecewise_constant',
     pax_fiddle.Config(schedules.LinearRampupPiecewiseConstant,
                       boundaries=[10, 20, 30], values=[1.0, 0.5, 0.1]),
     lambda x: (x / 10 if x < 10 else
                _piecewise(x, [20, 30], [1.0, 0.5, 0.1]))),
    ('piecewise_schedule',
     pax_fiddle.Config(
         schedules.PiecewiseSchedule, boundaries=[10, 30],
         schedules=[
             pax_fiddle.Config(schedules.Constant, value=2.0),
             pax_fiddle.Config(schedules.Linear, start=(0, 1.0),
                               limit=(10, 0.0)),
             pax_fiddle.Config(schedules.Constant, value=5.0),
         ]),
     lambda x: (2.0 if x < 10 else
                _polynomial(x - 10, 0, 1.0, 10, 0.0, 1) if x < 30 else 5.0)),
    ('cycle',
     pax_fiddle.Config(
         schedules.CycleSchedule, steps=[3, 2],
         schedules=[
             pax_fiddle.Config(schedules.Constant, value=7.0),
             pax_fiddle.Config(schedules.Linear, start=(0, 0.0),
                               limit=(100, 1.0)),
         ]),
     lambda x: 7.0 if x % 5 < 3 else _polynomial(x, 0, 0.0, 100, 1.0, 1)),
    ('transformer',
     pax_fiddle.Config(schedules.Transformer, warmup_steps=4, model_dim=16,
                       worker_replicas=2),
     lambda x: _transformer(x, 8, 16)),
    ('transformer_decay_end',
     pax_fiddle.Config(schedules.Transformer, warmup_steps=4, model_dim=16,
                       decay_end=20),
     lambda x: _transformer(x, 4, 16, 20)),
    ('sqrt_decay',
     pax_fiddle.Config(schedules.SqrtDecay, decay_start=4, multiplier=2.0,
                       offset=1.0),
     lambda x: 2.0 / math.sqrt(max(x - 1.0, 4))),
    ('rampup_sqrt_decay',
     pax_fiddle.Config(schedules.LinearRampupSqrtDecay, peak=2.0,
                       warmup_steps=4),
     lambda x: 2.0 * min(max(x, 1) / 4, math.sqrt(4 / max(x, 1)))),
    ('continuous',
     pax_fiddle.Config(schedules.ContinuousSchedule, initial_value=2.0,
                       start_step=10, half_life_steps=5, min=0.1),
     lambda x: 2.0 * max(0.5 ** (max(x - 10, 0) / 5), 0.1)),
]


class SchedulesTest(test_utils.TestCase):

  @parameterized.named_parameters(*CASES)
  def test_value_matches_formula(self, cfg, formula):
    schedule = schedules.instantiate(cfg)
    got = schedule.value_at(jnp.asarray(STEPS, jnp.int32))
    want = np.array([formula(x) for x in STEPS], np.float32)
    self.assertEqual(got.dtype, jnp.float32)
    self.assertAllClose(got, want, atol=1e-6, rtol=2e-5)

  def test_scalar_steps_and_jit(self):
    schedule = schedules.instantiate(pax_fiddle.Config(
        schedules.LinearRampupCosineDecay, warmup_steps=10, decay_start=20,
        decay_end=40, max=2.0))
    self.assertAllClose(schedule.value_at(5), 1.0)
    jitted = jax.jit(schedule.value_at)
    self.assertAllClose(jitted(jnp.array(30, jnp.int32)),
                        _cosine(30, 20, 2.0, 40, 0.02), rtol=1e-5)

  def test_old_style_hparams(self):
    cfg = schedules.Transformer.HParams(warmup_steps=4000, model_dim=128)
    self.assertIsInstance(cfg, pax_fiddle.Config)
    schedule = schedules.instantiate(cfg)
    self.assertEqual(schedule.worker_replicas, 1)
    self.assertIsNone(schedule.decay_end)
    self.assertAllClose(schedule.value_at(jnp.array(99)),
                        _transformer(99, 4000, 128), rtol=1e-5)

  @parameterized.named_parameters(
      ('polynomial_order', schedules.Polynomial,
       {'start': (5, 1.0), 'limit': (5, 0.0)}, 'Polynomial'),
      ('polynomial_origin', schedules.Polynomial,
       {'limit': (5, 0.0), 'origin': 'middle'}, 'origin'),
      ('exponential_zero', schedules.Exponential,
       {'limit': (5, 0.0)}, 'Exponential'),
      ('cosine_steps', schedules.Cosine, {}, 'total_steps'),
      ('rampup_max', schedules.LinearRampupCosineDecay,
       {'warmup_steps': 1, 'decay_start': 2, 'decay_end': 3}, 'max'),
      ('rampup_order', schedules.LinearRampupPolynomialDecay,
       {'warmup_steps': 5, 'decay_start': 2, 'decay_end': 8, 'max': 1.0},
       'decay_start'),
      ('piecewise_lengths', schedules.PiecewiseConstant,
       {'boundaries': [1, 2], 'values': [1.0]}, 'PiecewiseConstant'),
      ('piecewise_sorted', schedules.PiecewiseConstant,
       {'boundaries': [2, 1], 'values': [1.0, 2.0, 3.0]}, 'sorted'),
      ('piecewise_schedule_lengths', schedules.PiecewiseSchedule,
       {'boundaries': [1],
        'schedules': [pax_fiddle.Config(schedules.Constant)]},
       'PiecewiseSchedule'),
  )
  def test_bad_config_fails_early(self, cls, kwargs, words):
    with self.assertRaisesRegex(Exception, words):
      schedules.instantiate(pax_fiddle.Config(cls, **kwargs))


if __name__ == '__main__':
  absltest.main()
