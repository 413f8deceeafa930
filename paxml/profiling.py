"""Profiles of a few training steps, and the PGLE file XLA can compile with.

Public names: Profiler, PGLE_XLA_FLAGS, pgle_xla_flags, write_pgle_profile.

Pax's `Profiler` is here with its constructor and methods, and it really
captures: `capture_async()` starts a JAX profiler trace (viewable in
TensorBoard's profile plugin or Perfetto) that stops by itself after about
`num_steps` steps, from the mean step time the train program reports with
`update_step_moving_mean` (at least `min_duration_sec`). The train program
captures at `train.profiler_capture_step` (steps counted from the first step
of the run) into `<job_log_dir>/profile/`.

After each capture the profile's instruction latencies are extracted into
`profile.pb` (`jax.experimental.profiler.get_profiled_instructions_proto`):
the Profile Guided Latency Estimator (PGLE) input of XLA:GPU's scheduler. A
second run compiled with `--xla_gpu_pgle_profile_file_or_directory_path`
pointing at it schedules compute and collectives by measured times; the
flags are logged and written next to the file (`xla_flags.txt`). On CPU the
profile holds no GPU instructions and the file is empty (PGLE is a GPU
feature); the capture itself works everywhere.
"""

from __future__ import annotations

import os
import pathlib
import threading

from absl import logging
import jax
from jax.experimental import profiler as jax_exp_profiler

# The latency-hiding scheduler, which reads the profile. The seeds' recipe
# also turned on async all-gathers and reduce-scatters: XLA now runs
# collectives asynchronously by default and has removed those flags, so jax
# >= 0.10 stops at start-up on them ("Unknown flags in XLA_FLAGS").
PGLE_XLA_FLAGS = ('--xla_gpu_enable_latency_hiding_scheduler=true',)


def pgle_xla_flags(profile_path: os.PathLike[str] | str) -> str:
  """The XLA_FLAGS value of a run compiled with the PGLE profile."""
  return ' '.join(PGLE_XLA_FLAGS + (
      f'--xla_gpu_pgle_profile_file_or_directory_path={profile_path}',))


def _latest_run_dir(trace_dir: pathlib.Path) -> pathlib.Path:
  runs = sorted(p for p in (trace_dir / 'plugins' / 'profile').glob('*')
                if p.is_dir())
  if not runs:
    raise FileNotFoundError(
        f'No profiler run under {trace_dir}/plugins/profile: the trace was '
        'not written.')
  return runs[-1]


def write_pgle_profile(trace_dir: os.PathLike[str] | str) -> pathlib.Path:
  """Extracts the latest trace's instruction latencies into `profile.pb`.

  Args:
    trace_dir: The directory `jax.profiler.start_trace` wrote to.

  Returns:
    The path of `profile.pb`, in the trace's run directory; `xla_flags.txt`
    beside it holds the XLA_FLAGS of a run that uses it.
  """
  run_dir = _latest_run_dir(pathlib.Path(trace_dir))
  proto = jax_exp_profiler.get_profiled_instructions_proto(os.fspath(run_dir))
  path = run_dir / 'profile.pb'
  path.write_bytes(proto)
  (run_dir / 'xla_flags.txt').write_text(pgle_xla_flags(path) + '\n')
  return path


