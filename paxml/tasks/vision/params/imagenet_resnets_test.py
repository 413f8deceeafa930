"""Tests of the ImageNet ResNet experiment: Pax's config, and a tiny run."""

import os
import pathlib
import tempfile

from absl.testing import absltest
import jax
import numpy as np
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import learners
from paxml import train
from paxml.tasks.vision import input_generator
from paxml.tasks.vision.params import imagenet_resnets
from praxis import base_hyperparams
from praxis import layers
from praxis import optimizers
from praxis import pax_fiddle
from praxis import schedules
from praxis import test_utils

_EXP = 'tasks.vision.params.imagenet_resnets.ResNet50Pjit'


def _write_folder(root, per_class, seed):
  """Two classes: reddish and bluish noisy images of varied sizes."""
  rng = np.random.default_rng(seed)
  for c in range(2):
    os.makedirs(os.path.join(root, f'class{c}'))
    for i in range(per_class):
      h, w = rng.integers(14, 24, 2)
      image = rng.integers(0, 80, (h, w, 3))
      image[..., 0 if c == 0 else 2] += 170
      Image.fromarray(image.astype(np.uint8)).save(
          os.path.join(root, f'class{c}', f'{i}.png'))


class TinyResNet(imagenet_resnets.ResNet50Pjit):
  """ResNet50Pjit at toy sizes, on an image folder set by the test."""

  IMAGE_SIZE = 16
  TRAIN_BATCH_SIZE = 8
  EVAL_BATCH_SIZE = 8
  NUM_CLASSES = 2

  def _network(self):
    net = super()._network()
    net.set(strides=[1], channels=[16], blocks=[1], kernels=[3],
            entryflow_conv_kernel=(3, 3, 3), entryflow_conv_stride=(1, 1))
    return net


class ResNet50PjitTest(test_utils.TestCase):

  def test_registered_and_follows_pax(self):
    exp = experiment_registry.get(_EXP)()
    task_p = exp.task()
    steps_per_epoch = input_generator.TRAIN_EXAMPLES // 512
    self.assertEqual(task_p.train.num_train_steps, 90 * steps_per_epoch)
    self.assertEqual(task_p.model.ici_mesh_shape, [1, 8, 1])
    self.assertIs(task_p.model.network_tpl.block_params.cls,
                  layers.ResNetBlock)
    self.assertTrue(task_p.model.network_tpl.block_params.zero_init_residual)
    self.assertEqual(task_p.model.softmax_tpl.input_dims, 2048)
    self.assertEqual(task_p.model.softmax_tpl.num_classes, 1000)
    learner = task_p.train.learner
    self.assertIs(learner.cls, learners.Learner)
    self.assertEqual(learner.loss_name, 'avg_xent')
    op = learner.optimizer
    self.assertIs(op.cls, optimizers.ShardedSgd)
    self.assertEqual((op.momentum, op.nesterov), (0.9, True))
    self.assertEqual(op.learning_rate, 0.2)
    self.assertEqual(op.l2_regularizer_weight, 1e-4)
    self.assertTrue(op.skip_lp_1d_vectors)
    self.assertIs(op.lr_schedule.cls, schedules.LinearRampupPiecewiseConstant)
    self.assertEqual(op.lr_schedule.boundaries,
                     [steps_per_epoch * e for e in (5, 30, 60, 80, 90)])
    train_p, test_p = exp.datasets()
    self.assertIs(train_p.cls, input_generator.ImageNetTrain)
    self.assertEqual((train_p.batch_size, train_p.is_training), (512, True))
    self.assertTrue(test_p.reset_for_eval)
    specs = base_hyperparams.instantiate(
        exp.get_input_specs_provider_params()).get_input_specs()
    self.assertEqual(specs.image.shape, (512, 224, 224, 3))
    self.assertEqual(specs.label_probs.shape, (512, 1000))

  def test_tiny_run_reduces_the_loss(self):
    root = tempfile.mkdtemp()
    _write_folder(os.path.join(root, 'train'), 16, seed=0)
    _write_folder(os.path.join(root, 'validation'), 4, seed=1)
    exp = TinyResNet()
    exp.MESH_SHAPE = [1, jax.device_count(), 1]
    configs = train.ExperimentConfigs.from_experiment(exp, 'tiny_resnet')
    for ds, split in zip(configs.datasets, ('train', 'validation')):
      ds.file_pattern = os.path.join(root, split)
    task_p = configs.task
    task_p.train.num_train_steps = 10
    task_p.train.summary_interval_steps = 1
    task_p.train.eval_interval_steps = 100
    task_p.train.learner.optimizer.lr_schedule = pax_fiddle.Config(
        schedules.Constant, value=1.0)
    task_p.train.learner.optimizer.learning_rate = 0.05
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False,
        eval_on_test=False))
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'train'))
    acc.Reload()
    losses = [e.value for e in acc.Scalars('loss')]
    self.assertLen(losses, 10)
    # About log(2) at first (two classes, small initial logits), then lower.
    self.assertAllClose(losses[0], np.log(2), atol=0.1)
    self.assertLess(np.mean(losses[-3:]), np.mean(losses[:3]) - 0.1)


if __name__ == '__main__':
  absltest.main()
