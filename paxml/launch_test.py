"""Tests of the `paxml` command's restart with glibc's huge-page tunable."""

import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import textwrap
import tomllib
from unittest import mock

from absl.testing import absltest
from paxml import _launch

_ROOT = pathlib.Path(__file__).resolve().parent.parent
_THP = pathlib.Path('/sys/kernel/mm/transparent_hugepage/enabled')


def _machine_supports_the_tunable() -> bool:
  """glibc 2.35+ and transparent huge pages in `madvise` mode, read
  independently of the code under test."""
  name, version = platform.libc_ver()
  if sys.platform != 'linux' or name != 'glibc':
    return False
  if tuple(int(v) for v in version.split('.')[:2]) < (2, 35):
    return False
  return _THP.exists() and '[madvise]' in _THP.read_text()


# Prints the process id, environment and options before and after the
# restart, then whether glibc asked for huge pages for a fresh 64 MiB block:
# the number of mappings of 64 MiB or more that carry MADV_HUGEPAGE (`hg`
# in /proc/self/smaps; set by the advice, whether or not the kernel then
# found huge pages).
_PROBE = textwrap.dedent("""
    import os, sys
    from paxml import _launch
    def report(when, advised=''):
      print(when, os.getpid(), os.environ.get('GLIBC_TUNABLES'),
            sys.flags.utf8_mode, sys.argv[1:], advised, sep='|', flush=True)
    report('before')
    if 'trace' in sys.argv:
      sys.settrace(lambda *args: None)
    _launch.restart_with_huge_pages()
    sys.settrace(None)
    block = bytearray(64 << 20)
    advised, size_kb = 0, 0
    with open('/proc/self/smaps') as f:
      for line in f:
        if line.startswith('Size:'):
          size_kb = int(line.split()[1])
        elif line.startswith('VmFlags:'):
          advised += size_kb >= (64 << 10) and 'hg' in line.split()[1:]
    report('after', advised)
""")


def _probe(*args: str, tunables: str | None = None) -> list[list[str]]:
  env = dict(os.environ, PYTHONPATH=str(_ROOT))
  env.pop('GLIBC_TUNABLES', None)
  if tunables is not None:
    env['GLIBC_TUNABLES'] = tunables
  with tempfile.TemporaryDirectory() as tmp:
    script = pathlib.Path(tmp) / 'probe.py'
    script.write_text(_PROBE)
    out = subprocess.run(
        [sys.executable, '-X', 'utf8', str(script), *args], env=env,
        capture_output=True, text=True, check=True, timeout=60).stdout
  return [line.split('|') for line in out.splitlines()]


