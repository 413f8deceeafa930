"""Tests of the image-folder ImageNet inputs on tiny generated folders."""

import os
import tempfile

from absl.testing import absltest
import numpy as np
from PIL import Image

from paxml.tasks.vision import input_generator
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import test_utils


def write_image_folder(root, counts, size=(12, 10), seed=0):
  """Class folders c0, c1, ... of solid-color PNGs; returns the colors."""
  rng = np.random.default_rng(seed)
  colors = {}
  for c, count in enumerate(counts):
    os.makedirs(os.path.join(root, f'c{c}'))
    for i in range(count):
      color = rng.integers(0, 256, 3).astype(np.uint8)
      image = np.broadcast_to(color, (*size, 3))
      path = os.path.join(root, f'c{c}', f'img{i}.png')
      Image.fromarray(np.ascontiguousarray(image)).save(path)
      colors[path] = color
  return colors


class InputTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.colors = write_image_folder(self.root, [3, 2])

  def _input(self, cls, **kwargs):
    fields = dict(file_pattern=self.root, num_classes=2, data_shape=(8, 8, 3))
    fields.update(kwargs)
    p = pax_fiddle.Config(cls, name='inp', **fields)
    return base_hyperparams.instantiate(p)

  def test_listing_labels_from_one(self):
    paths, labels, names = input_generator.list_image_folder(self.root)
    self.assertEqual(names, ['c0', 'c1'])
    np.testing.assert_array_equal(labels, [1, 1, 1, 2, 2])
    self.assertEqual(os.path.basename(paths[3]), 'img0.png')

  def test_eval_reads_once_in_order_and_pads(self):
    inp = self._input(input_generator.ImageNetValidation, batch_size=4,
                      reset_for_eval=True, num_infeed_hosts=1)
    first, second = inp.get_next(), inp.get_next()
    with self.assertRaises(StopIteration):
      inp.get_next()
    self.assertEqual(first.image.shape, (4, 8, 8, 3))
    np.testing.assert_array_equal(first.weight, [1, 1, 1, 1])
    np.testing.assert_array_equal(second.weight, [1, 0, 0, 0])
    np.testing.assert_array_equal(second.eval_sample_weights, [1, 0, 0, 0])
    np.testing.assert_array_equal(
        np.argmax(first.label_probs, -1), [0, 0, 0, 1])
    np.testing.assert_array_equal(second.label_probs[1:], 0)
    # Solid colors stay solid through the crop and resize.
    paths = sorted(self.colors)
    for i in range(4):
      want = np.broadcast_to(self.colors[paths[i]].astype(np.float32),
                             (8, 8, 3))
      self.assertAllClose(first.image[i], want, atol=1e-3)
    self.assertAllClose(second.image[1:], np.zeros((3, 8, 8, 3), np.float32))

  def test_training_repeats_and_is_deterministic(self):
    def batches(seed):
      inp = self._input(input_generator.ImageNetTrain, batch_size=3,
                        is_training=True, input_random_seed=seed,
                        num_infeed_hosts=1)
      return [inp.get_next() for _ in range(3)]
    a, b = batches(5), batches(5)
    for x, y in zip(a, b):
      self.assertAllClose(x.image, y.image)
      np.testing.assert_array_equal(x.weight, [1, 1, 1])
    labels = np.concatenate([np.argmax(x.label_probs, -1) for x in a[:2]])
    # Epoch-shuffled, then repeated: the first 5 examples hold every one.
    self.assertEqual(sorted(labels[:5].tolist()), [0, 0, 0, 1, 1])

  def test_bad_setup_is_named(self):
    with self.assertRaisesRegex(FileNotFoundError, 'does not exist'):
      self._input(input_generator.ImageNetTrain, batch_size=2,
                  file_pattern=os.path.join(self.root, 'missing'))
    with self.assertRaisesRegex(ValueError, 'num_classes'):
      self._input(input_generator.ImageNetTrain, batch_size=2,
                  num_classes=1)
    with self.assertRaisesRegex(ValueError, 'data_shape'):
      self._input(input_generator.ImageNetTrain, batch_size=2,
                  data_shape=(8, 6, 3))

  def test_image_bytes_to_batch(self):
    inp = self._input(input_generator.ImageNetValidation, batch_size=2,
                      reset_for_eval=True)
    with open(sorted(self.colors)[0], 'rb') as f:
      batch = inp.ImageBytesToBatch(f.read())
    self.assertEqual(batch.image.shape, (1, 8, 8, 3))


if __name__ == '__main__':
  absltest.main()
