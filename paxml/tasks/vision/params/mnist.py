r"""A small CNN classifier on MNIST, read from local files.

Public names: MNIST_DATA_DIR_ENV, parse_idx, read_idx, load_mnist,
flattened_dims, per_example_xent, CNN, CNNModel, MnistDatasetInput,
MnistExperiment.

The data is not downloaded: `MnistDatasetInput` reads the four IDX files of
the MNIST distribution (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
`t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, each optionally gzipped)
or a Keras-style `mnist.npz` (arrays `x_train`, `y_train`, `x_test`,
`y_test`) from the directory in its `data_dir` field or, when that is unset,
in the `MNIST_DATA_DIR` environment variable. Batches hold `inputs` (float32
[B, 28, 28, 1] in [0, 1]), `labels` (int32 [B]) and `eval_sample_weights`.

Example:

  MNIST_DATA_DIR=/data/mnist python -m paxml.main \
      --exp=tasks.vision.params.mnist.MnistExperiment \
      --job_log_dir=/tmp/mnist --eval_on_test

`MnistExperiment` keeps Pax's single-device mesh (`ICI_MESH_SHAPE` 1, 1, 1);
on a machine with N devices add `--fdl_set=task.model.ici_mesh_shape=[1,N,1]`
(the per-host batch must divide by N).
"""

from __future__ import annotations

from collections.abc import Sequence
import gzip
import math
import os
import struct
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from paxml import base_experiment
from paxml import experiment_registry
from paxml import learners
from paxml import tasks_lib
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis import schedules
from praxis.layers import activations
from praxis.layers import convolutions
from praxis.layers import linears
from praxis.layers import poolings

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightedScalars = pytypes.WeightedScalars
template_field = base_layer.template_field

MNIST_DATA_DIR_ENV = 'MNIST_DATA_DIR'
_IDX_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}
_NPZ_FILE = 'mnist.npz'
_NPZ_KEYS = {'train': ('x_train', 'y_train'), 'test': ('x_test', 'y_test')}
# IDX type codes (third byte of the magic number); data is big-endian.
_IDX_DTYPES = {
    0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4',
    0x0E: '>f8',
}


# ----------------------------------------------------------------------------
# Reading MNIST files.
# ----------------------------------------------------------------------------


def parse_idx(raw: bytes, source: str = 'IDX data') -> np.ndarray:
  """Decodes the bytes of one IDX file into a native-endian array.

  Args:
    raw: The file's bytes: magic (0, 0, type code, rank), rank big-endian
      uint32 dims, then the big-endian values.
    source: Named in error messages.

  Returns:
    The array, shaped by the header.
  """
  if len(raw) < 4 or raw[:2] != b'\0\0' or raw[2] not in _IDX_DTYPES:
    raise ValueError(
        f'{source} is not an IDX file: bad magic number {raw[:4].hex()!r}.'
    )
  rank = raw[3]
  offset = 4 + 4 * rank
  if len(raw) < offset:
    raise ValueError(f'{source}: the IDX header of rank {rank} is truncated.')
  shape = struct.unpack(f'>{rank}I', raw[4:offset])
  dtype = np.dtype(_IDX_DTYPES[raw[2]])
  size = math.prod(shape)
  if len(raw) != offset + size * dtype.itemsize:
    raise ValueError(
        f'{source}: {len(raw) - offset} data bytes, but shape {shape} of '
        f'{dtype.name} needs {size * dtype.itemsize}.'
    )
  values = np.frombuffer(raw, dtype, size, offset).reshape(shape)
  return values.astype(dtype.newbyteorder('='))


def read_idx(path: str) -> np.ndarray:
  """Reads an IDX file (gzipped when its name ends in `.gz`)."""
  opener = gzip.open if path.endswith('.gz') else open
  with opener(path, 'rb') as f:
    return parse_idx(f.read(), source=path)


