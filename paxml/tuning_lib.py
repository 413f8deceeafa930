"""Hyperparameter tuning and AutoML: the trial loop of a PyGlove study.

An experiment declares its search space in its own configs, with PyGlove's
hyper primitives (`pg.oneof`, `pg.floatv`, `pg.manyof`) on class attributes
or inside `task()`/`datasets()`, and its search in `search()`
(`automl.SearchHParams`: algorithm, reward, early stopping, trial budget).
`tune` runs the study: it traces the search space, then for each trial the
algorithm proposes it evaluates the experiment's configs under the trial's
decisions and calls `trial_fn` (a training run) with an early-stopping
function, through which the run reports its measurements and learns whether
to stop. The reward, computed from the measurements, goes back to the
algorithm, which proposes the next trial.

`paxml.main --study=NAME` runs `tune` with a training run per trial; each
trial writes under `<job_log_dir>/<trial id>/<decisions>/`, and finished
trials are journaled so that a killed study resumes where it stopped
(`_study_journal`).
"""

from __future__ import annotations

import base64
import copy
import lzma
import math
from typing import Any, Callable, Sequence, Type

from absl import logging
from etils import epath
import jax
import pyglove as pg

from paxml import _study_journal
from paxml import _trial_dirs
from paxml import _tuning_metrics
from paxml import automl
from paxml import base_experiment
from paxml import tasks_lib
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import pax_fiddle
from praxis import py_utils

instantiate = base_hyperparams.instantiate

# trial_fn(experiment, work_unit, job_log_dir, early_stopping_fn): one trial.
TrialFn = Callable[[base_experiment.BaseExperiment, Any, epath.Path,
                    trainer_lib.EarlyStoppingFn], None]

# The k-th sub-experiment of a trial reports its step s as tuning step
# k * SUB_EXPERIMENT_STEP_INTERVAL + s, so that one trial's measurements keep
# their order across its sub-experiments.
SUB_EXPERIMENT_STEP_INTERVAL = automl.SUB_EXPERIMENT_STEP_OFFSET

EvalMetrics = _tuning_metrics.EvalMetrics
DecodeMetrics = _tuning_metrics.DecodeMetrics
should_early_stop = _tuning_metrics.should_early_stop
is_last_checkpoint = _tuning_metrics.is_last_checkpoint
TrialDirectoryNameGenerator = _trial_dirs.TrialDirectoryNameGenerator


def _class_path(cls: type) -> str:
  return f'{cls.__module__}.{cls.__qualname__}'


def _search_param(experiment: base_experiment.BaseExperiment, name: str,
                  default: Any = None) -> Any:
  """A field of the experiment's `search()`, or `default` without one."""
  try:
    return getattr(experiment.search(), name)
  except NotImplementedError:
    return default


def get_search_space(
    experiment_config: base_experiment.BaseExperiment,
) -> pg.hyper.DynamicEvaluationContext:
  """Traces the experiment's configs for its decision points.

  The task is always traced; the partitioner, the train programs and the
  training inputs (with the decode inputs) only where `search()` enables
  them (`enable_partitioner_tuning`, `enable_train_programs_tuning`,
  `enable_dataset_tuning`). Training inputs are instantiated, so that
  decision points inside callables they call join the space.

  Raises:
    ValueError: a parameter sweep over listed combinations whose configs
      have decision points beyond the sweep's.
  """

  def evaluate_configs() -> None:
    if _search_param(experiment_config, 'enable_partitioner_tuning', False):
      experiment_config.partitioner()
    if _search_param(experiment_config, 'enable_train_programs_tuning', False):
      experiment_config.train_programs()
    experiment_config.task()
    if _search_param(experiment_config, 'enable_dataset_tuning', False):
      for dataset in experiment_config.datasets():
        if dataset.is_training:
          instantiate(dataset)
      experiment_config.decode_datasets()

  space = pg.hyper.trace(evaluate_configs, require_hyper_name=True)
  names = list(space.hyper_dict)
  if automl.COMBINED_DECISION_ATTR in names and len(names) > 1:
    names.remove(automl.COMBINED_DECISION_ATTR)
    swept = getattr(experiment_config, automl.COMBINED_DECISION_POINT_NAMES,
                    None)
    raise ValueError(
        f'Found extra tuning parameters ({names}) in '
        f'{type(experiment_config).__name__} beyond the parameters {swept} '
        'swept by automl.parameter_sweep: list them in the sweep or remove '
        'them.')
  return space


