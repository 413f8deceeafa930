"""Tests of ml_monitoring: logged boundaries and the step number."""

from unittest import mock

from absl import logging
from absl.testing import absltest
from paxml import ml_monitoring


class MlMonitoringTest(absltest.TestCase):

  def test_event_logger_logs_both_ends_with_the_duration(self):
    times = iter([10.0, 12.5])
    with mock.patch.object(ml_monitoring.time, 'monotonic',
                           lambda: next(times)), \
        mock.patch.object(logging, 'info') as info:
      with ml_monitoring.ml_event_logger(ml_monitoring.MlEvent.MAIN_LOOP,
                                         job='train'):
        pass
    messages = [call.args[0] % call.args[1:] for call in info.call_args_list]
    self.assertEqual(messages, ['ML event MAIN_LOOP START job=train',
                                'ML event MAIN_LOOP END after 2.500s job=train'])

  def test_step_number(self):
    ml_monitoring.record_step_number(7)
    self.assertEqual(ml_monitoring.last_step_number(), 7)


if __name__ == '__main__':
  absltest.main()
