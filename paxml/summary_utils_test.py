"""Tests of summary_utils.py: events are read back with TensorBoard itself."""

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import types

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from paxml import base_metrics
from paxml import summary_utils
from PIL import Image
from praxis import base_layer
from praxis import test_utils
from tensorboard.backend.event_processing import event_accumulator

_HAS_SOUNDFILE = importlib.util.find_spec('soundfile') is not None


def _read(writer, logdir):
  """Closes `writer` (which writes every queued event) and reads `logdir`."""
  writer.close()
  guidance = {k: 0 for k in event_accumulator.DEFAULT_SIZE_GUIDANCE}
  acc = event_accumulator.EventAccumulator(logdir, size_guidance=guidance)
  acc.Reload()
  return acc


def _scalars(acc):
  """tag -> [(step, value)] for every scalar tag."""
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
          for tag in acc.Tags()['scalars']}


class SummaryUtilsTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.logdir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.logdir, ignore_errors=True)

  def _writer(self):
    writer = summary_utils.get_summary_writer(self.logdir)
    self.addCleanup(writer.close)
    return writer

  def test_flatten_summary_dict(self):
    got = summary_utils.flatten_summary_dict(
        {'a': {'b': {'c_scalar': 1}, 'd_image': 2}, 'e_text': 3})
    self.assertEqual(got, [('a/b/c_scalar', 1), ('a/d_image', 2),
                           ('e_text', 3)])

  def test_write_summary_entry(self):
    writer = self._writer()
    img0 = self.np_rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    img1 = self.np_rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    hist = self.np_rng.standard_normal(50).astype(np.float32)
    summary_utils.write_summary_entry(
        writer, 10,
        loss=jnp.array([1.0, 3.0]),
        weighted_scalars_list={
            'acc': (jnp.array(0.5), jnp.array(4.0)),
            'err': [(np.array([1.0, 2.0]), np.array([1.0, 3.0])),
                    (np.array(3.0), np.array(4.0))],
        },
        summary_tensors={'lm': {
            'x_scalar': jnp.array(1.5, jnp.bfloat16),
            'pic_image': np.stack([img0, img1]),
            'w_histogram': hist,
            'note_text': 'hello',
            'mean_aggregate_scalar': [np.array(1.0), np.array(2.0)],
        }},
        steps_per_sec=2.5)
    acc = _read(writer, self.logdir)
    # err: (1*1 + 2*3 + 3*4) / (1 + 3 + 4) = 19 / 8.
    self.assertEqual(_scalars(acc), {
        'loss': [(10, 2.0)],
        'Steps/sec': [(10, 2.5)],
        'Metrics/acc': [(10, 0.5)],
        'Metrics/acc-weight': [(10, 4.0)],
        'Metrics/err': [(10, 2.375)],
        'Metrics/err-weight': [(10, 8.0)],
        'lm/x_scalar': [(10, 1.5)],
        'lm/mean_scalar': [(10, 1.5)],
    })
    # One tag per image, pixels unchanged (uint8 is written as is).
    for i, img in enumerate([img0, img1]):
      (image,) = acc.Images(f'lm/pic_image/{i}')
      self.assertEqual((image.step, image.height, image.width), (10, 4, 5))
      pixels = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)))
      self.assertArraysEqual(pixels, img)
    (h,) = acc.Histograms('lm/w_histogram')
    self.assertEqual(h.step, 10)
    self.assertEqual(h.histogram_value.num, 50)
    self.assertAllClose(
        [h.histogram_value.min, h.histogram_value.max,
         h.histogram_value.sum, h.histogram_value.sum_squares],
        [hist.min(), hist.max(), hist.sum(), np.sum(hist**2)], atol=1e-4)
    (text,) = acc.Tensors('lm/note_text/text_summary')
    self.assertEqual(text.tensor_proto.string_val, [b'hello'])

  def test_write_text(self):
    writer = self._writer()
    summary_utils.write_text(writer, 0, 'Total Num Params', '1 234 567')
    acc = _read(writer, self.logdir)
    (event,) = acc.Tensors('Total Num Params/text_summary')
    self.assertEqual((event.step, event.tensor_proto.string_val),
                     (0, [b'1 234 567']))

  def test_disabled_writer_writes_nothing(self):
    with summary_utils.get_summary_writer(
        self.logdir, enable_summary_writer=False) as writer:
      summary_utils.write_summary_entry(
          writer, 1, 1.0, {'m': (1.0, 1.0)},
          summary_tensors={'x_scalar': 1.0})
      summary_utils.write_text(writer, 0, 'Model', 'text')
    self.assertEqual(os.listdir(self.logdir), [])

  def test_with_writer_is_the_default_inside_the_block(self):
    # Pax's form: `with get_summary_writer(dir):` then write_* calls that
    # take no writer.
    with summary_utils.get_summary_writer(self.logdir):
      summary_utils.write_summary_tensor(3, 'inside', 2.5,
                                         base_layer.SummaryType.SCALAR)
      with summary_utils.get_summary_writer(
          self.logdir, enable_summary_writer=False):  # Nested: it wins.
        summary_utils.write_summary_tensor(3, 'nested', 1.0,
                                           base_layer.SummaryType.SCALAR)
      summary_utils.write_summary_tensor(4, 'inside', 3.5,
                                         base_layer.SummaryType.SCALAR)
    acc = event_accumulator.EventAccumulator(self.logdir)
    acc.Reload()  # The writer was closed at the block's end.
    self.assertEqual(_scalars(acc), {'inside': [(3, 2.5), (4, 3.5)]})
    if 'tensorflow' not in sys.modules:
      with self.assertRaisesRegex(ValueError, 'No summary writer'):
        summary_utils.write_summary_tensor(5, 'outside', 1.0,
                                           base_layer.SummaryType.SCALAR)

  @parameterized.parameters(
      (None, False, {4: 4.0, 8: 8.0}, {4: 4.0, 8: 8.0}),
      # Steps 2 and 4, then 6 and 8: metric (2*2 + 4*4) / (2 + 4) = 20 / 6.
      (2, False, {4: 3.0, 8: 7.0}, {4: 20 / 6, 8: (36 + 64) / 14}),
      (2, True, {4: 3.0, 8: 7.0}, {4: 20 / 6, 8: (36 + 64) / 14}),
  )
  def test_summary_handler(self, accumulate, is_async, losses, metrics):
    writer = self._writer()
    handler = summary_utils.SummaryHandler(
        writer, write_interval_steps=4, accumulate_interval_steps=accumulate,
        log_interval_steps=4, is_async=is_async, name='train')
    wrote = []
    for step in range(1, 10):
      value = jnp.array(float(step))
      if handler.process(step, value, {'m': (value, value)},
                         {'s_scalar': value * 10}, steps_per_sec=step):
        wrote.append(step)
    handler.close()
    self.assertEqual(wrote, [4, 8])
    got = _scalars(_read(writer, self.logdir))
    self.assertEqual(dict(got['loss']), losses)
    self.assertEqual(dict(got['Steps/sec']), losses)
    self.assertEqual(dict(got['s_scalar']),
                     {k: v * 10 for k, v in losses.items()})
    self.assertAllClose(dict(got['Metrics/m']), metrics)

  def test_errors(self):
    writer = self._writer()
    with self.assertRaisesRegex(ValueError, "'bad' must be a .value, weight"):
      summary_utils.write_summary_entry(writer, 1, 1.0, {'bad': (1, 2, 3)})
    with self.assertRaisesRegex(ValueError, 'no summary type suffix'):
      summary_utils.write_summary_entry(writer, 1, 1.0, {},
                                        summary_tensors={'x': 1.0})
    with self.assertRaisesRegex(ValueError, 'No summary writer'):
      summary_utils.write_summary_tensor(
          1, 'x', 1.0, summary_utils.SummaryType.SCALAR)
    with self.assertRaisesRegex(ValueError,
                                "'eval': accumulate_interval_steps must be"):
      summary_utils.SummaryHandler(writer, 10, accumulate_interval_steps=0,
                                   name='eval')

  @absltest.skipIf(_HAS_SOUNDFILE, 'soundfile is installed')
  def test_audio_and_video_are_skipped_without_breaking_the_entry(self):
    writer = self._writer()
    summary_utils.write_summary_entry(
        writer, 3, 1.0, {},
        summary_tensors={'a_audio': np.zeros((1, 8, 1), np.float32),
                         'v_video': np.zeros((1, 2, 4, 4, 3), np.uint8),
                         'x_scalar': 4.0})
    acc = _read(writer, self.logdir)
    self.assertEqual(acc.Tags()['audio'], [])
    self.assertEqual(_scalars(acc), {'loss': [(3, 1.0)],
                                     'x_scalar': [(3, 4.0)]})

  def test_clu_metrics_are_merged_and_computed(self):
    writer = self._writer()
    handler = summary_utils.SummaryHandler(writer, 2,
                                           accumulate_interval_steps=1)
    metric = base_metrics.WeightedScalarCluMetric.create
    for step, (values, weights) in enumerate(
        [([1.0, 3.0], [1.0, 1.0]), ([6.0], [2.0])], start=1):
      handler.process(step, 0.0, None, None, clu_metrics={
          'acc': metric(value=jnp.array(values), weight=jnp.array(weights))})
    handler.close()
    # (1 + 3 + 6 * 2) / (1 + 1 + 2) = 4.
    self.assertEqual(_scalars(_read(writer, self.logdir))['Metrics/acc'],
                     [(2, 4.0)])

  @absltest.skipIf(importlib.util.find_spec('clu') is None, 'needs clu')
  def test_clu_video_summary_is_skipped_and_the_rest_written(self):
    from clu import values as clu_values  # pylint: disable=g-import-not-at-top
    video = clu_values.Summary(value=np.array(['2', '2', 'xx']),
                               metadata=None)
    with summary_utils.get_summary_writer(self.logdir):
      summary_utils.write_clu_metric_summaries(
          {'clip': video, 'acc': clu_values.Scalar(0.75)}, step_i=7)
    acc = event_accumulator.EventAccumulator(self.logdir)
    acc.Reload()
    self.assertEqual(_scalars(acc), {'Metrics/acc': [(7, 0.75)]})

  def test_model_texts(self):
    writer = self._writer()
    state = types.SimpleNamespace(mdl_vars={
        'a': {'w': np.zeros((3, 4), np.float32)}, 'b': np.zeros((5,))})
    summary_utils.write_model_structure(writer, state, False)
    summary_utils.write_total_num_params(writer, 1234567)
    summary_utils.write_global_batch_size(writer, 2048)
    acc = _read(writer, self.logdir)

    def text(tag):
      (event,) = acc.Tensors(f'{tag}/text_summary')
      return event.tensor_proto.string_val[0].decode()

    self.assertEqual(text('Model').split(), ['a:', 'w:', "'3x4'", 'b:', "'5'"])
    self.assertEqual(text('Total Num Params'), '1 234 567')
    self.assertEqual(text('Global batch size'), '2 048')