def _with_warm_start(
    experiment_cls: Type[base_experiment.BaseExperiment],
    feedback: pg.tuning.Feedback,
) -> Type[base_experiment.BaseExperiment]:
  """The experiment class, starting from the trial's warm-start checkpoint.

  Population-based searches hand a trial the checkpoint of an earlier one
  (`feedback.checkpoint_to_warm_start_from`); the trial then loads all of
  its variables and optimizer states, starting at step 0.
  """
  path = feedback.checkpoint_to_warm_start_from
  if not path:
    return experiment_cls

  class WarmStarted(experiment_cls):
    """`experiment_cls` loading the checkpoint `path` at start."""

    def task(self):
      task_p = copy.deepcopy(super().task())
      specs = getattr(self, 'get_input_specs_provider_params', None)
      if specs is None:
        raise ValueError(
            f'{experiment_cls.__name__}: a warm-started trial needs the '
            'experiment to define get_input_specs_provider_params().')
      logging.info('Trial %d starts from the checkpoint %s.', feedback.id,
                   path)
      task_p.train.init_from_checkpoint_rules = {
          path: tasks_lib.CheckpointLoadingRules(
              task_p=copy.deepcopy(task_p), load_rules=[(r'(.*)', '{}')],
              load_step=False, load_opt_states=True,
              input_specs_provider_p=specs())}
      return task_p

  WarmStarted.__name__ = experiment_cls.__name__
  return WarmStarted


def compressed(value: Any) -> str:
  """`value` (JSON-convertible by PyGlove) as a short ASCII string."""
  raw = pg.to_json_str(value).encode('utf-8')
  return base64.b64encode(lzma.compress(raw)).decode('ascii')


def uncompressed(str_compressed: str) -> str:
  """The JSON text that `compressed` packed."""
  return lzma.decompress(base64.b64decode(str_compressed)).decode('utf-8')


def _record_experiment_config(
    sub_experiments: dict[str, Type[base_experiment.BaseExperiment]],
    feedback: pg.tuning.Feedback) -> None:
  """Stores the trial's configs, as text, in the trial's metadata."""
  texts = {'datasets': {}, 'decode_datasets': {}, 'task': {}}
  to_text = base_hyperparams.nested_struct_to_text
  for name, cls in sub_experiments.items():
    experiment = cls()
    texts['datasets'][name] = [to_text(d) for d in experiment.datasets()]
    texts['decode_datasets'][name] = [
        to_text(d) for d in experiment.decode_datasets()]
    texts['task'][name] = to_text(experiment.task())
  for key, value in texts.items():
    feedback.set_metadata(
        f'experiment_config:{key}',
        {'format_version': 2.0, 'source': 'pax', 'config': compressed(value)},
        per_trial=True)


def _verify_running_mode(reward_fn: automl.BaseReward | None,
                         running_mode: str,
                         is_metric_reporting_role: bool) -> None:
  """Refuses a reporting job that cannot see the metrics the reward uses."""
  if reward_fn is None:
    return
  if is_metric_reporting_role:
    if reward_fn.needs_train and running_mode != 'train':
      raise ValueError(
          'Tuning uses training metrics but the reporting role is '
          f'{running_mode!r}: report the metrics from the train job.')
    if reward_fn.needs_decode and running_mode not in ('train', 'decode'):
      raise ValueError(
          'Tuning uses decode metrics but the reporting role is '
          f'{running_mode!r}: report the metrics from a train or decode job.')
  sources = [name for name, needed in (('eval', reward_fn.needs_eval),
                                       ('decode', reward_fn.needs_decode))
             if needed]
  logging.info('Tuning on the %s metrics.',
               ' and '.join(sources) if sources else 'last training step\'s')


def _publish(work_unit: Any, path: epath.Path, description: str) -> None:
  """Lists a file among the work unit's artifacts (where it keeps any)."""
  create_artifact = getattr(work_unit, 'create_artifact', None)
  if create_artifact is None:
    return
  try:
    from clu import platform  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  create_artifact(platform.ArtifactType.FILE, str(path), description)


