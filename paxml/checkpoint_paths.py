"""Names and discovery of the checkpoints under `<job_log_dir>/checkpoints`.

Public names: CHECKPOINT_PREFIX, CHECKPOINT_SUBDIR, STATE_ITEM_NAME,
INPUT_ITEM_NAME, METADATA_ITEM_NAME, TMP_PREFIX, COMMIT_SUCCESS_FILE,
CHECKPOINT_PATTERN_RE, TMP_CHECKPOINT_PATTERN_RE, CheckpointType,
PaxStepNameFormat, get_checkpoint_dir, checkpoint_prefix,
checkpoint_name_fixed_length, checkpoint_name, make_checkpoint_step_dir,
name_format, is_checkpoint_asset, is_tmp_checkpoint_asset,
is_legacy_flax_checkpoint, is_tfhub_dir, get_step_from_checkpoint_asset,
latest_checkpoint_if_exists, latest_checkpoint,
retrieve_latest_checkpoint_step_if_exists, retrieve_latest_checkpoint_step.

Pax 1.4's layout: a step directory is `checkpoint_<step>` with the step
zero-padded to 8 digits (`checkpoint_00000100`) except for Flax (pmap)
checkpoints (`checkpoint_100`); any of them, and a bare `<step>`, is found.
A checkpoint counts once committed: Orbax writes into
`<name>.orbax-checkpoint-tmp-<n>` and renames it when done (on GCS it writes
`commit_success.txt` last); old Pax wrote `tmp_<n>.checkpoint_<step>`.

  checkpoint_dir = checkpoint_paths.get_checkpoint_dir(job_log_dir)
  step = checkpoint_paths.retrieve_latest_checkpoint_step_if_exists(
      checkpoint_dir)  # None when there is none.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp
from paxml import checkpoint_types
from paxml import checkpoint_version

CheckpointType = checkpoint_types.CheckpointType

CHECKPOINT_PREFIX = 'checkpoint_'
CHECKPOINT_SUBDIR = 'checkpoints'
STATE_ITEM_NAME = 'state'
INPUT_ITEM_NAME = 'train_input'
METADATA_ITEM_NAME = 'metadata'
TMP_PREFIX = 'tmp_'
COMMIT_SUCCESS_FILE = 'commit_success.txt'
CHECKPOINT_PATTERN_RE = re.compile(rf'({CHECKPOINT_PREFIX})?\d+$')
TMP_CHECKPOINT_PATTERN_RE = re.compile(
    rf'{TMP_PREFIX}\d+\.{CHECKPOINT_PREFIX}\d+$')
_FIXED_LENGTH = 8


def get_checkpoint_dir(job_log_dir: epath.PathLike) -> epath.Path:
  """`<job_log_dir>/checkpoints`."""
  return epath.Path(job_log_dir) / CHECKPOINT_SUBDIR


def checkpoint_prefix(
    checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED) -> str:
  """`'checkpoint'`, for every checkpoint type."""
  del checkpoint_type
  return CHECKPOINT_PREFIX[:-1]


def checkpoint_name_fixed_length(
    checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED
) -> int | None:
  """Digits of the zero-padded step (8), or None for Flax checkpoints."""
  return None if checkpoint_type == CheckpointType.FLAX else _FIXED_LENGTH


def checkpoint_name(
    step: int,
    checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
    use_digit_step_subdirectory: bool = False,
) -> str:
  """`checkpoint_00000120` (`checkpoint_120` for Flax, `120` if digits)."""
  if use_digit_step_subdirectory:
    return str(step)
  width = checkpoint_name_fixed_length(checkpoint_type)
  if width is None:
    return f'{CHECKPOINT_PREFIX}{step}'
  return f'{CHECKPOINT_PREFIX}{step:0{width}d}'


def make_checkpoint_step_dir(
    checkpoint_dir: epath.PathLike,
    step: int,
    checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED,
    use_digit_step_subdirectory: bool = False,
) -> epath.Path:
  """The directory of the checkpoint of `step` under `checkpoint_dir`."""
  return epath.Path(checkpoint_dir) / checkpoint_name(
      step, checkpoint_type, use_digit_step_subdirectory)


def is_checkpoint_asset(x: epath.PathLike) -> bool:
  """Whether the name is `checkpoint_<n>` or `<n>` (committed or not)."""
  return bool(CHECKPOINT_PATTERN_RE.match(epath.Path(x).name))


def is_tmp_checkpoint_asset(x: epath.PathLike) -> bool:
  """Whether `x` is a checkpoint started but not committed."""
  x = epath.Path(x)
  if TMP_CHECKPOINT_PATTERN_RE.match(x.name):
    return True
  if x.is_file():  # A legacy Flax msgpack file.
    return False
  return bool(ocp.utils.is_tmp_checkpoint(x))


def is_legacy_flax_checkpoint(path: epath.PathLike) -> bool:
  """Whether `path` is an old Flax msgpack file named `checkpoint_<n>`."""
  path = epath.Path(path)
  return (is_checkpoint_asset(path) and not is_tmp_checkpoint_asset(path)
          and path.is_file())


def is_tfhub_dir(directory: epath.PathLike) -> bool:
  """Whether steps are TF-Hub style digit directories (never, here)."""
  del directory
  return False


def get_step_from_checkpoint_asset(checkpoint_dir: epath.PathLike) -> int:
  """The step of `checkpoint_<n>`, `<n>`, or of a temporary directory."""
  name = epath.Path(checkpoint_dir).name
  if name.isdigit():
    return int(name)
  if m := TMP_CHECKPOINT_PATTERN_RE.match(name):
    return int(name.rsplit(CHECKPOINT_PREFIX, 1)[1])
  m = re.match(rf'{CHECKPOINT_PREFIX}(\d+)', name)
  if m is None:
    raise ValueError(f'{checkpoint_dir} is not named like a checkpoint '
                     f'({CHECKPOINT_PREFIX}<step> or <step>).')
  return int(m.group(1))


def _committed_checkpoints(checkpoint_dir: epath.Path) -> list[epath.Path]:
  return [p for p in checkpoint_dir.iterdir()
          if is_checkpoint_asset(p) and not is_tmp_checkpoint_asset(p)]


def latest_checkpoint_if_exists(
    checkpoint_dir: epath.PathLike) -> epath.Path | None:
  """The committed checkpoint of the highest step, or None."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  if not checkpoint_dir.is_dir():
    logging.info('Checkpoint dir %s does not exist.', checkpoint_dir)
    return None
  found = _committed_checkpoints(checkpoint_dir)
  if not found:
    return None
  return max(found, key=get_step_from_checkpoint_asset)


