"""Records which config files a run read (its lineage).

Public names: log_config_file_lineage.

Open-source Pax makes this a no-op; here the file and a SHA-256 of its
contents are logged, so a run's log says exactly which config it used.
"""

import hashlib

from absl import logging
from etils import epath


def log_config_file_lineage(filepath: str) -> None:
  """Logs `filepath` with the SHA-256 of its bytes (or that it is missing)."""
  path = epath.Path(filepath)
  if not path.exists():
    logging.warning('Config file lineage: %s does not exist.', filepath)
    return
  digest = hashlib.sha256(path.read_bytes()).hexdigest()
  logging.info('Config file lineage: %s sha256=%s', filepath, digest)
