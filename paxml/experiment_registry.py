"""The registry of experiments that `--exp` names.

Public names: register, get, get_all, get_registry_tags, closest_names.

An experiment is registered under its canonical key `<module>.<ClassName>`
and found by any dotted suffix of that key, with or without a `params`
package segment, so `tasks.lm.params.lm_cloud.LmCloudSpmd2B`,
`lm.lm_cloud.LmCloudSpmd2B` and `LmCloudSpmd2B` all name the same class when
unambiguous.

Example:

  @experiment_registry.register
  class MyExperiment(base_experiment.BaseExperiment):
    ...

  experiment_registry.get('my_module.MyExperiment')
"""

from __future__ import annotations

import difflib
import sys
from typing import Any, Sequence

_REGISTRY: dict[str, type[Any]] = {}
_TAGS: dict[str, tuple[str, ...]] = {}


def _canonical_key(cls: type[Any]) -> str:
  return f'{cls.__module__}.{cls.__name__}'


def register(
    experiment_class: type[Any] | None = None,
    *,
    tags: Sequence[str] | None = None,
    allow_overwrite: bool = False,
) -> Any:
  """Registers an experiment class (a decorator, with or without arguments).

  Args:
    experiment_class: The class.
    tags: Labels kept with the class (`get_registry_tags`).
    allow_overwrite: Allow re-registering a key with another class.

  Returns:
    The class, or a decorator.
  """

  def decorate(cls: type[Any]) -> type[Any]:
    key = _canonical_key(cls)
    if key in _REGISTRY and _REGISTRY[key] is not cls and not allow_overwrite:
      raise ValueError(f'Experiment {key} is already registered.')
    _REGISTRY[key] = cls
    _TAGS[key] = tuple(tags or ())
    print(f'Registered experiment `{key}`', file=sys.stderr)
    return cls

  return decorate(experiment_class) if experiment_class else decorate


def _aliases(key: str) -> set[str]:
  """The dotted suffixes of `key` and of `key` without `params` segments."""
  forms = {key, '.'.join(p for p in key.split('.') if p != 'params')}
  aliases = set()
  for form in forms:
    parts = form.split('.')
    aliases.update('.'.join(parts[i:]) for i in range(len(parts)))
  return aliases


def get(key: str) -> type[Any] | None:
  """The registered class that `key` names, or None.

  Args:
    key: A canonical key or an unambiguous dotted suffix of one.

  Returns:
    The class, or None if no registered class matches.

  Raises:
    ValueError: if `key` matches several classes.
  """
  if key in _REGISTRY:
    return _REGISTRY[key]
  matches = {k for k in _REGISTRY if key in _aliases(k)}
  if len(matches) > 1:
    raise ValueError(
        f'Experiment name {key!r} is ambiguous: {", ".join(sorted(matches))}.'
    )
  return _REGISTRY[matches.pop()] if matches else None


def get_all() -> dict[str, type[Any]]:
  """Every registered experiment, by canonical key."""
  return dict(_REGISTRY)


def get_registry_tags(key: str) -> tuple[str, ...]:
  cls = get(key)
  return _TAGS[_canonical_key(cls)] if cls is not None else ()


def closest_names(key: str, n: int = 5) -> list[str]:
  """Registered keys that look most like `key` (for error messages)."""
  last = key.rsplit('.', 1)[-1]
  by_name = {k.rsplit('.', 1)[-1]: k for k in _REGISTRY}
  close = difflib.get_close_matches(last, list(by_name), n=n, cutoff=0.5)
  return [by_name[c] for c in close]
