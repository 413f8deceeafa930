"""Checks of the runner's flags and paths that cannot work.

Private to `paxml.main`: each check raises `ValueError` with one line naming
the flag, its value and what was expected, before anything is written.
"""

import os
import pathlib
import tempfile


def check_hosts(server_addr: str | None, num_hosts: int | None,
                host_idx: int | None, from_cluster: bool) -> None:
  """Rejects a multi-host set-up that cannot start."""
  if num_hosts is not None and num_hosts < 1:
    raise ValueError(f'--num_hosts={num_hosts}: expected an integer >= 1.')
  if host_idx is not None and host_idx < 0:
    raise ValueError(f'--host_idx={host_idx}: expected an integer >= 0.')
  if (num_hosts is not None and host_idx is not None
      and host_idx >= num_hosts):
    raise ValueError(f'--host_idx={host_idx}: expected 0..{num_hosts - 1} '
                     f'(--num_hosts={num_hosts}).')
  several = (num_hosts or 1) > 1 or (host_idx or 0) > 0
  if several and not server_addr and not from_cluster:
    raise ValueError(
        f'--num_hosts={num_hosts} --host_idx={host_idx} without '
        '--server_addr: expected --server_addr=HOST:PORT of the coordinator '
        '(process 0) on every host.')
  if server_addr is not None and ':' not in server_addr:
    raise ValueError(f'--server_addr={server_addr}: expected HOST:PORT.')


def check_job_log_dir(job_log_dir: str) -> None:
  """Rejects a --job_log_dir that is a file, under a file or unwritable."""
  path = pathlib.Path(job_log_dir).expanduser()
  flag = f'--job_log_dir={job_log_dir}'
  if path.exists() and not path.is_dir():
    raise ValueError(f'{flag}: is a file; expected a directory (or a path '
                     'that does not exist yet).')
  existing = path
  while not existing.exists():
    if existing.parent == existing:
      break
    existing = existing.parent
  if existing.exists() and not existing.is_dir():
    raise ValueError(f'{flag}: {existing} is a file; expected a directory.')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ValueError(f'{flag}: {existing} is not writable by this user; '
                     'expected a writable directory.')
  if existing == path:  # Permission bits can lie (ACLs, read-only mounts).
    try:
      with tempfile.TemporaryFile(dir=path):
        pass
    except OSError as e:
      raise ValueError(f'{flag}: cannot write there ({e.strerror}); '
                       'expected a writable directory.') from None
