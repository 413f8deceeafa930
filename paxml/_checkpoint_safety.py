"""Checks of a checkpoint before it is used, and what to do when one fails.

Private to paxml.checkpoints and paxml.checkpoint_managers.

`verify_step_dir` reads what is cheap before the arrays: the commit marker,
the metadata (JSON, a known version), each array's zarr header and chunk
files, the step stored in `state/step` against the directory's name, and the
input state's checksum. A damaged checkpoint raises
`CheckpointDamagedError` naming the file; `quarantine` renames a step
directory aside (`checkpoint_00000042.damaged-20250101-120000`), never
deleting it.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import math
from typing import Any

from absl import logging
from etils import epath
import numpy as np
from paxml import _zarr_metadata_key
from paxml import checkpoint_paths

COMMIT_MARKER = 'commit_success.txt'
ORBAX_STEP_METADATA = '_CHECKPOINT_METADATA'
CHECKSUM_SUFFIX = '.sha256'
KNOWN_VERSIONS = (0.0, 1.0, 1.1, 1.2)
DAMAGED_INFIX = '.damaged-'


class CheckpointDamagedError(ValueError):
  """A checkpoint that cannot be read; `path` is the damaged file."""

  def __init__(self, path: Any, reason: str):
    self.path = epath.Path(path)
    self.reason = reason
    super().__init__(f'damaged checkpoint file {self.path}: {reason}')


class CheckpointDirError(ValueError):
  """A checkpoint directory that cannot be used as asked."""


def checksum(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


def write_with_checksum(path: epath.Path, data: bytes) -> None:
  """Writes `data` and its SHA-256 beside it (`<name>.sha256`)."""
  path.write_bytes(data)
  path.parent.joinpath(path.name + CHECKSUM_SUFFIX).write_text(
      checksum(data) + '\n')


def read_with_checksum(path: epath.Path) -> bytes:
  """Reads `path`, checked against `<name>.sha256` when there is one."""
  data = path.read_bytes()
  sidecar = path.parent / (path.name + CHECKSUM_SUFFIX)
  if sidecar.exists():
    want = sidecar.read_text().strip()
    if checksum(data) != want:
      raise CheckpointDamagedError(
          path, f'its SHA-256 differs from the one saved in {sidecar.name}')
  return data


def has_commit_marker(step_dir: epath.Path) -> bool:
  """Whether a step directory was committed (Orbax's marker, or a state).

  Pax 1.4 on a local disk writes no marker file: a non-temporary directory
  with a `state` item counts as committed.
  """
  return ((step_dir / COMMIT_MARKER).exists()
          or (step_dir / checkpoint_paths.STATE_ITEM_NAME).exists())


def _read_json(path: epath.Path) -> Any:
  try:
    return json.loads(path.read_text())
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise CheckpointDamagedError(path, f'not valid JSON ({e})') from e


def _check_metadata(step_dir: epath.Path) -> None:
  path = step_dir / 'metadata' / 'metadata'
  if not path.exists():
    # Orbax >= 0.6 (this project) always writes the metadata item with its
    # step metadata; older Pax checkpoints may lack both.
    if (step_dir / ORBAX_STEP_METADATA).exists():
      raise CheckpointDamagedError(path, 'missing')
    return
  metadata = _read_json(path)
  version = metadata.get('version') if isinstance(metadata, dict) else None
  if not isinstance(version, (int, float)) or not any(
      math.isclose(version, v) for v in KNOWN_VERSIONS):
    raise CheckpointDamagedError(
        path, f'unknown checkpoint version {version!r} (this project reads '
        f'{list(KNOWN_VERSIONS)})')


def _chunk_keys(zarray: dict[str, Any]) -> list[str]:
  shape, chunks = zarray['shape'], zarray['chunks']
  if not shape:
    return ['0']
  sep = zarray.get('dimension_separator', '.')
  counts = [max(1, -(-s // c)) for s, c in zip(shape, chunks)]
  return [sep.join(map(str, i)) for i in itertools.product(
      *(range(n) for n in counts))]


def _check_zarr_arrays(state_dir: epath.Path) -> None:
  for array_dir in sorted(state_dir.iterdir()):
    header = array_dir / _zarr_metadata_key.get()
    if not header.exists():
      continue
    zarray = _read_json(header)
    try:
      keys = _chunk_keys(zarray)
    except (KeyError, TypeError, ValueError) as e:
      raise CheckpointDamagedError(header, f'not a zarr header ({e})') from e
    for key in keys:
      if not (array_dir / key).exists():
        raise CheckpointDamagedError(array_dir / key, 'missing array chunk')


def stored_step(state_dir: epath.Path) -> int | None:
  """The step held in a zarr `state/step`, or None without one."""
  step_dir = state_dir / 'step'
  if not (step_dir / _zarr_metadata_key.get()).exists():
    return None
  import tensorstore as ts  # pylint: disable=g-import-not-at-top
  try:
    store = ts.open(_zarr_metadata_key.tensorstore_spec(
        {'driver': 'file', 'path': str(step_dir)}), open=True).result()
    return int(np.asarray(store.read().result()).reshape(-1)[0])
  except Exception as e:  # pylint: disable=broad-except
    raise CheckpointDamagedError(step_dir, f'unreadable ({e})') from e


def verify_step_dir(step_dir: epath.PathLike, step: int) -> None:
  """Cheap checks of a checkpoint before its arrays are read.

  Args:
    step_dir: `checkpoint_<step>`.
    step: The step its name says.

  Raises:
    CheckpointDamagedError: Naming the damaged or missing file.
  """
  step_dir = epath.Path(step_dir)
  if not has_commit_marker(step_dir):
    raise CheckpointDamagedError(
        step_dir, f'no commit marker ({COMMIT_MARKER}) and no state: an '
        'unfinished or foreign directory')
  _check_metadata(step_dir)
  state_dir = step_dir / checkpoint_paths.STATE_ITEM_NAME
  if not state_dir.is_dir():
    raise CheckpointDamagedError(state_dir, 'missing')
  if (state_dir / 'manifest.ocdbt').exists() or (
      state_dir / 'checkpoint').exists():
    return  # OCDBT (1.2) and Flax states are checked as they are read.
  _check_zarr_arrays(state_dir)
  held = stored_step(state_dir)
  if held is not None and held != step:
    raise CheckpointDamagedError(
        state_dir / 'step', f'holds step {held}, but the directory is named '
        f'for step {step}')


def quarantine(step_dir: epath.Path, why: str = 'damaged') -> epath.Path:
  """Renames a step directory aside (`<name>.<why>-<time>`), never deletes."""
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
      '%Y%m%d-%H%M%S')
  infix = f'.{why}-'
  target = step_dir.parent / f'{step_dir.name}{infix}{stamp}'
  n = 1
  while target.exists():
    target = step_dir.parent / f'{step_dir.name}{infix}{stamp}-{n}'
    n += 1
  step_dir.rename(target)
  logging.warning('Moved the %s checkpoint %s aside to %s (nothing was '
                  'deleted).', why, step_dir, target.name)
  return target


def step_dirs(checkpoint_dir: epath.Path) -> list[tuple[int, epath.Path]]:
  """(step, dir) of every non-temporary step directory, newest first."""
  if not checkpoint_dir.is_dir():
    return []
  found = []
  for path in checkpoint_dir.iterdir():
    if (checkpoint_paths.is_checkpoint_asset(path) and path.is_dir()
        and not checkpoint_paths.is_tmp_checkpoint_asset(path)):
      found.append((checkpoint_paths.get_step_from_checkpoint_asset(path),
                    path))
  return sorted(found, key=lambda x: -x[0])
