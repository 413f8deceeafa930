"""SpecAugment: masks by hand from given draws, and the real Pax 1.4's masks."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import spectrum_augmenter

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))


def _augmenter(**fields):
  return base_layer.instantiate(pax_fiddle.Config(
      spectrum_augmenter.SpectrumAugmenter, name='aug', **fields))


def _run(layer, feats, paddings, do_eval=False, key=None):
  key = jax.random.PRNGKey(0) if key is None else key
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    return layer.apply({}, feats, paddings, rngs={'random': key})


class BlockMasksTest(test_utils.TestCase):

  def test_blocks_from_given_draws(self):
    # Row 0: length 0.5 * 4 = 2, start 0.5 * (10 - 2 + 1) = 4 -> frames 4, 5.
    # Row 1: length int(0.99 * 4) = 3 capped to int(0.2 * 10) = 2,
    # start int(0.0) = 0 -> frames 0, 1.
    mask = spectrum_augmenter.block_masks(
        jnp.array([[0.5], [0.99]]), jnp.array([[0.5], [0.0]]),
        choose_range=jnp.array([10, 10]), mask_size=10,
        max_length=jnp.array([4, 4]), max_ratio=0.2)
    want = np.ones((2, 10), np.float32)
    want[0, 4:6] = 0.0
    want[1, 0:2] = 0.0
    self.assertArraysEqual(np.asarray(mask), want, check_dtypes=False)

  def test_masks_per_frame_limits_the_count(self):
    # Two blocks drawn, but 0.1 * 10 frames = 1 mask counts: only the first.
    mask = spectrum_augmenter.block_masks(
        jnp.array([[0.5, 0.5]]), jnp.array([[0.0, 0.9]]),
        choose_range=jnp.array([10]), mask_size=10,
        max_length=jnp.array([2]), max_ratio=1.0, masks_per_frame=0.1)
    want = np.ones((1, 10), np.float32)
    want[0, 0] = 0.0
    self.assertArraysEqual(np.asarray(mask), want, check_dtypes=False)


class LayerTest(test_utils.TestCase):

  def test_eval_is_identity_unless_asked(self):
    feats = jnp.ones((2, 20, 5))
    paddings = jnp.zeros((2, 20))
    out, pads = _run(_augmenter(), feats, paddings, do_eval=True)
    self.assertArraysEqual(out, feats)
    self.assertArraysEqual(pads, paddings)
    out, _ = _run(_augmenter(augment_at_eval=True, freq_mask_max_bins=3),
                  feats, paddings, do_eval=True)
    self.assertLess(float(jnp.mean(out)), 1.0)

  def test_frequency_masks_whole_bands(self):
    feats = jnp.ones((4, 6, 10))
    out, _ = _run(_augmenter(time_mask_count=0, freq_mask_max_bins=3,
                             freq_mask_count=1), feats, jnp.zeros((4, 6)))
    out = np.asarray(out)
    # The same bins are zero at every frame, at most 2 (int(u * 3)) of them.
    self.assertArraysEqual(out, np.broadcast_to(out[:, :1], out.shape))
    self.assertTrue(np.all((out[:, 0] == 0).sum(-1) <= 2))

  def test_time_masks_stay_inside_the_utterance(self):
    feats = jnp.ones((3, 30, 2))
    paddings = np.zeros((3, 30), np.float32)
    paddings[:, 20:] = 1.0
    out, _ = _run(_augmenter(freq_mask_max_bins=0, time_mask_count=3,
                             time_mask_max_ratio=0.3), feats, paddings)
    self.assertArraysEqual(np.asarray(out)[:, 20:], np.ones((3, 10, 2)),
                           check_dtypes=False)

  def test_bad_shapes_are_named(self):
    with self.assertRaisesRegex(ValueError, 'paddings'):
      _run(_augmenter(), jnp.ones((2, 5, 3)), jnp.zeros((2, 4)))


class RealPaxTest(test_utils.TestCase):
  """Same key: the same entries masked as by the real Pax 1.4 (whose JAX drew
  random bits with jax_threefry_partitionable off, the default before 0.5)."""

  @parameterized.parameters(*sorted(
      k for k, v in _CONFIGS.items() if v['cls'] == 'SpectrumAugmenter'))
  def test_matches_real_pax(self, case):
    with jax.threefry_partitionable(False):
      out, _ = _run(_augmenter(**_CONFIGS[case]['fields']),
                    _REF['random/feats'], _REF['random/paddings'],
                    key=jnp.asarray(_REF['random/key']))
    self.assertArraysEqual(np.asarray(out), _REF[f'{case}/out'])


if __name__ == '__main__':
  absltest.main()
