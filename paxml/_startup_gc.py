"""Fewer garbage collections while the `paxml` command sets a run up.

Setting a run up (importing the libraries, tracing the model and its steps,
lowering them) makes a few million Python objects that live as long as the
process, and little garbage. CPython's cyclic collector, tuned for a heap
that stays put, scans that growing heap again and again meanwhile: a 1-step
TinyLm run spent 0.25-0.35 s of its 3 s in five full collections that found
almost nothing (0-209 objects each).

So the command calls `relax()` before its imports: until the run's first
step has been dispatched, the collector looks at the youngest objects only
(every `YOUNG_THRESHOLD` allocations; that is where cyclic garbage is found)
and never at the older generations. The first program that dispatches a
step calls `settle()`: one full collection (while the devices run that
step; 0.16 s for TinyLm, which found 20 objects), then what is left is
moved out of the collector's sight (`gc.freeze()`, so later collections
skip it) and the thresholds the process had come back. The full collection
frees the garbage cycles that outlived a young collection during set-up,
which freezing would otherwise keep for good.

`settle()` does nothing unless `relax()` ran, so a program of the user's that
uses the library (a notebook, a test) keeps its own collector settings. It
logs how long set-up took, from `relax()` to its own call (the first
step's dispatch; in an eval or decode job, the end of its first pass).
`relax()` uses only the standard library (it runs before the imports).
"""

import gc
import time

# Allocations between two collections of the youngest generation during
# set-up (CPython's default: 700). The older generations wait for `settle`.
YOUNG_THRESHOLD = 50_000
_NEVER = 1_000_000

_saved_thresholds: tuple[int, ...] | None = None
_relaxed_at = 0.0


def relax() -> None:
  """Collects the youngest generation only, and less often, until `settle`."""
  global _saved_thresholds, _relaxed_at
  if _saved_thresholds is None:
    _saved_thresholds = gc.get_threshold()
    _relaxed_at = time.monotonic()
  gc.set_threshold(YOUNG_THRESHOLD, _NEVER, _NEVER)


def settle(until: str = 'the first step dispatched') -> None:
  """Collects once in full, freezes what is left and brings the collector's
  thresholds back; does nothing unless `relax` ran (or after the first
  call). `until` says, in the log, where set-up ended."""
  global _saved_thresholds
  if _saved_thresholds is None:
    return
  from absl import logging  # pylint: disable=g-import-not-at-top
  start = time.monotonic()
  gc.collect()  # Once, while the devices run the first step.
  gc.freeze()
  gc.set_threshold(*_saved_thresholds)
  _saved_thresholds = None
  logging.info(
      'Set-up took %.2f s (command start to %s); then one full garbage '
      'collection (%.2f s), %d objects frozen.', start - _relaxed_at, until,
      time.monotonic() - start, gc.get_freeze_count())


def relaxed() -> bool:
  """Whether `relax` ran and `settle` has not yet."""
  return _saved_thresholds is not None
