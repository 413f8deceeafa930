"""Fail-safe training runs (issue 19): what each failure does and prints.

One reference run of the tiny regression experiment (10 steps, a checkpoint
every 2) is shared by every case: each case works on a copy of its job dir,
so the cases also show that the copy's earlier checkpoints are left intact.
"""

import hashlib
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from paxml import _job_lock
from paxml import _nonfinite_guard
from paxml import _preemption
from paxml import checkpoint_managers
from paxml import checkpoints
from paxml import eval_lib
from paxml import executors
from paxml import train
from paxml.tasks.test import regression

_STEPS = 10
_EXP = 'paxml.tasks.test.regression.RegressionExperiment'
_CLI_SETS = [f'--fdl_set=task.train.num_train_steps={_STEPS}',
             '--fdl_set=task.train.save_interval_steps=2']


def _configs(**train_fields):
  configs = train.ExperimentConfigs.from_experiment(
      regression.RegressionExperiment(), 'RegressionExperiment')
  fields = dict(num_train_steps=_STEPS, save_interval_steps=2)
  fields.update(train_fields)
  for name, value in fields.items():
    setattr(configs.task.train, name, value)
  return configs


def _run(job_dir, restore_dir=None, restore_step=None, lr=None,
         **train_fields):
  configs = _configs(**train_fields)
  if lr is not None:
    configs.task.train.learner.optimizer.learning_rate = lr
  options = executors.RunOptions(
      job_log_dir=pathlib.Path(job_dir), eval_on_test=False,
      decode_during_train=False, enable_summary_writer=False,
      restore_checkpoint_dir=restore_dir and pathlib.Path(restore_dir),
      restore_checkpoint_step=restore_step)
  return train.train_and_evaluate(configs, options)


def _files(root):
  """{relative path: sha256} of every file under `root`."""
  root = pathlib.Path(root)
  return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
          for p in sorted(root.rglob('*')) if p.is_file()}


def _arrays(step_dir):
  """{variable: bytes} of a checkpoint's state, read back from disk."""
  out = {}
  state = pathlib.Path(step_dir) / 'state'
  import tensorstore as ts  # pylint: disable=g-import-not-at-top
  for array_dir in sorted(state.iterdir()):
    if (array_dir / '.zarray').exists():
      store = ts.open({'driver': 'zarr', 'kvstore': {
          'driver': 'file', 'path': str(array_dir)}}, open=True).result()
      out[array_dir.name] = np.asarray(store.read().result()).tobytes()
  return out


def _steps(ckpt_dir):
  return sorted(int(p.name.split('_')[1]) for p in pathlib.Path(
      ckpt_dir).iterdir() if p.name.split('_')[-1].isdigit())


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
  """A finished run: checkpoints 1, 2, 4, 6, 8, 10."""
  job_dir = tmp_path_factory.mktemp('reference')
  _run(job_dir)
  assert _steps(job_dir / 'checkpoints') == [1, 2, 4, 6, 8, 10]
  return job_dir


@pytest.fixture
def copy_of(reference, tmp_path):
  """A copy of the reference job dir (checkpoints only)."""

  def make(keep=None):
    job_dir = tmp_path / 'job'
    shutil.copytree(reference / 'checkpoints', job_dir / 'checkpoints')
    for step in set(_steps(job_dir / 'checkpoints')) - set(keep or range(99)):
      shutil.rmtree(job_dir / 'checkpoints' / f'checkpoint_{step:08d}')
    return job_dir

  return make


def _warnings(caplog):
  return '\n'.join(r.getMessage() for r in caplog.records
                   if r.levelname in ('WARNING', 'ERROR'))


# -- 0. Only the run's own checkpoints are written or deleted -----------------


def test_warm_start_reads_another_run_and_saves_in_its_own_dir(
    reference, tmp_path):
  before = _files(reference / 'checkpoints')
  job = tmp_path / 'warm'
  state = _run(job, restore_dir=reference / 'checkpoints',
               num_train_steps=14, save_max_to_keep=1)
  assert int(state.step) == 14
  assert _files(reference / 'checkpoints') == before  # Untouched.
  assert _steps(job / 'checkpoints') == [14]  # Started from step 10.


