r"""A ViT and a ResNet on scikit-learn's 8x8 digits, as Pax classifiers.

Public names: DigitsOneHotInput, DigitsClassifier, DigitsViT, DigitsResNet.

Both experiments keep `digits.DigitsExperiment`'s split, batch size, Adam
learner and eval schedule, and swap its model for praxis'
`ClassificationModel` (a network, then a `FullSoftmax` over 10 classes), so
the test accuracy is written as `Metrics/accuracy` in
`summaries/eval_test_test`:

  python -m paxml.main \
      --exp=tasks.vision.params.digits_models.DigitsViT \
      --job_log_dir=/tmp/digits_vit --eval_on_test
  python -m paxml.main \
      --exp=tasks.vision.params.digits_models.DigitsResNet \
      --job_log_dir=/tmp/digits_resnet --eval_on_test
"""

from __future__ import annotations

import numpy as np

from paxml import experiment_registry
from paxml import tasks_lib
from paxml.tasks.vision.params import digits
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import classification_models
from praxis.layers import embedding_softmax
from praxis.layers import resnets
from praxis.layers import vits

LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]

IMAGE_SIZE = 8
NUM_CLASSES = 10


class DigitsOneHotInput(digits.DigitsInput):
  """`DigitsInput` plus what `ClassificationModel` reads.

  Batches also hold `label_probs` (float32 [B, 10], one-hot) and `weight`
  (float32 [B], ones); eval padding rows are all zeros, so they weigh
  nothing.
  """

  def __post_init__(self):
    if self.data is None:
      split = self.split or ('train' if self.is_training else 'test')
      images, labels = digits.load_digits_split(
          split, self.test_fraction, self.split_seed)
      self.data = {
          'inputs': images,
          'labels': labels,
          'label_probs': np.eye(NUM_CLASSES, dtype=np.float32)[labels],
          'weight': np.ones(labels.shape, np.float32),
      }
    super().__post_init__()


class DigitsClassifier(digits.DigitsExperiment):
  """DigitsExperiment with `network()` under a `ClassificationModel`.

  Subclasses define `network()` (images [B, 8, 8, 1] to features [B, D]) and
  `FEATURE_DIMS` (D).
  """

  FEATURE_DIMS = 0

  def network(self) -> LayerTpl:
    raise NotImplementedError(f'{type(self).__name__} must define network().')

  def task(self) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    task_p = super().task()
    task_p.model = pax_fiddle.Config(
        classification_models.ClassificationModel, name='digits',
        network_tpl=self.network(), input_field='inputs',
        label_field='label_probs',
        softmax_tpl=pax_fiddle.Config(
            embedding_softmax.FullSoftmax, input_dims=self.FEATURE_DIMS,
            num_classes=NUM_CLASSES))
    task_p.train.learner.loss_name = 'avg_xent'
    return task_p

  def datasets(self):
    configs = super().datasets()
    for config in configs:
      config.cls = DigitsOneHotInput
    return configs


@experiment_registry.register
class DigitsViT(DigitsClassifier):
  """A 2-layer ViT (2x2 patches, 16 tokens, width 32) on the digits.

  `vits.build_vision_transformer_hparams_for_test` with average pooling over
  the tokens, then a tanh projection, then the softmax; Adam at 0.003.
  Measured with the module docstring's command on a shared, busy 2-core CPU:
  test accuracy (`Metrics/accuracy` in `summaries/eval_test_test`) 77.8% at
  step 100, 90.3% at 200 and 91.7% at 300, in 55 s (27 s of CPU time),
  mostly compilation. (Adam at 0.01 did worse: 87.8% at step 300.)
  PATCH_SIZE must divide 8; another fails in `task()`, naming it.
  """

  PATCH_SIZE = 2
  MODEL_DIMS = 32
  MLP_DIMS = 64
  NUM_LAYERS = 2
  NUM_HEADS = 4
  LEARNING_RATE = 0.003

  @property
  def FEATURE_DIMS(self) -> int:  # pylint: disable=invalid-name
    return self.MODEL_DIMS

  def network(self) -> LayerTpl:
    if (not isinstance(self.PATCH_SIZE, int) or self.PATCH_SIZE < 1
        or IMAGE_SIZE % self.PATCH_SIZE):
      raise ValueError(
          f'{type(self).__name__}.PATCH_SIZE must be a positive divisor of '
          f'the {IMAGE_SIZE}x{IMAGE_SIZE} image size (1, 2, 4 or 8), got '
          f'{self.PATCH_SIZE!r}.')
    grid = IMAGE_SIZE // self.PATCH_SIZE
    vit_p = vits.build_vision_transformer_hparams_for_test(
        pos_emb_shapes=(grid, grid), patch_size=self.PATCH_SIZE,
        image_channels=1, model_dims=self.MODEL_DIMS, mlp_dims=self.MLP_DIMS,
        num_xformer_layers=self.NUM_LAYERS, num_heads=self.NUM_HEADS)
    vit_p.exit_layers_tpl.pooling_tpl.pooling_dims = (1,)  # Over the tokens.
    return vit_p


@experiment_registry.register
class DigitsResNet(DigitsClassifier):
  """A tiny CIFAR-style ResNet (basic blocks, 16 and 32 channels).

  A 3x3 stride-1 entry conv (no max pool), one basic block of 16 channels,
  one of 32 at stride 2 (8x8 -> 4x4), global average pooling, the softmax;
  batch norm as in Pax's ResNets. Measured with the module docstring's
  command on a shared, busy 2-core CPU: test accuracy 96.4% at step 100,
  98.1% at 200 and 99.4% at 300, in 78 s (23 s of CPU time).
  """

  CHANNELS = (16, 32)
  BLOCKS = (1, 1)
  STRIDES = (1, 2)

  @property
  def FEATURE_DIMS(self) -> int:  # pylint: disable=invalid-name
    return self.CHANNELS[-1]

  def network(self) -> LayerTpl:
    return pax_fiddle.Config(
        resnets.ResNet, name='resnet',
        block_params=pax_fiddle.Config(resnets.ResNetBasicBlock),
        channels=tuple(self.CHANNELS), blocks=tuple(self.BLOCKS),
        strides=tuple(self.STRIDES), kernels=(3,) * len(self.CHANNELS),
        entryflow_conv_kernel=(3, 3, 1), entryflow_conv_stride=(1, 1),
        entryflow_maxpool_params=None)
