"""Tests of checkpoint_creators.py."""

import datetime
import shutil
import tempfile
import types

from absl.testing import absltest
from etils import epath
import jax
import numpy as np
from paxml import checkpoint_creators
from paxml import checkpoints
from paxml import train_states
from praxis import test_utils

CheckpointType = checkpoints.CheckpointType
P = jax.sharding.PartitionSpec


class _FakePartitioner:
  """Initialises to `init` unless given a restored state."""

  def __init__(self, mesh, init):
    self.global_mesh = mesh
    self.init = init

  def initialize_prng_key_and_train_state(self, key, state, checkpoint_type):
    del checkpoint_type
    if state is not None:
      return key, state, None
    return key, self.init, 'random_init'


def _task_p(mesh_shape, interval=2, metadata_key=None):
  return types.SimpleNamespace(
      train=types.SimpleNamespace(save_max_to_keep=None,
                                  save_interval_steps=interval,
                                  save_keep_interval_duration=None,
                                  tensorstore_metadata_key=metadata_key),
      model=types.SimpleNamespace(ici_mesh_shape=mesh_shape))


class CheckpointCreatorsTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.job = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.job, ignore_errors=True)

  def test_parse_duration(self):
    parse = checkpoint_creators._parse_duration
    self.assertIsNone(parse(None))
    self.assertEqual(parse('90'), datetime.timedelta(seconds=90))
    self.assertEqual(parse('30s'), datetime.timedelta(seconds=30))
    self.assertEqual(parse('15m'), datetime.timedelta(seconds=900))
    self.assertEqual(parse('2h'), datetime.timedelta(seconds=7200))
    self.assertEqual(parse('1d'), datetime.timedelta(seconds=86400))
    with self.assertRaisesRegex(ValueError, 'Unable to parse'):
      parse('3w')

  def test_train_then_resume_on_a_mesh(self):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 2),
                             ('data', 'mdl'))
    w = np.arange(8.0, dtype=np.float32).reshape(2, 4)
    state = train_states.TrainState(
        step=np.array(0, np.uint32), mdl_vars={'params': {'w': w}},
        opt_states=[])
    specs = train_states.TrainState(step=P(), mdl_vars={'params': {'w': P(
        None, 'mdl')}}, opt_states=[])
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                          state)
    metadata = types.SimpleNamespace(
        padded_global_shapes=shapes, unpadded_global_shapes=shapes,
        partition_specs=specs)
    ckpt = checkpoint_creators._create_checkpointer(
        _task_p([1, 2]), self.job, CheckpointType.GDA, None,
        enable_async_checkpointing=False)
    self.assertIsNone(ckpt.step_to_restore)
    got, provenance, num_params, _ = ckpt.get_model_states(
        _FakePartitioner(mesh, state), metadata, jax.random.PRNGKey(0))
    self.assertIs(got, state)
    self.assertEqual(provenance, 'random_init')
    self.assertEqual(num_params, 8)
    for step in range(1, 6):
      state = state.replace(step=np.array(step, np.uint32),
                            mdl_vars={'params': {'w': w + step}})
      ckpt.save_if_needed(step, state)
    ckpt.save_final(5, partitioned_train_state=state)
    ckpt.wait_until_finished()
    self.assertEqual(sorted(ckpt.checkpoint_manager.all_steps()), [1, 2, 4, 5])

    again = checkpoint_creators._create_checkpointer(
        _task_p([1, 2]), self.job, CheckpointType.GDA, None)
    self.assertEqual(again.step_to_restore, 5)
    restored, provenance, _, _ = again.get_model_states(
        _FakePartitioner(mesh, None), metadata, jax.random.PRNGKey(0))
    self.assertIsNone(provenance)
    self.assertArraysEqual(restored.mdl_vars['params']['w'], w + 5)
    self.assertEqual(restored.mdl_vars['params']['w'].sharding,
                     jax.sharding.NamedSharding(mesh, P(None, 'mdl')))

  def test_a_refused_checkpointer_makes_nothing(self):
    # Refused before its manager exists: a manager starts cleaning up the
    # directory's unfinished checkpoints on a background thread as it is
    # made, and one left behind by the refusal could remove the temporary
    # directory of a checkpoint that a later manager is writing.
    with self.assertRaisesRegex(ValueError, 'FLAX checkpointing not'):
      checkpoint_creators._create_checkpointer(
          _task_p([1, 1]), self.job, CheckpointType.FLAX, None)
    with self.assertRaisesRegex(ValueError, 'tensorstore_metadata_key'):
      checkpoint_creators._create_checkpointer(
          _task_p([1, 1], metadata_key='a/b'), self.job, CheckpointType.GDA,
          None)
    self.assertEqual(list(self.job.iterdir()), [])

  def test_the_tasks_tensorstore_metadata_key_names_the_headers(self):
    self.addCleanup(checkpoints.reregister_type_handlers, '.zarray')
    ckpt = checkpoint_creators._create_checkpointer(
        _task_p([1, 1], metadata_key='zarr.json'), self.job,
        CheckpointType.GDA, None, enable_async_checkpointing=False)
    w = np.arange(6.0, dtype=np.float32)
    state = train_states.TrainState(step=np.array(3, np.uint32),
                                    mdl_vars={'w': w}, opt_states=[])
    ckpt.save_final(3, partitioned_train_state=state)
    state_dir = ckpt.checkpoint_manager.directory / 'checkpoint_00000003' / (
        'state')
    self.assertTrue((state_dir / 'mdl_vars.w' / 'zarr.json').exists())
    self.assertFalse((state_dir / 'mdl_vars.w' / '.zarray').exists())
    restored = checkpoints.restore_checkpoint(
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state),
        ckpt.checkpoint_manager.directory)
    self.assertArraysEqual(restored.mdl_vars['w'], w)

  def test_pjit_refuses_flax_and_pmap_writes_flax(self):
    with self.assertRaisesRegex(ValueError, 'FLAX checkpointing not'):
      checkpoint_creators._create_checkpointer(
          _task_p([1, 1]), self.job, CheckpointType.FLAX, None)
    ckpt = checkpoint_creators._create_checkpointer(
        _task_p(None, interval=1), self.job, CheckpointType.FLAX, None,
        enable_async_checkpointing=False)
    self.assertIsInstance(ckpt,
                          checkpoint_creators._OrbaxPmapTrainingCheckpointer)
    state = train_states.TrainState(step=np.array(3, np.uint32),
                                    mdl_vars={'w': np.ones(2, np.float32)},
                                    opt_states=[])
    ckpt.save_final(3, partitioned_train_state=state)
    self.assertTrue((self.job / 'checkpoints' / 'checkpoint_3' / 'state' /
                     'checkpoint').is_file())
    with self.assertRaisesRegex(NotImplementedError, 'Persistence'):
      checkpoint_creators._create_checkpointer(
          _task_p(None), self.job, CheckpointType.FLAX, None,
          maybe_use_persistence_checkpointing=True)


if __name__ == '__main__':
  absltest.main()