def _raise_missing(checkpoint_dir: epath.Path):
  if not checkpoint_dir.exists():
    raise ValueError(f'{checkpoint_dir=!r} does not exist')
  raise ValueError(
      f'No checkpoints were found in directory {checkpoint_dir=!r}')


def latest_checkpoint(checkpoint_dir: epath.PathLike) -> epath.Path:
  """The latest committed checkpoint; ValueError when there is none."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  path = latest_checkpoint_if_exists(checkpoint_dir)
  if path is None:
    _raise_missing(checkpoint_dir)
  return path


def retrieve_latest_checkpoint_step_if_exists(
    checkpoint_dir: epath.PathLike) -> int | None:
  """The latest committed step (or None), as process 0 sees it.

  With several processes the answer of process 0 is broadcast, so every
  process restores the same step.

  Args:
    checkpoint_dir: The checkpoint directory (`<job_log_dir>/checkpoints`).

  Returns:
    The step, or None.
  """
  path = latest_checkpoint_if_exists(checkpoint_dir)
  step = -1 if path is None else get_step_from_checkpoint_asset(path)
  if jax.process_count() > 1:
    step = int(multihost_utils.broadcast_one_to_all(np.int64(step)))
  return None if step < 0 else step


def retrieve_latest_checkpoint_step(checkpoint_dir: epath.PathLike) -> int:
  """The latest committed step; ValueError when there is none."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  step = retrieve_latest_checkpoint_step_if_exists(checkpoint_dir)
  if step is None:
    _raise_missing(checkpoint_dir)
  return step


@dataclasses.dataclass(frozen=True)
class PaxStepNameFormat(ocp.step.NameFormat):
  """Orbax step names as Pax writes them (see `checkpoint_name`).

  Finding ignores the padding: `checkpoint_7`, `checkpoint_00000007` and `7`
  are all step 7 (uncommitted directories are skipped).

  Attributes:
    checkpoint_type: Flax checkpoints are not zero-padded.
    use_digit_step_subdirectory: Name steps by their number alone.
  """

  checkpoint_type: CheckpointType = CheckpointType.UNSPECIFIED
  use_digit_step_subdirectory: bool = False

  def build_name(self, step: int) -> str:
    return checkpoint_name(step, self.checkpoint_type,
                           self.use_digit_step_subdirectory)

  def build_metadata(self, step_path: epath.Path,
                     step: int | None = None) -> ocp.step.Metadata | None:
    """The step's metadata if `step_path` is a committed checkpoint (of
    `step`, when given, and existing), else None."""
    step_path = epath.Path(step_path)
    if not is_checkpoint_asset(step_path):
      return None
    if step is not None and not step_path.exists():
      return None
    if is_tmp_checkpoint_asset(step_path):
      return None
    found = get_step_from_checkpoint_asset(step_path)
    if step is not None and found != step:
      return None
    return ocp.step.Metadata(step=found, path=step_path)

  def find_metadata(self, base_path: epath.PathLike,
                    step: int) -> ocp.step.Metadata | None:
    """The metadata of `step` under `base_path` named as this format names
    it, or None."""
    return self.build_metadata(
        epath.Path(base_path) / self.build_name(step), step=step)

  def find_all(self, base_path: epath.PathLike
               ) -> Iterator[ocp.step.Metadata]:
    base_path = epath.Path(base_path)
    if not base_path.is_dir():
      return iter(())
    return ocp.step.build_step_metadatas(base_path.iterdir(),
                                         self.build_metadata)

  def find_step(self, base_path: epath.PathLike,
                step: int) -> ocp.step.Metadata:
    for metadata in self.find_all(base_path):
      if metadata.step == step:
        return metadata
    raise ValueError(f'No committed checkpoint of step {step} in {base_path}.')


def name_format(
    checkpoint_type: CheckpointType = CheckpointType.GDA
) -> PaxStepNameFormat:
  """The Orbax step name format of Pax's step directories."""
  return PaxStepNameFormat(checkpoint_type=checkpoint_type)


# Names Pax 1.4's module also has (aliases of other modules' names).
Checkpointer = ocp.Checkpointer
AsyncCheckpointer = ocp.AsyncCheckpointer
get_version = checkpoint_version.get_version
get_version_key = checkpoint_version.get_version_key
retrieve_checkpoint_type = checkpoint_types.retrieve_checkpoint_type
