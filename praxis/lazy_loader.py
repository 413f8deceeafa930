"""LazyLoader: a module object that imports its module on first use.

Public names: LazyLoader.

Example (in a module that only sometimes needs TensorFlow):

  tf = lazy_loader.LazyLoader('tf', globals(), 'tensorflow.compat.v2')
  ...
  tf.constant(1)  # Imports TensorFlow here, and rebinds the global `tf`.
"""

import importlib
import types
from typing import Any

from absl import logging


class LazyLoader(types.ModuleType):
  """Stands for module `name` until an attribute of it is read.

  The first read imports the module, replaces `local_name` in
  `parent_module_globals` by it, and logs `warning` once if one is given.
  """

  def __init__(
      self,
      local_name: str,
      parent_module_globals: dict[str, Any],
      name: str,
      warning: str | None = None,
  ):
    self._local_name = local_name
    self._parent_module_globals = parent_module_globals
    self._warning = warning
    # Set without loading, for doctest and inspect.
    self.__module__ = name.rsplit('.', 1)[0]
    self.__wrapped__ = None
    super().__init__(name)

  def _load(self) -> types.ModuleType:
    module = importlib.import_module(self.__name__)
    self._parent_module_globals[self._local_name] = module
    if self._warning:
      logging.warning(self._warning)
      self._warning = None
    # Later lookups on this object find the module's names directly.
    self.__dict__.update(module.__dict__)
    return module

  def __getattr__(self, item: str) -> Any:
    return getattr(self._load(), item)

  def __dir__(self) -> list[str]:
    return dir(self._load())

  def __repr__(self) -> str:
    return f'<LazyLoader {self.__name__} as {self._local_name}>'