def _find(directory: str, name: str) -> str | None:
  for candidate in (name, name + '.gz'):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def _missing_data_message(data_dir: str | None, where: str) -> str:
  files = ', '.join(f'{n}[.gz]' for pair in _IDX_FILES.values() for n in pair)
  found = (f'in {data_dir!r} ({where})' if data_dir else
           f'(neither the data_dir field nor {MNIST_DATA_DIR_ENV} is set)')
  return (
      f'No MNIST data found {found}: point the data_dir field of '
      f'MnistDatasetInput or the {MNIST_DATA_DIR_ENV} environment variable '
      f'at a directory holding {files}, or {_NPZ_FILE} with arrays '
      'x_train, y_train, x_test and y_test.'
  )


def load_mnist(
    split: str, data_dir: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
  """Reads one split of MNIST from local IDX files or `mnist.npz`.

  Args:
    split: 'train' or 'test'.
    data_dir: The directory; None reads `$MNIST_DATA_DIR`.

  Returns:
    (images [N, H, W] or [N, H, W, C] as stored, labels int32 [N]).

  Raises:
    FileNotFoundError: Neither the IDX files nor `mnist.npz` are there.
  """
  if split not in _IDX_FILES:
    raise ValueError(f"MNIST split must be 'train' or 'test', got {split!r}.")
  where = 'the data_dir field'
  if not data_dir:
    data_dir, where = os.environ.get(MNIST_DATA_DIR_ENV), MNIST_DATA_DIR_ENV
  if not data_dir:
    raise FileNotFoundError(_missing_data_message(None, where))
  images_path, labels_path = (_find(data_dir, n) for n in _IDX_FILES[split])
  npz_path = os.path.join(data_dir, _NPZ_FILE)
  if images_path and labels_path:
    images, labels = read_idx(images_path), read_idx(labels_path)
    source = images_path
  elif os.path.isfile(npz_path):
    with np.load(npz_path) as f:
      missing = [k for k in _NPZ_KEYS[split] if k not in f]
      if missing:
        raise KeyError(f'{npz_path} has no arrays {missing}; it holds '
                       f'{sorted(f.keys())}.')
      images, labels = (f[k] for k in _NPZ_KEYS[split])
    source = npz_path
  else:
    raise FileNotFoundError(_missing_data_message(data_dir, where))
  if images.ndim not in (3, 4) or labels.shape != images.shape[:1]:
    raise ValueError(
        f'{source}: expected images [N, H, W(, C)] and labels [N], got '
        f'{images.shape} and {labels.shape}.'
    )
  return images, labels.astype(np.int32)


def _to_float_images(images: np.ndarray) -> np.ndarray:
  """uint8 pixels to float32 in [0, 1]; other dtypes cast to float32."""
  if images.dtype == np.uint8:
    return images.astype(np.float32) / 255.0
  return images.astype(np.float32)


# ----------------------------------------------------------------------------
# Model.
# ----------------------------------------------------------------------------


def flattened_dims(height: int, width: int, channels: Sequence[int]) -> int:
  """Features after len(channels) stride-2 SAME poolings of an image."""
  for _ in channels:
    height, width = -(-height // 2), -(-width // 2)
  return channels[-1] * height * width


def per_example_xent(logits: JTensor, labels: JTensor) -> JTensor:
  """Softmax cross entropy of integer `labels` [B] under `logits` [B, C]."""
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  label_logp = jnp.take_along_axis(
      logp, labels[:, None].astype(jnp.int32), axis=-1
  )
  return -label_logp[:, 0]


def _weighted_mean(values: JTensor, weights: JTensor) -> tuple[JTensor, Any]:
  total = jnp.sum(weights)
  mean = jnp.sum(values * weights) / jnp.where(total > 0, total, 1.0)
  return mean, total


class CNN(base_layer.BaseLayer):
  """Conv-ReLU-AvgPool blocks, then a ReLU dense layer and class logits.

  Block i (children `conv{i}`, `pooling{i}`, from 1) is a `kernel_size`
  square convolution to `channels[i-1]` channels with bias and activation,
  then a 2x2 stride-2 average pooling. The features are flattened and go
  through children `dense[0]` (FeedForward to `hidden_dims`), `dense[1]`
  (Linear to `num_classes`) and `dense[2]` (Bias). The defaults are Pax's
  MNIST network.

  Attributes:
    height: Image height.
    width: Image width.
    num_classes: Number of classes (logits).
    kernel_size: Convolution kernel height and width.
    activation_tpl: Activation after each convolution and the dense layer.
    channels: Output channels of each conv block (Pax: 32 then 64).
    hidden_dims: Width of the dense layer.
    input_channels: Channels of the input images.
  """

  height: int = 28
  width: int = 28
  num_classes: int = 10
  kernel_size: int = 3
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU)
  )
  channels: Sequence[int] = (32, 64)
  hidden_dims: int = 256
  input_channels: int = 1

  def _check(self) -> None:
    for field in ('height', 'width', 'num_classes', 'kernel_size',
                  'hidden_dims', 'input_channels'):
      if getattr(self, field) <= 0:
        raise ValueError(f'CNN {self.name!r}: {field}={getattr(self, field)} '
                         'must be positive.')
    if not self.channels or min(self.channels) <= 0:
      raise ValueError(f'CNN {self.name!r}: channels={self.channels} must be '
                       'a non-empty list of positive ints.')

  def setup(self) -> None:
    self._check()
    in_channels = self.input_channels
    for i, out_channels in enumerate(self.channels, start=1):
      self.create_child(f'conv{i}', pax_fiddle.Config(
          convolutions.ConvBNAct,
          filter_shape=(self.kernel_size, self.kernel_size, in_channels,
                        out_channels),
          filter_stride=(1, 1), bias=True, batch_norm_tpl=None,
          activation_tpl=self.activation_tpl.clone()))
      self.create_child(f'pooling{i}', pax_fiddle.Config(
          poolings.Pooling, window_shape=(2, 2), window_stride=(2, 2),
          pooling_type='AVG'))
      in_channels = out_channels
    dense_p = pax_fiddle.Config(
        linears.FeedForward,
        input_dims=flattened_dims(self.height, self.width, self.channels),
        output_dims=self.hidden_dims, has_bias=True,
        activation_tpl=self.activation_tpl.clone())
    linear_p = pax_fiddle.Config(
        linears.Linear, input_dims=self.hidden_dims,
        output_dims=self.num_classes)
    bias_p = pax_fiddle.Config(linears.Bias, dims=self.num_classes)
    self.create_children('dense', [dense_p, linear_p, bias_p])

  def __call__(self, inputs: JTensor) -> JTensor:
    """Maps images [B, height, width, input_channels] to logits [B, C]."""
    expected = (self.height, self.width, self.input_channels)
    if tuple(inputs.shape[1:]) != expected:
      raise ValueError(
          f'CNN {self.name!r}: inputs of shape {tuple(inputs.shape)} do not '
          f'match [B, height, width, input_channels] = [B, {expected[0]}, '
          f'{expected[1]}, {expected[2]}].'
      )
    outputs = inputs
    for i in range(1, len(self.channels) + 1):
      outputs = getattr(self, f'conv{i}')(outputs)
      outputs = getattr(self, f'pooling{i}')(outputs)[0]
    outputs = jnp.reshape(outputs, [outputs.shape[0], -1])
    for layer in self.dense:
      outputs = layer(outputs)
    return outputs


