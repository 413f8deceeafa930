"""A tiny speech-style experiment: a Conformer trained with CTC.

Public names: make_data, greedy_ctc_decode, CtcConformerModel,
SpeechCtcConformer.

The synthetic "utterances" are frames of noisy class embeddings: each label
of a short transcript lasts 1-2 frames, with blank frames between some
labels and padding at the end. The model (input projection, SpecAugment,
one Conformer block, output projection) learns to transcribe them with the
CTC loss; decode reports the greedy transcripts' sequence accuracy.

`python -m paxml.main --exp=tasks.test.speech.SpeechCtcConformer
--job_log_dir=/tmp/speech --eval_on_test --decode_during_train` trains it
(80 steps, with eval and decode at steps 40 and 80) in about a minute on a
CPU, mostly compilation; it ends near 0.94 sequence accuracy.
"""

import jax.numpy as jnp
import numpy as np
import optax
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
from praxis.layers import conformers
from praxis.layers import linears
from praxis.layers import spectrum_augmenter

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor

NUM_CLASSES = 5   # blank (0) and labels 1..4
FEATURE_DIMS = 8
NUM_FRAMES = 12
MAX_LABELS = 3


def make_data(num_examples: int, seed: int) -> dict[str, np.ndarray]:
  """Synthetic utterances and their transcripts (blank id 0).

  Returns arrays `features` [N, T, F], `paddings` [N, T], `labels` [N, L]
  and `label_paddings` [N, L]; transcripts have 2-3 labels, right-padded.
  """
  rng = np.random.default_rng(seed)
  # A fixed embedding per class, the same for every seed.
  embed = np.random.default_rng(0).normal(size=(NUM_CLASSES, FEATURE_DIMS))
  features = np.zeros((num_examples, NUM_FRAMES, FEATURE_DIMS), np.float32)
  paddings = np.ones((num_examples, NUM_FRAMES), np.float32)
  labels = np.zeros((num_examples, MAX_LABELS), np.int32)
  label_paddings = np.ones((num_examples, MAX_LABELS), np.float32)
  for n in range(num_examples):
    transcript = rng.integers(1, NUM_CLASSES, size=rng.integers(2, 4))
    frames = []
    for i, label in enumerate(transcript):
      # A repeated label needs a blank between its copies; else maybe one.
      repeat = i > 0 and label == transcript[i - 1]
      frames += [0] * (1 if repeat else int(rng.integers(0, 2)))
      frames += [int(label)] * int(rng.integers(1, 3))
    t = len(frames)  # at most 3 * (1 + 2) = 9 <= NUM_FRAMES
    features[n, :t] = embed[frames] + 0.3 * rng.normal(size=(t, FEATURE_DIMS))
    paddings[n, :t] = 0.0
    labels[n, :len(transcript)] = transcript
    label_paddings[n, :len(transcript)] = 0.0
  return {'features': features, 'paddings': paddings, 'labels': labels,
          'label_paddings': label_paddings}


