"""Tests of `train.external_checkpoint_path`: a run starts from another format."""

import pathlib
import shutil
import tempfile

from absl.testing import absltest
import jax
import numpy as np
from paxml import _config_checks
from paxml import checkpoints
from paxml import executors
from paxml import train
from paxml import train_states
from paxml import trainer_lib
from paxml.tasks.test import regression

_EXP = 'tasks.test.regression.RegressionExperiment'
_START = 0.5  # Every float the handler returns.


class _ConstantHandler:
  """A user's handler in Pax's protocol: a TrainState of constants at step 5.

  It stands for a reader of another format (it ignores the files there) and
  records what the runner passed it.
  """

  def __init__(self):
    self.calls = []

  def restore(self, directory, item=None, partitioner=None,
              transformations=None):
    self.calls.append((directory, item, partitioner, transformations))
    shapes = item.unpadded_global_shapes
    state = jax.tree.map(
        lambda s: np.full(s.shape, _START, s.dtype), shapes)
    return state.replace(step=np.array(5, shapes.step.dtype))


class ExternalCheckpointTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.job = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.job, ignore_errors=True)

  def _run(self, steps, handler, path='/elsewhere/model', **train_fields):
    configs = train.ExperimentConfigs.from_experiment(
        regression.RegressionExperiment(), _EXP)
    train_p = configs.task.train
    train_p.num_train_steps = steps
    train_p.eval_interval_steps = 0
    train_p.decode_interval_steps = 0
    train_p.external_checkpoint_path = path
    train_p.external_checkpoint_handler = handler
    for name, value in train_fields.items():
      setattr(train_p, name, value)
    return train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=self.job, enable_summary_writer=False))

  def test_a_new_run_starts_from_the_handlers_state(self):
    handler = _ConstantHandler()
    final = self._run(6, handler, restore_transformations={'a': 'b'})
    self.assertLen(handler.calls, 1)
    directory, item, partitioner, transformations = handler.calls[0]
    self.assertEqual(str(directory), '/elsewhere/model')
    self.assertIsInstance(item, trainer_lib.TrainStateMetadata)
    self.assertIsNotNone(partitioner)
    self.assertEqual(transformations, {'a': 'b'})
    # It ran one step from step 5; Adam's first update moves each weight by
    # the learning rate (0.05): the sign of its gradient times lr.
    self.assertEqual(int(final.step), 6)
    ckpt = checkpoints.Checkpointer(self.job)
    self.addCleanup(ckpt.close)
    self.assertEqual(ckpt.latest_step(), 6)
    self.assertIsInstance(final, train_states.TrainState)
    for w in jax.tree.leaves(final.mdl_vars):
      np.testing.assert_allclose(np.abs(np.asarray(w) - _START), 0.05,
                                 rtol=1e-3)

    # Resumed, the run reads its own checkpoint and not the external one.
    again = _ConstantHandler()
    final = self._run(7, again)
    self.assertEqual(again.calls, [])
    self.assertEqual(int(final.step), 7)

  def test_a_state_of_another_structure_is_refused_by_name(self):

    class NoOptimizer(_ConstantHandler):

      def restore(self, *args, **kwargs):
        return super().restore(*args, **kwargs).replace(opt_states=[])

    with self.assertRaisesRegex(
        ValueError, r"external_checkpoint_handler \(NoOptimizer\) read "
        r"/elsewhere/model: its state .* does not have the model's TrainState"):
      self._run(6, NoOptimizer())

  def test_the_path_needs_its_handler_and_transformations_need_the_path(self):
    train_p = train.ExperimentConfigs.from_experiment(
        regression.RegressionExperiment(), _EXP).task.train
    train_p.external_checkpoint_path = '/elsewhere/model'
    with self.assertRaisesRegex(
        ValueError, r"external_checkpoint_path='/elsewhere/model'; expected "
        r'task\.train\.external_checkpoint_handler too'):
      _config_checks.check_external_checkpoint(train_p)
    train_p.external_checkpoint_path = None
    train_p.restore_transformations = {'a': 'b'}
    with self.assertRaisesRegex(
        ValueError, r"restore_transformations=\{'a': 'b'\}; expected None"):
      _config_checks.check_external_checkpoint(train_p)
    with self.assertRaisesRegex(ValueError, 'external_checkpoint_handler'):
      self._run(3, None)
    self.assertFalse((self.job / 'checkpoints').exists())


if __name__ == '__main__':
  absltest.main()