class CNNModel(base_model.BaseModel):
  """Classifies `inputs` into integer `labels` with a network (a `CNN`).

  Metrics (value, weight): `loss` (mean softmax cross entropy) and
  `accuracy` (top-1), averaged with the batch's `eval_sample_weights` (all
  ones when absent), so padded eval rows do not count; the weight is the
  number of real examples.

  Attributes:
    network_tpl: The network: images to logits [B, num_classes].
  """

  network_tpl: pax_fiddle.Config[base_layer.BaseLayer] = template_field(CNN)

  def setup(self) -> None:
    self.create_child('network', self.network_tpl)

  def compute_predictions(self, input_batch: NestedMap) -> JTensor:
    """Logits [B, num_classes] of `input_batch.inputs`."""
    return self.network(input_batch['inputs'])

  def compute_loss(
      self, predictions: JTensor, input_batch: NestedMap
  ) -> tuple[WeightedScalars, NestedMap]:
    labels = input_batch['labels']
    weights = input_batch.get(base_input.EVAL_SAMPLE_WEIGHTS)
    if weights is None:
      weights = jnp.ones(labels.shape, jnp.float32)
    weights = weights.astype(jnp.float32)
    loss, total = _weighted_mean(per_example_xent(predictions, labels),
                                 weights)
    correct = jnp.argmax(predictions, axis=-1) == labels
    accuracy, _ = _weighted_mean(correct.astype(jnp.float32), weights)
    metrics = NestedMap(loss=(loss, total), accuracy=(accuracy, total))
    return metrics, NestedMap(predictions=predictions)


