"""Tests of the command's garbage-collector settings during set-up."""

import gc
import weakref

from absl.testing import absltest
import jax
from paxml import _startup_gc
from paxml import partitioning_test
from paxml import programs_test


def _generations_collected(make_objects) -> list[int]:
  """The generations the collector visited while `make_objects()` ran."""
  seen = []

  def callback(phase, info):
    if phase == 'start':
      seen.append(info['generation'])

  gc.callbacks.append(callback)
  try:
    kept = make_objects()
  finally:
    gc.callbacks.remove(callback)
  del kept
  return seen


def _many_live_containers():
  # Each list is tracked by the collector and stays alive: the kind of
  # heap growth set-up makes.
  return [[i] for i in range(300_000)]


class StartupGcTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self._thresholds = gc.get_threshold()
    self._frozen = gc.get_freeze_count()
    self.assertFalse(_startup_gc.relaxed())

  def tearDown(self):
    if _startup_gc.relaxed():
      _startup_gc.settle()
    gc.unfreeze()
    gc.set_threshold(*self._thresholds)
    super().tearDown()

  def test_settle_without_relax_changes_nothing(self):
    gc.set_threshold(900, 11, 12)
    _startup_gc.settle()
    self.assertEqual(gc.get_threshold(), (900, 11, 12))
    self.assertEqual(gc.get_freeze_count(), self._frozen)

  def test_relaxed_collects_young_objects_only_and_less_often(self):
    defaults = _generations_collected(_many_live_containers)
    # The reference: CPython's own settings visit older generations too.
    self.assertTrue(any(g >= 1 for g in defaults), defaults)
    _startup_gc.relax()
    relaxed = _generations_collected(_many_live_containers)
    self.assertTrue(relaxed)  # The young generation is still collected,
    self.assertEqual(set(relaxed), {0})  # only it,
    self.assertLess(len(relaxed), len(defaults))  # less often:
    self.assertLessEqual(len(relaxed),
                         300_000 // _startup_gc.YOUNG_THRESHOLD + 1)

  def test_relaxed_still_frees_young_garbage_cycles(self):
    _startup_gc.relax()
    gc.collect()

    class Node:
      pass

    def cycles():
      for _ in range(3 * _startup_gc.YOUNG_THRESHOLD):
        node = Node()
        node.me = node
    freed = []
    gc.callbacks.append(
        lambda phase, info: freed.append(info['collected'])
        if phase == 'stop' else None)
    try:
      cycles()
    finally:
      gc.callbacks.pop()
    self.assertGreater(sum(freed), _startup_gc.YOUNG_THRESHOLD)

  def test_settle_freezes_set_up_and_restores_the_thresholds(self):
    gc.set_threshold(900, 11, 12)
    _startup_gc.relax()
    _startup_gc.relax()  # Twice: the first thresholds are still restored.
    self.assertEqual(gc.get_threshold()[0], _startup_gc.YOUNG_THRESHOLD)
    kept = _many_live_containers()
    _startup_gc.settle()
    self.assertFalse(_startup_gc.relaxed())
    self.assertEqual(gc.get_threshold(), (900, 11, 12))
    self.assertGreaterEqual(gc.get_freeze_count() - self._frozen, len(kept))
    _startup_gc.settle()  # Once only.
    self.assertEqual(gc.get_threshold(), (900, 11, 12))

  def test_settle_frees_older_garbage_cycles_before_freezing(self):
    _startup_gc.relax()

    class Node:
      pass

    node = Node()
    node.me = node
    alive = weakref.ref(node)
    gc.collect(0)  # It outlives a young collection: now in an older one.
    del node  # Garbage, in a cycle.
    _many_live_containers()  # Young collections only, while relaxed.
    self.assertIsNotNone(alive())
    _startup_gc.settle()
    self.assertIsNone(alive())  # Collected, not frozen.

  def test_end_setup_logs_once_and_keeps_the_collector_relaxed(self):
    _startup_gc.relax()
    with self.assertLogs('absl', level='INFO') as logs:
      _startup_gc.end_setup('here')
      _startup_gc.end_setup('there')  # Once only.
    self.assertLen(logs.output, 1)
    self.assertRegex(logs.output[0],
                     r'Set-up took [0-9.]+ s \(command start to here\)')
    self.assertEqual(gc.get_threshold()[0], _startup_gc.YOUNG_THRESHOLD)
    self.assertTrue(_startup_gc.relaxed())
    with self.assertLogs('absl', level='INFO') as logs:
      _startup_gc.settle('there')  # Set-up is not logged a second time.
    self.assertLen(logs.output, 1)
    self.assertIn('one full garbage collection', logs.output[0])

  def test_train_program_settles_once_its_first_step_is_done(self):
    task = partitioning_test._task(
        None, train_fields=dict(summary_interval_steps=2, num_train_steps=3))
    _, state, program = programs_test._setup_train(
        task, programs_test._input(is_training=True))
    _startup_gc.relax()
    out = program.run(state, 0)
    # Dispatched: set-up is over, but the collection waits for the step.
    self.assertTrue(_startup_gc.relaxed())
    jax.block_until_ready(out.loss)
    out = program.run(out.state, 1)
    self.assertFalse(_startup_gc.relaxed())
    self.assertGreater(gc.get_freeze_count(), self._frozen)
    program.run(out.state, 2)
    program.shutdown()


if __name__ == '__main__':
  absltest.main()
