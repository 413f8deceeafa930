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

Several workers (processes, on one host or on hosts sharing the
file system) may run one study: each starts the same command. The journal is
read and written under a file lock; a worker claims a trial in the journal
before training it, and a worker whose tuner proposes a trial that another
live worker has claimed skips it (in its own tuner, as infeasible) and goes
on to the next, so every trial is trained once. A claim of a worker that
died (on this host: no such process) is taken over.

`<job_log_dir>/study_summary.json` (`<study>_summary.json` for a named study)
lists every trial and names the best one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
from typing import Any, Iterator

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


def _this_worker() -> str:
  return f'{socket.gethostname()}:{os.getpid()}'


def _is_alive(owner: str) -> bool:
  """Whether the worker `host:pid` may still run (other hosts: assumed)."""
  host, _, pid = owner.rpartition(':')
  if host != socket.gethostname():
    return True
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError):
    return True
  return True


def _measurement_record(m: Any) -> dict[str, Any]:
  return {'step': int(m.step), 'reward': _number(m.reward),
          'metrics': {k: _number(v) for k, v in dict(m.metrics).items()},
          'checkpoint_path': m.checkpoint_path}


class StudyJournal:
  """The trials of one study, in `<root>/study_journal/<study>.json`."""

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
    self._me = _this_worker()
    self._path.parent.mkdir(parents=True, exist_ok=True)
    with self._locked():
      self._load()
    finished = sum(t.get('status', 'done') == 'done'
                   for t in self._trials.values())
    if self._trials:
      logging.info('Study journal %s: %d finished trial(s) will be replayed '
                   'where the tuner proposes them again.', self._path,
                   finished)

  @contextlib.contextmanager
  def _locked(self) -> Iterator[None]:
    """Holds the journal's lock file (one worker reads-and-writes at once)."""
    lock_path = self._path.parent / f'.{self._path.name}.lock'
    with open(os.fspath(lock_path), 'a') as f:
      fcntl.flock(f, fcntl.LOCK_EX)
      try:
        yield
      finally:
        fcntl.flock(f, fcntl.LOCK_UN)

  def _load(self) -> None:
    """Reads the journal from disk (under the lock): other workers' trials."""
    if not self._path.exists():
      return
    name = self._study or 'default'
    try:
      saved = json.loads(self._path.read_text())
      recorded = saved['identity']
      self._trials = {int(t['id']): t for t in saved['trials']}
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(
          f'{self._path}: not a study journal this version can read ({e}); '
          'move it away to start the study afresh.') from e
    if recorded != self._identity:
      changed = sorted(k for k in set(recorded) | set(self._identity)
                       if recorded.get(k) != self._identity.get(k))
      raise ValueError(
          f'{self._path} records study {name!r} with another {changed}; '
          'use another --job_log_dir or --study name, or move the journal '
          'away to start afresh.')

  def _save(self) -> None:
    trials = [self._trials[k] for k in sorted(self._trials)]
    _write_atomically(self._path, json.dumps(
        {'study': self._study, 'identity': self._identity, 'trials': trials},
        indent=1))
    _write_atomically(self._summary_path,
                      json.dumps(summary(trials, self._study), indent=1))

  @staticmethod
  def _dna_key(feedback: pg.tuning.Feedback) -> str:
    return pg.to_json_str(feedback.dna)

  def replay(self, feedback: pg.tuning.Feedback,
             trial_dir: epath.Path | None = None) -> bool:
    """Settles a proposed trial from the journal, or claims it to run here.

    Returns True when the trial needs no training here: its recorded result
    was fed back, or another live worker has claimed it (then it is skipped
    in this worker's tuner). Returns False after claiming it for this worker.
    """
    dna = self._dna_key(feedback)
    with self._locked():
      self._load()
      record = self._trials.get(feedback.id)
      if record is not None and record['dna'] != dna:
        logging.warning(
            'Trial %d: the tuner now proposes other decisions than the '
            'recorded run (an unseeded search?); running it again.',
            feedback.id)
        record = None
      status = None if record is None else record.get('status', 'done')
      if status == 'running':
        owner = record.get('owner', '')
        if owner != self._me and _is_alive(owner):
          feedback.skip(f'Trial {feedback.id} runs in worker {owner}.')
          logging.info('Trial %d: worker %s runs it; next trial.',
                       feedback.id, owner)
          return True
        if owner != self._me:
          logging.warning('Trial %d: its worker %s is gone; running it here.',
                          feedback.id, owner)
      elif status == 'done':
        self._feed_back(feedback, record)
        return True
      self._trials[feedback.id] = {
          'id': feedback.id, 'dna': dna, 'decisions': str(feedback.dna),
          'dir': os.fspath(trial_dir) if trial_dir is not None else '',
          'status': 'running', 'owner': self._me, 'infeasible': False,
          'reason': None, 'measurements': []}
      self._save()
    return False

  def _feed_back(self, feedback: pg.tuning.Feedback,
                 record: dict[str, Any]) -> None:
    for m in record['measurements']:
      feedback.add_measurement(m['reward'], metrics=m['metrics'], step=m['step'],
                               checkpoint_path=m['checkpoint_path'])
    if record['infeasible']:
      feedback.skip(record.get('reason') or 'Recorded as infeasible.')
    else:
      feedback.done()
    logging.info('Trial %d: replayed its recorded result (%s).', feedback.id,
                 'infeasible' if record['infeasible'] else 'completed')

  def record(self, feedback: pg.tuning.Feedback, trial_dir: epath.Path,
             error: str | None = None) -> None:
    """Writes the just-finished trial into the journal and the summary."""
    trial = feedback.get_trial()
    with self._locked():
      self._load()
      self._trials[feedback.id] = {
          'id': feedback.id,
          'dna': self._dna_key(feedback),
          'decisions': str(feedback.dna),
          'dir': os.fspath(trial_dir),
          'status': 'done',
          'owner': self._me,
          'infeasible': bool(trial.infeasible),
          'reason': error,
          'measurements': [_measurement_record(m) for m in trial.measurements],
      }
      self._save()


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
    if t.get('status', 'done') == 'running':
      status = 'running'
    else:
      status = 'infeasible' if t['infeasible'] else 'completed'
    row = {'id': t['id'], 'dir': t['dir'], 'decisions': t['decisions'],
           'status': status,
           'reward': final['reward'] if final else None,
           'metrics': final['metrics'] if final else {}}
    rows.append(row)
    if (row['status'] == 'completed' and row['reward'] is not None
        and math.isfinite(row['reward']) and (best is None or row['reward'] > best['reward'])):
      best = row
  return {'study': study, 'best_trial': best, 'trials': rows}
