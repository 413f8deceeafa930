"""Strings handed from host pre-processing to host callbacks by integer id.

Public names: Repository, repository.

A model cannot carry strings through jitted code, so pre-processing stores
them in a `Repository` and passes the ids; a host callback inside the model
reads them back with `get`, and post-processing removes them with `pop`. A
repository holds at most `max_size` strings and evicts the oldest beyond it.

Example:

  string_id = host_callback.repository('regexes').add('a+b')
  ...  # In a host callback: host_callback.repository('regexes').get(id)
  host_callback.repository('regexes').pop(string_id)
"""

from __future__ import annotations

import collections
import threading


class Repository:
  """A thread-safe, size-bounded map from assigned int ids to strings."""

  MAX_SIZE = 10000

  def __init__(self, max_size: int = MAX_SIZE):
    """Makes an empty repository.

    Args:
      max_size: How many strings it holds before evicting the oldest.
    """
    if max_size < 1:
      raise ValueError(f'Repository max_size must be >= 1, got {max_size}.')
    self._max_size = max_size
    self._lock = threading.Lock()
    # Ids are assigned in increasing order and dicts keep insertion order, so
    # the first key is always the oldest string.
    self._values: dict[int, str] = {}
    self._next_id = 0

  def add(self, value: str) -> int:
    """Stores `value` and returns its new id, evicting the oldest if full."""
    with self._lock:
      value_id = self._next_id
      self._next_id += 1
      self._values[value_id] = value
      while len(self._values) > self._max_size:
        del self._values[next(iter(self._values))]
      return value_id

  def pop(self, value_id: int) -> bool:
    """Removes the string of `value_id`; False if it is not held."""
    with self._lock:
      return self._values.pop(value_id, None) is not None

  def get(self, value_id: int) -> str:
    """The string of `value_id`; raises KeyError if it is not held."""
    with self._lock:
      return self._values[value_id]

  @property
  def size(self) -> int:
    """How many strings are held."""
    with self._lock:
      return len(self._values)


_lock = threading.Lock()
_repositories: dict[str, Repository] = collections.defaultdict(Repository)


def repository(namespace: str) -> Repository:
  """The process-wide repository of `namespace` (made on first use)."""
  with _lock:
    return _repositories[namespace]
