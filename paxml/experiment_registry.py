"""The registry of experiments that `--exp` names.

Public names: register, get, get_all, get_registry_tags, closest_names,
load.

An experiment is registered under its canonical key `<module>.<ClassName>`
and found by any dotted suffix of that key, with or without a `params`
package segment, so `tasks.lm.params.lm_cloud.LmCloudSpmd2B`,
`lm.lm_cloud.LmCloudSpmd2B` and `LmCloudSpmd2B` all name the same class when
unambiguous.

The state lives on `_ExperimentRegistryHelper` as in Pax (`_registry`,
`_registry_tags`, `_allow_overwrite`), so code that resets
`_ExperimentRegistryHelper._registry = {}` empties the registry; the
secondary keys are derived from `_registry` on each lookup.

Example:

  @experiment_registry.register
  class MyExperiment(base_experiment.BaseExperiment):
    ...

  experiment_registry.get('my_module.MyExperiment')
"""

from __future__ import annotations

import difflib
import importlib
import pathlib
import pprint
import re
import sys
import traceback
from typing import Any, Mapping, Sequence


def _being_reloaded() -> bool:
  """Whether `importlib.reload` is on the stack (re-running a module)."""
  return any(frame.name == 'reload' and frame.filename == importlib.__file__
             for frame in traceback.extract_stack())


def _canonical_key(cls: type[Any]) -> str:
  return f'{cls.__module__}.{cls.__name__}'


def _aliases(key: str) -> set[str]:
  """The dotted suffixes of `key` and of `key` without `params` segments."""
  forms = {key, '.'.join(p for p in key.split('.') if p != 'params')}
  aliases = set()
  for form in forms:
    parts = form.split('.')
    aliases.update('.'.join(parts[i:]) for i in range(len(parts)))
  return aliases


class _ExperimentRegistryHelper:
  """The global registry: canonical key -> experiment class, and tags."""

  _registry: dict[str, type[Any]] = {}
  _registry_tags: dict[str, list[str]] = {}
  # Set to True (e.g. in a notebook) to let any re-registration overwrite.
  _allow_overwrite = False

  @classmethod
  def register(
      cls,
      experiment_class: type[Any] | None = None,
      *,
      tags: Sequence[str] | None = None,
      allow_overwrite: bool = False,
  ) -> Any:
    """Registers an experiment class (a decorator, with or without arguments).

    Args:
      experiment_class: The class.
      tags: Labels kept with the class (`get_registry_tags`).
      allow_overwrite: Allow re-registering a key (always allowed while a
        module is being reloaded with `importlib.reload`).

    Returns:
      The class, or a decorator when called without one.

    Raises:
      ValueError: if the canonical key is already registered and overwriting
        is not allowed.
    """
    if experiment_class is None:
      return lambda c: cls.register(c, tags=tags,
                                    allow_overwrite=allow_overwrite)
    key = _canonical_key(experiment_class)
    preexisting = key in cls._registry
    overwrite = allow_overwrite or cls._allow_overwrite or _being_reloaded()
    if preexisting and not overwrite:
      raise ValueError(f'Experiment already registered: {key}')
    cls._registry[key] = experiment_class
    cls._registry_tags[key] = list(tags or ())
    note = ' (overwritten)' if preexisting else ''
    # Registration runs at import time, before logging is set up.
    print(f'Registered experiment `{key}`{note}', file=sys.stderr)
    return experiment_class

  @classmethod
  def get(cls, key: str) -> type[Any] | None:
    """The registered class that `key` names, or None.

    Args:
      key: A canonical key or an unambiguous dotted suffix of one.

    Returns:
      The class, or None if no registered class matches.

    Raises:
      ValueError: if `key` matches several classes.
    """
    if key in cls._registry:
      return cls._registry[key]
    matches = sorted(k for k in cls._registry if key in _aliases(k))
    if len(matches) > 1:
      raise ValueError(
          f'key={key} does not uniquely identify an experiment (it is '
          f'ambiguous); possible matches: {", ".join(matches)}')
    return cls._registry[matches[0]] if matches else None

  @classmethod
  def get_all(cls) -> Mapping[str, type[Any]]:
    """Every registered experiment, by canonical key."""
    return cls._registry

  @classmethod
  def get_registry_tags(cls, key: str) -> list[str]:
    """The tags of the experiment `key` names (canonical key or suffix)."""
    if key in cls._registry_tags:
      return cls._registry_tags[key]
    found = cls.get(key)
    return cls._registry_tags.get(_canonical_key(found), []) if found else []

  @classmethod
  def closest_names(cls, key: str, n: int = 5) -> list[str]:
    """Registered keys that look most like `key` (for error messages)."""
    last = key.rsplit('.', 1)[-1]
    by_name = {k.rsplit('.', 1)[-1]: k for k in cls._registry}
    close = difflib.get_close_matches(last, list(by_name), n=n, cutoff=0.5)
    return [by_name[c] for c in close]


