"""SeqIOInput on a tiny in-test SeqIO task (skipped where seqio is absent)."""

import itertools

from absl.testing import absltest
import numpy as np
import pytest

from paxml import seqio_input
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils

seqio = pytest.importorskip('seqio')
tf = pytest.importorskip('tensorflow')

_COUNTER = itertools.count()


def _task(examples, metric_fns=()):
  """Registers a task over `examples` (dicts of int lists) under a new name;
  its vocabulary is bytes (ByteVocabulary: id = byte + 3), no EOS added."""
  name = f'seqio_input_own_test_{next(_COUNTER)}'
  ds = tf.data.Dataset.from_generator(
      lambda: iter(examples),
      output_signature={k: tf.TensorSpec([None], tf.int32)
                        for k in examples[0]})
  vocab = seqio.ByteVocabulary()
  seqio.TaskRegistry.add(
      name,
      source=seqio.FunctionDataSource(
          dataset_fn=lambda split, shuffle_files, seed=None: ds,
          splits=['train', 'validation']),
      preprocessors=[],
      output_features={k: seqio.Feature(vocab, add_eos=False)
                       for k in examples[0]},
      metric_fns=list(metric_fns))
  return name


def _input(name, **kwargs):
  kwargs.setdefault('feature_converter',
                    seqio_input.LanguageModelFeatures(pack=False))
  kwargs.setdefault('task_feature_lengths', {'targets': 6})
  return base_hyperparams.instantiate(pax_fiddle.Config(
      seqio_input.SeqIOInput, mixture_name=name, split_name='validation',
      batch_size=2, is_training=False, **kwargs))


def _seq2seq(**kwargs):
  return dict(kwargs, task_feature_lengths={'inputs': 4, 'targets': 4},
              feature_converter=seqio_input.SequenceModelFeatures(pack=False))


