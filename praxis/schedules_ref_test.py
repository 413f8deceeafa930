"""Our schedules against the values the real Pax 1.4 recorded.

`testdata/ref_schedules.json` was written by `testdata/make_ref_schedules.py`
under the reference Pax (jax 0.4.26): for each case, a schedule class of
`praxis.schedules`, its fields and `value_at(step)` at int32 and uint32 steps.
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from praxis import pax_fiddle
from praxis import schedules

_REF_PATH = os.path.join(
    os.path.dirname(__file__), 'testdata', 'ref_schedules.json'
)
with open(_REF_PATH) as _f:
  _CASES = json.load(_f)['cases']


def _decode(value):
  """A recorded field value: tuples and sub-schedules are marked dicts."""
  if isinstance(value, dict) and 'tuple' in value:
    return tuple(_decode(v) for v in value['tuple'])
  if isinstance(value, dict) and 'schedule' in value:
    return _config(value['schedule']['cls'], value['schedule']['fields'])
  if isinstance(value, list):
    return [_decode(v) for v in value]
  return value


def _config(cls_name, fields):
  return pax_fiddle.Config(
      getattr(schedules, cls_name),
      **{k: _decode(v) for k, v in fields.items()},
  )


def _case_name(i, case):
  return f'{i:02d}_{case["cls"]}'


class ScheduleRefTest(parameterized.TestCase):

  def test_every_reference_class_is_recorded(self):
    # The concrete schedule classes of praxis 1.4's schedules.py.
    pax_classes = {
        'Constant', 'Polynomial', 'Linear', 'Exponential', 'Cosine',
        'DelayedCosine', 'LinearRampupPolynomialDecay',
        'LinearRampupCosineDecay', 'PiecewiseConstant', 'Transformer',
        'SqrtDecay', 'LinearRampupSqrtDecay', 'LinearRampupExponentialDecay',
        'LinearRampupPiecewiseConstant', 'PiecewiseSchedule', 'CycleSchedule',
        'ContinuousSchedule',
    }
    self.assertEqual({c['cls'] for c in _CASES}, pax_classes)
    for name in pax_classes:
      self.assertTrue(
          issubclass(getattr(schedules, name), schedules.BaseSchedule), name
      )

  @parameterized.named_parameters(
      (_case_name(i, c), c) for i, c in enumerate(_CASES)
  )
  def test_matches_reference(self, case):
    schedule = pax_fiddle.instantiate(_config(case['cls'], case['fields']))
    for dtype in ('int32', 'uint32'):
      got = [
          float(np.asarray(schedule.value_at(jnp.array(s, dtype=dtype))))
          for s in case['steps']
      ]
      np.testing.assert_allclose(
          got, case[dtype], rtol=2e-6, atol=1e-7,
          err_msg=f'{case["cls"]}({case["fields"]}) at {dtype} steps '
          f'{case["steps"]}',
      )


if __name__ == '__main__':
  absltest.main()
