"""Keeps freed host memory for reuse on CPU runs (glibc's malloc settings).

XLA:CPU allocates the temporaries of a compiled computation as one buffer
each time it runs, and frees it afterwards (the reference's TinyLm train
step: 600 MB). glibc serves an allocation that large with `mmap` and gives
it back with `munmap`, so every step faults its temporaries in again: the
kernel zero-fills 150,000 pages a step, about 0.3 s of system time on a
0.5 s TinyLm step on two cores. With one malloc arena, no `mmap` and a high
trim threshold, a freed buffer stays in the heap and the next step reuses
it: the process keeps its peak host memory instead of returning it between
steps.

The settings take effect for the threads that have not allocated yet, so
`keep_freed_memory` runs before JAX creates its CPU client (and its
threads). Private to `paxml.main`.

Public names: runs_on_cpu_only, keep_freed_memory.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import platform
from typing import Iterable

# mallopt(3) parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
# The largest trim threshold mallopt takes (an int): up to 2 GiB free at the
# top of the heap is kept.
_TRIM_THRESHOLD = 2**31 - 1


def _installed_accelerator_plugins() -> list[str]:
  """The PJRT plugins JAX would find (CUDA, ROCm, TPU), without importing."""
  found = [ep.name for ep in importlib.metadata.entry_points(
      group='jax_plugins')]
  for module in ('jax_plugins', 'libtpu'):
    if importlib.util.find_spec(module) is not None:
      found.append(module)
  return found


def runs_on_cpu_only(jax_platforms: str | None,
                     plugins: Iterable[str] | None = None) -> bool:
  """Whether JAX's default backend will be the CPU.

  Args:
    jax_platforms: The `jax_platforms` setting (`--jax_platforms` or
      JAX_PLATFORMS), e.g. 'cpu' or 'cuda,cpu'; None or '' when unset.
    plugins: The accelerator plugins installed (default: looked up).

  Returns:
    True when the first platform asked for is the CPU, or none is asked
    for and no accelerator plugin is installed.
  """
  if jax_platforms:
    return jax_platforms.split(',')[0].strip().lower() == 'cpu'
  if plugins is None:
    plugins = _installed_accelerator_plugins()
  return not list(plugins)


def keep_freed_memory() -> bool:
  """Sets glibc's malloc to keep freed memory for reuse; False elsewhere.

  One arena for all threads, no `mmap` for large blocks, and freed memory
  at the top of the heap kept up to 2 GiB.

  Returns:
    Whether the settings were made (Linux with glibc only).
  """
  if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
    return False
  try:
    mallopt = ctypes.CDLL('libc.so.6').mallopt
  except (OSError, AttributeError):
    return False
  mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  mallopt.restype = ctypes.c_int
  return all(mallopt(param, value) == 1 for param, value in (
      (_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0),
      (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)))