class Profiler:
  """Captures a JAX profiler trace of a few steps (Pax's interface).

  Attributes of the constructor as in Pax; `log_dir` (where traces go) and
  `pgle` (extract `profile.pb` after each capture) are this project's.
  """

  def __init__(
      self,
      num_steps: float = 2.0,
      min_duration_sec: float = 1.0,
      default_duration_sec: float = 5.0,
      tag: str | None = None,
      max_num_hosts: int | None = None,
      capture_host_profile: bool = False,
      log_dir: os.PathLike[str] | str | None = None,
      pgle: bool = True,
  ) -> None:
    """Constructor.

    Args:
      num_steps: Steps a capture should span, from the mean step time.
      min_duration_sec: The shortest capture, in seconds.
      default_duration_sec: The capture's length before any step was timed.
      tag: Appended to the trace directory's name.
      max_num_hosts: Only processes with an index below it capture (None:
        all).
      capture_host_profile: Also trace Python on the host.
      log_dir: Where the traces go (default: `$TMPDIR/pax_profile`).
      pgle: After a capture, write `profile.pb` for XLA:GPU's PGLE.
    """
    if num_steps <= 0:
      raise ValueError(f'Profiler num_steps must be > 0, got {num_steps}.')
    if min_duration_sec < 0:
      raise ValueError('Profiler min_duration_sec must be >= 0, got '
                       f'{min_duration_sec}.')
    self._capture_num_steps = num_steps
    self._capture_min_duration_sec = min_duration_sec
    self._capture_default_duration_sec = default_duration_sec
    self._tag = tag
    self._max_num_hosts = max_num_hosts
    self._capture_host_profile = capture_host_profile
    self._log_dir = pathlib.Path(
        log_dir if log_dir is not None
        else pathlib.Path(os.environ.get('TMPDIR', '/tmp')) / 'pax_profile')
    if tag:
      self._log_dir = self._log_dir / tag
    self._pgle = pgle
    self._step_duration_sec = 0.0
    self._step_count = 0
    self._timer = None
    self._lock = threading.Lock()
    self._capturing = False
    self.last_pgle_profile: pathlib.Path | None = None

  @property
  def log_dir(self) -> pathlib.Path:
    return self._log_dir

  def update_step_moving_mean(self, duration_sec: float) -> None:
    """Adds one step's duration to the mean the capture length comes from."""
    self._step_duration_sec += duration_sec
    self._step_count += 1

  @property
  def step_duration_estimate_sec(self) -> float:
    """The mean step time so far (the default duration before any step)."""
    if not self._step_count:
      return self._capture_default_duration_sec
    return self._step_duration_sec / self._step_count

  @property
  def capture_duration_sec(self) -> float:
    return max(self._capture_min_duration_sec,
               self._capture_num_steps * self.step_duration_estimate_sec)

  def _profiles_here(self) -> bool:
    return (self._max_num_hosts is None
            or jax.process_index() < self._max_num_hosts)

  def capture_async(self) -> None:
    """Starts a trace that a timer stops after `capture_duration_sec`."""
    if not self._profiles_here():
      return
    if self._timer is not None:
      if self._timer.is_alive():
        logging.warning('A profile is already being captured; not starting '
                        'another.')
        return
      self._timer.join()
    missing = [d for d in (self._log_dir, *self._log_dir.parents)
               if not d.exists()]  # Deepest first.
    self._log_dir.mkdir(parents=True, exist_ok=True)
    duration = self.capture_duration_sec
    try:
      jax.profiler.start_trace(os.fspath(self._log_dir),
                               create_perfetto_link=False)
    except RuntimeError as e:  # Another profiler's trace is running.
      logging.warning('Not profiling into %s: %s', self._log_dir, e)
      for directory in missing:  # Leaves no empty directory behind.
        try:
          directory.rmdir()
        except OSError:
          break
      return
    logging.info('Profiling for %.2f s into %s.', duration, self._log_dir)
    self._capturing = True
    self._timer = threading.Timer(duration, self._stop)
    self._timer.daemon = True
    self._timer.start()

  def _stop(self) -> None:
    # Called by the timer's thread, or by `stop_now`: whichever comes first
    # stops and writes; the other waits for it on the lock.
    with self._lock:
      if not self._capturing:
        return
      self._capturing = False
      jax.profiler.stop_trace()
      logging.info('Profile written under %s.', self._log_dir)
      if self._pgle:
        self._write_pgle()

  def _write_pgle(self) -> None:
    try:
      path = write_pgle_profile(self._log_dir)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('Could not extract a PGLE profile from %s: %s',
                      self._log_dir, e)
      return
    self.last_pgle_profile = path
    if path.stat().st_size == 0:
      logging.info(
          'PGLE profile %s is empty: the trace holds no GPU instructions '
          '(PGLE is an XLA:GPU feature).', path)
    else:
      logging.info('PGLE profile: %s. To compile with it, rerun with\n'
                   "  XLA_FLAGS='%s'", path, pgle_xla_flags(path))

  def wait(self) -> None:
    """Waits for the capture in progress (if any) to end and be written."""
    timer, self._timer = self._timer, None
    if timer is None:
      return
    timer.join()

  def stop_now(self) -> None:
    """Ends the capture in progress now (e.g. when training ends early)."""
    timer, self._timer = self._timer, None
    if timer is None:
      return
    timer.cancel()
    self._stop()
    timer.join()
