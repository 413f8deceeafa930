"""Bad flags, config values and paths: one line, exit status 2, no traceback.

Each case runs `python -m paxml.main` as a user would; every run stops
before JAX compiles anything (about 3 s each), and the runs go two at a
time.
"""

from concurrent import futures
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest

_EXP = 'tasks.test.regression.RegressionExperiment'
_SET = '--fdl_set='


def _env(**extra: str) -> dict[str, str]:
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('PAX_DEBUG', None)
  env.update(extra)
  return env


def _run(args: list[str], env: dict[str, str] | None = None,
         prefix: tuple[str, ...] = ('-m', 'paxml.main')
         ) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *prefix, *args], capture_output=True,
                        text=True, timeout=600, env=env or _env(),
                        check=False)


class BadInputTest(absltest.TestCase):
  """The cases run once (in parallel), each test checks its own."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.file = os.path.join(cls.tmp, 'a_file')
    with open(cls.file, 'w') as f:
      f.write('x')
    cls.job = os.path.join(cls.tmp, 'job')  # Never created by a bad run.
    exp = [f'--exp={_EXP}', f'--job_log_dir={cls.job}']
    cls.cases = {
        'abc': exp + [_SET + 'task.train.num_train_steps=abc'],
        'ten': exp + [_SET + "task.train.num_train_steps='ten'"],
        'fast': exp + [_SET + "task.train.learner.optimizer.learning_rate="
                             "'fast'"],
        'float17': exp + [_SET + "task.model.fprop_dtype='float17'"],
        'int8': exp + [_SET + "task.model.fprop_dtype='int8'"],
        'negative': exp + [_SET + 'task.train.num_train_steps=-5'],
        'metadata_key': exp + [
            _SET + "task.train.tensorstore_metadata_key='a/b'"],
        'hosts': exp + ['--num_hosts=2', '--host_idx=1'],
        'host_idx': exp + ['--num_hosts=2', '--host_idx=2',
                           '--server_addr=localhost:1234'],
        'dir_is_file': [f'--exp={_EXP}', f'--job_log_dir={cls.file}'],
        'dir_under_file': [f'--exp={_EXP}',
                           f'--job_log_dir={cls.file}/sub'],
        'fdl_config_file': exp + ['--fdl_config_file=cfg.json'],
        'config_file_missing': [f'--job_log_dir={cls.job}',
                                f'--fdl_config_file={cls.tmp}/none.json'],
        'config_file_garbage': [f'--job_log_dir={cls.job}',
                                f'--fdl_config_file={cls.file}'],
        'unknown_flag': exp + ['--modee=train'],
        'bad_enum': exp + ['--mode=trian'],
        'unknown_exp': ['--exp=NoSuchExperimentAnywhere',
                        f'--job_log_dir={cls.job}'],
        'misspelt_exp': ['--exp=tasks.test.regression.RegresionExperiment',
                         f'--job_log_dir={cls.job}'],
    }
    with futures.ThreadPoolExecutor(2) as pool:
      runs = {name: pool.submit(_run, args)
              for name, args in cls.cases.items()}
      runs['debug'] = pool.submit(
          _run, cls.cases['negative'], _env(PAX_DEBUG='1'))
      runs['help'] = pool.submit(
          _run, ['--help'], None,
          ('-c', "import sys; sys.argv[0] = 'paxml'; "
                 'from paxml.main import main; main()'))
      runs['suffix'] = pool.submit(
          _run, [], None,
          ('-c', 'from paxml import experiment_registry as r; '
                 "print('FOUND', r.load('RegressionExperiment').__module__, "
                 "r.load('regression.RegressionSignalExperiment').__name__)"))
      cls.results = {name: run.result() for name, run in runs.items()}

  def assert_one_line_error(self, case: str, *parts: str) -> str:
    """The case exited with 2 and printed `error: ...` with `parts`."""
    result = self.results[case]
    self.assertEqual(result.returncode, 2, result.stderr[-3000:])
    self.assertNotIn('Traceback', result.stderr)
    errors = [line for line in result.stderr.splitlines()
              if line.startswith('error: ')]
    self.assertLen(errors, 1, result.stderr[-3000:])
    for part in parts:
      self.assertIn(part, errors[0])
    self.assertFalse(os.path.exists(self.job), 'a bad run wrote its job dir')
    return errors[0]

  def test_a_value_that_is_not_a_literal(self):
    self.assert_one_line_error(
        'abc', '--fdl_set=task.train.num_train_steps=abc',
        "'abc' is not a Python literal",
        "task.train.num_train_steps='abc'")

  def test_a_zarr_header_name_that_is_not_a_file_name(self):
    self.assert_one_line_error(
        'metadata_key', "task.train.tensorstore_metadata_key='a/b'",
        "expected None or the file name of each array's zarr header")

  def test_a_string_in_a_number_field(self):
    self.assert_one_line_error(
        'ten', "task.train.num_train_steps='ten'", 'expected a number')
    self.assert_one_line_error(
        'fast', "task.train.learner.optimizer.learning_rate='fast'",
        'expected a number')

  def test_dtypes(self):
    self.assert_one_line_error(
        'float17', "task.model.fprop_dtype='float17' is not a dtype")
    self.assert_one_line_error(
        'int8', "task.model.fprop_dtype='int8' is not a float dtype")

  def test_negative_steps(self):
    self.assert_one_line_error(
        'negative', 'task.train.num_train_steps=-5',
        'expected an integer >= 0')

  def test_hosts(self):
    self.assert_one_line_error(
        'hosts', '--num_hosts=2 --host_idx=1 without --server_addr')
    self.assert_one_line_error('host_idx', '--host_idx=2: expected 0..1')

  def test_job_log_dir(self):
    self.assert_one_line_error(
        'dir_is_file', f'--job_log_dir={self.file}: is a file')
    self.assert_one_line_error(
        'dir_under_file', f'--job_log_dir={self.file}/sub: {self.file} is '
        'a file')

  @absltest.skipIf(os.geteuid() == 0, 'root can write anywhere')
  def test_unwritable_job_log_dir(self):
    locked = os.path.join(self.tmp, 'locked')
    os.mkdir(locked, 0o500)
    result = _run([f'--exp={_EXP}', f'--job_log_dir={locked}/job'])
    self.assertEqual(result.returncode, 2)
    self.assertIn(f'{locked} is not writable', result.stderr)

  def test_flags_the_runner_does_not_honour(self):
    self.assert_one_line_error(
        'fdl_config_file', '--fdl_config_file=cfg.json cannot be combined '
        'with --exp')

  def test_fiddle_config_file(self):
    self.assert_one_line_error(
        'config_file_missing', f'--fdl_config_file={self.tmp}/none.json: no '
        'such file')
    self.assert_one_line_error(
        'config_file_garbage', f'--fdl_config_file={self.file}: cannot read '
        'a Fiddle config from it')

  def test_flag_parsing_errors(self):
    self.assert_one_line_error('unknown_flag', "Unknown command line flag "
                               "'modee'", 'Did you mean: mode')
    self.assert_one_line_error('bad_enum', 'flag --mode=trian',
                               'value should be one of')

  def test_unknown_experiment(self):
    self.assert_one_line_error(
        'unknown_exp', '--exp=NoSuchExperimentAnywhere: Could not find '
        'experiment `NoSuchExperimentAnywhere`: no registered experiment and '
        'no class of the catalogue (paxml.tasks) has that name.')
    self.assert_one_line_error(
        'misspelt_exp',
        'Could not find experiment `tasks.test.regression.RegresionExperiment`',
        'Closest registered: paxml.tasks.test.regression.RegressionExperiment')

  def test_debug_shows_the_traceback(self):
    result = self.results['debug']
    self.assertNotEqual(result.returncode, 0)
    self.assertIn('Traceback', result.stderr)
    self.assertIn('task.train.num_train_steps=-5', result.stderr)

  def test_help_lists_the_run_flags(self):
    result = self.results['help']
    out = result.stdout + result.stderr
    for flag in ('exp', 'job_log_dir', 'mode', 'fdl_set',
                 'restore_checkpoint_dir', 'library_logs',
                 'debug_tracebacks'):
      self.assertRegex(out, rf'\n  --(\[no\])?{flag}:')

  def test_experiment_suffix_resolves_over_the_catalogue(self):
    result = self.results['suffix']
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    self.assertIn('FOUND paxml.tasks.test.regression '
                  'RegressionSignalExperiment', result.stdout)


if __name__ == '__main__':
  absltest.main()
