"""ImageNet preprocessing for ResNets, in numpy and PIL (no TensorFlow).

Public names: IMAGE_SIZE, CROP_FRACTION, decode_image, resize_bicubic,
sample_distorted_bounding_box, distorted_bounding_box_crop,
preprocess_for_train, preprocess_for_eval, preprocess_image.

Pax's functions, on host arrays: training takes a random crop (Inception
style: 8%-100% of the area, aspect ratio 3/4-4/3, at least 10% of the image,
10 attempts, else the eval crop), resizes it bicubically to `image_size`
square and flips it left-right with probability 1/2; eval takes the central
square of side `CROP_FRACTION * min(height, width)` (as Pax computes it) and
resizes it. Outputs are float32 (or bfloat16) [image_size, image_size, 3]
in [0, 255] (bicubic overshoot is not clipped, as in TensorFlow).

`image_bytes` is an encoded image (JPEG, PNG, ...) or an already decoded
uint8 array [H, W, 3]. Randomness comes from a `numpy.random.Generator`
(`rng`); the sampling follows `tf.image.sample_distorted_bounding_box` but
its random numbers are numpy's, so crops are not TensorFlow's crops.

Example:

  with open('cat.jpg', 'rb') as f:
    image = resnet_preprocessing.preprocess_image(f.read(), image_size=224)
"""

from __future__ import annotations

from collections.abc import Sequence
import io
import math
from typing import Any

import ml_dtypes
import numpy as np
from PIL import Image

IMAGE_SIZE = 224
CROP_FRACTION = 0.875

ImageLike = Any  # bytes of an encoded image, or a uint8 array [H, W, 3].

_KEYS_CUBIC_A = -0.5  # TensorFlow's bicubic kernel with half-pixel centers.


def decode_image(image_bytes: ImageLike) -> np.ndarray:
  """An RGB uint8 array [H, W, 3] of encoded bytes (or of an array)."""
  if isinstance(image_bytes, (bytes, bytearray, memoryview)):
    with Image.open(io.BytesIO(bytes(image_bytes))) as image:
      return np.asarray(image.convert('RGB'))
  image = np.asarray(image_bytes)
  if image.ndim == 2:
    image = np.repeat(image[..., None], 3, axis=-1)
  if image.ndim != 3 or image.shape[-1] != 3:
    raise ValueError(
        f'An image must be encoded bytes or an array [H, W, 3], got an array '
        f'of shape {image.shape}.'
    )
  return image


def _keys_cubic(x: np.ndarray) -> np.ndarray:
  a, x = _KEYS_CUBIC_A, np.abs(x)
  near = ((a + 2) * x - (a + 3)) * x * x + 1
  far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
  return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _bicubic_matrix(in_size: int, out_size: int) -> np.ndarray:
  """[out, in] interpolation weights of TF's half-pixel bicubic resize.

  Taps outside the image get weight 0 and each row is renormalized.
  """
  scale = in_size / out_size
  centers = (np.arange(out_size) + 0.5) * scale - 0.5
  base = np.floor(centers).astype(np.int64)
  weights = np.zeros((out_size, in_size), np.float64)
  rows = np.arange(out_size)
  for offset in (-1, 0, 1, 2):
    index = base + offset
    w = _keys_cubic(centers - index)
    inside = (index >= 0) & (index < in_size)
    np.add.at(weights, (rows[inside], index[inside]), w[inside])
  return weights / weights.sum(axis=1, keepdims=True)


def resize_bicubic(image: np.ndarray, size: Sequence[int]) -> np.ndarray:
  """Bicubic resize of [H, W, C] to float32 [size[0], size[1], C].

  Half-pixel centers and the Keys kernel (a = -0.5), without antialiasing,
  as `tf.image.resize(..., method='bicubic')`.
  """
  h, w = image.shape[:2]
  wh = _bicubic_matrix(h, int(size[0]))
  ww = _bicubic_matrix(w, int(size[1]))
  out = np.einsum('oh,hwc->owc', wh, image.astype(np.float64))
  out = np.einsum('pw,owc->opc', ww, out)
  return out.astype(np.float32)


def _round(x: float) -> int:
  """Rounds halves away from zero (C's `round`, as TensorFlow uses)."""
  return int(math.floor(x + 0.5))


def _random_crop_box(
    height: int, width: int, aspect_ratio: float,
    area_range: Sequence[float], rng: np.random.Generator,
) -> tuple[int, int, int, int] | None:
  """(y, x, h, w) of a crop with this aspect ratio and area, or None."""
  min_area = area_range[0] * height * width
  max_area = area_range[1] * height * width
  crop_h = _round(math.sqrt(min_area / aspect_ratio))
  max_h = _round(math.sqrt(max_area / aspect_ratio))
  if _round(max_h * aspect_ratio) > width:
    # The tallest crop whose rounded width still fits.
    max_h = int((width + 0.5 - 1e-7) / aspect_ratio)
    if _round(max_h * aspect_ratio) > width:
      max_h -= 1
  max_h = min(max_h, height)
  crop_h = min(crop_h, max_h)
  if crop_h < max_h:
    crop_h += int(rng.integers(0, max_h - crop_h + 1))
  crop_w = _round(crop_h * aspect_ratio)
  if crop_w * crop_h < min_area:
    crop_h += 1
    crop_w = _round(crop_h * aspect_ratio)
  if crop_w * crop_h > max_area:
    crop_h -= 1
    crop_w = _round(crop_h * aspect_ratio)
  area = crop_w * crop_h
  if not (min_area <= area <= max_area and 0 < crop_w <= width
          and 0 < crop_h <= height):
    return None
  y = int(rng.integers(0, height - crop_h + 1))
  x = int(rng.integers(0, width - crop_w + 1))
  return y, x, crop_h, crop_w


