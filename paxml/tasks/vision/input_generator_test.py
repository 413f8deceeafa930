"""Tests of the image-folder ImageNet inputs on tiny generated folders."""

import io
import os
import struct
import tempfile

from absl.testing import absltest
import numpy as np
from PIL import Image
from tensorboardX import record_writer

from paxml.tasks.vision import _tfrecord
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


def _varint(v):
  v &= (1 << 64) - 1
  out = b''
  while True:
    out += bytes([(v & 0x7F) | (0x80 if v > 0x7F else 0)])
    v >>= 7
    if not v:
      return out


def _len_field(number, payload):
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(features):
  """A tf.train.Example, encoded from the protobuf spec by hand.

  features: name -> ('bytes', [b'..']) | ('float', [..]) | ('int64', [..]);
  floats are packed, int64s unpacked (both are legal encodings).
  """
  entries = b''
  for name, (kind, values) in features.items():
    if kind == 'bytes':
      inner = b''.join(_len_field(1, v) for v in values)
      feature = _len_field(1, inner)
    elif kind == 'float':
      feature = _len_field(2, _len_field(
          1, struct.pack(f'<{len(values)}f', *values)))
    else:
      inner = b''.join(_varint(1 << 3) + _varint(v) for v in values)
      feature = _len_field(3, inner)
    entries += _len_field(1, _len_field(1, name.encode()) +
                          _len_field(2, feature))
  return _len_field(1, entries)


def _png_bytes(color, size=(10, 12)):
  buf = io.BytesIO()
  image = np.broadcast_to(np.asarray(color, np.uint8), (*size, 3))
  Image.fromarray(np.ascontiguousarray(image)).save(buf, format='PNG')
  return buf.getvalue()


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


class TFRecordTest(test_utils.TestCase):

  def test_parse_example(self):
    data = _example({'a': ('bytes', [b'xy', b'']), 'b': ('float', [1.5, -2.0]),
                     'c': ('int64', [3, -4, 2**40])})
    self.assertEqual(_tfrecord.parse_example(data), {
        'a': [b'xy', b''], 'b': [1.5, -2.0], 'c': [3, -4, 2**40]})

  def test_input_reads_pax_style_records(self):
    root = tempfile.mkdtemp()
    colors = [(250, 0, 0), (0, 250, 0), (0, 0, 250)]
    for shard in range(2):
      writer = record_writer.RecordWriter(
          os.path.join(root, f'validation-{shard:05d}-of-00002'))
      for k in range(shard, 3, 2):  # Labels 1..3, as ImageNet's.
        writer.write(_example({
            'image/encoded': ('bytes', [_png_bytes(colors[k])]),
            'image/class/label': ('int64', [k + 1])}))
      writer.close()
    p = pax_fiddle.Config(
        input_generator.ImageNetValidation, name='inp', num_classes=3,
        data_shape=(4, 4, 3), batch_size=4, reset_for_eval=True,
        num_infeed_hosts=1,
        file_pattern=f'tfrecord:{root}/validation-*-of-*')
    batch = base_hyperparams.instantiate(p).get_next()
    # Shard 0 holds labels 1 and 3, shard 1 label 2; files in sorted order.
    np.testing.assert_array_equal(np.argmax(batch.label_probs[:3], -1),
                                  [0, 2, 1])
    np.testing.assert_array_equal(batch.weight, [1, 1, 1, 0])
    self.assertAllClose(batch.image[1],
                        np.full((4, 4, 3), colors[2], np.float32), atol=1e-3)
    p.num_classes = 2
    with self.assertRaisesRegex(ValueError, 'num_classes'):
      base_hyperparams.instantiate(p).get_next()


if __name__ == '__main__':
  absltest.main()