def _write_file_once(path: epath.Path, content: str) -> None:
  """Writes a description of the study for people (first writer wins)."""
  if path.exists():
    return
  try:
    path.write_text(content)
  except OSError as e:
    logging.warning('Could not write %s (%s); it is only informative.', path,
                    e)


def tune(
    trial_fn: TrialFn,
    experiment_config: base_experiment.BaseExperiment,
    work_unit: Any,
    job_log_dir: epath.Path,
    study: str | None = None,
    pythia_port: int | None = None,
    is_metric_reporting_role: bool = True,
    tuner_group: str | None = None,
    max_num_trials: int | None = None,
    controller_mode: str = 'auto',
    running_mode: str = 'train',
    errors_to_skip: Sequence[Any] = (),
) -> None:
  """Runs a study: trials proposed by the search algorithm, until its budget.

  Args:
    trial_fn: Runs one trial: `trial_fn(experiment, work_unit, trial_dir,
      early_stopping_fn)`; the run reports measurements through
      `should_early_stop(early_stopping_fn, ...)`.
    experiment_config: The experiment, with `search()` and decision points.
    work_unit: Where artifacts are listed (a clu work unit), or None.
    job_log_dir: The study's directory; trials write under it.
    study: The study's name. Names starting with 'local' register the study
      with PyGlove's local backend under that name
      (`pg.tuning.poll_result(study)`).
    pythia_port: Unused (Vizier's Pythia service is not provided).
    is_metric_reporting_role: Whether this job reports the measurements
      (only one of a trial's train/eval/decode jobs does).
    tuner_group: Jobs of one group work on the same trial.
    max_num_trials: Overrides `search().max_num_trials`.
    controller_mode: 'auto' or 'secondary' ('primary', a dedicated
      controller, needs a tuning service this project does not provide).
    running_mode: The mode of this job: 'train', 'eval', 'decode', ...
    errors_to_skip: More exception types (or `(type, regex)` pairs) that
      mark a trial infeasible, beyond FloatingPointError and
      `search().errors_to_skip`.

  Raises:
    ValueError: an experiment without decision points, a reporting job that
      cannot see the reward's metrics, or controller_mode='primary'.
  """
  del pythia_port
  search_p = experiment_config.search()
  reward_fn = instantiate(search_p.search_reward) if search_p.search_reward \
      else None
  _verify_running_mode(reward_fn, running_mode, is_metric_reporting_role)
  algorithm = instantiate(search_p.search_algorithm)()
  aggregator = instantiate(
      search_p.cross_step_metric_aggregator
      or pax_fiddle.Config(automl.LastReportedMetricValues))
  stopping_policy = (instantiate(search_p.early_stopping)()
                     if search_p.early_stopping is not None else None)
  space = get_search_space(experiment_config)
  if space.dna_spec.is_constant:
    raise ValueError(
        f'Cannot tune {type(experiment_config).__name__!r}: its configs have '
        'no decision points (pg.oneof, pg.floatv, ...).')
  num_trials = max_num_trials or search_p.max_num_trials
  if space.dna_spec.space_size != -1:  # -1: infinite (continuous values).
    num_trials = min(num_trials, space.dna_spec.space_size)
  if controller_mode == 'primary':
    raise ValueError(
        '--controller_mode=primary runs a dedicated tuning controller, which '
        'needs a tuning service (Vizier) that this project does not provide; '
        "use 'auto'.")

  job_log_dir = epath.Path(job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  for name, obj in (('search_space', space.dna_spec),
                    ('search_algorithm', algorithm),
                    ('early_stopping_policy', stopping_policy)):
    logging.info('Tuning %s: %s', name, obj)
    if obj is not None:
      path = job_log_dir / f'{name}.txt'
      _write_file_once(path, str(obj))
      _publish(work_unit, path, name)

  reports = is_metric_reporting_role and jax.process_index() == 0
  journal = None
  if reports:
    journal = _study_journal.StudyJournal(job_log_dir, study, {
        'experiment': _class_path(type(experiment_config)),
        'search_space': str(space.dna_spec)})
  sub_experiments = experiment_config.sub_experiments()
  dirnames = TrialDirectoryNameGenerator(
      job_log_dir, space, getattr(experiment_config,
                                  automl.COMBINED_DECISION_POINT_NAMES, None))
  skip = [FloatingPointError, *(search_p.errors_to_skip or []),
          *errors_to_skip]
  for example, feedback in pg.sample(
      space, algorithm, num_trials, early_stopping_policy=stopping_policy,
      group=tuner_group,
      name=study if study and study.startswith('local') else None,
      is_chief=None if controller_mode == 'auto' else False):
    with example():
      trial_dir = dirnames.dirname(feedback.id)
      if search_p.add_experiment_config_to_metadata and reports:
        _record_experiment_config(sub_experiments, feedback)
      if journal is not None and journal.replay(feedback, trial_dir):
        continue
      logging.info('Trial %d (group %r) starts in %s.', feedback.id,
                   tuner_group, trial_dir)
      for i, (sub_id, sub_cls) in enumerate(sub_experiments.items()):
        stop_fn = EarlyStoppingFn(
            feedback=feedback, sub_experiment_id=sub_id, reward_fn=reward_fn,
            cross_step_metric_aggregator=aggregator,
            is_metric_reporting_role=is_metric_reporting_role,
            is_last_experiment=i == len(sub_experiments) - 1,
            tuning_step_start=i * SUB_EXPERIMENT_STEP_INTERVAL,
            treats_early_stopped_trials_as_done=(
                search_p.treats_early_stopped_trials_as_done),
            train_to_end=search_p.train_to_end)
        with feedback.skip_on_exceptions(skip):
          trial_fn(_with_warm_start(sub_cls, feedback)(), work_unit,
                   trial_dir, stop_fn)
        if feedback.get_trial().status == 'COMPLETED':
          break
      trial = feedback.get_trial()
      logging.info('Trial %d ended: %s.', feedback.id,
                   'infeasible' if trial.infeasible else trial.status)
      if journal is not None and trial.status == 'COMPLETED':
        journal.record(feedback, trial_dir)
  logging.info('Study %r has run all of its trials.', study)


class EarlyStoppingFn:
  """A sub-experiment's line to its trial: reports metrics, says when to stop.

  Called by the training run as `fn(metrics, running_mode, global_step,
  is_last_ckpt, checkpoint_path)`; returns True when the run should stop
  (the trial is complete, or the tuner stopped it early).
  """

  def __init__(
      self,
      feedback: pg.tuning.Feedback,
      sub_experiment_id: str,
      reward_fn: automl.BaseReward | None,
      cross_step_metric_aggregator: Any,
      is_metric_reporting_role: bool,
      is_last_experiment: bool,
      tuning_step_start: int,
      treats_early_stopped_trials_as_done: bool,
      train_to_end: bool,
  ):
    self._feedback = feedback
    self._sub_experiment_id = sub_experiment_id
    self._reward_fn = reward_fn
    self._aggregator = cross_step_metric_aggregator
    self._reports = is_metric_reporting_role
    self._is_last_experiment = is_last_experiment
    self._step_start = tuning_step_start
    self._early_stopped_is_done = treats_early_stopped_trials_as_done
    self._train_to_end = train_to_end
    self._needs_eval = bool(reward_fn and reward_fn.needs_eval)
    self._needs_decode = bool(reward_fn and reward_fn.needs_decode)

  @property
  def train_to_end(self) -> bool:
    return self._train_to_end

  def __call__(self, metrics: dict[str, float],
               running_mode: trainer_lib.RunningMode, global_step: int,
               is_last_ckpt: bool, checkpoint_path: Any) -> bool:
    step = self._step_start + global_step
    path = str(checkpoint_path)
    if self._reports:
      measured_now = running_mode.has_eval or running_mode.has_decode
      if measured_now or (is_last_ckpt and not (self._needs_eval or
                                                self._needs_decode)):
        # A failed report (NaN reward) still reaches the barrier below, so
        # that every host takes the same path out of the trial.
        try:
          if jax.process_index() == 0:
            self._report(metrics, running_mode, step, is_last_ckpt, path)
        finally:
          py_utils.sync_global_devices(
              f'Trial {self._feedback.id} reported tuning step {step}.')
      elif is_last_ckpt:
        if jax.process_index() == 0:
          if not self._feedback.get_trial().measurements:
            self._feedback.skip(
                'Training ended before any eval/decode measured the reward '
                f'(trial {self._feedback.id}, step {global_step}).')
          elif self._is_last_experiment:
            self._complete(aggregate=True, step=step + 1, path=path)
      else:
        return False
    return self._poll_stop()

  def _poll_stop(self) -> bool:
    """Whether the trial is over, completing an early-stopped one."""
    if self._feedback.get_trial().status == 'COMPLETED':
      stop = True
    elif self._feedback.should_stop_early():
      if jax.process_index() == 0:
        self._end_early_stopped()
      stop = True
    else:
      stop = False
    if stop:
      py_utils.sync_global_devices(f'Trial {self._feedback.id} is over.')
    return stop

  def _end_early_stopped(self, reason: str | None = None) -> None:
    if self._early_stopped_is_done and self._feedback.get_trial().measurements:
      self._feedback.done()
    elif reason is None:
      self._feedback.skip()
    else:
      self._feedback.skip(reason)

  def _reward(self, metrics: dict[str, float], step: int) -> float:
    return 0.0 if self._reward_fn is None else self._reward_fn(metrics, step)

  def _reward_and_used_metrics(
      self, metrics: dict[str, float],
      step: int) -> tuple[float, dict[str, float]]:
    reward = self._reward(metrics, step)
    if self._reward_fn is None:
      return reward, metrics
    used = {}
    for metric in self._reward_fn.used_metrics:
      used.update(dict(metric.match_items(metrics)))
    return reward, used

  def _report(self, metrics: dict[str, float],
              running_mode: trainer_lib.RunningMode, step: int,
              is_last_ckpt: bool, path: str) -> None:
    """Adds a measurement; completes the trial after its last one."""
    if self._sub_experiment_id:
      metrics = {f'{k}:{self._sub_experiment_id}': v
                 for k, v in metrics.items()}
    try:
      reward, used = self._reward_and_used_metrics(metrics, step)
      if math.isnan(reward):
        raise FloatingPointError(
            f'The reward of trial {self._feedback.id} at tuning step {step} '
            f'is NaN (metrics: {used}).')
      self._feedback.add_measurement(reward, metrics=used, step=step,
                                     checkpoint_path=path)
      logging.info('Trial %d (%s, %s) measured at tuning step %d: reward %f, '
                   '%s', self._feedback.id, self._sub_experiment_id or '-',
                   running_mode, step, reward, used)
      if is_last_ckpt and self._is_last_experiment:
        self._complete(aggregate=True, step=step + 1, path=path)
    except automl.EarlyStoppingError as e:
      if e.skip:
        logging.info('Trial %d stopped early at step %s: %s',
                     self._feedback.id, e.step, e.skip_reason)
        self._end_early_stopped(e.skip_reason or 'Unknown.')
        return
      reward = e.reward
      if reward is None:
        reward = self._reward(e.metrics, e.step)
      self._feedback.add_measurement(reward=reward, step=e.step,
                                     metrics=e.metrics,
                                     checkpoint_path=e.checkpoint)
      logging.info('Trial %d stopped early at step %s with reward %f (%s).',
                   self._feedback.id, e.step, reward, e.metrics)
      self._complete(path=path)

  def _complete(self, aggregate: bool = False, step: int | None = None,
                path: str | None = None) -> None:
    """Ends the trial; with `aggregate`, after a final measurement that the
    cross-step aggregator computes from all of the trial's measurements."""
    if aggregate:
      history = []
      for m in self._feedback.get_trial().measurements:
        history.append((m.step, dict(m.metrics, reward=m.reward)))
      final = dict(self._aggregator(history))
      final.pop('reward', None)
      reward, used = self._reward_and_used_metrics(final, step)
      self._feedback.add_measurement(reward, used, step=step,
                                     checkpoint_path=path)
      logging.info('Trial %d final measurement at step %d: reward %f, %s',
                   self._feedback.id, step, reward, used)
    self._feedback.done()
