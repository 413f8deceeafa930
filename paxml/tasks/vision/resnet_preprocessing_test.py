"""Tests of the numpy ResNet preprocessing against crops worked by hand."""

import io

from absl.testing import absltest
import ml_dtypes
import numpy as np
from PIL import Image

from paxml.tasks.vision import resnet_preprocessing as rp
from praxis import test_utils


def _png(image: np.ndarray) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format='PNG')
  return buf.getvalue()


def _image(h, w, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)


class ResizeTest(test_utils.TestCase):

  def test_same_size_is_identity_and_constant_stays_constant(self):
    image = _image(5, 7)
    self.assertAllClose(rp.resize_bicubic(image, (5, 7)),
                        image.astype(np.float32))
    const = np.full((3, 4, 3), 77, np.uint8)
    self.assertAllClose(rp.resize_bicubic(const, (9, 5)),
                        np.full((9, 5, 3), 77.0, np.float32))

  def test_halving_weights_by_hand(self):
    # Output pixel 0 of 4 -> 2 sits at input 0.5: Keys weights (a = -0.5)
    # 0.5625 at distance 0.5 and -0.0625 at 1.5; the tap at -1 is outside
    # and dropped, the rest renormalized.
    row = np.array([10.0, 20.0, 40.0, 80.0])
    image = np.broadcast_to(row[None, :, None], (1, 4, 3))
    out = rp.resize_bicubic(image, (1, 2))
    want0 = (0.5625 * 10 + 0.5625 * 20 - 0.0625 * 40) / 1.0625
    want1 = (-0.0625 * 20 + 0.5625 * 40 + 0.5625 * 80) / 1.0625
    self.assertAllClose(out[0, :, 0], [want0, want1], rtol=1e-6)


class CropTest(test_utils.TestCase):

  def test_eval_center_crop_by_hand(self):
    # size 8: padding round(8 / 7) = 1, side int(8 / 9 * 10) = 8, offsets
    # (10 - 8 + 1) // 2 = 1 and (14 - 8 + 1) // 2 = 3.
    image = _image(10, 14)
    out = rp.preprocess_for_eval(_png(image), False, image_size=8)
    self.assertEqual(out.dtype, np.float32)
    self.assertAllClose(out, image[1:9, 3:11].astype(np.float32))

  def test_eval_resizes_the_center_square(self):
    image = _image(20, 12, seed=1)
    # side int(16 / 18 * 12) = 10, offsets (20 - 10 + 1) // 2 = 5 and 1.
    want = rp.resize_bicubic(image[5:15, 1:11], (16, 16))
    out = rp.preprocess_image(image, is_training=False, use_bfloat16=True,
                              image_size=16)
    self.assertEqual(out.dtype, ml_dtypes.bfloat16)
    self.assertAllClose(out.astype(np.float32), want, rtol=1e-2, atol=1.0)

  def test_random_boxes_meet_the_constraints(self):
    for seed in range(30):
      rng = np.random.default_rng(seed)
      y, x, h, w = rp.sample_distorted_bounding_box(
          (40, 60, 3), min_object_covered=0.1,
          aspect_ratio_range=(0.75, 4 / 3), area_range=(0.08, 1.0),
          max_attempts=10, rng=rng)
      self.assertTrue(0 <= y and y + h <= 40 and 0 <= x and x + w <= 60)
      if (h, w) != (40, 60):
        self.assertGreaterEqual(h * w, 0.1 * 2400)
        # Rounding the width moves the ratio by at most 0.5 / h.
        self.assertBetween(w / h, 0.75 - 0.5 / h, 4 / 3 + 0.5 / h)

  def test_train_crop_and_flip_by_hand(self):
    image = _image(24, 30, seed=2)
    seed = 7
    # Replay the generator: the box, then the flip coin.
    rng = np.random.default_rng(seed)
    y, x, h, w = rp.sample_distorted_bounding_box(
        image.shape, 0.1, (3 / 4, 4 / 3), (0.08, 1.0), 10, rng)
    flip = rng.uniform() < 0.5
    want = rp.resize_bicubic(image[y:y + h, x:x + w], (12, 12))
    if flip:
      want = want[:, ::-1]
    out = rp.preprocess_for_train(
        image, False, image_size=12, rng=np.random.default_rng(seed))
    self.assertAllClose(out, want)

  def test_flip_mirrors_columns(self):
    image = _image(2, 3)
    for seed in range(4):
      coin = np.random.default_rng(seed).uniform() < 0.5
      out = rp._flip(image, np.random.default_rng(seed))
      np.testing.assert_array_equal(out, image[:, ::-1] if coin else image)

  def test_bad_inputs_are_named(self):
    with self.assertRaisesRegex(ValueError, r'array \[H, W, 3\]'):
      rp.decode_image(np.zeros((4, 4, 2), np.uint8))
    with self.assertRaisesRegex(ValueError, 'whole-image bbox'):
      rp.distorted_bounding_box_crop(_image(4, 4), bbox=[[[0, 0, 0.5, 1]]])


if __name__ == '__main__':
  absltest.main()
