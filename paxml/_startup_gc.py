"""Fewer garbage collections while the `paxml` command sets a run up.

Setting a run up (importing the libraries, tracing the model and its steps,
lowering them) makes a few million Python objects that live as long as the
process, and little garbage. CPython's cyclic collector, tuned for a heap
that stays put, scans that growing heap again and again meanwhile: a 1-step
TinyLm run spent 0.25-0.35 s of its 3 s in five full collections that found
almost nothing (0-209 objects each).

So the command calls `relax()` before its imports: until set-up is over,
the collector looks at the youngest objects only (every `YOUNG_THRESHOLD`
allocations; that is where cyclic garbage is found) and never at the older
generations. `settle()` ends that: one full collection (0.16-0.3 s for
TinyLm, which found 20 objects), then what is left is moved out of the
collector's sight (`gc.freeze()`, so later collections skip it) and the
thresholds the process had come back. The full collection frees the
garbage cycles that outlived a young collection during set-up, which
freezing would otherwise keep for good.

The train program calls `end_setup()` once its first step is dispatched
(it logs how long set-up took) and `settle()` at a later step, once the
first step is done: the collection, a walk over the whole heap on the
host's cores, no longer runs beside the first step (on a 2-core CPU,
where XLA runs the step on both, it delayed that step's result by about
as long as it took; a 1-step run never collects). An eval or decode job
calls `settle(until)` after its first pass.

`end_setup` and `settle` do nothing unless `relax()` ran, so a program of
the user's that uses the library (a notebook, a test) keeps its own
collector settings. `relax()` uses only the standard library (it runs
before the imports).
"""

import gc
import time

# Allocations between two collections of the youngest generation during
# set-up (CPython's default: 700). The older generations wait for `settle`.
YOUNG_THRESHOLD = 50_000
_NEVER = 1_000_000

_saved_thresholds: tuple[int, ...] | None = None
_relaxed_at = 0.0
_setup_logged = False


def relax() -> None:
  """Collects the youngest generation only, and less often, until `settle`."""
  global _saved_thresholds, _relaxed_at, _setup_logged
  if _saved_thresholds is None:
    _saved_thresholds = gc.get_threshold()
    _relaxed_at = time.monotonic()
    _setup_logged = False
  gc.set_threshold(YOUNG_THRESHOLD, _NEVER, _NEVER)


def end_setup(until: str = 'the first step dispatched') -> None:
  """Logs how long set-up took, from `relax()` to this call (`until` says
  where set-up ended); once, and only while relaxed. The collector stays
  relaxed until `settle`."""
  global _setup_logged
  if _saved_thresholds is None or _setup_logged:
    return
  _setup_logged = True
  from absl import logging  # pylint: disable=g-import-not-at-top
  logging.info('Set-up took %.2f s (command start to %s).',
               time.monotonic() - _relaxed_at, until)


def settle(until: str = 'the first step dispatched') -> None:
  """Ends set-up (`end_setup(until)`, if not yet), collects once in full,
  freezes what is left and brings the collector's thresholds back; does
  nothing unless `relax` ran (or after the first call)."""
  global _saved_thresholds
  if _saved_thresholds is None:
    return
  end_setup(until)
  from absl import logging  # pylint: disable=g-import-not-at-top
  start = time.monotonic()
  gc.collect()
  gc.freeze()
  gc.set_threshold(*_saved_thresholds)
  _saved_thresholds = None
  logging.info('Set-up\'s heap: one full garbage collection (%.2f s), %d '
               'objects frozen.', time.monotonic() - start,
               gc.get_freeze_count())


def relaxed() -> bool:
  """Whether `relax` ran and `settle` has not yet."""
  return _saved_thresholds is not None