register = _ExperimentRegistryHelper.register
get = _ExperimentRegistryHelper.get
get_all = _ExperimentRegistryHelper.get_all
get_registry_tags = _ExperimentRegistryHelper.get_registry_tags
closest_names = _ExperimentRegistryHelper.closest_names


def _import_experiment_module(module: str) -> bool:
  """Imports `paxml.<module>` or else `<module>`; False if neither exists."""
  for candidate in (f'paxml.{module}', module):
    try:
      importlib.import_module(candidate)
      return True
    except ModuleNotFoundError as e:
      if not candidate.startswith(str(e.name)):
        raise  # The module exists but one of its own imports is missing.
  return False


def _import_catalogue_modules(name: str) -> bool:
  """Imports the modules of the catalogue (`paxml.tasks`) that define the
  class `name` ends with; True if any was imported.

  A suffix such as `RegressionExperiment` then resolves although its module
  was not imported yet. Only files whose text defines that class name are
  imported, so the look-up stays cheap.
  """
  last = name.rsplit('.', 1)[-1]
  if not last.isidentifier():
    return False
  root = pathlib.Path(__file__).parent / 'tasks'
  pattern = re.compile(rf'^\s*(class\s+{re.escape(last)}\b|'
                       rf'{re.escape(last)}\s*=)', re.M)
  found = False
  for path in sorted(root.rglob('*.py')):
    if path.name.endswith('_test.py') or path.name.startswith('__'):
      continue
    try:
      text = path.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError):
      continue
    if not pattern.search(text):
      continue
    relative = path.relative_to(root.parent).with_suffix('')
    module = 'paxml.' + '.'.join(relative.parts)
    try:
      importlib.import_module(module)
      found = True
    except ImportError:  # A missing optional dependency: not a candidate.
      continue
  return found


def load(name: str) -> type[Any]:
  """The experiment class `name` names, importing its module if needed.

  Args:
    name: A registered key (or suffix), or `<module>.<Class>` where `module`
      is a full module path or a path relative to the `paxml` package.

  Returns:
    The experiment class.

  Raises:
    ValueError: if the module cannot be imported or holds no such experiment
      (Pax's messages, then the closest registered names).
  """
  cls = get(name)
  if cls is not None:
    return cls
  module = name.rsplit('.', 1)[0]
  imported = '.' in name and _import_experiment_module(module)
  if not imported and _import_catalogue_modules(name):
    cls = get(name) or get(f'paxml.{name}')
    if cls is not None:
      return cls
  if not imported and '.' not in name:
    close = closest_names(name)
    hint = f' Closest registered: {", ".join(close)}.' if close else ''
    raise ValueError(f'Could not find experiment `{name}`: no registered '
                     'experiment and no class of the catalogue (paxml.tasks) '
                     f'has that name.{hint}')
  if not imported:
    raise ValueError(f'Could not find experiment `{name}` because could not '
                     f'import module `{module}`.')
  cls = get(name) or get(f'paxml.{name}')
  if cls is not None:
    return cls
  close = closest_names(name)
  hint = f'\nClosest registered: {", ".join(close)}.' if close else ''
  raise ValueError(
      f'Could not find experiment `{name}`.\nRegistered experiments are: '
      f'{pprint.pformat(dict(get_all()))}{hint}')
