"""Token masking and time shifts: properties, by hand, and Pax 1.4's draws."""

import os

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import augmentations

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))


def _run(layer, *args, do_eval=False, key=None):
  key = jax.random.PRNGKey(0) if key is None else key
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    return layer.apply({}, *args, rngs={'random': key})


def _mlm(**fields):
  return base_layer.instantiate(pax_fiddle.Config(
      augmentations.MaskedLmDataAugmenter, name='mlm', **fields))


def _shifter(**fields):
  return base_layer.instantiate(pax_fiddle.Config(
      augmentations.TemporalShifting, name='shift', **fields))


class MaskedLmTest(test_utils.TestCase):

  def test_rates_and_padding(self):
    ids = jnp.asarray(self.np_rng.integers(0, 50, size=(50, 100)), jnp.int32)
    paddings = np.zeros((50, 100), np.float32)
    paddings[:, 80:] = 1.0
    layer = _mlm(vocab_size=60, mask_token_id=55, mask_prob=0.3,
                 random_prob=0.1, same_prob=0.1)
    out, picked = _run(layer, ids, paddings)
    out, picked, ids = map(np.asarray, (out, picked, ids))
    self.assertTrue(np.all(picked[:, 80:] == 0))
    self.assertArraysEqual(out[picked == 0], ids[picked == 0])
    valid = picked[:, :80]
    # 4,000 tokens; picked at 0.5 (std ~0.008), masked at 0.3 (std ~0.007).
    self.assertAlmostEqual(valid.mean(), 0.5, delta=0.04)
    self.assertAlmostEqual(np.mean(out[:, :80] == 55), 0.3, delta=0.04)

  def test_bad_probabilities_are_named(self):
    with self.assertRaisesRegex(ValueError, 'mask_token_id'):
      _run(_mlm(vocab_size=10), jnp.zeros((1, 3), jnp.int32),
           jnp.zeros((1, 3)))
    with self.assertRaisesRegex(ValueError, 'same_prob'):
      _run(_mlm(vocab_size=10, mask_token_id=1, mask_prob=0.6,
                random_prob=0.3, same_prob=0.2), jnp.zeros((1, 3), jnp.int32),
           jnp.zeros((1, 3)))

  def test_matches_real_pax(self):
    layer = _mlm(vocab_size=17, mask_token_id=16, mask_prob=0.3,
                 random_prob=0.2, same_prob=0.1)
    with jax.threefry_partitionable(False):  # Pax 1.4's JAX default.
      out, picked = _run(layer, _REF['mlm/ids'], _REF['mlm/paddings'],
                         key=jnp.asarray(_REF['random/key']))
    self.assertArraysEqual(np.asarray(out), _REF['mlm/out'])
    self.assertArraysEqual(np.asarray(picked), _REF['mlm/picked'])


class TemporalShiftingTest(test_utils.TestCase):

  def test_shift_by_hand(self):
    x = jnp.array([1.0, 2.0, 3.0, 4.0])
    self.assertArraysEqual(
        augmentations.shift_along_axis(x, 0, 2, 1), jnp.array([0., 1, 2, 3]))
    self.assertArraysEqual(
        augmentations.shift_along_axis(x, 0, 2, -2, pad_value=9.0),
        jnp.array([3., 4, 9, 9]))

  def test_each_row_is_a_shift_and_paddings_follow(self):
    signal = jnp.tile(jnp.arange(1.0, 21.0), (6, 1))
    out, pads = _run(_shifter(shift_range_ms=0.25), signal,
                     jnp.zeros((6, 20)))
    out, pads = np.asarray(out), np.asarray(pads)
    for row, pad in zip(out, pads):
      kept = row[pad == 0]
      # A contiguous run of the signal, at most 4 samples (0.25ms) moved.
      self.assertGreaterEqual(len(kept), 16)
      self.assertArraysEqual(np.diff(kept), np.ones(len(kept) - 1),
                             check_dtypes=False)
      self.assertTrue(np.all(row[pad == 1] == 0))
      start = int(np.argmax(pad == 0))
      self.assertLessEqual(abs(kept[0] - 1 - (0 - start)), 4)

  def test_eval_and_too_long_shift(self):
    x = jnp.ones((2, 8))
    out, _ = _run(_shifter(shift_range_ms=0.25), x, None, do_eval=True)
    self.assertArraysEqual(out, x)
    with self.assertRaisesRegex(ValueError, 'shift_range_ms'):
      _run(_shifter(shift_range_ms=1.0), x, None)

  def test_matches_real_pax(self):
    with jax.threefry_partitionable(False):  # Pax 1.4's JAX default.
      out, pads = _run(_shifter(shift_range_ms=0.5), _REF['shift/signal'],
                       np.zeros((3, 40), np.float32),
                       key=jnp.asarray(_REF['random/key']))
    self.assertArraysEqual(np.asarray(out), _REF['shift/out'])
    self.assertArraysEqual(np.asarray(pads), _REF['shift/out_paddings'])


if __name__ == '__main__':
  absltest.main()
