"""Records the values of the real Pax 1.4 schedules, for schedules_ref_test.

Run it with the reference environment's Python, from a directory where this
project's `praxis` is not importable (the script checks):

  cd /tmp && JAX_PLATFORMS=cpu /work/refpax/bin/python \
      /work/main/praxis/testdata/make_ref_schedules.py \
      /work/main/praxis/testdata/ref_schedules.json

For every case (a schedule class, its fields and the steps to read) it writes
`value_at(step)` for int32 and uint32 steps. JSON cannot hold tuples or
configs, so a field value that is a tuple is written `{"tuple": [...]}` and a
sub-schedule `{"schedule": {"cls": ..., "fields": {...}}}`.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import praxis
from praxis import pax_fiddle
from praxis import schedules

STEPS = [0, 1, 2, 5, 9, 10, 11, 49, 50, 51, 99, 100, 101, 149, 150, 151, 199,
         200, 201, 250, 299, 300, 301, 500, 1000, 3999, 4000, 4001, 10000,
         100000, 399999, 400000, 500000, 1000000]


def sub(cls, **fields):
  """A sub-schedule spec."""
  return {'schedule': {'cls': cls, 'fields': fields}}


CASES = [
    ('Constant', {}),
    ('Constant', {'value': 0.25}),
    ('Polynomial', {'power': 2, 'start': (10, 1.0), 'limit': (100, 0.1)}),
    ('Polynomial', {'power': 3, 'start': (0, 0.0), 'limit': (200, 2.0),
                    'origin': 'limit'}),
    ('Polynomial', {'power': 1, 'start': (50, 2.0), 'limit': (150, 0.5)}),
    ('Linear', {'start': (0, 0.0), 'limit': (100, 1.0)}),
    ('Linear', {'start': (50, 2.0), 'limit': (150, 0.5)}),
    ('Exponential', {'start': (0, 1.0), 'limit': (100, 0.01)}),
    ('Exponential', {'start': (10, 2.0), 'limit': (1000, 0.5)}),
    ('Cosine', {'initial_value': 1.0, 'final_value': 0.1, 'total_steps': 200}),
    ('Cosine', {'initial_value': 2.0, 'total_steps': 1000}),
    ('DelayedCosine', {'start': (10, 1.0), 'limit': (200, 0.0)}),
    ('DelayedCosine', {'start': (0, 2.0), 'limit': (100, 0.5)}),
    ('LinearRampupPolynomialDecay', {
        'warmup_steps': 10, 'decay_start': 100, 'decay_end': 200, 'power': 2,
        'min_ratio': 0.1, 'max': 2.0}),
    ('LinearRampupPolynomialDecay', {
        'warmup_steps': 0, 'decay_start': 0, 'decay_end': 100, 'max': 1.0}),
    ('LinearRampupPolynomialDecay', {
        'warmup_steps': 10, 'decay_start': 10, 'decay_end': 50, 'max': 1.0}),
    ('LinearRampupCosineDecay', {
        'warmup_steps': 10, 'decay_start': 100, 'decay_end': 200,
        'min_ratio': 0.1, 'max': 2.0}),
    ('LinearRampupCosineDecay', {
        'warmup_steps': 0, 'decay_start': 50, 'decay_end': 300, 'max': 1.0}),
    ('LinearRampupExponentialDecay', {
        'warmup_steps': 10, 'decay_start': 100, 'decay_end': 200,
        'min_ratio': 0.1, 'max': 2.0}),
    ('LinearRampupExponentialDecay', {
        'warmup_steps': 50, 'decay_start': 50, 'decay_end': 1000, 'max': 1.0}),
    ('PiecewiseConstant', {'boundaries': [10, 100, 200],
                           'values': [1.0, 0.5, 0.1, 0.01]}),
    ('PiecewiseConstant', {'boundaries': [], 'values': [3.0]}),
    # A zero value: Pax's `v > 0` selection makes later intervals leak in.
    ('PiecewiseConstant', {'boundaries': [50, 150],
                           'values': [1.0, 0.0, 0.5]}),
    ('LinearRampupPiecewiseConstant', {'boundaries': [10, 100, 200],
                                       'values': [1.0, 0.5, 0.1]}),
    ('LinearRampupPiecewiseConstant', {'boundaries': [100],
                                       'values': [2.0]}),
    ('PiecewiseSchedule', {
        'boundaries': [100, 200],
        'schedules': [
            sub('Linear', start={'tuple': [0, 0.0]},
                limit={'tuple': [100, 1.0]}),
            sub('Constant', value=0.5),
            sub('Exponential', start={'tuple': [0, 0.5]},
                limit={'tuple': [100, 0.05]}),
        ]}),
    ('CycleSchedule', {
        'schedules': [
            sub('Constant', value=1.0),
            sub('Linear', start={'tuple': [0, 0.0]},
                limit={'tuple': [300, 1.0]}),
        ],
        'steps': [100, 50]}),
    ('Transformer', {}),
    ('Transformer', {'warmup_steps': 100, 'model_dim': 64,
                     'worker_replicas': 2, 'decay_end': 300}),
    ('SqrtDecay', {}),
    ('SqrtDecay', {'decay_start': 100, 'multiplier': 2.0, 'offset': 10.0}),
    ('LinearRampupSqrtDecay', {}),
    ('LinearRampupSqrtDecay', {'peak': 2.0, 'warmup_steps': 100}),
    ('ContinuousSchedule', {}),
    ('ContinuousSchedule', {'initial_value': 2.0, 'start_step': 100,
                            'half_life_steps': 50, 'min': 0.1}),
]


def encode(value):
  """A field value as JSON (tuples and sub-schedules marked)."""
  if isinstance(value, tuple):
    return {'tuple': [encode(v) for v in value]}
  if isinstance(value, list):
    return [encode(v) for v in value]
  return value


def decode(value):
  """The field value `encode` wrote, with sub-schedules as configs."""
  if isinstance(value, dict) and 'tuple' in value:
    return tuple(decode(v) for v in value['tuple'])
  if isinstance(value, dict) and 'schedule' in value:
    spec = value['schedule']
    return config(spec['cls'], spec['fields'])
  if isinstance(value, list):
    return [decode(v) for v in value]
  return value


def config(cls_name, fields):
  return pax_fiddle.Config(
      getattr(schedules, cls_name),
      **{k: decode(v) for k, v in fields.items()})


def main(out_path):
  if not praxis.__file__.startswith('/work/refpax/'):
    sys.exit(f'not the reference praxis: {praxis.__file__}; run from /tmp')
  cases = []
  for cls_name, fields in CASES:
    fields = {k: encode(v) for k, v in fields.items()}
    schedule = pax_fiddle.instantiate(config(cls_name, fields))
    case = {'cls': cls_name, 'fields': fields, 'steps': STEPS}
    for dtype in ('int32', 'uint32'):
      case[dtype] = [
          float(np.asarray(schedule.value_at(jnp.array(s, dtype=dtype))))
          for s in STEPS
      ]
    cases.append(case)
  with open(out_path, 'w') as f:  # One case a line.
    f.write(f'{{"jax": "{jax.__version__}", "cases": [\n')
    f.write(',\n'.join(json.dumps(c) for c in cases))
    f.write('\n]}\n')


if __name__ == '__main__':
  main(sys.argv[1])