class LanguageModelRowsTest(absltest.TestCase):

  def test_ids_are_the_targets_shifted_right(self):
    # Labels: the targets, padded to 6; ids: the labels shifted right by
    # one (BOS 0; so the last target moves into the padding, as in SeqIO).
    name = _task([{'targets': [5, 6, 7, 1]}, {'targets': [8, 1]}])
    batch = _input(name, reset_for_eval=True,
                   eval_loop_num_batches=None).get_next()
    np.testing.assert_array_equal(batch.ids, [[0, 5, 6, 7, 1, 0],
                                              [0, 8, 1, 0, 0, 0]])
    np.testing.assert_array_equal(batch.labels, [[5, 6, 7, 1, 0, 0],
                                                 [8, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.weights, [[1, 1, 1, 1, 0, 0],
                                                  [1, 1, 0, 0, 0, 0]])
    np.testing.assert_array_equal(batch.paddings, 1 - batch.weights)
    np.testing.assert_array_equal(batch.eval_sample_weights, [1, 1])

  def test_eval_epoch_is_padded_to_whole_batches(self):
    name = _task([{'targets': [5]}, {'targets': [6]}, {'targets': [7]}])
    inp = _input(name, reset_for_eval=True, eval_loop_num_batches=None)
    batches = [inp.get_next(), inp.get_next()]
    with self.assertRaises(StopIteration):
      inp.get_next()
    np.testing.assert_array_equal(batches[1].eval_sample_weights, [1, 0])
    inp.reset()
    np.testing.assert_array_equal(inp.get_next().labels, batches[0].labels)


def _exact_match(targets, predictions):
  return {'matches': sum(t == p for t, p in zip(targets, predictions)),
          'count': len(targets)}


def _score_sum(targets, scores):
  del targets
  return {'sum': float(sum(scores))}


class MetricsTest(absltest.TestCase):

  def _decoded(self, inp, batches, answer):
    """(enumeration id, output) pairs of `batches` batches of `inp`."""
    outputs = []
    for _ in range(batches):
      batch = inp._iter.__next__()  # pylint: disable=protected-access
      for ex in py_utils.tree_unstack(batch, 0):
        outputs.append((py_utils.get_enumeration_id(ex),
                        {'decoded_substr': answer(ex), 'scores': 1.5}))
    return outputs

  def test_predict_metrics_join_outputs_to_targets(self):
    # Targets 'a', 'b', 'c' (bytes 97.. + 3); the model answers 'a' always.
    examples = [{'inputs': [9], 'targets': [ord(c) + 3]} for c in 'abc']
    name = _task(examples, [_exact_match])
    inp = _input(name, **_seq2seq(reset_for_eval=True,
                                  eval_loop_num_batches=None))
    outputs = self._decoded(inp, 2, lambda ex: 'a')
    (metrics,) = inp.compute_metrics(outputs)
    self.assertEqual(metrics, {'matches': 1, 'count': 3})

  def test_score_metrics_skip_padding(self):
    examples = [{'targets': [ord(c) + 3]} for c in 'abc']
    name = _task(examples, [_score_sum])
    inp = _input(name, reset_for_eval=True, eval_loop_num_batches=None,
                 feature_converter=seqio_input.LanguageModelFeatures(
                     pack=False, weights_on_targets_only=True))
    outputs = self._decoded(inp, 2, lambda ex: '')  # 3 real + 1 padding.
    self.assertLen(outputs, 4)
    (metrics,) = inp.compute_metrics(outputs, score_metrics=True)
    self.assertEqual(metrics, {'sum': 4.5})

  def test_eval_loop_num_batches_reads_that_many_targets(self):
    examples = [{'inputs': [9], 'targets': [ord(c) + 3]} for c in 'abcde']
    name = _task(examples, [_exact_match])
    inp = _input(name, **_seq2seq(reset_for_eval=False,
                                  eval_loop_num_batches=1))
    outputs = self._decoded(inp, 1, lambda ex: 'b')
    (metrics,) = inp.compute_metrics(outputs)
    self.assertEqual(metrics, {'matches': 1, 'count': 2})  # 'a', 'b'.

  def test_scoring_without_weights_on_targets_only_is_refused(self):
    name = _task([{'targets': [5]}], [_score_sum])
    with self.assertRaisesRegex(ValueError, 'weights_on_targets_only=True'):
      _input(name, reset_for_eval=True, eval_loop_num_batches=None)



class ReadOptionsTest(absltest.TestCase):

  def test_targets_keep_only_the_filtered_fields(self):
    examples = [{'inputs': [9], 'targets': [ord(c) + 3]} for c in 'ab']
    name = _task(examples, [_exact_match])
    inp = _input(name, **_seq2seq(
        reset_for_eval=True, eval_loop_num_batches=None,
        eval_metrics_filter_targets_fields=['targets']))
    inp._gen_targets_artifacts()  # pylint: disable=protected-access
    targets = inp._get_targets()  # pylint: disable=protected-access
    self.assertLen(targets, 2)
    for example in targets.values():
      self.assertEqual(set(example), {'targets'})

  def test_task_or_mixture(self):
    name = _task([{'targets': [5]}])
    inp = _input(name, reset_for_eval=True, eval_loop_num_batches=None)
    self.assertTrue(inp.is_task)
    self.assertFalse(inp.is_mixture)
    self.assertFalse(inp.is_mock_tpu)
    mixture = f'{name}_mixture'
    seqio.MixtureRegistry.add(mixture, [(name, 1.0)])
    inp = _input(mixture, reset_for_eval=True, eval_loop_num_batches=None)
    self.assertTrue(inp.is_mixture)
    self.assertFalse(inp.is_task)

  def test_read_config_is_the_one_seqio_reads_with(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    config = tfds.ReadConfig(shuffle_seed=7)
    name = _task([{'targets': [5]}])
    _input(name, reset_for_eval=True, eval_loop_num_batches=None,
           read_config=config, warm_start=False)
    override = seqio.utils._TFDS_DATA_READ_CONFIG_OVERRIDE  # pylint: disable=protected-access
    self.assertIs(override, config)
    self.assertIsNotNone(config.options)


if __name__ == '__main__':
  absltest.main()