class TensorboardxImportTest(absltest.TestCase):

  @absltest.skipIf(importlib.util.find_spec('torch') is None,
                   'torch is not installed')
  def test_no_torch_import_on_the_side(self):
    # tensorboardX imports an installed torch (a second of start-up) unless
    # paxml keeps it from doing so; `import torch` still works afterwards.
    code = ('import sys; from paxml import summary_utils; '
            'print("torch" in sys.modules); '
            'w = summary_utils.SummaryWriter(sys.argv[1]); '
            'w.add_scalar("x", 1.0, 0); w.close(); '
            'import torch; print(float(torch.ones(2).sum()))')
    with tempfile.TemporaryDirectory() as logdir:
      out = subprocess.run([sys.executable, '-c', code, logdir], check=True,
                           capture_output=True, text=True).stdout.split()
      self.assertEqual(out, ['False', '2.0'])
      self.assertEqual(_scalars(_read(summary_utils.SummaryWriter(logdir),
                                      logdir))['x'], [(0, 1.0)])


class TreeHelpersTest(test_utils.TestCase):

  def test_pretty_repr(self):
    self.assertEqual(summary_utils.pretty_repr({'a': [1, 2], 'b': {}}),
                     '{\n    a: [\n        1,\n        2,\n    ],\n'
                     '    b: {},\n}')
    self.assertEqual(summary_utils.pretty_format_iters('{\n a: [1],\n}'),
                     ' a: 1')

  def test_l2_mean_is_the_rms_of_each_subtree(self):
    tree = {'x': {'u': np.array([3.0, 4.0]), 'v': np.array([0.0])},
            'y': np.array([[2.0, 2.0], [2.0, 2.0]])}
    got = summary_utils.l2_mean(tree, prefix='p', max_level=1)
    # x: sqrt((9 + 16 + 0) / 3); y: sqrt(16 / 4).
    self.assertAllClose(got, {'p/x': np.sqrt(25 / 3), 'p/y': 2.0})
    self.assertEqual(sorted(summary_utils.l2_mean(tree)),
                     ['x/u', 'x/v', 'y'])

  def test_flatten_flax_summaries_numbers_repeated_layers(self):
    got = summary_utils.flatten_flax_summaries(
        {'lm': {'loss_scalar': [1, 2], 'pic_image': 3}})
    self.assertEqual(got, {'lm/loss_0_scalar': 1, 'lm/loss_1_scalar': 2,
                           'lm/pic_image': 3})

  def test_display_name_drops_the_aggregate_marker(self):
    self.assertEqual(
        summary_utils.get_summary_display_name_from_key('a/m_aggregate_scalar'),
        'a/m_scalar')

  def test_aggregate_per_replica_summaries(self):
    def fn(x):
      return summary_utils.aggregate_per_replica_summaries(
          {'s_scalar': x, 'p_image': jnp.broadcast_to(x, (1, 2, 2, 1))})

    out = jax.pmap(fn, axis_name=summary_utils.PMAP_PARALLEL_AXIS_NAME)(
        jnp.arange(1.0, jax.local_device_count() + 1))
    n = jax.local_device_count()
    self.assertAllClose(out['s_scalar'], np.full((n,), (n + 1) / 2))
    self.assertEqual(out['p_image'].shape, (n, n, 2, 2, 1))


if __name__ == '__main__':
  absltest.main()
