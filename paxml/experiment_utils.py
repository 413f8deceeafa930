"""Summaries of an experiment class's variables (its settings).

Public names: get_cls_vars_summary.

Example (`Exp2(Exp1)`, Exp1 sets `A = 1`, Exp2 sets `A = 2` and `B = 3`):

  print(experiment_utils.get_cls_vars_summary(Exp2))
  # paxml.base_experiment.BaseExperiment:
  #     _abc_impl: <...>
  #
  # my_module.Exp2:
  #     A: 2
  #     B: 3

Each variable is listed once, under the most derived class that sets it (the
one whose value is live), classes from the base down; `experiment_vars_
summary_parser.parse` reads the text back.
"""

from __future__ import annotations

from typing import Any

from paxml import base_experiment

BaseExperiment = base_experiment.BaseExperiment


def _full_cls_name(cls: type[Any]) -> str:
  if cls.__module__ == 'builtins':
    return cls.__qualname__
  return f'{cls.__module__}.{cls.__qualname__}'


def _own_vars(cls: type[Any]) -> dict[str, Any]:
  """The plain class variables `cls` itself sets (no methods or dunders)."""
  return {k: v for k, v in vars(cls).items()
          if not (callable(v) or isinstance(v, (property, classmethod,
                                                staticmethod))
                  or (k.startswith('__') and k.endswith('__')))}


def _cls_vars(cls: type[Any]) -> dict[str, Any]:
  """`_own_vars`, less those BaseExperiment itself sets (unless it is it)."""
  own = _own_vars(cls)
  if cls is BaseExperiment:
    return own
  base = _own_vars(BaseExperiment)
  return {k: v for k, v in own.items() if k not in base}


def _vars_by_owner(cls: type[Any]) -> dict[type[Any], dict[str, Any]]:
  """class -> the variables it owns (sets, and no subclass overrides)."""
  owners: dict[type[Any], dict[str, Any]] = {}
  seen = set()
  for klass in cls.__mro__[:-1]:  # Most derived first; `object` left out.
    for name, value in _cls_vars(klass).items():
      if name not in seen:
        seen.add(name)
        owners.setdefault(klass, {})[name] = value
  return owners


def get_cls_vars_summary(cls: type[Any]) -> str:
  """The text summary of `cls`'s class variables (see the module docstring).

  Args:
    cls: An experiment class.

  Returns:
    `<module.Class>:` headers, each followed by `    NAME: value` lines,
    sections separated by a blank line.
  """
  owners = _vars_by_owner(cls)
  sections = []
  for klass in reversed(cls.__mro__[:-1]):
    if klass in owners:
      lines = '\n'.join(f'    {k}: {v}' for k, v in owners[klass].items())
      sections.append(f'{_full_cls_name(klass)}:\n{lines}\n')
  return '\n'.join(sections)
