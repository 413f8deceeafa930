"""Unit tests of the runner's config checks and console filter."""

import logging
import os
import subprocess
import sys
import tempfile
from typing import Optional, Union

from absl.testing import absltest

from paxml import _config_checks
from paxml import _console


class ConfigChecksTest(absltest.TestCase):

  def test_expected_types(self):
    expected = _config_checks._expected
    self.assertIsNone(expected(3, int))
    self.assertIsNone(expected(3, float))  # An int is a number.
    self.assertIsNone(expected(None, int))  # None is left to the field.
    self.assertIsNone(expected('x', Optional[str]))
    self.assertIsNone(expected(2, Union[str, int]))
    self.assertEqual(expected('ten', int), 'an integer')
    self.assertEqual(expected(True, int), 'an integer')
    self.assertEqual(expected('fast', float), 'a number')
    self.assertEqual(expected('yes', bool), 'a bool')
    self.assertEqual(expected(1.5, Optional[int]), 'an integer or None')
    self.assertIsNone(expected(object(), list))  # Not checked.

  def test_parse_value(self):
    self.assertEqual(_config_checks.parse_value('a.b=[1, 2]'), [1, 2])
    self.assertIs(_config_checks.parse_value('a.b=false'), False)
    with self.assertRaisesRegex(ValueError, r"--fdl_set=a\.b=fo\(o: 'fo\(o' "
                                'is not a Python literal'):
      _config_checks.parse_value('a.b=fo(o')

  def test_path_parts(self):
    self.assertEqual(_config_checks._parts("datasets[1].x['k'].y"),
                     ['datasets', 1, 'x', 'k', 'y'])


class ConsoleFilterTest(absltest.TestCase):

  def _record(self, path, level, msg='m'):
    return logging.LogRecord('absl', level, path, 1, msg, None, None)

  def test_library_info_is_hidden_and_warnings_stay(self):
    keep = _console._LibraryInfoFilter().filter
    lib = '/site-packages/orbax/checkpoint/checkpoint.py'
    own = _console._OWN_DIRS[0] + 'train.py'
    self.assertFalse(keep(self._record(lib, logging.INFO)))
    self.assertTrue(keep(self._record(own, logging.INFO)))
    self.assertTrue(keep(self._record(lib, logging.WARNING)))
    self.assertFalse(keep(self._record(
        lib, logging.WARNING, '[process=0] Skipping merge of OCDBT x')))

  def test_debug_switch(self):
    with absltest.mock.patch.dict('os.environ', {'PAX_DEBUG': '1'}):
      self.assertTrue(_console.debug_tracebacks())
    with absltest.mock.patch.dict('os.environ', {'PAX_DEBUG': '0'}):
      self.assertFalse(_console.debug_tracebacks())
      self.assertTrue(_console.debug_tracebacks(True))


if __name__ == '__main__':
  absltest.main()


_EXIT_SCRIPT = r'''
import atexit, concurrent.futures, sys, threading, time
from paxml import _console
out = sys.argv[1]
atexit.register(lambda: open(out, 'a').write('atexit\n'))
def late():
  time.sleep(0.2)
  open(out, 'a').write('thread\n')
threading.Thread(target=late).start()
concurrent.futures.ThreadPoolExecutor(1).submit(lambda: None)
sys.stdout.write('buffered')  # No newline: still in the buffer.
_console.exit_process(eval(sys.argv[2]))
'''


class ExitProcessTest(absltest.TestCase):

  def _exit(self, code, profile=False):
    with tempfile.TemporaryDirectory() as d:
      script, out = f'{d}/exit.py', f'{d}/out.txt'
      with open(script, 'w') as f:
        f.write(_EXIT_SCRIPT)
      profiler = ['-m', 'cProfile', '-o', f'{d}/prof'] if profile else []
      proc = subprocess.run(
          [sys.executable, *profiler, script, out, repr(code)],
          capture_output=True, text=True, timeout=120)
      if profile:  # cProfile writes its file after the program returns.
        self.assertTrue(os.path.exists(f'{d}/prof'), proc.stderr)
      with open(out) as f:
        return proc, f.read()

  def test_threads_joined_handlers_run_output_flushed(self):
    for code, status in ((None, 0), (3, 3)):
      proc, written = self._exit(code)
      self.assertEqual(proc.returncode, status)
      self.assertEqual(proc.stdout, 'buffered')
      # The thread is joined first, then the exit handlers run.
      self.assertEqual(written, 'thread\natexit\n')

  def test_under_a_profiler_the_usual_exit(self):
    # (cProfile itself turns a SystemExit into status 0.)
    _, written = self._exit(3, profile=True)
    self.assertEqual(written, 'thread\natexit\n')

  def test_a_message_is_printed_with_status_one(self):
    proc, _ = self._exit('stopped: disk full')
    self.assertEqual(proc.returncode, 1)
    self.assertEqual(proc.stderr.strip(), 'stopped: disk full')