def test_missing_restore_dir_is_an_error_before_anything_is_written(tmp_path):
  job = tmp_path / 'job'
  with pytest.raises(checkpoints.CheckpointDirError,
                     match=r'--restore_checkpoint_dir=.*nowhere: no such '
                     r'directory'):
    _run(job, restore_dir=tmp_path / 'nowhere')
  assert not job.exists() and not (tmp_path / 'nowhere').exists()


@pytest.mark.parametrize('keep', [0, -1])
def test_save_max_to_keep_below_one_is_rejected(copy_of, keep):
  job = copy_of()
  before = _files(job)
  with pytest.raises(checkpoints.CheckpointDirError,
                     match=rf'task.train.save_max_to_keep={keep}: expected an '
                     'integer >= 1'):
    _run(job, num_train_steps=14, save_max_to_keep=keep)
  assert _files(job) == before


def test_save_max_to_keep_one_keeps_the_newest(copy_of):
  job = copy_of()
  _run(job, num_train_steps=12, save_max_to_keep=1)
  assert _steps(job / 'checkpoints') == [12]


# -- 1. Non-finite guard --------------------------------------------------------


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize('floats', [('b16',), ('f16', 'f64')])
def test_state_is_finite_finds_one_bad_entry_in_any_float_array(bad, floats):
  # With a bfloat16 array the state is checked by one compiled reduction;
  # with numpy's float dtypes only, by numpy reading the arrays in place.
  rng = np.random.default_rng(0)
  dtypes = {'b16': jax.numpy.bfloat16, 'f16': np.float16, 'f64': np.float64}
  state = {'w': rng.normal(size=(5, 3)).astype(np.float32),
           'count': np.array([7], np.int32), 'empty': np.zeros((0, 2))}
  for name in floats:
    state[name] = np.asarray(rng.normal(size=(4,)), dtypes[name])
  assert _nonfinite_guard.state_is_finite(jax.tree.map(jax.numpy.asarray,
                                                       state))
  for name, index in [('w', (4, 2))] + [(name, (0,)) for name in floats]:
    broken = dict(state)
    broken[name] = np.array(state[name], np.float32)
    broken[name][index] = bad
    broken[name] = broken[name].astype(state[name].dtype)
    assert not np.all(np.isfinite(np.asarray(broken[name], np.float32)))
    assert not _nonfinite_guard.state_is_finite(
        jax.tree.map(jax.numpy.asarray, broken)), name


@pytest.mark.parametrize('lr', [1e30, float('inf')])
def test_non_finite_run_stops_and_keeps_every_checkpoint(copy_of, lr):
  job = copy_of()
  before = _files(job / 'checkpoints')
  with pytest.raises(train.NonFiniteTrainingError) as error:
    _run(job, lr=lr, num_train_steps=30, save_interval_steps=1)
  message = str(error.value)
  assert 'max_consecutive_nonfinite_steps=3' in message
  assert 'for 3 consecutive steps' in message
  assert 'checkpoint_00000010 (resume from it with ' \
         '--restore_checkpoint_step=10)' in message
  assert '\n' not in message
  after = _files(job / 'checkpoints')
  assert {k: v for k, v in after.items() if k in before} == before
  # Whatever was saved after step 10 holds finite numbers only.
  for step in _steps(job / 'checkpoints'):
    for name, data in _arrays(
        job / 'checkpoints' / f'checkpoint_{step:08d}').items():
      assert np.all(np.isfinite(np.frombuffer(
          data, np.float32 if 'count' not in name and name != 'step'
          else np.int32))), (step, name)
  assert max(_steps(job / 'checkpoints')) <= 11


# -- 2. Checked restores: damaged checkpoints are moved aside -----------------


def _garbage(path):
  path.write_bytes(random.Random(0).randbytes(max(path.stat().st_size, 16)))


def _truncate(path):
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])


