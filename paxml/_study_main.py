"""`paxml.main` for experiments with a search space: a tuning study.

As in Pax, an experiment whose configs have decision points (`pg.oneof`,
`pg.floatv`, ... on class attributes or in `task()`) is tuned instead of
trained once: `tuning_lib.tune` runs one training per trial, each under
`<job_log_dir>/<trial id>/<decisions>/`, and the run ends with a table of the
trials and the best one (also in `<job_log_dir>/<study>_summary.json`).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from absl import logging


def has_search_space(experiment: Any) -> bool:
  """Whether the experiment's configs have decision points (needs PyGlove
  only where the experiment was written with it)."""
  if 'pyglove' not in sys.modules:
    return False  # Decision points are PyGlove objects: none without it.
  from paxml import tuning_lib  # pylint: disable=g-import-not-at-top
  return not tuning_lib.get_search_space(experiment).dna_spec.is_constant


def reporting_role(mode: str, metrics_from: str, eval_on_test: bool,
                   decode_during_train: bool) -> bool:
  """Whether this job reports the trials' measurements.

  Pax reports from the job whose mode is `--metrics_from`; a train job that
  also evaluates (`--eval_on_test`) or decodes (`--decode_during_train`)
  measures those metrics itself, so it reports them too.
  """
  if metrics_from == mode:
    return True
  return mode == 'train' and (
      (metrics_from == 'eval' and eval_on_test) or
      (metrics_from == 'decode' and decode_during_train))


def summary_table(summary: dict[str, Any]) -> str:
  """The trials of a study as an aligned text table, best trial marked."""
  best = (summary.get('best_trial') or {}).get('id')
  lines = [f'{"trial":>5}  {"status":<10}  {"reward":>12}  decisions']
  for row in summary['trials']:
    reward = row['reward']
    shown = 'n/a' if reward is None else f'{reward:.6g}'
    mark = '  <- best' if row['id'] == best else ''
    lines.append(f'{row["id"]:>5}  {row["status"]:<10}  {shown:>12}  '
                 f'{row["dir"].rsplit("/", 1)[-1]}{mark}')
  return '\n'.join(lines)


class StudyStopped(BaseException):
  """SIGTERM or Ctrl-C during a trial: the study stops, to resume later.

  A BaseException, so that the trial loop, which records any Exception of a
  trial as an infeasible trial, lets it through: the interrupted trial stays
  unfinished in the study journal and runs again (from its checkpoint) when
  the study resumes.
  """


def run_study(experiment: Any, trial_fn: Callable[..., None], *,
              job_log_dir: str, study: str | None, num_trials: int | None,
              tuner_group: str | None, controller_mode: str, mode: str,
              reports: bool) -> None:
  """Tunes `experiment`, one `trial_fn` run per trial; prints the trials."""
  from paxml import _study_journal  # pylint: disable=g-import-not-at-top
  from paxml import tuning_lib  # pylint: disable=g-import-not-at-top
  from etils import epath  # pylint: disable=g-import-not-at-top

  from paxml import _preemption  # pylint: disable=g-import-not-at-top

  def failing_trial_is_infeasible(exp, work_unit, trial_dir, stop_fn):
    try:
      trial_fn(exp, work_unit, trial_dir, stop_fn)
    except Exception:  # Any failure ends this trial, never the study.
      if _preemption.preemption_requested():
        raise StudyStopped(_preemption.requesting_signal()) from None
      logging.exception('Trial in %s failed; it is recorded as infeasible '
                        'and the study goes on.', trial_dir)
      raise
    if _preemption.preemption_requested():
      raise StudyStopped(_preemption.requesting_signal())

  _preemption.clear_request()
  try:
    tuning_lib.tune(
        failing_trial_is_infeasible, experiment, None,
        epath.Path(job_log_dir), study=study,
        is_metric_reporting_role=reports, tuner_group=tuner_group,
        max_num_trials=num_trials, controller_mode=controller_mode,
        running_mode=mode, errors_to_skip=(Exception,))
  except StudyStopped as e:
    logging.warning(
        'Study %s stopped by %s during a trial; finished trials are kept. '
        'Run the same command to resume it: the interrupted trial continues '
        'from its last checkpoint.', study or '(unnamed)', e)
  path = _study_journal.summary_path(epath.Path(job_log_dir), study)
  if reports and path.exists():
    summary = json.loads(path.read_text())
    print(summary_table(summary))
    logging.info('Study %s: trials and the best one in %s', study or
                 '(unnamed)', path)