# ----------------------------------------------------------------------------
# Input.
# ----------------------------------------------------------------------------


class MnistDatasetInput(base_input.InMemoryInput):
  """MNIST from local files, sharded over hosts as `InMemoryInput`.

  Training shuffles and repeats; eval (`reset_for_eval=True`) reads the split
  once, padded. Batches: `inputs` float32 [B, H, W, 1] in [0, 1], `labels`
  int32 [B], `eval_sample_weights` [B].

  Attributes:
    data_dir: Directory of the MNIST files (see the module docstring); None
      reads the `MNIST_DATA_DIR` environment variable.
    split: 'train' or 'test'; None picks 'train' for a training input and
      'test' otherwise.
  """

  data_dir: str | None = None
  split: str | None = None

  def __post_init__(self):
    split = self.split or ('train' if self.is_training else 'test')
    if split not in _IDX_FILES:
      raise ValueError(f'MnistDatasetInput {self.name!r}: split={split!r} '
                       "must be 'train' or 'test'.")
    if self.data is None:
      images, labels = load_mnist(split, self.data_dir)
      if images.ndim == 3:
        images = images[..., None]
      self.data = {'inputs': images, 'labels': labels}
    super().__post_init__()

  def get_next(self) -> NestedMap:
    batch = super().get_next()
    batch.inputs = _to_float_images(batch.inputs)
    return batch


# ----------------------------------------------------------------------------
# Experiment.
# ----------------------------------------------------------------------------


@experiment_registry.register
class MnistExperiment(base_experiment.BaseExperiment):
  """Pax's MNIST CNN: SGD with momentum 0.1, lr 0.01, 1000 steps of 1024.

  The data comes from local files (see the module docstring).
  """

  BATCH_SIZE = 1024
  MOMENTUM = 0.1
  LEARNING_RATE = 0.01
  TRAIN_STEPS = 1000
  HEIGHT = 28
  WIDTH = 28
  NUM_CLASSES = 10
  KERNEL_SIZE = 3
  DATA_DIR = None  # None: the MNIST_DATA_DIR environment variable.

  MESH_AXIS_NAMES = ('replica', 'data', 'mdl')
  ICI_MESH_SHAPE = (1, 1, 1)

  def task(self) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    model_p = pax_fiddle.Config(
        CNNModel, name='mnist',
        network_tpl=pax_fiddle.Config(
            CNN, name='mnist_model', height=self.HEIGHT, width=self.WIDTH,
            num_classes=self.NUM_CLASSES, kernel_size=self.KERNEL_SIZE),
        ici_mesh_shape=list(self.ICI_MESH_SHAPE),
        mesh_axis_names=self.MESH_AXIS_NAMES)
    optimizer_p = pax_fiddle.Config(
        optimizers.ShardedSgd, momentum=self.MOMENTUM,
        learning_rate=self.LEARNING_RATE,
        lr_schedule=pax_fiddle.Config(schedules.Constant, value=1.0))
    task_p = pax_fiddle.Config(
        tasks_lib.SingleTask, name='mnist_task', model=model_p)
    task_p.train.learner = pax_fiddle.Config(
        learners.Learner, loss_name='loss', optimizer=optimizer_p)
    task_p.train.num_train_steps = self.TRAIN_STEPS
    task_p.train.eval_skip_train = True
    return task_p

  def _input(self, is_training: bool) -> pax_fiddle.Config[MnistDatasetInput]:
    return pax_fiddle.Config(
        MnistDatasetInput, name='train' if is_training else 'test',
        batch_size=self.BATCH_SIZE, is_training=is_training,
        reset_for_eval=not is_training, data_dir=self.DATA_DIR,
        input_random_seed=1234 if is_training else None)

  def datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    return [self._input(True), self._input(False)]


# Names Pax 1.4's module also has (aliases of other modules' names).
Predictions = base_model.Predictions