_LATEST = 'checkpoints/checkpoint_00000010'
_DAMAGES = {
    'missing_metadata': (lambda j: (j / _LATEST / 'metadata/metadata').unlink(),
                         'metadata/metadata: missing'),
    'garbage_metadata': (lambda j: _garbage(j / _LATEST / 'metadata/metadata'),
                         'metadata/metadata: not valid JSON'),
    'garbage_array': (
        lambda j: _garbage(j / _LATEST / 'state/mdl_vars.params.proj.w/0.0'),
        'state/mdl_vars.params.proj.w: array data unreadable'),
    'truncated_array': (
        lambda j: _truncate(
            j / _LATEST / 'state/opt_states_0_2.m.params.proj.w/0.0'),
        'state/opt_states_0_2.m.params.proj.w: array data unreadable'),
    'missing_chunk': (
        lambda j: (j / _LATEST / 'state/mdl_vars.params.proj.w/0.0').unlink(),
        'mdl_vars.params.proj.w/0.0: missing array chunk'),
    'input_state': (
        lambda j: (j / _LATEST / 'train_input/process_0-of-1.bin').write_bytes(
            b'{"position": 49}'),
        'process_0-of-1.bin: its SHA-256 differs'),
    'misnamed': (
        lambda j: (j / _LATEST).rename(j / 'checkpoints/checkpoint_00000031'),
        'state/step: holds step 10, but the directory is named for step 31'),
}


@pytest.mark.parametrize('damage', sorted(_DAMAGES))
def test_damaged_latest_is_moved_aside_and_the_run_resumes(
    reference, copy_of, caplog, damage):
  job = copy_of(keep=[6, 8, 10])
  damage_fn, expected = _DAMAGES[damage]
  damage_fn(job)
  moved = [p for p in (job / 'checkpoints').iterdir() if p.name.endswith(
      ('_00000010', '_00000031'))][0]
  moved_files = _files(moved)
  state = _run(job, num_train_steps=_STEPS)
  assert int(state.step) == _STEPS
  warnings = _warnings(caplog)
  assert expected in warnings
  assert 'Resuming from step 8, the newest checkpoint that reads' in warnings
  assert '--restore_checkpoint_step' in warnings
  aside = [p for p in (job / 'checkpoints').iterdir()
           if p.name.startswith(moved.name + '.damaged-')]
  assert len(aside) == 1 and _files(aside[0]) == moved_files  # Kept as is.
  # Re-trained from step 8: bit-identical to the uninterrupted run.
  assert _arrays(job / _LATEST) == _arrays(reference / _LATEST)


def test_empty_step_dir_is_ignored(reference, copy_of, caplog):
  job = copy_of(keep=[8, 10])
  (job / 'checkpoints/checkpoint_999').mkdir()
  state = _run(job, num_train_steps=12)
  assert int(state.step) == 12
  assert 'checkpoint_999 has no commit marker' in _warnings(caplog)
  assert _steps(job / 'checkpoints') == [8, 10, 12]


def test_explicit_damaged_or_missing_step_is_one_error(copy_of):
  job = copy_of(keep=[8, 10])
  _DAMAGES['garbage_array'][0](job)
  with pytest.raises(checkpoints.CheckpointDirError,
                     match=r'--restore_checkpoint_step=10: the checkpoint is '
                     r'damaged \(damaged checkpoint file .*proj.w: array data '
                     r'unreadable.*choose another step \(found: \[8, 10\]\)'):
    _run(job, restore_step=10)
  with pytest.raises(checkpoints.CheckpointNotFoundError,
                     match=r'--restore_checkpoint_step=5: no committed '
                     r'checkpoint .*checkpoint_00000005 \(steps found: '
                     r'\[8, 10\]\)'):
    _run(job, restore_step=5)
  assert _steps(job / 'checkpoints') == [8, 10]  # Nothing moved.


