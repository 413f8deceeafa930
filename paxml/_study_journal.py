"""A study's finished trials on disk: resume after a crash, and the best one.

PyGlove's local tuning backend keeps a study in memory, so a killed tuning
run would start over. The journal
(`<job_log_dir>/study_journal/<study>.json`, one per study name)
records each trial when it ends: the tuner's decisions (its DNA), whether it
was feasible, its measurements and its directory. A restarted study asks the
tuner for trials as before; when the tuner proposes the trial it proposed
last time (same id, same decisions — as a seeded search does), the recorded
measurements are fed back instead of training again, so the tuner's state,
and every later proposal, are those of an uninterrupted run.

`<job_log_dir>/study_summary.json` (`<study>_summary.json` for a named study)
lists every trial and names the best one.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from absl import logging
from etils import epath
import pyglove as pg

JOURNAL_DIR = 'study_journal'


def _write_atomically(path: epath.Path, text: str) -> None:
  tmp = path.parent / f'.{path.name}.tmp-{os.getpid()}'
  tmp.write_text(text)
  os.replace(os.fspath(tmp), os.fspath(path))


def _number(x: Any) -> float | None:
  """A float for JSON (Python's json keeps NaN and infinities)."""
  return None if x is None else float(x)


def _measurement_record(m: Any) -> dict[str, Any]:
  return {'step': int(m.step), 'reward': _number(m.reward),
          'metrics': {k: _number(v) for k, v in dict(m.metrics).items()},
          'checkpoint_path': m.checkpoint_path}


class StudyJournal:
  """The finished trials of one study, kept in `<root>/study_trials.json`."""

  def __init__(self, root_dir: epath.Path, study: str | None,
               identity: dict[str, str]):
    """Opens the journal of `study` under `root_dir`.

    Args:
      root_dir: The study's job_log_dir.
      study: The study's name (None: 'default').
      identity: What makes a journal this study's (the experiment, the search
        space): a journal recorded with another identity is refused.

    Raises:
      ValueError: the journal is unreadable or belongs to another study.
    """
    self._root = epath.Path(root_dir)
    name = study or 'default'
    self._path = self._root / JOURNAL_DIR / f'{name}.json'
    self._summary_path = summary_path(self._root, study)
    self._study = study
    self._identity = identity
    self._trials: dict[int, dict[str, Any]] = {}
    if not self._path.exists():
      return
    try:
      saved = json.loads(self._path.read_text())
      recorded = saved['identity']
      self._trials = {int(t['id']): t for t in saved['trials']}
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(
          f'{self._path}: not a study journal this version can read ({e}); '
          'move it away to start the study afresh.') from e
    if recorded != identity:
      changed = sorted(k for k in set(recorded) | set(identity)
                       if recorded.get(k) != identity.get(k))
      raise ValueError(
          f'{self._path} records study {name!r} with another {changed}; '
          'use another --job_log_dir or --study name, or move the journal '
          'away to start afresh.')
    logging.info('Study journal %s: %d finished trial(s) will be replayed '
                 'where the tuner proposes them again.', self._path,
                 len(self._trials))

  @staticmethod
  def _dna_key(feedback: pg.tuning.Feedback) -> str:
    return pg.to_json_str(feedback.dna)

  def replay(self, feedback: pg.tuning.Feedback) -> bool:
    """Feeds back a recorded result for this trial; False if there is none."""
    record = self._trials.get(feedback.id)
    if record is None:
      return False
    if record['dna'] != self._dna_key(feedback):
      logging.warning(
          'Trial %d: the tuner now proposes other decisions than the recorded '
          'run (an unseeded search?); running it again.', feedback.id)
      return False
    for m in record['measurements']:
      feedback.add_measurement(m['reward'], metrics=m['metrics'], step=m['step'],
                               checkpoint_path=m['checkpoint_path'])
    if record['infeasible']:
      feedback.skip(record.get('reason') or 'Recorded as infeasible.')
    else:
      feedback.done()
    logging.info('Trial %d: replayed its recorded result (%s).', feedback.id,
                 'infeasible' if record['infeasible'] else 'completed')
    return True

  def record(self, feedback: pg.tuning.Feedback, trial_dir: epath.Path,
             error: str | None = None) -> None:
    """Writes the just-finished trial into the journal and the summary."""
    trial = feedback.get_trial()
    self._trials[feedback.id] = {
        'id': feedback.id,
        'dna': self._dna_key(feedback),
        'decisions': str(feedback.dna),
        'dir': os.fspath(trial_dir),
        'infeasible': bool(trial.infeasible),
        'reason': error,
        'measurements': [_measurement_record(m) for m in trial.measurements],
    }
    trials = [self._trials[k] for k in sorted(self._trials)]
    self._path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(self._path, json.dumps(
        {'study': self._study, 'identity': self._identity, 'trials': trials},
        indent=1))
    _write_atomically(self._summary_path,
                      json.dumps(summary(trials, self._study), indent=1))


def summary_path(root_dir: epath.Path, study: str | None) -> epath.Path:
  """Where the summary of `study` is written under its job_log_dir."""
  name = f'{study}_summary.json' if study else 'study_summary.json'
  return epath.Path(root_dir) / name


def _final(record: dict[str, Any]) -> dict[str, Any] | None:
  measurements = record['measurements']
  return measurements[-1] if measurements else None


def summary(trials: list[dict[str, Any]], study: str | None) -> dict[str, Any]:
  """Every trial's final reward and metrics, and the best feasible trial."""
  rows, best = [], None
  for t in trials:
    final = _final(t)
    row = {'id': t['id'], 'dir': t['dir'], 'decisions': t['decisions'],
           'status': 'infeasible' if t['infeasible'] else 'completed',
           'reward': final['reward'] if final else None,
           'metrics': final['metrics'] if final else {}}
    rows.append(row)
    if (row['status'] == 'completed' and row['reward'] is not None
        and math.isfinite(row['reward']) and (best is None or row['reward'] > best['reward'])):
      best = row
  return {'study': study, 'best_trial': best, 'trials': rows}