def greedy_ctc_decode(logits: JTensor, paddings: JTensor,
                      max_labels: int) -> tuple[JTensor, JTensor]:
  """Best class per frame, repeats merged, blanks (0) dropped.

  Returns `(labels [B, max_labels], lengths [B])`, labels right-padded with 0
  (labels past max_labels are cut off; lengths counts them all).
  """
  best = jnp.argmax(logits, axis=-1)
  previous = jnp.pad(best[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
  keep = (best != 0) & (best != previous) & (paddings == 0)
  slot = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, max_labels)
  out = jnp.zeros((best.shape[0], max_labels + 1), best.dtype)
  rows = jnp.arange(best.shape[0])[:, None]
  out = out.at[rows, jnp.minimum(slot, max_labels)].set(best)
  return out[:, :max_labels], jnp.sum(keep, axis=1)


class CtcConformerModel(base_model.BaseModel):
  """Features -> Linear -> SpecAugment -> Conformer -> Linear -> CTC.

  Attributes:
    input_dims: Feature depth.
    model_dims: Conformer depth.
    num_classes: Output classes, blank (0) included.
    conformer_tpl: The Conformer block (dims set from the above).
    specaug_tpl: SpecAugment in training (None: none).
  """

  input_dims: int = FEATURE_DIMS
  model_dims: int = 16
  num_classes: int = NUM_CLASSES
  conformer_tpl: pax_fiddle.Config = base_layer.template_field(
      conformers.Conformer)
  specaug_tpl: pax_fiddle.Config | None = base_layer.template_field(None)

  def setup(self) -> None:
    self.create_child('input_proj', pax_fiddle.Config(
        linears.FeedForward, input_dims=self.input_dims,
        output_dims=self.model_dims))
    if self.specaug_tpl is not None:
      self.create_child('specaug', self.specaug_tpl)
    self.create_child('conformer', self.conformer_tpl.clone().set(
        input_dims=self.model_dims, model_dims=self.model_dims))
    self.create_child('output_proj', pax_fiddle.Config(
        linears.FeedForward, input_dims=self.model_dims,
        output_dims=self.num_classes,
        activation_tpl=pax_fiddle.Config(activations.Identity)))

  def compute_predictions(self, input_batch: NestedMap) -> NestedMap:
    features, paddings = input_batch.features, input_batch.paddings
    if self.specaug_tpl is not None:
      features, paddings = self.specaug(features, paddings)
    x = self.input_proj(features)
    x = self.conformer(x, paddings)
    return NestedMap(logits=self.output_proj(x))

  def compute_loss(self, predictions: NestedMap, input_batch: NestedMap):
    per_seq = optax.ctc_loss(predictions.logits, input_batch.paddings,
                             input_batch.labels, input_batch.label_paddings)
    weights = input_batch.get('eval_sample_weights')
    if weights is None:
      weights = jnp.ones_like(per_seq)
    total = jnp.maximum(jnp.sum(weights), 1e-6)
    loss = jnp.sum(per_seq * weights) / total
    return NestedMap(loss=(loss, total)), NestedMap(ctc_loss=per_seq)

  def decode(self, input_batch: NestedMap):
    logits = self.compute_predictions(input_batch).logits
    labels, _ = greedy_ctc_decode(logits, input_batch.paddings,
                                  input_batch.labels.shape[1])
    correct = jnp.all(labels == input_batch.labels, axis=1)
    weights = input_batch.get('eval_sample_weights',
                              jnp.ones(correct.shape, jnp.float32))
    total = jnp.maximum(jnp.sum(weights), 1e-6)
    accuracy = jnp.sum(correct * weights) / total
    return (NestedMap(sequence_accuracy=(accuracy, total)),
            NestedMap(decoded=labels, labels=input_batch.labels),
            NestedMap())

  def process_decode_out(self, input_obj, decode_out):
    del input_obj
    pairs = [(f'utt_{i}', {'decoded': d.tolist(), 'labels': t.tolist()})
             for i, (d, t) in enumerate(zip(decode_out.decoded,
                                            decode_out.labels))]
    return NestedMap(), pairs, NestedMap()


def _input(name: str, is_training: bool, seed: int, num: int, **kwargs):
  return pax_fiddle.Config(
      base_input.InMemoryInput, name=name, is_training=is_training,
      batch_size=16, data=make_data(num, seed), input_random_seed=seed,
      **kwargs)


@experiment_registry.register
class SpeechCtcConformer(base_experiment.BaseExperiment):
  """A one-block Conformer + CTC on synthetic utterances (80 Adam steps)."""

  NUM_TRAIN_STEPS = 80

  def datasets(self):
    return [_input('train', True, 1, 256),
            _input('test', False, 2, 64, reset_for_eval=True)]

  def decode_datasets(self):
    return [_input('decode', False, 3, 64, reset_for_eval=True)]

  def task(self):
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='speech')
    task_p.model = pax_fiddle.Config(
        CtcConformerModel, name='model',
        conformer_tpl=pax_fiddle.Config(
            conformers.Conformer, kernel_size=3, atten_num_heads=2,
            ffn_dim_multiplier=2),
        specaug_tpl=pax_fiddle.Config(
            spectrum_augmenter.SpectrumAugmenter, freq_mask_max_bins=1,
            freq_mask_count=1, time_mask_count=1, time_mask_max_ratio=0.1))
    train = task_p.train
    train.num_train_steps = self.NUM_TRAIN_STEPS
    train.save_interval_steps = 40
    train.summary_interval_steps = 20
    train.eval_interval_steps = 40
    train.decode_interval_steps = 40
    train.learner = pax_fiddle.Config(
        learners.Learner, loss_name='loss',
        optimizer=pax_fiddle.Config(
            optimizers.Adam, learning_rate=0.01,
            lr_schedule=pax_fiddle.Config(schedules.Constant)))
    return task_p
