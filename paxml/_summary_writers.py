"""The two kinds of summary writer that `summary_utils` writes through.

A tensorboardX `SummaryWriter` (what `summary_utils.get_summary_writer`
makes) or, for code written against Pax, a TensorFlow summary writer
(`tf.summary.create_file_writer(...)`); TensorFlow is only touched when such
a writer is given. Both take one call per value: `scalar`, `image` (one
[1, H, W, C] image), `audio` (one [1, frames, channels] clip), `text`,
`histogram`, and `flush`.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import sys
from typing import Any, Iterator

from absl import logging
import numpy as np

_CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    'summary_writer', default=None)


def _is_tf_writer(writer: Any) -> bool:
  return type(writer).__module__.startswith('tensorflow')


class _TensorboardX:
  """Writes through a tensorboardX SummaryWriter (or the no-op writer)."""

  def __init__(self, writer: Any):
    self._writer = writer

  def scalar(self, tag: str, value: float, step: int) -> None:
    self._writer.add_scalar(tag, value, step)

  def image(self, tag: str, image: np.ndarray, step: int) -> None:
    self._writer.add_images(tag, image, step, dataformats='NHWC')

  def audio(self, tag: str, clip: np.ndarray, sample_rate: int,
            step: int) -> None:
    if importlib.util.find_spec('soundfile') is None:
      logging.warning('Audio summary %s skipped: install soundfile.', tag)
      return
    self._writer.add_audio(tag, clip[0], step, sample_rate=sample_rate)

  def text(self, tag: str, text: str, step: int) -> None:
    self._writer.add_text(tag, text, step)

  def histogram(self, tag: str, values: np.ndarray, step: int) -> None:
    self._writer.add_histogram(tag, values, step)

  def flush(self) -> None:
    self._writer.flush()


class _TensorFlow:
  """Writes with `tf.summary` into a TensorFlow writer (or TF's default)."""

  def __init__(self, writer: Any):
    self._writer = writer
    # Pax writes through `tensorflow.compat.v2.summary` (a module of its own).
    self._tf_summary = importlib.import_module('tensorflow.compat.v2').summary

  @contextlib.contextmanager
  def _default(self) -> Iterator[None]:
    if self._writer is None:
      yield
    else:
      with self._writer.as_default():
        yield

  def scalar(self, tag: str, value: float, step: int) -> None:
    with self._default():
      self._tf_summary.scalar(tag, value, step)

  def image(self, tag: str, image: np.ndarray, step: int) -> None:
    with self._default():
      self._tf_summary.image(tag, image, step)

  def audio(self, tag: str, clip: np.ndarray, sample_rate: int,
            step: int) -> None:
    with self._default():
      self._tf_summary.audio(tag, clip, sample_rate, step)

  def text(self, tag: str, text: str, step: int) -> None:
    with self._default():
      self._tf_summary.text(tag, text, step)

  def histogram(self, tag: str, values: np.ndarray, step: int) -> None:
    with self._default():
      self._tf_summary.histogram(tag, values, step)

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()


def backend(writer: Any) -> Any:
  """The backend that writes into `writer`."""
  return _TensorFlow(writer) if _is_tf_writer(writer) else _TensorboardX(
      writer)


@contextlib.contextmanager
def writing_to(writer: Any) -> Iterator[Any]:
  """Makes `writer` the one that `current()` returns, within the block."""
  token = _CURRENT.set(backend(writer))
  try:
    yield _CURRENT.get()
  finally:
    _CURRENT.reset(token)


def current() -> Any:
  """The backend of the enclosing `writing_to`, or TF's default writer.

  Raises:
    ValueError: outside `writing_to` when TensorFlow is not in use.
  """
  found = _CURRENT.get()
  if found is not None:
    return found
  if 'tensorflow' in sys.modules:
    return _TensorFlow(None)
  raise ValueError('No summary writer: call this inside '
                   'summary_utils.write_summary_entry or '
                   'summary_utils.writing_to(writer).')
