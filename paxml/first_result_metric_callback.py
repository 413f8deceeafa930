"""The hook run when a training job produces its first result.

Public names: train_first_result_callback_fn.

Pax calls it once the first training step's outputs are ready (Google
reports that time internally; open-source Pax does nothing). Here it logs
the time since the process started, the time to first result.
"""

import time

from absl import logging

_PROCESS_START = time.monotonic()


def train_first_result_callback_fn() -> None:
  """Logs the seconds from process start to the first training result."""
  logging.info('First training result after %.1fs.',
               time.monotonic() - _PROCESS_START)
