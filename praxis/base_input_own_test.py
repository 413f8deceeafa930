"""InMemoryInput: its restored state is checked against the data; batches."""

import json

from absl.testing import absltest
import numpy as np

from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle


def _input(n: int, **kwargs) -> base_input.InMemoryInput:
  return base_hyperparams.instantiate(pax_fiddle.Config(
      base_input.InMemoryInput, data={'x': np.arange(n)}, batch_size=8,
      is_training=True, input_random_seed=1, **kwargs))


def _with(state: bytes, **changes) -> bytes:
  values = json.loads(state)
  values.update(changes)
  return json.dumps(values).encode()


class RestoredStateTest(absltest.TestCase):

  def test_position_past_shrunk_data_is_refused(self):
    saved = _input(64)
    for _ in range(6):  # 48 of 64 examples read.
      saved.get_next()
    state = saved._get_state_internal()
    self.assertEqual(json.loads(state)['position'], 48)
    shrunk = _input(40)
    with self.assertRaisesRegex(
        ValueError, "InMemoryInput 'train': restored input state has "
        r'position=48; expected 0\.\.40'):
      shrunk._set_state_internal(state)

  def test_crafted_positions_are_refused(self):
    state = _input(64)._get_state_internal()
    for position in (-5, 1000000):
      with self.assertRaisesRegex(ValueError,
                                  rf'position={position}; expected 0\.\.64'):
        _input(64)._set_state_internal(_with(state, position=position))
    with self.assertRaisesRegex(ValueError, r'epoch=-1; expected >= 0'):
      _input(64)._set_state_internal(_with(state, epoch=-1))

  def test_a_valid_state_round_trips_and_the_epoch_end_wraps(self):
    a, b = _input(64), _input(64)
    for _ in range(3):
      a.get_next()
    b.set_state(a.get_state())
    np.testing.assert_array_equal(a.get_next()['x'], b.get_next()['x'])
    # Position == size (an epoch's end) is the start of the next epoch.
    c, d = _input(64), _input(64)
    for _ in range(8):
      c.get_next()
    d._set_state_internal(_with(c._get_state_internal(), position=64,
                                epoch=0))
    np.testing.assert_array_equal(c.get_next()['x'], d.get_next()['x'])

  def test_index_generation_cannot_loop(self):
    inp = _input(64)
    inp._position = 10**6  # Bypassing the check: still no endless loop.
    with self.assertRaisesRegex(RuntimeError, 'outside this host'):
      inp.get_next()

  def test_the_state_records_the_data_size(self):
    state = json.loads(_input(16)._get_state_internal())
    self.assertEqual(state['num_examples'], 16)
    with self.assertLogs(level='WARNING') as logs:  # Valid, but data changed.
      _input(24)._set_state_internal(_with(_input(16)._get_state_internal(),
                                           position=8))
    self.assertIn('saved for 16 examples; the data now has 24',
                  '\n'.join(logs.output))


class BatchTest(absltest.TestCase):

  def _batches(self, data, n):
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        base_input.InMemoryInput, data=data, batch_size=6, is_training=True,
        input_random_seed=3))
    return [inp.get_next_padded() for _ in range(n)]

  def test_flat_and_nested_data_give_the_same_rows(self):
    n = 12  # Two epochs in four batches of 6.
    ids = np.arange(n)
    # A non-contiguous view, as `ids[:, :-1]` of a token array.
    x = np.stack([10 * ids, 10 * ids + 1, -ids], axis=1)[:, :2]
    flat = self._batches({'x': x, 'ids': ids}, 4)
    nested = self._batches({'x': x, 'sub': {'ids': ids}}, 4)
    for f, g in zip(flat, nested):
      self.assertEqual(sorted(f), ['eval_sample_weights', 'ids', 'x'])
      np.testing.assert_array_equal(f['ids'], g['sub']['ids'])
      np.testing.assert_array_equal(f['x'], g['x'])
      # Row i of every array is one example.
      np.testing.assert_array_equal(f['x'], np.stack(
          [10 * f['ids'], 10 * f['ids'] + 1], axis=1))
      np.testing.assert_array_equal(f['eval_sample_weights'], np.ones(6))
    # Each epoch (two batches) holds every example once.
    for epoch in (flat[:2], flat[2:]):
      self.assertEqual(
          sorted(np.concatenate([b['ids'] for b in epoch]).tolist()),
          list(range(n)))


if __name__ == '__main__':
  absltest.main()
