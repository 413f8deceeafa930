"""The runner's console: one-line errors, quiet libraries, --help.

Private to `paxml.main`:

* `exit_with_error` prints a bad flag or config value as one line
  (`error: ...`) and exits with status 2; `debug_tracebacks` says whether to
  raise instead (`--debug_tracebacks`, or the environment's `PAX_DEBUG=1`).
* `one_line_flag_errors` does the same for errors of flag parsing (an
  unknown flag, a bad enum value), which absl reports with exit status 1.
* `run_quietly` hides libraries' INFO lines (Orbax's, ...) unless
  `--library_logs`; Pax's own INFO lines and every warning stay.
* `show_flags_in_help` lists the runner's flags in `--help` when the runner
  is started as the `paxml` console script.
* `exit_process` ends the command without tearing down its modules.
"""

import atexit
import logging as std_logging
import os
import pathlib
import sys
import threading
from typing import Any, Callable, Sequence

from absl import flags
from absl import logging

_OWN_DIRS = tuple(
    str(pathlib.Path(__file__).resolve().parent.parent / package) + os.sep
    for package in ('paxml', 'praxis'))


def debug_tracebacks(flag_value: bool = False) -> bool:
  """Whether errors should keep their tracebacks."""
  return bool(flag_value) or os.environ.get('PAX_DEBUG', '') not in (
      '', '0', 'false', 'False')


def exit_with_error(error: BaseException, status: int = 2) -> None:
  """Prints `error: <message>` on stderr and exits with `status`."""
  print(f'error: {error}', file=sys.stderr)
  sys.exit(status)


def one_line_flag_errors(
    fiddle_parser: Callable[[Sequence[str]], Any]
) -> Callable[[Sequence[str]], Any]:
  """Fiddle's flags parser (for `app.run`) whose errors are one line and
  exit status 2 (absl prints them with the usage text and exits with 1)."""
  rewrite = getattr(sys.modules.get(fiddle_parser.__module__),
                    'rewrite_fdl_args', None)
  if rewrite is None:  # Another Fiddle: keep its parser as it is.
    return fiddle_parser

  def parse(argv: Sequence[str]) -> Any:
    try:
      return flags.FLAGS(rewrite(argv))
    except flags.Error as e:
      if debug_tracebacks():
        raise
      exit_with_error(e)

  return parse


class _LibraryInfoFilter(std_logging.Filter):
  """Drops INFO (and DEBUG) records that come from outside Pax."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    path = str(record.pathname)
    if record.levelno >= std_logging.WARNING:
      # Orbax warns on every save of a single-process run that it has no
      # per-process OCDBT files to merge: expected here, not a problem.
      return not (f'orbax{os.sep}' in path
                  and 'Skipping merge of OCDBT' in str(record.msg))
    if os.path.isabs(path):
      path = os.path.realpath(path)
    return path.startswith(_OWN_DIRS) or record.name == '__main__'


_FILTER = _LibraryInfoFilter()


def quiet_libraries(quiet: bool = True) -> None:
  """Hides (or shows again) libraries' INFO log lines."""
  handler = logging.get_absl_handler()
  if quiet:
    handler.addFilter(_FILTER)
  else:
    handler.removeFilter(_FILTER)


def run_quietly(main: Callable[[Sequence[str]], Any],
                library_logs: Callable[[], bool]
                ) -> Callable[[Sequence[str]], Any]:
  """`main` with libraries' INFO lines hidden unless `library_logs()`."""

  def run(argv: Sequence[str]) -> Any:
    quiet_libraries(not library_logs())
    return main(argv)

  return run


def show_flags_in_help(module_name: str, extra: Sequence[str] = ()) -> None:
  """Makes `--help` list the flags of `module_name` (and `extra` flags)."""
  values = flags.FLAGS
  main_module = sys.argv[0]
  own = list(values.flags_by_module_dict().get(module_name, []))
  own += [values[name] for name in extra if name in values]
  for flag in own:
    values.register_key_flag_for_module(main_module, flag)


def exit_process(code: Any) -> None:
  """Ends the process as `sys.exit(code)` would, less the modules' teardown.

  At exit the interpreter first joins the threads that are not daemons,
  runs the exit handlers (`atexit`: logging's flush, `jax.distributed`'s
  shutdown, ...) and flushes stdout and stderr; then it tears down every
  module, some 1,500 after a run (jax, orbax, fiddle, ...): about 0.4 s on
  a 2-core machine, spent after the work is done and saved. This does the
  first three and skips the teardown. Only the command-line entry point
  calls it, once the run has ended. Under a profiler or tracer (`python -m
  cProfile`, coverage, a debugger), which may write its results after the
  program returns, it exits as usual.

  Args:
    code: `SystemExit.code`: None or an int status, or a message (printed
      on stderr, status 1).
  """
  if sys.getprofile() is not None or sys.gettrace() is not None:
    sys.exit(code)
  if code is None:
    status = 0
  elif isinstance(code, int):
    status = code
  else:
    print(code, file=sys.stderr)
    status = 1
  # What the interpreter runs first at exit: the threading module's exit
  # callbacks (executors stop their workers) and the join of non-daemons.
  threading._shutdown()  # pylint: disable=protected-access
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (AttributeError, OSError, ValueError):
      pass
  os._exit(status)  # pylint: disable=protected-access
