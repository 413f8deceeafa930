"""Files of eval/decode jobs: outputs, sharded records, progress markers.

Public names: EvaluationMode, OutputFormatType, ShardedParallelWriter,
JnpEncoder, write_key_value_pairs, write_pickle_file, load_outputs,
checkpoint_progress, get_checkpoint_step.

* `write_key_value_pairs` writes outputs as JSON lines (values only), and a
  pickle of the pairs beside it.
* `ShardedParallelWriter` writes byte records round-robin into TFRecord
  shards (the format is written here; TensorFlow is not needed).
* `checkpoint_progress` / `get_checkpoint_step` let a preempted eval or
  decode job resume on the checkpoint it was working on, even when newer
  ones have appeared since.

Example:

  with io_utils.checkpoint_progress(job_log_dir, step,
                                    io_utils.EvaluationMode.DECODE):
    ...  # Decode the checkpoint of `step`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import json
import os
import pickle
import re
import threading
from typing import Any, Iterable, Iterator, Sequence

from absl import logging
from etils import epath
import jax
import numpy as np
from paxml import checkpoint_paths
from paxml._tensorboardx import record_writer

_PROGRESS_CKPT_STEP_KEY = 'restore_checkpoint_step'
_INTERNAL_ARTIFACTS_SUBDIR = '_internal_artifacts'
_SHARD_FILE_RE = re.compile(
    r'(eval|decoder)_out_([0-9]*)_shard_([0-9]*)\.pickle')


class EvaluationMode(str, enum.Enum):
  """The kind of job whose progress is recorded."""

  EVAL = 'eval'
  DECODE = 'decoder'

  @property
  def progress_filename(self) -> str:
    return f'_{self.value}_progress.json'


class OutputFormatType(enum.Enum):
  """Container format of a ShardedParallelWriter (also the file suffix)."""

  TFRECORD = enum.auto()


class ShardedParallelWriter:
  """Writes chunks of byte records round-robin into shards, on threads.

  Files are `<fq_filename>.tfrecord-<i>-of-<n>` (5 digits each). Use one
  writer per output (e.g. only on process 0); it cannot be reopened.
  """

  def __init__(self, fq_filename: epath.PathLike, num_shards: int,
               output_format: OutputFormatType = OutputFormatType.TFRECORD):
    """Opens the shard files.

    Args:
      fq_filename: Path prefix of the shards.
      num_shards: How many shards.
      output_format: The container format.
    """
    if output_format != OutputFormatType.TFRECORD:
      raise NotImplementedError(f'{output_format} writer not implemented.')
    if num_shards < 1:
      raise ValueError(f'num_shards must be >= 1, got {num_shards}.')
    suffix = output_format.name.lower()
    self._num_shards = num_shards
    self._writers = [
        record_writer.RecordWriter(
            f'{fq_filename}.{suffix}-{i:05d}-of-{num_shards:05d}')
        for i in range(num_shards)]
    self._locks = [threading.Lock() for _ in range(num_shards)]
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=num_shards)
    self._futures: list[concurrent.futures.Future[None]] = []
    self._next_shard = 0

  def _write_to_shard(self, shard: int, chunk: Sequence[bytes]) -> None:
    with self._locks[shard]:
      for record in chunk:
        self._writers[shard].write(record)

  def _raise_worker_errors(self) -> None:
    pending = []
    for future in self._futures:
      if future.done():
        future.result()
      else:
        pending.append(future)
    if len(pending) >= self._num_shards:
      logging.warning('ShardedParallelWriter falls behind the data; use more '
                      'shards.')
    self._futures = pending

  def write(self, chunk: Sequence[bytes]) -> None:
    """Queues `chunk` (all its records) for the next shard."""
    self._raise_worker_errors()
    self._futures.append(
        self._pool.submit(self._write_to_shard, self._next_shard, chunk))
    self._next_shard = (self._next_shard + 1) % self._num_shards

  def close(self) -> None:
    """Waits for the queued writes (raising their errors), closes the files."""
    self._pool.shutdown(wait=True)
    for future in self._futures:
      future.result()
    for writer in self._writers:
      writer.close()


def _to_ndarray(x: Any) -> Any:
  """A device array (anything with an ndarray `_value`) as that ndarray."""
  value = getattr(x, '_value', None)
  return value if isinstance(value, np.ndarray) else x


def cast_to_ndarrays(tree: Any) -> Any:
  """`tree` with its device arrays as numpy arrays (what the pickle holds,
  so that it loads without JAX); other leaves are kept."""
  return jax.tree.map(_to_ndarray, tree)


class JnpEncoder(json.JSONEncoder):
  """JSON for numpy/JAX arrays and scalars, TF tensors, bytes, dataclasses."""

  def default(self, o: Any) -> Any:
    if isinstance(o, (np.ndarray, jax.Array)):
      return np.asarray(o).tolist()
    if isinstance(o, (np.integer, np.floating, np.bool_)):
      return o.item()
    if isinstance(o, bytes):
      return o.decode('utf-8')
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
      return dataclasses.asdict(o)
    if type(o).__module__.startswith('tensorflow') and hasattr(o, 'numpy'):
      return np.asarray(o.numpy()).tolist()  # An eager tf.Tensor.
    return super().default(o)


def write_pickle_file(filename: epath.PathLike,
                      key_value_pairs: Sequence[tuple[str | None, Any]],
                      cast_to_ndarray: bool = True) -> None:
  """Pickles the pairs to `<filename>.pickle` (what `load_outputs` reads)."""
  if cast_to_ndarray:
    key_value_pairs = cast_to_ndarrays(key_value_pairs)
  with epath.Path(filename).with_suffix('.pickle').open('wb') as f:
    pickle.dump(key_value_pairs, f, protocol=pickle.HIGHEST_PROTOCOL)


def write_key_value_pairs(
    filename: epath.PathLike,
    key_value_pairs: Sequence[tuple[str | None, Any]],
    cast_to_ndarray: bool = True,
    write_pickle: bool = True,
) -> None:
  """Writes `<filename>.jsonl` (one value a line) and `<filename>.pickle`.

  Args:
    filename: The path; its suffix is replaced.
    key_value_pairs: (key, value) pairs.
    cast_to_ndarray: Turn device arrays into numpy arrays first (so the
      pickle loads without JAX).
    write_pickle: Also pickle the pairs.
  """
  filename = epath.Path(filename)
  if cast_to_ndarray:
    key_value_pairs = cast_to_ndarrays(key_value_pairs)
  if write_pickle:
    write_pickle_file(filename, key_value_pairs, cast_to_ndarray=False)
  with filename.with_suffix('.jsonl').open('w') as f:
    for _, value in key_value_pairs:
      f.write(json.dumps(value, cls=JnpEncoder) + '\n')


def _validate_filenames(filenames: Iterable[epath.PathLike],
                        step: int | None = None) -> tuple[int, int]:
  """(step, number of shards) of `{eval,decoder}_out_<step>_shard_<i>.pickle`.

  Args:
    filenames: The output files.
    step: The step wanted; None when the files hold only one.

  Returns:
    The step and its shard count.

  Raises:
    ValueError: for no files, a foreign name, several steps without `step`,
      a missing step, or a missing shard.
  """
  shards = collections.defaultdict(set)
  for name in filenames:
    base = os.path.basename(os.fspath(name))
    match = _SHARD_FILE_RE.fullmatch(base)
    if match is None:
      raise ValueError(f'filename {base} is not recognized as valid')
    shards[int(match.group(2))].add(int(match.group(3)))
  if not shards:
    raise ValueError('Expecting at least one file. Found none.')
  available = ', '.join(str(s) for s in sorted(shards))
  if step is None:
    if len(shards) > 1:
      raise ValueError('Requiring explicit step= argument, as eval/decode '
                       f'outputs from multiple steps are found: {available}')
    (step,) = shards
  if step not in shards:
    raise ValueError(f'step={step} not found in eval/decode outputs. '
                     f'Available steps: {available}')
  missing = set(range(len(shards[step]))) - shards[step]
  if missing:
    raise ValueError(f'step={step} missing the following shards: {missing}')
  return step, len(shards[step])


def load_outputs(basedir: epath.Path, pname: str, fname_prefix: str,
                 step: int | None = None) -> list[Any]:
  """The pickled outputs of an eval/decode input, all shards in order.

  Args:
    basedir: The job's log dir (or its `1` subdirectory).
    pname: The input's name.
    fname_prefix: 'eval' or 'decoder'.
    step: The step (may be omitted when only one is present).

  Returns:
    The (key, value) pairs.
  """
  basedir = epath.Path(basedir)
  root = basedir if basedir.name == '1' else basedir / '1'
  dirname = root / f'{fname_prefix}_out' / pname
  try:
    step, num_shards = _validate_filenames(
        dirname.glob(f'{fname_prefix}_out_*.pickle'), step)
  except ValueError as e:
    raise ValueError(f'Failed to read outputs under "{basedir}"') from e
  outputs = []
  for shard in range(num_shards):
    path = dirname / f'{fname_prefix}_out_{step}_shard_{shard}.pickle'
    with path.open('rb') as f:
      outputs.extend(pickle.load(f))
  return outputs


def _progress_file(job_log_dir: epath.Path, mode: EvaluationMode
                   ) -> epath.Path:
  return (epath.Path(job_log_dir) / _INTERNAL_ARTIFACTS_SUBDIR
          / mode.progress_filename)


@contextlib.contextmanager
def checkpoint_progress(job_log_dir: epath.Path, checkpoint_step: int,
                        mode: EvaluationMode) -> Iterator[None]:
  """Records, for the block's duration, the step being evaluated/decoded.

  On process 0 only. A progress file left by a preempted run is kept (so the
  resumed run stays on its step); the file is removed when the block ends.

  Args:
    job_log_dir: The job's log dir.
    checkpoint_step: The step of the checkpoint being worked on.
    mode: Eval or decode.

  Yields:
    Nothing.
  """
  if jax.process_index() != 0:
    yield
    return
  path = _progress_file(job_log_dir, mode)
  path.parent.mkdir(parents=True, exist_ok=True)
  if not path.exists():
    path.write_text(json.dumps({_PROGRESS_CKPT_STEP_KEY: checkpoint_step}))
  try:
    yield
  finally:
    path.unlink(missing_ok=True)


def get_checkpoint_step(job_log_dir: epath.Path,
                        restore_checkpoint_dir: epath.Path,
                        mode: EvaluationMode,
                        checkpoint_type: Any | None = None) -> int:
  """The step to evaluate/decode: an interrupted one if it still exists.

  Args:
    job_log_dir: The job's log dir (holding the progress file).
    restore_checkpoint_dir: Where the checkpoints are.
    mode: Eval or decode.
    checkpoint_type: A `checkpoint_paths.CheckpointType` (default:
      unspecified).

  Returns:
    The recorded step if its checkpoint directory exists, else the latest
    checkpoint's step.
  """
  path = _progress_file(job_log_dir, mode)
  if path.exists():
    step = json.loads(path.read_text())[_PROGRESS_CKPT_STEP_KEY]
    step_dir = checkpoint_paths.make_checkpoint_step_dir(
        epath.Path(restore_checkpoint_dir), step,
        checkpoint_type or checkpoint_paths.CheckpointType.UNSPECIFIED)
    if step_dir.exists():
      logging.info('Resuming %s from step %d.', mode.value, step)
      return step
    logging.info('The %s progress names step %d, which has no checkpoint; '
                 'taking the latest.', mode.value, step)
  return checkpoint_paths.retrieve_latest_checkpoint_step(
      restore_checkpoint_dir)
