"""ImageNet-style image classification inputs: TFRecords or image folders.

Public names: TRAIN_EXAMPLES, EVAL_EXAMPLES, IMAGENET_DATA_DIR,
IMAGENET_DATA_DIR_ENV, IMAGE_EXTENSIONS, TFRECORD_PREFIX, list_image_folder,
list_tfrecords, BaseImageNetInput, ImageNetTrain, ImageNetValidation.

Pax reads ImageNet TFRecords through Lingvo and TensorFlow; these inputs
decode images with PIL, without TensorFlow, from either
- TFRecords of `tf.train.Example`s with `image/encoded` and
  `image/class/label` (Pax's files): `file_pattern='tfrecord:<glob>'`; or
- a directory with one subdirectory of image files (JPEG, PNG, ...) per
  class (`<dir>/<class name>/<image>`, the extracted ImageNet tarballs).
  Classes are the sorted subdirectory names (or the `class_names` field)
  numbered from 1, as the TFRecord labels.
The default `label_id_offset=-1` gives ids 0..num_classes-1 for both.

Without `file_pattern`, the data dir (`$IMAGENET_DATA_DIR`, else
`IMAGENET_DATA_DIR`) holds `train-*-of-*` / `validation-*-of-*` TFRecords
or `train/` / `validation/` class folders. Images are
preprocessed by `resnet_preprocessing` (random crop and flip in training,
center crop in eval). Examples are sharded over hosts, shuffled and repeated
in training, read once in order and padded in eval (see `InMemoryInput`,
whose state checkpointing they share).

Batches (b = batch_size, (h, w, d) = data_shape): `image` float32
[b, h, w, d] in [0, 255], `label_probs` [b, num_classes] one-hot, `weight`
and `eval_sample_weights` [b] (0 for padded rows), `bucket_keys` [b].

Example:

  inp = base_hyperparams.instantiate(pax_fiddle.Config(
      input_generator.ImageNetTrain, file_pattern='/data/tiny/train',
      num_classes=10, data_shape=(64, 64, 3), batch_size=32,
      is_training=True))
  batch = inp.get_next()
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent import futures
import glob
import os

import numpy as np

from paxml.tasks.vision import _tfrecord
from paxml.tasks.vision import resnet_preprocessing
from praxis import base_input
from praxis import py_utils

NestedMap = py_utils.NestedMap

TRAIN_EXAMPLES = 1281167  # The size of ImageNet training dataset.
EVAL_EXAMPLES = 50000  # The size of ImageNet validation dataset.
IMAGENET_DATA_DIR = '/PATH/TO/IMAGENET_DATA/'
IMAGENET_DATA_DIR_ENV = 'IMAGENET_DATA_DIR'
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.gif', '.webp')
TFRECORD_PREFIX = 'tfrecord:'


def list_image_folder(
    directory: str, class_names: Sequence[str] | None = None
) -> tuple[list[str], np.ndarray, list[str]]:
  """The images of a folder of class folders, in sorted order.

  Args:
    directory: Holds one subdirectory per class.
    class_names: The classes, in label order; None: the sorted
      subdirectories. Images of other subdirectories are an error.

  Returns:
    (image paths, int32 labels numbered from 1, class names).
  """
  if not os.path.isdir(directory):
    raise FileNotFoundError(
        f'Image folder {directory!r} does not exist: set the file_pattern '
        f'field of the input or ${IMAGENET_DATA_DIR_ENV} to a directory with '
        'one subdirectory of images per class.'
    )
  found = sorted(
      d for d in os.listdir(directory)
      if os.path.isdir(os.path.join(directory, d))
  )
  names = list(class_names) if class_names is not None else found
  unknown = sorted(set(found) - set(names))
  if unknown:
    raise ValueError(
        f'Image folder {directory!r} has class folders {unknown[:5]} that '
        'are not in the class_names field.'
    )
  paths, labels = [], []
  for label, name in enumerate(names, start=1):
    folder = os.path.join(directory, name)
    if not os.path.isdir(folder):
      continue
    for file in sorted(os.listdir(folder)):
      if file.lower().endswith(IMAGE_EXTENSIONS):
        paths.append(os.path.join(folder, file))
        labels.append(label)
  if not paths:
    raise ValueError(
        f'Image folder {directory!r} holds no images '
        f'({", ".join(IMAGE_EXTENSIONS)}) in class subdirectories.'
    )
  return paths, np.asarray(labels, np.int32), names


def list_tfrecords(pattern: str) -> list[tuple[str, int, int]]:
  """(path, offset, length) of every record of the files matching `pattern`."""
  paths = sorted(glob.glob(pattern))
  if not paths:
    raise FileNotFoundError(
        f'No TFRecord files match {pattern!r} (the file_pattern field, after '
        f'{TFRECORD_PREFIX!r}).'
    )
  return [(path, offset, length) for path in paths
          for offset, length in _tfrecord.index_records(path)]


def _read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


class BaseImageNetInput(base_input.InMemoryInput):
  """Images of a class-folder directory, preprocessed for a ResNet.

  Attributes:
    num_classes: Number of classes (the width of `label_probs`).
    data_shape: (height, width, depth) of the output images; height and
      width must be equal.
    label_id_offset: Added to the folder labels (numbered from 1).
    file_pattern: 'tfrecord:<glob>' or a directory of class folders; None:
      the split's files in the data dir (see the module docstring).
    class_names: Class folder names in label order; None: sorted folders.
    num_samples: Number of examples (informational, as in Pax).
    num_batcher_threads: Threads decoding the images of a batch.
  """

  _SPLIT = ''

  num_classes: int = 1000
  data_shape: Sequence[int] = (224, 224, 3)
  label_id_offset: int = -1
  batch_size: int | None = 128
  file_pattern: str | None = None
  class_names: Sequence[str] | None = None
  num_samples: int = 0
  num_batcher_threads: int = 8

  def _is_training(self) -> bool:
    raise NotImplementedError(f'Abstract method of {type(self).__name__}.')

  def _source(self) -> str:
    """file_pattern, else the split's TFRecords or folder in the data dir."""
    if self.file_pattern:
      return self.file_pattern
    root = os.environ.get(IMAGENET_DATA_DIR_ENV) or IMAGENET_DATA_DIR
    shards = os.path.join(root, f'{self._SPLIT}-*-of-*')
    if glob.glob(shards):
      return TFRECORD_PREFIX + shards
    return os.path.join(root, self._SPLIT)

  def _check_ids(self, ids: np.ndarray, raw: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= self.num_classes):
      raise self._error(
          'num_classes',
          f'is {self.num_classes}, but the labels {raw} plus '
          f'label_id_offset={self.label_id_offset} span '
          f'{ids.min()}..{ids.max()}',
      )

  def _check_fields(self) -> None:
    h, w, d = tuple(self.data_shape)
    if h != w or h <= 0 or d != 3:
      raise self._error(
          'data_shape', f'must be (size, size, 3), got {self.data_shape}'
      )
    if self.num_classes <= 0:
      raise self._error('num_classes', 'must be positive')

  def __post_init__(self):
    self._check_fields()
    self._records = self._paths = None
    if self.data is None:
      source = self._source()
      if source.startswith(TFRECORD_PREFIX):
        # Labels are read with the images ('image/class/label').
        self._records = list_tfrecords(source[len(TFRECORD_PREFIX):])
        ids = np.zeros(len(self._records), np.int32)
      else:
        self._paths, labels, _ = list_image_folder(source, self.class_names)
        ids = labels + self.label_id_offset
        self._check_ids(ids, f'of the folders (1..{labels.max()})')
      self.data = {
          'index': np.arange(len(ids), dtype=np.int64),
          'label': ids.astype(np.int32),
      }
    super().__post_init__()

  def _example(self, index: int) -> tuple[bytes, int | None]:
    """(encoded image, TFRecord label or None) of example `index`."""
    if self._records is None:
      return _read(self._paths[index]), None
    path, offset, length = self._records[index]
    features = _tfrecord.parse_example(
        _tfrecord.read_record(path, offset, length)
    )
    try:
      return (features['image/encoded'][0],
              int(features['image/class/label'][0]))
    except (KeyError, IndexError) as e:
      raise ValueError(
          f'{path}: a record at offset {offset} lacks image/encoded or '
          'image/class/label.'
      ) from e

  def _preprocess(self, image_bytes, rng=None) -> np.ndarray:
    """One image, preprocessed to `data_shape`."""
    return resnet_preprocessing.preprocess_image(
        image_bytes, self._is_training(), image_size=self.data_shape[0],
        rng=rng,
    )

  def _batch_rngs(
      self, n: int, position: tuple[int, int]
  ) -> list[np.random.Generator]:
    """Per-image generators, fixed by the seed, host and (epoch, position)."""
    seed = [self._seed & (2**64 - 1), self.infeed_host_index, *position]
    children = np.random.SeedSequence(seed).spawn(n)
    return [np.random.default_rng(s) for s in children]

  def _images(
      self, indices: np.ndarray, real: np.ndarray, position: tuple[int, int]
  ) -> tuple[np.ndarray, np.ndarray]:
    """(images, TFRecord labels (0 for folders and padded rows))."""
    rngs = self._batch_rngs(len(indices), position)
    images = np.zeros((len(indices), *self.data_shape), np.float32)
    labels = np.zeros(len(indices), np.int64)

    def load(i):
      if real[i]:
        image_bytes, label = self._example(int(indices[i]))
        images[i] = self._preprocess(image_bytes, rngs[i])
        labels[i] = label or 0

    threads = max(1, min(self.num_batcher_threads, len(indices)))
    with futures.ThreadPoolExecutor(threads) as pool:
      list(pool.map(load, range(len(indices))))
    return images, labels

  def get_next(self) -> NestedMap:
    position = (self._epoch, self._position)  # Before this batch.
    batch = super().get_next()
    weights = np.asarray(batch[base_input.EVAL_SAMPLE_WEIGHTS], np.float32)
    real = weights > 0
    images, record_labels = self._images(batch.index, real, position)
    ids = np.asarray(batch.label)
    if self._records is not None:
      ids = np.where(real, record_labels + self.label_id_offset, 0)
      self._check_ids(ids[real], 'of the TFRecords')
    labels = np.eye(self.num_classes, dtype=np.float32)[ids]
    return NestedMap(
        bucket_keys=real.astype(np.int32),
        image=images,
        label_probs=labels * real[:, None],
        weight=weights,
        eval_sample_weights=weights,
    )

  # pylint: disable-next=invalid-name
  def ImageBytesToBatch(self, image_bytes) -> NestedMap:
    """A batch of one preprocessed image (`image` [1, h, w, d])."""
    return NestedMap(image=self._preprocess(image_bytes)[np.newaxis])


class ImageNetTrain(BaseImageNetInput):
  """The ImageNet training split (random crops and flips)."""

  _SPLIT = 'train'
  num_samples: int = TRAIN_EXAMPLES

  def _is_training(self) -> bool:
    return True


class ImageNetValidation(BaseImageNetInput):
  """The ImageNet validation split (center crops)."""

  _SPLIT = 'validation'
  num_samples: int = EVAL_EXAMPLES

  def _is_training(self) -> bool:
    return False