def _run_with_a_bad_experiment(start: str) -> subprocess.CompletedProcess:
  """Runs the Python code `start`, which starts the runner, in a fresh
  interpreter, with an unknown experiment on the command line (the runner
  stops before writing anything) and no GLIBC_TUNABLES."""
  with tempfile.TemporaryDirectory() as tmp:
    code = ("import sys; sys.argv = ['paxml', '--exp=no.such.Exp', "
            f"'--job_log_dir={tmp}/job']; " + start)
    env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu')
    env.pop('GLIBC_TUNABLES', None)
    result = subprocess.run([sys.executable, '-c', code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert not os.path.exists(f'{tmp}/job'), 'the bad run wrote its job dir'
  return result


class EnvironmentTest(absltest.TestCase):
  """When a restart is wanted, and the environment it gets."""

  def _env(self, environ, glibc=(2, 36), thp='madvise', tool=False):
    return _launch.environment_with_huge_pages(environ, glibc, thp, tool)

  def test_adds_the_tunable_and_keeps_everything_else(self):
    environ = {'PATH': '/bin', 'GLIBC_TUNABLES': 'glibc.malloc.arena_max=4'}
    env = self._env(environ)
    self.assertEqual(env, {
        'PATH': '/bin',
        'GLIBC_TUNABLES': 'glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1'})
    self.assertEqual(environ['GLIBC_TUNABLES'], 'glibc.malloc.arena_max=4')
    self.assertEqual(self._env({}),
                     {'GLIBC_TUNABLES': 'glibc.malloc.hugetlb=1'})

  def test_no_restart_when_the_user_or_a_restart_set_it(self):
    for tunables in ('glibc.malloc.hugetlb=0', 'glibc.malloc.hugetlb=1',
                     'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2'):
      self.assertIsNone(self._env({'GLIBC_TUNABLES': tunables}), tunables)
    # A longer name that starts the same is another tunable.
    self.assertIsNotNone(
        self._env({'GLIBC_TUNABLES': 'glibc.malloc.hugetlbx=0'}))

  def test_no_restart_where_it_cannot_help(self):
    self.assertIsNone(self._env({}, glibc=(2, 34)))
    self.assertIsNone(self._env({}, glibc=None))  # musl, macOS.
    self.assertIsNone(self._env({}, thp='never'))
    self.assertIsNone(self._env({}, thp='always'))  # The kernel does it.
    self.assertIsNone(self._env({}, thp=None))
    self.assertIsNone(self._env({}, tool=True))

  def test_huge_pages_mode_reads_the_bracketed_word(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = pathlib.Path(tmp) / 'enabled'
      path.write_text('always [madvise] never\n')
      self.assertEqual(_launch.huge_pages_mode(str(path)), 'madvise')
      path.write_text('[always] madvise never\n')
      self.assertEqual(_launch.huge_pages_mode(str(path)), 'always')
      self.assertIsNone(_launch.huge_pages_mode(str(path) + '.missing'))

  def test_glibc_version_matches_platform(self):
    name, version = platform.libc_ver()
    if name != 'glibc':
      self.assertIsNone(_launch.glibc_version())
    else:
      self.assertEqual(_launch.glibc_version(),
                       tuple(int(v) for v in version.split('.')[:2]))

  def test_started_as_the_module_or_the_file_only(self):
    main_py = str(_ROOT / 'paxml' / 'main.py')
    cases = {
        ('python', '-m', 'paxml.main', '--exp=x'): True,
        ('python', '-X', 'utf8', '-mpaxml.main'): True,
        ('python', '-Xutf8', '-Bm', 'paxml.main'): True,
        ('python', '-W', 'error', '--check-hash-based-pycs', 'always', '-u',
         '-m', 'paxml.main'): True,
        ('python', main_py, '--job_log_dir=/tmp/j'): True,
        # A program of the user's that runs paxml.main with runpy.
        ('python', 'wrapper.py', '-m', 'paxml.main'): False,
        ('python', '-c', 'import runpy', '-m', 'paxml.main'): False,
        ('python', '-W', 'paxml.main', 'wrapper.py'): False,
        ('python', '-m', 'other.main', main_py): False,
        ('python', '-', main_py): False,
        ('python',): False,
    }
    for argv, expected in cases.items():
      with mock.patch.object(sys, 'orig_argv', list(argv)):
        self.assertEqual(_launch.started_as('paxml.main', main_py), expected,
                         argv)

  def test_a_failed_restart_goes_on_without_it(self):
    environ = {k: v for k, v in os.environ.items() if k != 'GLIBC_TUNABLES'}
    with mock.patch.dict(os.environ, environ, clear=True), \
         mock.patch.object(_launch, 'glibc_version', return_value=(2, 36)), \
         mock.patch.object(_launch, 'huge_pages_mode', return_value='madvise'), \
         mock.patch.object(_launch, '_tool_attached', return_value=False), \
         mock.patch.object(sys, 'platform', 'linux'), \
         mock.patch.object(os, 'execve',
                           side_effect=OSError(7, 'Argument list too long')) \
         as execve, \
         mock.patch.object(sys, 'stderr') as stderr:
      _launch.restart_with_huge_pages()  # Returns instead of raising.
    execve.assert_called_once()
    self.assertEqual(execve.call_args.args[2]['GLIBC_TUNABLES'],
                     'glibc.malloc.hugetlb=1')
    stderr.write.assert_called_once()
    self.assertIn('Argument list too long', stderr.write.call_args.args[0])

  def test_log_note_names_the_setting(self):
    self.assertIsNone(_launch.host_malloc_note({}))
    note = _launch.host_malloc_note(
        {'GLIBC_TUNABLES': 'glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1'})
    self.assertStartsWith(note, 'glibc malloc: glibc.malloc.hugetlb=1 ')


class ConsoleCommandTest(absltest.TestCase):

  def test_paxml_command_runs_the_launcher_then_the_runner(self):
    pyproject = tomllib.loads((_ROOT / 'pyproject.toml').read_text())
    module, function = pyproject['project']['scripts']['paxml'].split(':')
    self.assertEqual((module, function), ('paxml._launch', 'console_main'))
    result = _run_with_a_bad_experiment(
        'from paxml import _launch; _launch.console_main()')
    # The runner read the flags: a bad experiment is one line and status 2.
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    self.assertIn('error: --exp=no.such.Exp', result.stderr)
    # And it runs restarted with the tunable where the machine has it.
    self.assertEqual('glibc malloc: glibc.malloc.hugetlb=1' in result.stderr,
                     _machine_supports_the_tunable())


class RestartTest(absltest.TestCase):
  """The restart in a real process."""

  def setUp(self):
    super().setUp()
    if not _machine_supports_the_tunable():
      self.skipTest('needs Linux, glibc 2.35+ and transparent huge pages in '
                    'madvise mode')

  def test_restarts_once_as_the_same_process_with_huge_pages(self):
    lines = _probe('a', 'b c')
    self.assertEqual([l[0] for l in lines], ['before', 'before', 'after'])
    pids = {l[1] for l in lines}
    self.assertLen(pids, 1)  # execve: the same process.
    self.assertEqual([l[2] for l in lines],
                     ['None'] + ['glibc.malloc.hugetlb=1'] * 2)
    # The interpreter's options and the arguments survive the restart.
    self.assertEqual({l[3] for l in lines}, {'1'})
    self.assertEqual({l[4] for l in lines}, {"['a', 'b c']"})
    # glibc read the tunable: it asked for huge pages for the 64 MiB block.
    self.assertGreater(int(lines[-1][5]), 0)

  def test_user_setting_is_kept_and_not_restarted(self):
    lines = _probe(tunables='glibc.malloc.hugetlb=0')
    self.assertEqual([l[0] for l in lines], ['before', 'after'])
    self.assertEqual(lines[-1][2], 'glibc.malloc.hugetlb=0')
    self.assertEqual(int(lines[-1][5]), 0)  # glibc's default: no advice.

  def test_runner_run_by_a_users_program_does_not_restart_it(self):
    result = _run_with_a_bad_experiment(
        "print('wrapper', flush=True); "
        "import runpy; runpy.run_module('paxml.main', run_name='__main__')")
    self.assertEqual(result.returncode, 2, result.stderr[-2000:])
    self.assertEqual(result.stdout, 'wrapper\n')  # Ran once.
    self.assertIn('error: --exp=no.such.Exp', result.stderr)
    self.assertNotIn('glibc malloc:', result.stderr)

  def test_no_restart_under_a_tracer(self):
    lines = _probe('trace')
    self.assertEqual([l[0] for l in lines], ['before', 'after'])
    self.assertEqual(lines[-1][2], 'None')


if __name__ == '__main__':
  absltest.main()
