"""ImageNet-style image classification inputs read from image folders.

Public names: TRAIN_EXAMPLES, EVAL_EXAMPLES, IMAGENET_DATA_DIR,
IMAGENET_DATA_DIR_ENV, IMAGE_EXTENSIONS, list_image_folder,
BaseImageNetInput, ImageNetTrain, ImageNetValidation.

Pax reads ImageNet TFRecords through Lingvo and TensorFlow; these inputs
read plain image files (JPEG, PNG, ...) with PIL instead, from a directory
with one subdirectory per class (`<dir>/<class name>/<image>`, the layout of
the ImageNet tarballs once extracted). Classes are the sorted subdirectory
names (or the `class_names` field) numbered from 1, as the labels of Pax's
TFRecords, so the default `label_id_offset=-1` gives ids 0..num_classes-1.

The directory is the `file_pattern` field, or else `<data dir>/train`
(`ImageNetTrain`) or `<data dir>/validation` (`ImageNetValidation`) where
the data dir is `$IMAGENET_DATA_DIR` or `IMAGENET_DATA_DIR`. Images are
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
import os

import numpy as np

from paxml.tasks.vision import resnet_preprocessing
from praxis import base_input
from praxis import py_utils

NestedMap = py_utils.NestedMap

TRAIN_EXAMPLES = 1281167  # The size of ImageNet training dataset.
EVAL_EXAMPLES = 50000  # The size of ImageNet validation dataset.
IMAGENET_DATA_DIR = '/PATH/TO/IMAGENET_DATA/'
IMAGENET_DATA_DIR_ENV = 'IMAGENET_DATA_DIR'
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.gif', '.webp')


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
    file_pattern: The directory of class folders; None: the split's
      directory under the data dir (see the module docstring).
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

  def _directory(self) -> str:
    if self.file_pattern:
      return self.file_pattern
    root = os.environ.get(IMAGENET_DATA_DIR_ENV) or IMAGENET_DATA_DIR
    return os.path.join(root, self._SPLIT)

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
    if self.data is None:
      self._paths, labels, _ = list_image_folder(
          self._directory(), self.class_names
      )
      ids = labels + self.label_id_offset
      if ids.min() < 0 or ids.max() >= self.num_classes:
        raise self._error(
            'num_classes',
            f'is {self.num_classes}, but the folder labels 1..{labels.max()} '
            f'plus label_id_offset={self.label_id_offset} span '
            f'{ids.min()}..{ids.max()}',
        )
      self.data = {
          'index': np.arange(len(self._paths), dtype=np.int64),
          'label': ids.astype(np.int32),
      }
    super().__post_init__()

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
  ) -> np.ndarray:
    rngs = self._batch_rngs(len(indices), position)
    images = np.zeros((len(indices), *self.data_shape), np.float32)

    def load(i):
      if real[i]:
        images[i] = self._preprocess(
            _read(self._paths[int(indices[i])]), rngs[i]
        )

    threads = max(1, min(self.num_batcher_threads, len(indices)))
    with futures.ThreadPoolExecutor(threads) as pool:
      list(pool.map(load, range(len(indices))))
    return images

  def get_next(self) -> NestedMap:
    position = (self._epoch, self._position)  # Before this batch.
    batch = super().get_next()
    weights = np.asarray(batch[base_input.EVAL_SAMPLE_WEIGHTS], np.float32)
    real = weights > 0
    images = self._images(batch.index, real, position)
    labels = np.eye(self.num_classes, dtype=np.float32)[batch.label]
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
