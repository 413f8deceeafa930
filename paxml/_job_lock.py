"""One training run per job directory: a lock file taken at start.

Private to paxml.train.

`<job_log_dir>/train.lock` is held with `fcntl.flock` for the run's life and
names its holder (`host pid start-time`). The kernel drops the lock when the
holder dies, however it dies, so a crashed run's lock is taken over at once.
Where flock is not available (some network file systems) the holder's line
decides: a lock of a process on this host that is no longer alive is stale
and taken over; any other is refused.

  lock = _job_lock.JobLock(job_log_dir)
  lock.acquire()   # JobLockedError naming host and pid if another run holds it.
  ...
  lock.release()
"""

from __future__ import annotations

import errno
import os
import pathlib
import socket
import time

from absl import logging
from praxis import base_hyperparams

LOCK_FILE_NAME = 'train.lock'


class JobLockedError(base_hyperparams.ConfigError):
  """Another run is training in the same --job_log_dir."""


def _holder_line() -> str:
  return f'{socket.gethostname()} {os.getpid()} {int(time.time())}\n'


def _parse_holder(text: str) -> tuple[str, int | None]:
  """(host, pid) from a lock file's line; pid None if it is unreadable."""
  parts = text.split()
  if len(parts) >= 2 and parts[1].isdigit():
    return parts[0], int(parts[1])
  return (parts[0] if parts else '?'), None


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class JobLock:
  """An exclusive lock on a job directory (see the module docstring)."""

  def __init__(self, job_log_dir: os.PathLike[str] | str):
    self._path = pathlib.Path(job_log_dir) / LOCK_FILE_NAME
    self._fd: int | None = None

  @property
  def path(self) -> pathlib.Path:
    return self._path

  def _refuse(self, holder_text: str) -> None:
    host, pid = _parse_holder(holder_text)
    raise JobLockedError(
        f'--job_log_dir={self._path.parent}: another run is training there '
        f'(host {host}, pid {pid if pid is not None else "?"}; lock file '
        f'{self._path}). Wait for it to finish, stop it, or use another '
        '--job_log_dir.')

  def acquire(self) -> None:
    """Takes the lock; JobLockedError if a live run holds it."""
    import fcntl  # pylint: disable=g-import-not-at-top
    self._path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = os.pread(fd, 256, 0).decode('utf-8', 'replace')
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        self._refuse(holder)
      # No flock here: decide by the holder's line.
      host, pid = _parse_holder(holder)
      if holder.strip() and not (host == socket.gethostname() and pid
                                 is not None and not _pid_alive(pid)):
        if pid != os.getpid():
          self._refuse(holder)
      fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
    previous = os.pread(fd, 256, 0).decode('utf-8', 'replace').strip()
    if previous:
      logging.warning('Taking over the lock of a run that ended without '
                      'releasing it (%s): %s', previous, self._path)
    os.ftruncate(fd, 0)
    os.pwrite(fd, _holder_line().encode(), 0)
    os.fsync(fd)
    self._fd = fd

  def release(self) -> None:
    """Empties and unlocks the lock file (the file itself stays)."""
    if self._fd is None:
      return
    try:
      os.ftruncate(self._fd, 0)
    finally:
      os.close(self._fd)  # Closing drops the flock.
      self._fd = None

  def __enter__(self) -> JobLock:
    self.acquire()
    return self

  def __exit__(self, *exc) -> None:
    self.release()