def test_going_back_to_an_older_step_sets_newer_ones_aside(reference, copy_of,
                                                           caplog):
  job = copy_of(keep=[6, 8, 10])
  before = _files(job / 'checkpoints/checkpoint_00000010')
  _run(job, restore_step=6)
  aside = [p for p in (job / 'checkpoints').iterdir()
           if '.superseded-' in p.name]
  assert sorted(p.name.split('.')[0] for p in aside) == [
      'checkpoint_00000008', 'checkpoint_00000010']
  assert _files([p for p in aside if '10.' in p.name][0]) == before
  assert 'Moved the superseded checkpoint' in _warnings(caplog)
  # Steps 7..10 were trained again and saved: the same numbers as before.
  assert _arrays(job / _LATEST) == _arrays(reference / _LATEST)


# -- 3. One writer per job dir ------------------------------------------------


def test_job_lock_names_its_holder_and_takes_over_stale_locks(tmp_path,
                                                             caplog):
  held = _job_lock.JobLock(tmp_path)
  held.acquire()
  with pytest.raises(_job_lock.JobLockedError,
                     match=rf'another run is training there \(host '
                     rf'{os.uname().nodename}, pid {os.getpid()};'):
    _run(tmp_path, num_train_steps=2)
  assert not (tmp_path / 'model_params.txt').exists()
  held.release()
  # A crashed run's lock: its line stays, the kernel dropped the flock.
  (tmp_path / 'train.lock').write_text(f'{os.uname().nodename} 999999 0\n')
  lock = _job_lock.JobLock(tmp_path)
  lock.acquire()
  assert 'Taking over the lock' in _warnings(caplog)
  assert (tmp_path / 'train.lock').read_text().split()[1] == str(os.getpid())
  lock.release()


# -- 5. A failing save stops the run ------------------------------------------


def test_failing_save_stops_the_run_with_one_line(tmp_path, monkeypatch):
  original = checkpoints.Checkpointer.save
  calls = []

  def save_then_lose_the_dir(self, step, *args, **kwargs):
    calls.append(step)
    if len(calls) == 2:  # The directory turns into a file (unwritable).
      self.wait_until_finished()
      shutil.rmtree(self.directory)
      pathlib.Path(self.directory).write_text('not a directory')
    return original(self, step, *args, **kwargs)

  monkeypatch.setattr(checkpoints.Checkpointer, 'save', save_then_lose_the_dir)
  start = time.monotonic()
  with pytest.raises(checkpoints.CheckpointSaveError,
                     match=rf'^Saving the checkpoint of step 2 in {tmp_path}/'
                     r'checkpoints failed: (FileExistsError|NotADirectoryError)'
                     r': .*$') as error:
    _run(tmp_path, num_train_steps=50)
  assert '\n' not in str(error.value)
  assert time.monotonic() - start < 30
  assert not (tmp_path / 'train.lock').read_text()  # Released.


def test_unwritable_checkpoint_dir_is_an_error_at_start(tmp_path):
  (tmp_path / 'checkpoints').write_text('a file')
  with pytest.raises(checkpoints.CheckpointDirError,
                     match=rf'Checkpoint directory {tmp_path}/checkpoints is '
                     'not writable'):
    _run(tmp_path)


# -- Eval jobs waiting for checkpoints ------------------------------------------


def test_eval_job_says_what_it_waits_for(reference, tmp_path, monkeypatch,
                                         caplog):
  caplog.set_level('INFO')
  target = tmp_path / 'job'
  sleeps = []

  def fake_sleep(seconds):
    sleeps.append(seconds)
    if len(sleeps) == 3:  # The training job writes its last checkpoint.
      shutil.copytree(reference / 'checkpoints/checkpoint_00000010',
                      target / 'checkpoints/checkpoint_00000010')

  monkeypatch.setattr(eval_lib.time, 'sleep', fake_sleep)
  monkeypatch.setattr(eval_lib, '_WAIT_LOG_SECONDS', 0.0)
  options = executors.RunOptions(job_log_dir=target, mode='eval',
                                 enable_summary_writer=False)
  eval_lib.evaluate(_configs(), options)
  lines = [r.getMessage() for r in caplog.records]
  waits = [m for m in lines if 'eval job waiting for a first checkpoint in '
           f'{target}/checkpoints (waited' in m]
  assert len(waits) == 3
  assert any(m.startswith('Eval job finished at step 10; eval: test/loss=')
             for m in lines)


