"""Tests of seqio_input that need no seqio: configs, errors, pure helpers.

`sys.modules['seqio'] = None` makes `import seqio` fail, so the error tests
hold whether or not seqio is installed. Reading real SeqIO data is not
tested (seqio and TensorFlow are not installed here).
"""

import dataclasses
import sys
from unittest import mock

from absl.testing import absltest
import numpy as np

from paxml import seqio_input
from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils

_INSTALL_ERROR = (
    "SeqIOInput 'c4_train' needs seqio and TensorFlow, which are not "
    "installed: run `pip install 'pax-jax[seqio]'`."
)


def _config(**overrides):
  fields = {
      'mixture_name': 'c4',
      'split_name': 'train',
      'task_feature_lengths': {'targets': 8},
      'feature_converter': seqio_input.LanguageModelFeatures(pack=True),
      'batch_size': 2,
      'is_training': True,
  }
  fields.update(overrides)
  return pax_fiddle.Config(seqio_input.SeqIOInput, **fields)


def _without_seqio():
  return mock.patch.dict(sys.modules, {'seqio': None})


class WithoutSeqioTest(test_utils.TestCase):

  def test_building_raises_one_clear_error(self):
    with _without_seqio(), self.assertRaises(ImportError) as ctx:
      base_hyperparams.instantiate(_config())
    self.assertEqual(str(ctx.exception), _INSTALL_ERROR)
    self.assertIsInstance(ctx.exception.__cause__, ImportError)

  def test_feature_converter_and_eval_configs_raise_it_too(self):
    with _without_seqio():
      with self.assertRaisesRegex(
          ImportError, r"^SequenceModelFeatures needs seqio .*\[seqio\]'`\.$"):
        seqio_input.SequenceModelFeatures()(None, {'inputs': 4})
      with self.assertRaisesRegex(ImportError, 'get_eval_hparams_for_seqio'):
        seqio_input.get_eval_hparams_for_seqio(
            'glue', 4, {'inputs': 8, 'targets': 4}, 1,
            seqio_input.MetricType.PREDICT)

  def test_config_errors_come_first_and_name_the_field(self):
    cases = [
        ({'mixture_or_task': object()},
         'set exactly one of mixture_name and mixture_or_task'),
        ({'mixture_name': None}, 'set exactly one of mixture_name'),
        ({'split_name': None}, 'split_name=None must be set'),
        ({'feature_converter': None}, 'feature_converter=None must be set'),
        ({'deterministic_input': True}, 'deterministic_input is not supported'),
        ({'is_training': False, 'reset_for_eval': True, 'repeat': True},
         'repeat=True makes an eval with reset_for_eval endless'),
        ({'num_batches_to_skip': -1}, 'num_batches_to_skip=-1 must be'),
    ]
    for overrides, message in cases:
      with (self.subTest(message), _without_seqio(),
            self.assertRaisesRegex(ValueError, message)):
        base_hyperparams.instantiate(_config(**overrides))


