"""Tests of lineage_logging and first_result_metric_callback (their logs)."""

import hashlib
import pathlib
import tempfile
from unittest import mock

from absl import logging
from absl.testing import absltest
from paxml import first_result_metric_callback
from paxml import lineage_logging


def _logged(mocked):
  return [c.args[0] % c.args[1:] for c in mocked.call_args_list]


class LineageTest(absltest.TestCase):

  def test_logs_the_file_and_its_digest(self):
    path = pathlib.Path(tempfile.mkdtemp()) / 'exp.json'
    path.write_bytes(b'{"a": 1}')
    with mock.patch.object(logging, 'info') as info:
      lineage_logging.log_config_file_lineage(str(path))
    expected = hashlib.sha256(b'{"a": 1}').hexdigest()
    self.assertEqual(_logged(info),
                     [f'Config file lineage: {path} sha256={expected}'])
    with mock.patch.object(logging, 'warning') as warning:
      lineage_logging.log_config_file_lineage(str(path) + '.missing')
    self.assertIn('does not exist', _logged(warning)[0])

  def test_first_result_logs_the_elapsed_time(self):
    with mock.patch.object(first_result_metric_callback.time, 'monotonic',
                           lambda: first_result_metric_callback._PROCESS_START
                           + 3.0), mock.patch.object(logging, 'info') as info:
      first_result_metric_callback.train_first_result_callback_fn()
    self.assertEqual(_logged(info), ['First training result after 3.0s.'])


if __name__ == '__main__':
  absltest.main()