# -- 4. Signals, and SIGKILL at random points (subprocesses) ------------------


def _cli(job_dir, *extra):
  return subprocess.Popen(
      [sys.executable, '-m', 'paxml.main', f'--exp={_EXP}',
       f'--job_log_dir={job_dir}', *_CLI_SETS, *extra],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      cwd='/', env={**os.environ, 'JAX_PLATFORMS': 'cpu'})


def _wait_for(proc, condition, timeout=300.0):
  """Polls `condition` while `proc` runs (every 5 ms: no core spent spinning,
  which on a 2-core machine would slow the trainer it waits for)."""
  end = time.monotonic() + timeout
  while time.monotonic() < end and proc.poll() is None:
    if condition():
      return True
    time.sleep(0.005)
  return False


def _has_tmp_checkpoint(ckpt_dir):
  try:
    return any('tmp' in n for n in os.listdir(ckpt_dir))
  except FileNotFoundError:
    return False


def _lock_taken(job_dir):
  try:
    return bool((job_dir / 'train.lock').read_text())
  except FileNotFoundError:
    return False


def test_sigkill_at_random_points_then_resume_bit_identically(reference,
                                                             tmp_path):
  job = tmp_path / 'job'
  ckpt_dir = job / 'checkpoints'
  rng = random.Random(19)
  kill_when = [lambda: _lock_taken(job),
               lambda: _has_tmp_checkpoint(ckpt_dir),
               lambda: _has_tmp_checkpoint(ckpt_dir)]
  for condition in kill_when:
    proc = _cli(job)
    hit = _wait_for(proc, condition)
    if rng.random() < 0.5:
      time.sleep(rng.uniform(0, 0.05))  # Somewhere around that point.
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert hit, 'the kill point was not reached'
  proc = _cli(job)
  out, _ = proc.communicate(timeout=600)
  assert proc.returncode == 0, out[-3000:]
  assert 'Training finished at step 10' in out
  assert _arrays(ckpt_dir / 'checkpoint_00000010') == _arrays(
      reference / _LATEST)


def test_ctrl_c_saves_at_the_next_step_and_exits_cleanly(tmp_path):
  job = tmp_path / 'job'
  proc = _cli(job, '--fdl_set=task.train.num_train_steps=100000')
  assert _wait_for(proc, lambda: _steps_or_none(job / 'checkpoints'))
  proc.send_signal(signal.SIGINT)
  out, _ = proc.communicate(timeout=600)
  assert proc.returncode == 0, out[-3000:]
  assert 'SIGINT received: a checkpoint will be saved at the next step' in out
  assert 'Traceback' not in out
  stopped = [l for l in out.splitlines() if 'Training stopped by SIGINT' in l]
  step = int(stopped[0].split('at step ')[1].split()[0])
  assert step in _steps(job / 'checkpoints')


def test_second_ctrl_c_exits_at_once(monkeypatch, caplog):
  exits = []
  monkeypatch.setattr(_preemption.os, '_exit', exits.append)
  before = signal.getsignal(signal.SIGINT)
  assert checkpoints.install_sigterm_handler()
  try:
    _preemption._on_signal(signal.SIGINT, None)
    assert checkpoints.preemption_requested() and not exits
    assert _preemption.requesting_signal() == 'SIGINT'
    _preemption._on_signal(signal.SIGINT, None)
    assert exits == [130]
    assert 'Second Ctrl-C: stopping at once' in _warnings(caplog)
  finally:
    checkpoints.install_sigterm_handler()  # Clears the request.
    checkpoints.uninstall_sigterm_handler()
  assert signal.getsignal(signal.SIGINT) is before
  assert not checkpoints.preemption_requested()


def _steps_or_none(ckpt_dir):
  try:
    return _steps(ckpt_dir)
  except FileNotFoundError:
    return None


def _steps_after(job, step):
  steps = _steps_or_none(job / 'checkpoints') or []
  return any(s > step for s in steps)
