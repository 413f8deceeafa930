"""SIGTERM and Ctrl-C: save a checkpoint at the next step, then stop.

Private to paxml.checkpoints (which re-exports the public names).

The first SIGTERM or SIGINT (Ctrl-C) asks the train loop to save at its next
step and stop cleanly (exit status 0); a second Ctrl-C ends the process at
once (status 130; the job lock is dropped by the kernel).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils

_received = threading.Event()
_signal_name: list[str] = []
_previous: dict[int, Any] = {}


def _on_signal(signum: int, frame: Any) -> None:
  del frame
  name = signal.Signals(signum).name
  if signum == signal.SIGINT and _received.is_set():
    logging.warning('Second Ctrl-C: stopping at once, without a checkpoint.')
    os._exit(130)  # pylint: disable=protected-access
  if not _received.is_set():
    _signal_name[:] = [name]
    extra = (' (press Ctrl-C again to stop at once)'
             if signum == signal.SIGINT else '')
    logging.warning('%s received: a checkpoint will be saved at the next '
                    'step, then the run stops%s.', name, extra)
  _received.set()


def install_sigterm_handler() -> bool:
  """Makes SIGTERM and Ctrl-C request a final checkpoint, then a clean stop.

  Only for single-process runs, called from the main thread (with several
  processes JAX's preemption service watches SIGTERM and agrees on a step,
  see `reached_preemption`). Installing clears an earlier request.

  Returns:
    Whether the handlers were installed.
  """
  if jax.process_count() > 1:
    return False
  if threading.current_thread() is not threading.main_thread():
    return False
  clear_request()
  for signum in (signal.SIGTERM, signal.SIGINT):
    previous = signal.signal(signum, _on_signal)
    _previous.setdefault(signum, previous)
  return True


def uninstall_sigterm_handler() -> None:
  """Puts back the handlers found by `install_sigterm_handler`."""
  if threading.current_thread() is not threading.main_thread():
    return
  for signum, previous in list(_previous.items()):
    signal.signal(signum, previous)
    del _previous[signum]


def clear_request() -> None:
  """Forgets a stop request (a new run in the same process starts afresh)."""
  _received.clear()
  _signal_name.clear()


def preemption_requested() -> bool:
  """Whether SIGTERM or Ctrl-C arrived since the handler was installed."""
  return _received.is_set()


def requesting_signal() -> str | None:
  """'SIGTERM' or 'SIGINT' when a stop was requested, else None."""
  return _signal_name[0] if _signal_name else None


def reached_preemption(step: int) -> bool:
  """Whether to save a checkpoint at `step` and stop, because of preemption.

  With several processes this is JAX's preemption sync point (every process
  must call it at every step); with one process it is `preemption_requested`.

  Args:
    step: The current step.

  Returns:
    True at the step where the final checkpoint should be written.
  """
  if _received.is_set():
    return True
  try:
    return multihost_utils.reached_preemption_sync_point(step)
  except RuntimeError:  # The preemption service is disabled.
    return False
