"""Start/end markers of a run's phases (backend set-up, main loop, steps).

Public names: MlEvent, EventBoundary, record_step_number,
record_event_boundary, ml_event_logger, last_step_number.

Open-source Pax makes these no-ops (Google records them internally); here
each boundary is logged at INFO with its keyword details, and the end of an
event logs how long it took, so a log shows where a run's time went.

Example:

  with ml_monitoring.ml_event_logger(ml_monitoring.MlEvent.MAIN_LOOP):
    ...
"""

from __future__ import annotations

import contextlib
import enum
import threading
import time
from typing import Any, Iterator

from absl import logging


class MlEvent(enum.Enum):
  """Phases of a run."""

  INITIALIZE_BACKEND = enum.auto()
  INITIALIZE_SETUP = enum.auto()
  MAIN_LOOP = enum.auto()
  TRAIN_STEP = enum.auto()
  EVAL_STEP = enum.auto()
  DECODE_STEP = enum.auto()


class EventBoundary(enum.Enum):
  """Which end of an event."""

  START = enum.auto()
  END = enum.auto()


_lock = threading.Lock()
_starts: dict[MlEvent, float] = {}
_step: int | None = None


def record_step_number(step_number: int) -> None:
  """Remembers the current step (see `last_step_number`)."""
  global _step
  _step = int(step_number)


def last_step_number() -> int | None:
  """The step last given to `record_step_number`, or None."""
  return _step


def record_event_boundary(event: MlEvent, boundary: EventBoundary,
                          **kwargs: Any) -> None:
  """Logs the start or end of `event` (the end with the time since start)."""
  details = ''.join(f' {k}={v}' for k, v in sorted(kwargs.items()))
  with _lock:
    if boundary == EventBoundary.START:
      _starts[event] = time.monotonic()
      elapsed = ''
    else:
      start = _starts.pop(event, None)
      elapsed = '' if start is None else (
          f' after {time.monotonic() - start:.3f}s')
  logging.info('ML event %s %s%s%s', event.name, boundary.name, elapsed,
               details)


@contextlib.contextmanager
def ml_event_logger(event: MlEvent, **kwargs: Any) -> Iterator[None]:
  """Records the START of `event` on entry and its END on exit."""
  record_event_boundary(event, EventBoundary.START, **kwargs)
  try:
    yield
  finally:
    record_event_boundary(event, EventBoundary.END, **kwargs)
