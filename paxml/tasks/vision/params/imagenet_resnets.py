"""ResNet classifiers on ImageNet, read from local image folders.

Public names: ImageClassificationInputSpecsProvider, ResNet50Pjit.

`ResNet50Pjit` is Pax's ResNet-50 baseline ("ImageNet in 1 Hour", SGD with
Nesterov momentum, linear warmup then step decay, zero-init residual batch
norms, 90 epochs). Pax reads ImageNet TFRecords through Lingvo; here the
inputs (`input_generator.ImageNetTrain` / `ImageNetValidation`) read, without
TensorFlow, the same TFRecords (`$IMAGENET_DATA_DIR/train-*-of-*`,
`validation-*-of-*`) or class folders of image files
(`$IMAGENET_DATA_DIR/train/<class>/*.JPEG`, `validation/...`); the class
attributes `TRAIN_FILE_PATTERN` and `EVAL_FILE_PATTERN` override them
('tfrecord:<glob>' or a directory).

Example:

  IMAGENET_DATA_DIR=/data/imagenet python -m paxml.main \
      --exp=tasks.vision.params.imagenet_resnets.ResNet50Pjit \
      --job_log_dir=/tmp/resnet50

`MESH_SHAPE` is Pax's [1, 8, 1] (8 devices of data parallelism); on another
machine set it to [1, N, 1] for N devices, e.g. with
`--fdl_set=task.model.ici_mesh_shape=[1,N,1]`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from paxml import base_experiment
from paxml import experiment_registry
from paxml import learners
from paxml import tasks_lib
from paxml.tasks.vision import input_generator
from praxis import base_input
from praxis import base_layer
from praxis import layers
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis import schedules

WeightInit = base_layer.WeightInit
NestedMap = py_utils.NestedMap
NestedShapeDtypeStruct = pytypes.NestedShapeDtypeStruct
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]


class ImageClassificationInputSpecsProvider(base_input.BaseInputSpecsProvider):
  """Input specs of image classification batches (for model init).

  Attributes:
    height: Image height.
    width: Image width.
    num_color_channels: Image channels.
    num_classes: Width of `label_probs`.
    batch_size: Batch size of the specs.
  """

  height: int = 224
  width: int = 224
  num_color_channels: int = 3
  num_classes: int = 1000
  batch_size: int = 1

  def get_input_specs(self) -> NestedShapeDtypeStruct:
    """Specs of eval_sample_weights, image, label_probs and weight."""
    if self.height is None or self.width is None:
      raise ValueError(
          f'Both `height` (`{self.height}`) and `width` (`{self.width}`) '
          'params must be set.'
      )
    if self.num_classes is None:
      raise ValueError('Parameter `num_classes` must be set.')
    b = self.batch_size
    image_shape = (b, self.height, self.width, self.num_color_channels)

    def spec(shape):
      return jax.ShapeDtypeStruct(shape=shape, dtype=jnp.float32)

    return NestedMap(
        eval_sample_weights=spec((b,)),
        image=spec(image_shape),
        label_probs=spec((b, self.num_classes)),
        weight=spec((b,)),
    )


@experiment_registry.register(tags=['smoke_test_abstract_init'])
class ResNet50Pjit(base_experiment.BaseExperiment):
  """ResNet-50 baseline ("ImageNet in 1 Hour": arxiv.org/abs/1706.02677).

  Differences from the paper, as in Pax: synchronized batch norm over the
  whole batch (about -0.3% accuracy, https://arxiv.org/abs/2105.07576), and
  the learning rate warms up from 0 instead of 0.1.
  """

  # Input.
  IMAGE_SIZE = 224
  TRAIN_BATCH_SIZE = 512
  EVAL_BATCH_SIZE = 512
  NUM_CLASSES = 1000
  TRAIN_FILE_PATTERN = None  # None: $IMAGENET_DATA_DIR/train.
  EVAL_FILE_PATTERN = None  # None: $IMAGENET_DATA_DIR/validation.

  # Optimization.
  LOSS_NAME = 'avg_xent'
  NUM_EPOCHS = 90
  LEARNING_RATE = (TRAIN_BATCH_SIZE / 256) * 0.1
  L2_REGULARIZER_WEIGHT = 1e-4
  BPROP_VARIABLE_EXCLUSION = []
  CLIP_GRADIENT_NORM_TO_VALUE = 0.0
  EMA_DECAY = 0.0

  # Checkpoints, summaries, eval.
  SAVE_MAX_TO_KEEP = 1_000  # Keep many checkpoints for later analysis.
  SAVE_INTERVAL_STEPS = 5_000
  SUMMARY_INTERVAL_STEPS = 1_000
  EVAL_INTERVAL_STEPS = 1_000
  DECODE_INTERVAL_STEPS = 5_000

  # SPMD: full data parallelism.
  MESH_AXIS_NAMES = ('replica', 'data', 'mdl')
  BATCH_SPLIT_AXES = ('replica', 'data')
  MESH_SHAPE = [1, 8, 1]

  def get_input_specs_provider_params(
      self,
  ) -> pax_fiddle.Config[base_input.BaseInputSpecsProvider]:
    """The specs of a training batch."""
    return pax_fiddle.Config(ImageClassificationInputSpecsProvider).set(
        batch_size=self.TRAIN_BATCH_SIZE,
        height=self.IMAGE_SIZE,
        width=self.IMAGE_SIZE,
        num_classes=self.NUM_CLASSES,
    )

  def _input(self, cls, batch_size: int, file_pattern, is_training: bool):
    return pax_fiddle.Config(
        cls,
        name='train' if is_training else 'test',
        batch_size=batch_size,
        num_classes=self.NUM_CLASSES,
        data_shape=(self.IMAGE_SIZE, self.IMAGE_SIZE, 3),
        file_pattern=file_pattern,
        is_training=is_training,
        reset_for_eval=not is_training,
        input_random_seed=1234 if is_training else None,
    )

  def _dataset_train(self) -> pax_fiddle.Config[base_input.BaseInput]:
    """The training input."""
    return self._input(
        input_generator.ImageNetTrain, self.TRAIN_BATCH_SIZE,
        self.TRAIN_FILE_PATTERN, True,
    )

  def _dataset_test(self) -> pax_fiddle.Config[base_input.BaseInput]:
    """The validation input (one padded pass)."""
    return self._input(
        input_generator.ImageNetValidation, self.EVAL_BATCH_SIZE,
        self.EVAL_FILE_PATTERN, False,
    )

  def datasets(self) -> list[pax_fiddle.Config[base_input.BaseInput]]:
    """The training and validation inputs."""
    return [self._dataset_train(), self._dataset_test()]

  def _network(self) -> LayerTpl:
    net = layers.ResNet.HParamsResNet50()
    # Zero-init of the residual branches' last BN gamma, for large batches
    # (Table 2(b) of "ImageNet in 1 hour"); needs skip_lp_1d_vectors.
    net.block_params = pax_fiddle.Config(
        layers.ResNetBlock, zero_init_residual=True
    )
    return net

  def _optimizer(self) -> pax_fiddle.Config[optimizers.BaseOptimizer]:
    return pax_fiddle.Config(optimizers.ShardedSgd, momentum=0.9, nesterov=True)

  def _lr_schedule(self) -> pax_fiddle.Config[schedules.BaseSchedule]:
    lrs = [1, 0.1, 0.01, 0.001, 0.0]
    epoch_boundaries = [5, 30, 60, 80, 90]
    iters = input_generator.TRAIN_EXAMPLES // self.TRAIN_BATCH_SIZE
    return pax_fiddle.Config(
        schedules.LinearRampupPiecewiseConstant,
        boundaries=[iters * e for e in epoch_boundaries],
        values=lrs,
    )

  def _learner(self) -> pax_fiddle.Config[learners.Learner]:
    lp = pax_fiddle.Config(learners.Learner)
    lp.loss_name = self.LOSS_NAME
    lp.bprop_variable_exclusion = self.BPROP_VARIABLE_EXCLUSION
    lp.optimizer = self._optimizer()
    op = lp.optimizer
    op.lr_schedule = self._lr_schedule()
    op.learning_rate = self.LEARNING_RATE
    op.skip_lp_1d_vectors = True
    # Only where the optimizer config left them unset.
    if op.l2_regularizer_weight is None:
      op.l2_regularizer_weight = self.L2_REGULARIZER_WEIGHT
    if op.clip_gradient_norm_to_value == 0.0:
      op.clip_gradient_norm_to_value = self.CLIP_GRADIENT_NORM_TO_VALUE
    if op.ema_decay == 0.0:
      op.ema_decay = self.EMA_DECAY
    return lp

  def _configure_task(
      self, task_p: pax_fiddle.Config[tasks_lib.SingleTask]
  ) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    """Learner, sharding, summaries, checkpoints and eval of the task."""
    train_p = task_p.train
    train_p.learner = self._learner()
    if self.MESH_SHAPE is not None:
      model = task_p.model
      model.ici_mesh_shape = self.MESH_SHAPE
      model.dcn_mesh_shape = None
      model.mesh_axis_names = self.MESH_AXIS_NAMES
      batch = self.BATCH_SPLIT_AXES
      train_p.inputs_split_mapping = NestedMap(
          map_5d=(batch, None, None, None, None),
          map_4d=(batch, None, None, None),
          map_3d=(batch, None, None),
          map_2d=(batch, None),
          map_1d=(batch,),
      )
    steps_per_epoch = input_generator.TRAIN_EXAMPLES // self.TRAIN_BATCH_SIZE
    train_p.num_train_steps = steps_per_epoch * 90
    train_p.eval_interval_steps = steps_per_epoch
    train_p.summary_interval_steps = self.SUMMARY_INTERVAL_STEPS
    train_p.save_interval_steps = self.SAVE_INTERVAL_STEPS
    train_p.decode_interval_steps = self.DECODE_INTERVAL_STEPS
    train_p.save_max_to_keep = self.SAVE_MAX_TO_KEEP
    train_p.summary_accumulate_interval_steps = 1
    train_p.variable_norm_summary = True
    train_p.eval_skip_train = True
    return task_p

  def task(self) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    """A ClassificationModel of `_network()` and a softmax."""
    resnet = self._network()
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='classifier_task')
    task_p.model = pax_fiddle.Config(
        layers.ClassificationModel,
        name='classifier',
        network_tpl=resnet,
        softmax_tpl=pax_fiddle.Config(
            layers.FullSoftmax,
            params_init=WeightInit.Gaussian(scale=0.01),
            input_dims=resnet.channels[-1],
            num_classes=self.NUM_CLASSES,
        ),
    )
    return self._configure_task(task_p)
