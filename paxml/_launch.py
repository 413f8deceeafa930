"""What the `paxml` command does before it imports JAX.

XLA:CPU allocates the temporaries of a computation as one buffer per run and
frees it when the run ends. A buffer that large (hundreds of MB for a small
LM) is above glibc's mmap threshold, so glibc maps it at every step and
unmaps it after, and the kernel zero-fills it again, 4 KiB page by 4 KiB
page: about 30% of a CPU step's processor time went to page faults. With
the tunable `glibc.malloc.hugetlb=1` (glibc 2.35 and later) glibc asks for
transparent huge pages for such blocks: one fault maps 2 MiB, not 4 KiB.
glibc reads its tunables once, when the process starts, so the command
replaces itself (`os.execve`: same process id, same arguments and
interpreter options) with the tunable added to `GLIBC_TUNABLES`, once,
before anything heavy is imported. Nothing else changes.

It does not restart when the tunable is already in `GLIBC_TUNABLES` (set
`GLIBC_TUNABLES=glibc.malloc.hugetlb=0` to keep glibc's default), when the
C library is not glibc 2.35 or later, when the kernel's transparent huge
pages are not in `madvise` mode (the only one where glibc acts on the
tunable: `always` gives large blocks huge pages anyway, `never` none),
when a debugger, profiler or coverage tool is attached (a restart would
detach it), or when a program of the user's runs `paxml.main` with `runpy`
(it would run again). Only the standard library is used here.
"""

import os
import sys
from typing import Mapping

TUNABLE = 'glibc.malloc.hugetlb'
_THP_ENABLED = '/sys/kernel/mm/transparent_hugepage/enabled'


def glibc_version() -> tuple[int, int] | None:
  """(major, minor) of the running glibc, or None for another C library."""
  try:
    name, version = os.confstr('CS_GNU_LIBC_VERSION').split()
    major, minor = version.split('.')[:2]
    return (int(major), int(minor)) if name == 'glibc' else None
  except (AttributeError, ValueError, OSError):
    return None


def huge_pages_mode(path: str = _THP_ENABLED) -> str | None:
  """The kernel's transparent huge page mode (`always`, `madvise`, `never`),
  or None where the kernel does not say."""
  try:
    with open(path) as f:
      text = f.read()
  except OSError:
    return None
  start, end = text.find('['), text.find(']')
  return text[start + 1:end] if 0 <= start < end else None


def _setting(environ: Mapping[str, str]) -> str | None:
  """The `glibc.malloc.hugetlb=...` entry of GLIBC_TUNABLES, if any."""
  for tunable in environ.get('GLIBC_TUNABLES', '').split(':'):
    if tunable.split('=')[0] == TUNABLE:
      return tunable
  return None


def _tool_attached() -> bool:
  """Whether a debugger, profiler or coverage tool watches this process."""
  if sys.gettrace() is not None or sys.getprofile() is not None:
    return True
  monitoring = getattr(sys, 'monitoring', None)  # Python 3.12+.
  if monitoring is not None:
    return any(monitoring.get_tool(tool) is not None for tool in range(6))
  return False


def environment_with_huge_pages(
    environ: Mapping[str, str], glibc: tuple[int, int] | None,
    thp_mode: str | None, tool_attached: bool) -> dict[str, str] | None:
  """The environment to restart with, or None when no restart is wanted."""
  if _setting(environ) is not None:
    return None  # Set by the user, or by a restart already.
  if glibc is None or glibc < (2, 35):
    return None  # The tunable does not exist there.
  if thp_mode != 'madvise':
    return None  # glibc only acts in this mode (`always`: the kernel does).
  if tool_attached:
    return None
  env = dict(environ)
  env['GLIBC_TUNABLES'] = ':'.join(
      filter(None, [environ.get('GLIBC_TUNABLES'), f'{TUNABLE}=1']))
  return env


def started_as(module: str, file: str) -> bool:
  """Whether this process's own command line runs `module` (`python -m
  module`) or `file` (`python file`), rather than a program of the user's
  that runs it with `runpy` (restarting would run that program again)."""
  args = sys.orig_argv[1:]
  i = 0
  while i < len(args):  # The interpreter's options, up to what it runs.
    arg = args[i]
    if arg == '-' or not arg.startswith('-'):  # Standard input, a script.
      return arg != '-' and os.path.realpath(arg) == os.path.realpath(file)
    if arg.startswith('--'):
      i += 2 if arg == '--check-hash-based-pycs' else 1
      continue
    for j, option in enumerate(arg[1:], start=2):  # Short options, as -Bm.
      if option in 'cmWX':  # These take a value: the rest, or the next arg.
        value = arg[j:] or (args[i + 1] if i + 1 < len(args) else '')
        if option in 'cm':
          return option == 'm' and value == module
        i += 0 if arg[j:] else 1
        break
    i += 1
  return False


def restart_with_huge_pages() -> None:
  """Replaces this process with itself (`sys.orig_argv`, how it was
  started) with `glibc.malloc.hugetlb=1` set, when that helps (see the
  module's docstring); returns otherwise."""
  if sys.platform != 'linux':
    return
  env = environment_with_huge_pages(
      os.environ, glibc_version(), huge_pages_mode(), _tool_attached())
  if env is None:
    return
  argv = list(sys.orig_argv)
  if not argv or not sys.executable:
    return
  # argv[0] as run: Python finds its prefix (and a virtual environment) from
  # it, and a bare `python` could name another interpreter on PATH.
  argv[0] = sys.executable
  for stream in (sys.stdout, sys.stderr):
    if stream is not None:
      stream.flush()
  try:
    os.execve(sys.executable, argv, env)
  except OSError as e:  # The run works without the tunable: go on.
    sys.stderr.write(f'paxml: not restarted with {TUNABLE}=1: {e}\n')


def host_malloc_note(environ: Mapping[str, str] = os.environ) -> str | None:
  """One line for the run's log when the tunable is set, else None."""
  setting = _setting(environ)
  if setting is None:
    return None
  return (f'glibc malloc: {setting} (GLIBC_TUNABLES; {TUNABLE}=1 asks for '
          f'transparent huge pages for large blocks, {TUNABLE}=0 keeps '
          "glibc's default).")


def console_main() -> None:
  """The `paxml` console command: `python -m paxml.main`'s twin."""
  restart_with_huge_pages()
  from paxml import _startup_gc  # pylint: disable=g-import-not-at-top
  _startup_gc.relax()  # Until the first step is dispatched.
  from paxml import main  # pylint: disable=g-import-not-at-top
  main.main()
