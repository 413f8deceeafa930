"""Tests of checkpoint_types.py."""

from absl.testing import absltest
from paxml import checkpoint_types
from paxml import checkpoints
from praxis import py_utils

CheckpointType = checkpoint_types.CheckpointType


class _Model:

  def __init__(self, mesh_shape):
    self.mesh_shape = mesh_shape


class _Task:

  def __init__(self, mesh_shape):
    self.model = _Model(mesh_shape)


class CheckpointTypesTest(absltest.TestCase):

  def test_values_are_the_names_pax_writes(self):
    self.assertEqual(
        [t.value for t in CheckpointType],
        ['unspecified', 'flax', 'gda', 'persistence'],
    )
    self.assertEqual(CheckpointType('gda'), CheckpointType.GDA)
    self.assertEqual(CheckpointType.FLAX, 'flax')
    self.assertIs(checkpoints.CheckpointType, CheckpointType)

  def test_retrieve_checkpoint_type(self):
    retrieve = checkpoint_types.retrieve_checkpoint_type
    self.assertEqual(retrieve(False, _Task([1, 2])), CheckpointType.GDA)
    self.assertEqual(retrieve(True, _Task([1, 2])), CheckpointType.PERSISTENCE)
    if not py_utils.pmap_use_tensorstore():
      self.assertEqual(retrieve(False, _Task(None)), CheckpointType.FLAX)
      self.assertEqual(retrieve(True, _Task(None)), CheckpointType.FLAX)

  def test_task_without_model_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'must have a `model`'):
      checkpoint_types.retrieve_checkpoint_type(False, object())


if __name__ == '__main__':
  absltest.main()
