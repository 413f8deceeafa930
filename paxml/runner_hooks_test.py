"""An experiment's runner hooks, as in Pax: its own programs, partitioner and
executor; the train program's `update_state`; the step-0 text summaries;
distinct input names."""

import pathlib
import tempfile

from absl.testing import absltest
from paxml import decode_programs
from paxml import eval_lib
from paxml import executors
from paxml import partitioning
from paxml import programs
from paxml import train
from paxml.tasks.test import regression
from praxis import base_hyperparams
from tensorboard.backend.event_processing import event_accumulator


class _Recorded(regression.RegressionExperiment):
  """4 steps, an eval every 2; what the hooks were asked is in `calls`."""

  NUM_TRAIN_STEPS = 4
  calls: list = []

  def task(self):
    task_p = super().task()
    task_p.train.eval_interval_steps = 2
    task_p.train.decode_interval_steps = 0
    return task_p


class _CountingTrainProgram(programs.SingleTaskTrainProgram):

  def __init__(self, calls):
    super().__init__()
    self._calls = calls

  def update_state(self, state, step):
    self._calls.append(('update_state', step, int(state.step)))
    return super().update_state(state, step)


class _CountingEvalProgram(programs.SingleTaskEvalProgram):

  def __init__(self, input_p, calls):
    super().__init__(input_p)
    self._calls = calls

  def run(self, state, step):
    self._calls.append(('eval', step))
    return super().run(state, step)


class _Partitioner(partitioning.PjitPartitioner):

  def __init__(self, calls, task):
    super().__init__(init_is_eval=False, reshard_inputs=True, task=task)
    self._calls = calls

  def setup(self, *args, **kwargs):
    self._calls.append(('partitioner',))
    return super().setup(*args, **kwargs)


class _Executor(executors.DefaultExecutor):

  def __init__(self, calls):
    super().__init__()
    self._calls = calls

  def start(self):
    self._calls.append(('executor',))
    return super().start()


class Hooked(_Recorded):

  def __init__(self):
    super().__init__()
    self.calls = []

  def train_programs(self):
    return [_CountingTrainProgram(self.calls)]

  def eval_programs(self):
    return [_CountingEvalProgram(p, self.calls) for p in self.eval_datasets()]

  def partitioner(self):
    return _Partitioner(self.calls, base_hyperparams.instantiate(self.task()))

  def executor(self):
    return _Executor(self.calls)


def _texts(summary_dir: pathlib.Path) -> dict[str, str]:
  acc = event_accumulator.EventAccumulator(str(summary_dir))
  acc.Reload()
  texts = {}
  for tag in acc.Tags()['tensors']:
    if tag.endswith('/text_summary'):
      (event,) = acc.Tensors(tag)
      texts[tag[:-len('/text_summary')]] = (
          event.tensor_proto.string_val[0].decode())
  return texts


class RunnerHooksTest(absltest.TestCase):

  def test_training_runs_the_experiments_own_parts(self):
    experiment = Hooked()
    job_dir = pathlib.Path(tempfile.mkdtemp())
    state = train.train_and_evaluate(experiment, job_dir, eval_on_test=True,
                                     enable_checkpoint_saving=False)
    self.assertEqual(int(state.step), 4)
    calls = experiment.calls
    self.assertEqual(calls[:2], [('partitioner',), ('executor',)])
    # The hook runs before each step, on the state of that step.
    self.assertEqual([c for c in calls if c[0] == 'update_state'],
                     [('update_state', s, s) for s in range(4)])
    self.assertEqual([c for c in calls if c[0] == 'eval'],
                     [('eval', 2), ('eval', 4)])

  def test_eval_job_runs_the_experiments_eval_programs(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(_Recorded(), job_dir)
    experiment = Hooked()
    eval_lib.evaluate(experiment, job_dir, enable_summary_writer=False)
    self.assertIn(('eval', 4), experiment.calls)
    self.assertIn(('partitioner',), experiment.calls)

  def test_default_hooks_are_paxs(self):
    experiment = _Recorded()
    (train_program,) = experiment.train_programs()
    self.assertIsInstance(train_program, programs.SingleTaskTrainProgram)
    evals = experiment.eval_programs()
    self.assertEqual([type(p) for p in evals],
                     [programs.SingleTaskEvalProgram] * len(
                         experiment.eval_datasets()))
    self.assertEqual([type(p) for p in experiment.decode_programs()],
                     [decode_programs.SingleTaskDecodeProgram] * len(
                         experiment.decode_datasets()))
    self.assertNotEmpty(experiment.decode_datasets())
    self.assertIsNone(experiment.partitioner())
    self.assertIsNone(experiment.executor())

  def test_step_0_texts_name_the_variables_and_count_them(self):
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(_Recorded(), job_dir,
                             enable_checkpoint_saving=False)
    texts = _texts(job_dir / 'summaries' / 'train')
    # The regression's one variable: proj.w, 4 x 2; batches of 8.
    self.assertEqual(texts['Total Num Params'], '8')
    self.assertEqual(texts['Global batch size'], '8')
    self.assertIn('proj', texts['Model'])
    self.assertIn("'4x2'", texts['Model'])

  def test_two_eval_inputs_with_one_name_are_refused_before_writing(self):

    class Twice(_Recorded):

      def datasets(self):
        datasets = super().datasets()
        return datasets + [d for d in datasets if not d.is_training]

    job_dir = pathlib.Path(tempfile.mkdtemp()) / 'job'
    with self.assertRaisesRegex(
        base_hyperparams.ConfigError,
        r"eval_datasets\[0\] and eval_datasets\[1\] are both named 'test'"):
      train.train_and_evaluate(Twice(), job_dir, eval_on_test=True)
    self.assertFalse(job_dir.exists())


if __name__ == '__main__':
  absltest.main()
