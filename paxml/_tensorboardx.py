"""tensorboardX, imported without the PyTorch import it does on the side.

`tensorboardX.writer` imports `torch` when it is installed, only to widen a
type annotation (`numpy_compatible`); that import costs a second or more of
every run's start-up, and Pax never hands tensorboardX a torch tensor. When
torch is installed but not imported yet, `torch` is hidden while
tensorboardX loads (an import of it then fails, which tensorboardX expects)
and restored right after, so a later `import torch` works as usual.

Import `tensorboardX` (and `record_writer`) from here, before anything else
imports it.
"""

import sys

if 'torch' in sys.modules or 'tensorboardX' in sys.modules:
  import tensorboardX  # pylint: disable=g-import-not-at-top
else:
  sys.modules['torch'] = None  # `import torch` raises ImportError.
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
  finally:
    del sys.modules['torch']

from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top,g-bad-import-order

__all__ = ['tensorboardX', 'record_writer']
