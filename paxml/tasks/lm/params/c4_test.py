"""C4 experiment recipes: derived MLPerf hyper-parameters, early stopping."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
from paxml import experiment_registry
from paxml.tasks.lm.params import c4


class MLPerfDerivedHParamsTest(parameterized.TestCase):

  @parameterized.parameters(1536, 4096)
  def test_learning_rate_and_cosine_steps_follow_the_global_batch(self, gbs):
    devices = jax.device_count()

    class Exp(c4.C4SpmdPipelineGpt3AdamMLPerfHP):
      PERCORE_BATCH_SIZE = gbs / devices

    optimizer = Exp().task().train.learner.optimizer
    # MLPerf's GPT-3 reference: 2e-5 up to 3,584 sequences, 3e-5 above; 265
    # warmup and 108,600 decay steps at batch 1536, inversely scaled.
    self.assertEqual(optimizer.learning_rate, 2e-5 if gbs <= 3584 else 3e-5)
    warmup = math.ceil(265 * 1536 / gbs - 1e-6)
    self.assertEqual(optimizer.lr_schedule.warmup_steps, warmup)
    self.assertEqual(optimizer.lr_schedule.decay_start, warmup + 1)
    self.assertEqual(optimizer.lr_schedule.decay_end,
                     math.ceil(108600 * 1536 / gbs - 1e-6))

  def test_explicit_values_win(self):
    task_p = c4.C4SpmdPipelineGpt3AdamMLPerfHPBS2k512Replicas().task()
    self.assertEqual(task_p.train.learner.optimizer.learning_rate, 2e-5)
    self.assertEqual(task_p.train.learner.optimizer.lr_schedule.decay_end,
                     81450)

  def test_unknown_schedule_is_named(self):

    class Exp(c4.C4SpmdAdam):
      LR_SCHEDULE = 'constant'

    with self.assertRaisesRegex(ValueError, "LR_SCHEDULE='constant'"):
      Exp().task()


class CatalogueTest(absltest.TestCase):

  def test_limit_steps_and_registration(self):
    for name, steps in (('LmCloudSpmdAdamLimitSteps', 4000),
                        ('C4Spmd1BAdam4ReplicasLimitSteps', 15000)):
      cls = experiment_registry.get(f'tasks.lm.params.c4.{name}')
      self.assertEqual(cls().task().train.num_train_steps, steps)
    self.assertIsNotNone(experiment_registry.get(
        'tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam8Replicas'))

  def test_early_stopping_fn(self):
    stop = c4.EarlyStoppingFn(target_log_pplx=2.5)
    key = 'eval_test_C4Validation/metrics/log_pplx'
    self.assertTrue(stop({key: 2.5}, None, 10, False, None))
    self.assertFalse(stop({key: 2.6}, None, 10, False, None))
    self.assertFalse(stop({'other': 1.0}, None, 10, False, None))


if __name__ == '__main__':
  absltest.main()