class FieldsTest(test_utils.TestCase):

  def test_fields_and_defaults(self):
    defaults = {f.name: f.default
                for f in dataclasses.fields(seqio_input.SeqIOInput)
                if f.default is not dataclasses.MISSING}
    # Upstream paxml's SeqIOInput defaults.
    nones = ('mixture_name', 'mixture_or_task', 'split_name',
             'task_feature_lengths', 'feature_converter', 'shuffle',
             'repeat', 'num_batches_to_skip', 'eval_metrics_targets_length',
             'overridden_vocab', 'eval_num_examples')
    trues = ('eval_auto_pad', 'drop_remainder', 'trim_output_features',
             'try_in_mem_cache', 'use_enumeration',
             'enable_symbolic_checkpointing',
             'experimental_enable_index_shuffle', 'eval_enable_cache',
             'warm_start')
    falses = ('deterministic_input', 'use_cached', 'annotate_padding_fields',
              'log_preprocessed_targets')
    expected = {**dict.fromkeys(nones), **dict.fromkeys(trues, True),
                **dict.fromkeys(falses, False)}
    for name, value in expected.items():
      self.assertIn(name, defaults)
      self.assertEqual(defaults[name], value, name)
    config = pax_fiddle.Config(seqio_input.SeqIOInput)
    start = config.deterministic_input_start_index
    self.assertIs(start.cls, seqio_input.SeqIOInput.DeterministicInput)
    self.assertEqual((start.start_step, start.example_index_offset), (0, 0))

  def test_legacy_hparams_clone_and_set(self):
    p = seqio_input.SeqIOInput.HParams(
        mixture_name='super_glue_wsc', split_name='validation',
        task_feature_lengths={'inputs': 32, 'targets': 32},
        feature_converter=seqio_input.LanguageModelFeatures(pack=False),
        is_training=False, use_cached=False, input_random_seed=123,
        batch_size=4, reset_for_eval=True)
    q = p.clone().set(infeed_host_index=1, num_infeed_hosts=2, shuffle=False)
    self.assertIs(q.cls, seqio_input.SeqIOInput)
    self.assertEqual((q.infeed_host_index, q.num_infeed_hosts, q.shuffle),
                     (1, 2, False))
    self.assertEqual(p.num_infeed_hosts, 0)
    self.assertIn("mixture_name : 'super_glue_wsc'",
                  base_hyperparams.nested_struct_to_text(q))

  def test_feature_converters_are_plain_configs(self):
    lm = seqio_input.LanguageModelFeatures(pack=True)
    self.assertTrue(seqio_input.is_packing_on(lm))
    self.assertFalse(seqio_input.is_packing_on(
        seqio_input.PackedLanguageModelFeatures()))
    self.assertFalse(seqio_input.is_packing_on(seqio_input.RemoveProvenance()))
    self.assertEqual(lm, seqio_input.LanguageModelFeatures(pack=True))
    self.assertEqual((lm.bos_id, lm.eos_id, lm.weights_on_targets_only),
                     (0, 1, None))
    built = base_hyperparams.instantiate(pax_fiddle.Config(
        seqio_input.SequenceModelFeaturesWithTaskInfo, pack=True, bos_id=3))
    self.assertIsInstance(built, seqio_input.SequenceModelFeatures)
    self.assertEqual((built.pack, built.bos_id), (True, 3))
    with self.assertRaises(dataclasses.FrozenInstanceError):
      lm.pack = False  # pytype: disable=not-writable


class HelpersTest(test_utils.TestCase):

  def test_select_split(self):
    self.assertEqual(seqio_input.select_split('t', 'validation'),
                     'validation')
    self.assertEqual(seqio_input.select_split('t', lambda name: name + '_x'),
                     't_x')

  def test_decode_output_keys_become_enumeration_ids(self):
    decode_out = py_utils.NestedMap({
        py_utils.INDEX_WITHIN_SHARD_KEY: np.array([4, 5, -1]),
        py_utils.SHARD_INDEX_KEY: np.array([1, 1, -1]),
        py_utils.NUM_SHARDS_KEY: np.array([2, 2, -1]),
        'ids': np.zeros([3, 2]),
    })
    pairs = [('a', 'first'), ('b', 'second')]  # The padded row has no pair.
    got = seqio_input.maybe_update_decode_output_keys(pairs, decode_out)

    def key(index):
      return (f'{py_utils.INDEX_WITHIN_SHARD_KEY}={index}/'
              f'{py_utils.SHARD_INDEX_KEY}=1/{py_utils.NUM_SHARDS_KEY}=2')

    self.assertEqual(got, [(key(4), 'first'), (key(5), 'second')])
    with self.assertRaisesRegex(RuntimeError, '2 non-padded examples'):
      seqio_input.maybe_update_decode_output_keys(pairs[:1], decode_out)
    plain = py_utils.NestedMap(ids=np.zeros([2, 2]))
    self.assertIs(
        seqio_input.maybe_update_decode_output_keys(pairs, plain), pairs)

  def test_only_seqio_inputs_process_outputs(self):
    inp = base_hyperparams.instantiate(pax_fiddle.Config(
        base_input.InMemoryInput, batch_size=1, data={'x': np.arange(2)}))
    self.assertFalse(seqio_input.should_process_outputs(inp))
    self.assertEqual(
        [m.name for m in seqio_input.MetricType], ['PREDICT', 'SCORE'])


if __name__ == '__main__':
  absltest.main()
