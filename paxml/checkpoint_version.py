"""Versions of the checkpoint layout.

Public names: get_version, get_version_key.

  0.0  No per-item directories (a Flax msgpack may be `checkpoint_<step>`).
  1.0  `checkpoint_<step>/{state,metadata}`; metadata holds the version.
  1.1  Metadata also holds `train_state_metadata` (unpadded shape, dtype and
       masked-ness of every model variable). Pax 1.4's default.
  1.2  As 1.1, the state in TensorStore's OCDBT format.

  version = checkpoint_version.get_version(tensorstore_use_ocdbt=False)  # 1.1
"""

from __future__ import annotations

_VERSION = 1.1
_OCDBT_VERSION = 1.2
_VERSION_KEY = 'version'


def get_version(tensorstore_use_ocdbt: bool | None = None) -> float:
  """The version new checkpoints get: 1.2 with OCDBT, else 1.1."""
  if tensorstore_use_ocdbt is None:
    raise ValueError('Must set the value of `tensorstore_use_ocdbt`.')
  return _OCDBT_VERSION if tensorstore_use_ocdbt else _VERSION


def get_version_key() -> str:
  """The metadata key of the version, `'version'`."""
  return _VERSION_KEY
