"""Names and discovery of the checkpoints under `<job_log_dir>/checkpoints`.

Public names: CHECKPOINT_PREFIX, CHECKPOINT_SUBDIR, STATE_ITEM_NAME,
INPUT_ITEM_NAME, METADATA_ITEM_NAME, get_checkpoint_dir, checkpoint_name,
make_checkpoint_step_dir, name_format, is_checkpoint_asset,
is_tmp_checkpoint_asset, get_step_from_checkpoint_asset, latest_checkpoint,
retrieve_latest_checkpoint_step.

Every run writes Orbax checkpoints named `checkpoint_<step>` (no zero
padding). A checkpoint counts only once Orbax has committed it: on a local
disk Orbax writes into `<name>.orbax-checkpoint-tmp-<n>` and renames it when
done; on GCS it writes `commit_success.txt` last. The functions here defer to
Orbax for that test, so a half-written directory is never reported:

  checkpoint_dir = checkpoint_paths.get_checkpoint_dir(job_log_dir)
  step = checkpoint_paths.retrieve_latest_checkpoint_step(checkpoint_dir)
"""

from __future__ import annotations

import re

from etils import epath
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

CHECKPOINT_PREFIX = 'checkpoint_'
CHECKPOINT_SUBDIR = 'checkpoints'
STATE_ITEM_NAME = 'state'
INPUT_ITEM_NAME = 'train_input'
METADATA_ITEM_NAME = 'metadata'

_CHECKPOINT_RE = re.compile(rf'{CHECKPOINT_PREFIX}(\d+)')


def get_checkpoint_dir(job_log_dir: epath.PathLike) -> epath.Path:
  """`<job_log_dir>/checkpoints`."""
  return epath.Path(job_log_dir) / CHECKPOINT_SUBDIR


def checkpoint_name(step: int) -> str:
  """`checkpoint_<step>`, e.g. `checkpoint_100`."""
  return f'{CHECKPOINT_PREFIX}{step}'


def make_checkpoint_step_dir(
    checkpoint_dir: epath.PathLike, step: int) -> epath.Path:
  """The directory of the checkpoint of `step` under `checkpoint_dir`."""
  return epath.Path(checkpoint_dir) / checkpoint_name(step)


def name_format() -> ocp.step.NameFormat:
  """The Orbax step name format that writes and finds `checkpoint_<step>`."""
  return ocp.step.standard_name_format(step_prefix=CHECKPOINT_PREFIX[:-1])


def is_checkpoint_asset(path: epath.PathLike) -> bool:
  """Whether `path` is named like a committed checkpoint, `checkpoint_<n>`."""
  return bool(_CHECKPOINT_RE.fullmatch(epath.Path(path).name))


def is_tmp_checkpoint_asset(path: epath.PathLike) -> bool:
  """Whether `path` is a checkpoint Orbax has started but not committed."""
  path = epath.Path(path)
  if not path.name.startswith(CHECKPOINT_PREFIX) or not path.is_dir():
    return False
  return not ocp.step.is_path_finalized(path)


def get_step_from_checkpoint_asset(path: epath.PathLike) -> int:
  """The step of `checkpoint_<step>` (or of its temporary directory)."""
  return ocp.step.step_from_checkpoint_name(epath.Path(path).name)


def latest_checkpoint(checkpoint_dir: epath.PathLike) -> epath.Path | None:
  """The committed checkpoint of the highest step, or None."""
  checkpoint_dir = epath.Path(checkpoint_dir)
  if not checkpoint_dir.is_dir():
    return None
  found = [m for m in name_format().find_all(checkpoint_dir)
           if is_checkpoint_asset(m.path)]
  if not found:
    return None
  return max(found, key=lambda m: m.step).path


def retrieve_latest_checkpoint_step(
    checkpoint_dir: epath.PathLike) -> int | None:
  """The latest committed step (or None), as process 0 sees it.

  With several processes the answer of process 0 is broadcast, so every
  process restores the same step.

  Args:
    checkpoint_dir: The checkpoint directory (`<job_log_dir>/checkpoints`).

  Returns:
    The step, or None.
  """
  path = latest_checkpoint(checkpoint_dir)
  step = -1 if path is None else get_step_from_checkpoint_asset(path)
  if jax.process_count() > 1:
    step = int(multihost_utils.broadcast_one_to_all(np.int64(step)))
  return None if step < 0 else step
