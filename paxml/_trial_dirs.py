"""Readable directory names for tuning trials.

Each trial of a study writes under `<job_log_dir>/<trial id>/<decisions>`,
where `<decisions>` shows the values the tuner chose, so that trials line up
by name in TensorBoard: `lr=1.000e-03|width=64|act=RELU`. When the decision
names together are long (many decision points, as in architecture search),
only the values are shown: `1.000e-03|64|RELU`.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from etils import epath
import pyglove as pg

from paxml import automl

# Characters kept in a directory name (word characters, `=`, brackets, `.`
# and `,`); anything else, `-` and path separators included, is dropped.
_UNSAFE = re.compile(r'[^\w=(){}.,\[\]]+')
# Characters rewritten to look alike but be safe in a path.
_LOOKALIKES = str.maketrans({':': '=', '[': '{', ']': '}', ',': '.'})


class TrialDirectoryNameGenerator:
  """Names the directory of each trial from the tuner's current decisions.

  Call `dirname(trial_id)` inside the trial's `example()` context, where the
  search space's decision points evaluate to this trial's choices.
  """

  def __init__(
      self,
      root_dir: epath.Path,
      search_space: pg.hyper.DynamicEvaluationContext,
      combined_decision_point_names: list[str] | None = None,
      total_name_length_threshold: int = 64,
  ):
    names = list(search_space.hyper_dict.keys())
    if combined_decision_point_names:
      if names != [automl.COMBINED_DECISION_ATTR]:
        raise ValueError(
            'A parameter sweep over combinations has the single decision '
            f'point {automl.COMBINED_DECISION_ATTR!r}; the search space has '
            f'{names}.')
      names = list(combined_decision_point_names)
    self._root_dir = epath.Path(root_dir)
    self._search_space = search_space
    self._decision_point_names = names
    self._combined = bool(combined_decision_point_names)
    self._include_decision_names = (
        sum(len(n) for n in names) < total_name_length_threshold)

  def parameter_values(self) -> list[tuple[str, Any]]:
    """(decision name, chosen value) pairs of the current trial."""
    pairs = []
    for name, hyper in self._search_space.hyper_dict.items():
      value = self._search_space.evaluate(hyper)
      if isinstance(hyper, pg.hyper.CustomHyper):
        value = '(CUSTOM)'
      pairs.append((name, value))
    if not self._combined:
      return pairs
    (_, combination), = pairs
    if (not isinstance(combination, tuple)
        or len(combination) != len(self._decision_point_names)):
      raise ValueError(
          f'The sweep combination {combination!r} does not give one value '
          f'per name of {self._decision_point_names}.')
    return list(zip(self._decision_point_names, combination))

  def format_value(self, value: Any) -> str:
    """A path-safe rendering of one decision's value."""
    if isinstance(value, float):
      return f'{value:.3e}'
    if isinstance(value, (bool, int)):
      return str(value)
    if inspect.isclass(value):
      return value.__name__
    return _UNSAFE.sub('', str(value).translate(_LOOKALIKES))

  def dirname(self, trial_id: int) -> epath.Path:
    """`<root>/<trial_id>/<decisions>` for the current trial."""
    parts = []
    for name, value in self.parameter_values():
      text = self.format_value(value)
      parts.append(f'{name}={text}' if self._include_decision_names else text)
    return self._root_dir / str(trial_id) / '|'.join(parts)
