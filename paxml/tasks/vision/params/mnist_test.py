"""Tests of the MNIST files reader, CNN model, input and experiment.

No data is downloaded: the tests write tiny IDX and npz files themselves.
"""

import gzip
import os
import pathlib
import struct
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import learners
from paxml import tasks_lib
from paxml import train
from paxml.tasks.vision.params import mnist
from praxis import base_hyperparams
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis import test_utils

NestedMap = py_utils.NestedMap
_EXP = 'tasks.vision.params.mnist.MnistExperiment'
_NUM_TRAIN, _NUM_TEST = 64, 32


def _idx_bytes(array: np.ndarray, type_code: int) -> bytes:
  """The IDX encoding, written from the format's description."""
  header = bytes([0, 0, type_code, array.ndim])
  dims = struct.pack('>' + 'I' * array.ndim, *array.shape)
  return header + dims + array.astype(array.dtype.newbyteorder('>')).tobytes()


def _synthetic_mnist(num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Noise plus a bright bar whose height encodes the label: learnable."""
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 10, num).astype(np.uint8)
  images = rng.integers(0, 40, (num, 28, 28)).astype(np.uint8)
  for i, label in enumerate(labels):
    images[i, 2 * label:2 * label + 6, 4:24] = 255
  return images, labels


def _write_idx_dir(directory: str, gz: bool = False) -> dict[str, np.ndarray]:
  arrays = {}
  for prefix, num, seed in (('train', _NUM_TRAIN, 0), ('t10k', _NUM_TEST, 1)):
    images, labels = _synthetic_mnist(num, seed)
    for kind, array in (('images-idx3', images), ('labels-idx1', labels)):
      path = os.path.join(directory, f'{prefix}-{kind}-ubyte')
      opener = gzip.open if gz else open
      with opener(path + ('.gz' if gz else ''), 'wb') as f:
        f.write(_idx_bytes(array, 0x08))
    arrays[prefix] = (images, labels)
  return arrays


class IdxAndNpzTest(test_utils.TestCase):

  def test_parse_idx_of_other_types(self):
    values = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(
        mnist.parse_idx(_idx_bytes(values, 0x0C)), values)
    floats = np.array([1.5, -2.25], np.float64)
    np.testing.assert_array_equal(
        mnist.parse_idx(_idx_bytes(floats, 0x0E)), floats)

  def test_parse_idx_rejects_bad_files(self):
    with self.assertRaisesRegex(ValueError, 'x.idx is not an IDX file'):
      mnist.parse_idx(b'\x01\x02\x08\x01', source='x.idx')
    raw = _idx_bytes(np.zeros([2, 3], np.uint8), 0x08)
    with self.assertRaisesRegex(ValueError, r'5 data bytes, but shape'):
      mnist.parse_idx(raw[:-1])

  def test_idx_files_plain_and_gzipped(self):
    for gz in (False, True):
      with self.subTest(gz=gz):
        directory = tempfile.mkdtemp()
        written = _write_idx_dir(directory, gz=gz)
        for split, prefix in (('train', 'train'), ('test', 't10k')):
          images, labels = mnist.load_mnist(split, directory)
          np.testing.assert_array_equal(images, written[prefix][0])
          np.testing.assert_array_equal(labels, written[prefix][1])
          self.assertEqual(labels.dtype, np.int32)

  def test_npz_file(self):
    directory = tempfile.mkdtemp()
    arrays = {
        'x_train': self.np_rng.integers(0, 256, (5, 28, 28)).astype(np.uint8),
        'y_train': np.array([0, 1, 2, 3, 9], np.uint8),
        'x_test': self.np_rng.integers(0, 256, (3, 28, 28)).astype(np.uint8),
        'y_test': np.array([7, 7, 1], np.uint8),
    }
    np.savez(os.path.join(directory, 'mnist.npz'), **arrays)
    with mock.patch.dict(os.environ, {'MNIST_DATA_DIR': directory}):
      images, labels = mnist.load_mnist('test')
    np.testing.assert_array_equal(images, arrays['x_test'])
    np.testing.assert_array_equal(labels, arrays['y_test'])

  def test_missing_data_names_the_variable_field_and_files(self):
    with (mock.patch.dict(os.environ, clear=True),
          self.assertRaises(FileNotFoundError) as ctx):
      mnist.load_mnist('train')
    message = str(ctx.exception)
    for part in ('MNIST_DATA_DIR', 'data_dir', 'train-images-idx3-ubyte',
                 't10k-labels-idx1-ubyte', 'mnist.npz', 'x_train'):
      self.assertIn(part, message)
    self.assertNotIn('\n', message)
    empty = tempfile.mkdtemp()
    cfg = pax_fiddle.Config(mnist.MnistDatasetInput, batch_size=2,
                            is_training=True, data_dir=empty)
    with self.assertRaisesRegex(FileNotFoundError,
                                f'No MNIST data found in {empty!r}'):
      base_hyperparams.instantiate(cfg)


class CnnModelTest(test_utils.TestCase):

  def test_metrics_match_numpy_and_ignore_padded_rows(self):
    model_p = pax_fiddle.Config(
        mnist.CNNModel, name='m',
        network_tpl=pax_fiddle.Config(mnist.CNN, height=6, width=5,
                                      channels=(3, 4), hidden_dims=8,
                                      num_classes=5))
    batch = NestedMap(
        inputs=self.np_rng.normal(size=(4, 6, 5, 1)).astype(np.float32),
        labels=np.array([0, 4, 2, 1], np.int32),
        eval_sample_weights=np.array([1, 1, 1, 0], np.float32))
    model = base_layer.instantiate(model_p)
    # Random variables of the declared shapes (no compiled RNG: faster).
    variables = jax.tree.map(
        lambda h: self.np_rng.normal(size=h.shape).astype(np.float32),
        model.abstract_init_with_metadata(batch),
        is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))
    # 6x5 -> 3x3 -> 2x2 after SAME 2x2 poolings: 4 channels * 4 = 16.
    self.assertEqual(
        variables['params']['network']['dense_0']['linear']['w'].shape,
        (16, 8))
    logits, (metrics, _) = jax.jit(lambda v, b: (
        model.apply(v, b, method=model.compute_predictions),
        model.apply(v, b)))(variables, batch)
    logits = np.asarray(logits)
    logp = logits - np.log(np.sum(np.exp(logits), -1, keepdims=True))
    xent = -logp[np.arange(4), batch.labels]
    correct = np.argmax(logits, -1) == batch.labels
    self.assertAllClose(metrics.loss[0], np.mean(xent[:3]), rtol=1e-5)
    self.assertAllClose(metrics.accuracy[0], np.mean(correct[:3]))
    self.assertAllClose(metrics.loss[1], 3.0)

  def test_bad_config_and_inputs_name_the_field(self):
    with self.assertRaisesRegex(ValueError, "CNN 'cnn': channels=()"):
      test_utils.init_and_apply(
          base_layer.instantiate(pax_fiddle.Config(
              mnist.CNN, name='cnn', channels=())),
          np.zeros([1, 28, 28, 1], np.float32))
    with self.assertRaisesRegex(ValueError, r'\[B, 28, 28, 1\]'):
      test_utils.init_and_apply(
          base_layer.instantiate(pax_fiddle.Config(mnist.CNN, name='cnn')),
          np.zeros([1, 8, 8, 1], np.float32))


class MnistInputTest(test_utils.TestCase):

  def test_eval_batches_in_order_and_host_sharded(self):
    directory = tempfile.mkdtemp()
    images, labels = _write_idx_dir(directory)['t10k']
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        mnist.MnistDatasetInput, batch_size=4, reset_for_eval=True,
        data_dir=directory, num_infeed_hosts=2, infeed_host_index=1))
    batch = inp.get_next()
    self.assertEqual(batch.inputs.dtype, np.float32)
    self.assertAllClose(batch.inputs[..., 0], images[1:8:2] / 255.0)
    self.assertArraysEqual(batch.labels, labels[1:8:2], check_dtypes=False)
    num_batches = 1
    while True:
      try:
        inp.get_next()
      except StopIteration:
        break
      num_batches += 1
    self.assertEqual(num_batches, _NUM_TEST // 2 // 4)

  def test_bad_split_is_named(self):
    cfg = pax_fiddle.Config(mnist.MnistDatasetInput, batch_size=2,
                            split='validation')
    with self.assertRaisesRegex(ValueError, "split='validation' must be"):
      base_hyperparams.instantiate(cfg)


class MnistExperimentTest(test_utils.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.data_dir = tempfile.mkdtemp()
    _write_idx_dir(cls.data_dir)

  def _configs(self) -> train.ExperimentConfigs:
    exp = experiment_registry.get(_EXP)()
    configs = train.ExperimentConfigs.from_experiment(exp, _EXP)
    for ds in configs.datasets:
      ds.data_dir = self.data_dir
    return configs

  def test_config_follows_pax(self):
    task_p = self._configs().task
    self.assertIs(task_p.cls, tasks_lib.SingleTask)
    self.assertEqual(task_p.model.ici_mesh_shape, [1, 1, 1])
    self.assertEqual(task_p.train.num_train_steps, 1000)
    learner = task_p.train.learner
    self.assertIs(learner.cls, learners.Learner)
    self.assertIs(learner.optimizer.cls, optimizers.ShardedSgd)
    self.assertEqual(learner.optimizer.momentum, 0.1)
    self.assertEqual(learner.optimizer.learning_rate, 0.01)
    self.assertIs(learner.optimizer.lr_schedule.cls, schedules.Constant)

  def test_task_and_datasets_build_and_abstract_init(self):
    configs = self._configs()
    train_p, test_p = configs.datasets
    self.assertTrue(train_p.is_training)
    self.assertTrue(test_p.reset_for_eval)
    task = base_hyperparams.instantiate(configs.task)
    batch = base_hyperparams.instantiate(train_p).get_next()
    specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                         batch)
    self.assertEqual(specs.inputs.shape, (1024, 28, 28, 1))
    hparams = task.model.abstract_init_with_metadata(specs)
    shapes = jax.tree.map(
        lambda h: tuple(h.shape), hparams['params']['network'],
        is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))
    # Two 2x2 poolings: 28 -> 14 -> 7, times 64 channels.
    self.assertEqual(shapes['conv1']['w'], (3, 3, 1, 32))
    self.assertEqual(shapes['conv2']['w'], (3, 3, 32, 64))
    self.assertEqual(shapes['dense_0']['linear']['w'], (7 * 7 * 64, 256))
    self.assertEqual(shapes['dense_1']['w'], (256, 10))
    self.assertEqual(shapes['dense_2']['b'], (10,))
    self.assertEqual(base_hyperparams.instantiate(test_p).num_examples,
                     _NUM_TEST)

  def test_training_steps_reduce_the_loss(self):
    configs = self._configs()
    # The mesh takes every (virtual) device; a larger step for a short run.
    configs.task.model.ici_mesh_shape = [1, jax.device_count(), 1]
    configs.task.train.learner.optimizer.learning_rate = 0.05
    configs.task.train.num_train_steps = 12
    configs.task.train.summary_interval_steps = 1
    for ds in configs.datasets:
      ds.batch_size = 16
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False,
        eval_on_test=False))
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'train'))
    acc.Reload()
    losses = [e.value for e in acc.Scalars('loss')]
    self.assertLen(losses, 12)
    # Near log(10) at the start (10 balanced classes), then lower.
    self.assertAllClose(np.mean(losses[:2]), np.log(10), atol=0.15)
    self.assertLess(np.mean(losses[-3:]), np.mean(losses[:3]) - 0.1)


if __name__ == '__main__':
  absltest.main()
