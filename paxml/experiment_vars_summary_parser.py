"""Reads back `experiment_utils.get_cls_vars_summary` text (no heavy imports).

Public names: parse.

Example:

  parse('my.Exp:\n    LAYERS: 4\n    NAME: lm\n')  # {'LAYERS': 4, 'NAME': 'lm'}
"""

import ast
from typing import Any

from absl import logging


def parse(cls_vars_summary: str) -> dict[str, Any]:
  """Variable name -> value; values that are not Python literals stay text.

  Args:
    cls_vars_summary: The summary text.

  Returns:
    The variables of every section.
  """
  cls_vars = {}
  for line in cls_vars_summary.splitlines():
    text = line.strip()
    if not text or text.endswith(':'):
      continue  # A blank line or a class header.
    if ':' not in text:
      logging.warning('Ignoring a line of unexpected format: %s', line)
      continue
    key, value = (s.strip() for s in text.split(':', 1))
    try:
      cls_vars[key] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      cls_vars[key] = value
  return cls_vars