def sample_distorted_bounding_box(
    image_shape: Sequence[int],
    min_object_covered: float = 0.1,
    aspect_ratio_range: Sequence[float] = (0.75, 1.33),
    area_range: Sequence[float] = (0.05, 1.0),
    max_attempts: int = 100,
    rng: np.random.Generator | None = None,
) -> tuple[int, int, int, int]:
  """A random crop (y, x, height, width) of an image [H, W, ...].

  Like `tf.image.sample_distorted_bounding_box` with the whole image as the
  bounding box: up to `max_attempts` crops of a uniform aspect ratio in
  `aspect_ratio_range` and an area fraction in `area_range`; the first that
  covers at least `min_object_covered` of the image wins, else the whole
  image.
  """
  rng = rng if rng is not None else np.random.default_rng()
  height, width = int(image_shape[0]), int(image_shape[1])
  for _ in range(max_attempts):
    aspect_ratio = rng.uniform(*aspect_ratio_range)
    box = _random_crop_box(height, width, aspect_ratio, area_range, rng)
    if box is not None and box[2] * box[3] >= (
        min_object_covered * height * width):
      return box
  return 0, 0, height, width


def distorted_bounding_box_crop(
    image_bytes: ImageLike,
    bbox: Any = None,
    min_object_covered: float = 0.1,
    aspect_ratio_range: Sequence[float] = (0.75, 1.33),
    area_range: Sequence[float] = (0.05, 1.0),
    max_attempts: int = 100,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
  """The image cropped by `sample_distorted_bounding_box`, uint8 [h, w, 3].

  `bbox` must be None or the whole image ([[[0, 0, 1, 1]]], as Pax passes);
  other boxes are not supported.
  """
  if bbox is not None and not np.allclose(
      np.reshape(np.asarray(bbox, np.float32), [-1]), [0.0, 0.0, 1.0, 1.0]):
    raise ValueError(
        f'distorted_bounding_box_crop supports only the whole-image bbox '
        f'[[[0, 0, 1, 1]]], got {bbox}.'
    )
  image = decode_image(image_bytes)
  y, x, h, w = sample_distorted_bounding_box(
      image.shape, min_object_covered, aspect_ratio_range, area_range,
      max_attempts, rng,
  )
  return image[y:y + h, x:x + w]


def _center_crop(image: np.ndarray, image_size: int) -> np.ndarray:
  """The central square of side image_size / (image_size + padding) * min."""
  height, width = image.shape[:2]
  crop_padding = round(image_size * (1 / CROP_FRACTION - 1))
  side = int(image_size / (image_size + crop_padding) * min(height, width))
  top = (height - side + 1) // 2
  left = (width - side + 1) // 2
  return image[top:top + side, left:left + side]


def _decode_and_center_crop(
    image_bytes: ImageLike, image_size: int
) -> np.ndarray:
  """The eval crop, resized to float32 [image_size, image_size, 3]."""
  image = _center_crop(decode_image(image_bytes), image_size)
  return resize_bicubic(image, (image_size, image_size))


def _decode_and_random_crop(
    image_bytes: ImageLike, image_size: int, rng: np.random.Generator
) -> np.ndarray:
  """A random crop resized to image_size; the eval crop when none is found."""
  image = decode_image(image_bytes)
  crop = distorted_bounding_box_crop(
      image, min_object_covered=0.1, aspect_ratio_range=(3. / 4, 4. / 3.),
      area_range=(0.08, 1.0), max_attempts=10, rng=rng,
  )
  if crop.shape == image.shape:  # No crop was found.
    return _decode_and_center_crop(image, image_size)
  return resize_bicubic(crop, (image_size, image_size))


def _flip(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """Flips left-right with probability 1/2."""
  return image[:, ::-1] if rng.uniform() < 0.5 else image


def _to_dtype(image: np.ndarray, use_bfloat16: bool) -> np.ndarray:
  return image.astype(ml_dtypes.bfloat16 if use_bfloat16 else np.float32)


def preprocess_for_train(
    image_bytes: ImageLike,
    use_bfloat16: bool,
    image_size: int = IMAGE_SIZE,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
  """Random crop, resize and flip: [image_size, image_size, 3] in [0, 255]."""
  rng = rng if rng is not None else np.random.default_rng()
  image = _decode_and_random_crop(image_bytes, image_size, rng)
  image = _flip(image, rng)
  return _to_dtype(np.ascontiguousarray(image), use_bfloat16)


def preprocess_for_eval(
    image_bytes: ImageLike, use_bfloat16: bool, image_size: int = IMAGE_SIZE
) -> np.ndarray:
  """Center crop and resize: [image_size, image_size, 3] in [0, 255]."""
  image = _decode_and_center_crop(image_bytes, image_size)
  return _to_dtype(image, use_bfloat16)


def preprocess_image(
    image_bytes: ImageLike,
    is_training: bool = False,
    use_bfloat16: bool = False,
    image_size: int = IMAGE_SIZE,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
  """Training or eval preprocessing of one image (see the module doc)."""
  if is_training:
    return preprocess_for_train(image_bytes, use_bfloat16, image_size, rng)
  return preprocess_for_eval(image_bytes, use_bfloat16, image_size)
