"""Tests of checkpoints.py and checkpoint_paths.py on 8 virtual CPU devices."""

import os
import shutil
import signal
import tempfile

from absl.testing import absltest
from etils import epath
import jax
from jax import numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from paxml import checkpoint_paths
from paxml import checkpoints
from paxml import train_states
from praxis import py_utils
from praxis import test_utils

NestedMap = py_utils.NestedMap
Mesh = jax.sharding.Mesh
NamedSharding = jax.sharding.NamedSharding
P = jax.sharding.PartitionSpec

# Leaf path -> partition spec on a ('data', 'mdl') mesh.
_SPECS = {
    'w': P('data', 'mdl'),
    'b': P('mdl'),
    'count': P(),
    'mu_w': P(None, 'mdl'),
}


def _mesh(shape):
  n = int(np.prod(shape))
  return Mesh(np.array(jax.devices()[:n]).reshape(shape), ('data', 'mdl'))


def _state_tree(leaf):
  """A TrainState whose leaves are `leaf(name)`."""
  return train_states.TrainState(
      step=leaf('step'),
      mdl_vars={'params': NestedMap(w=leaf('w'), b=leaf('b'))},
      opt_states=[NestedMap(count=leaf('count'), mu=NestedMap(w=leaf('mu_w')))],
  )


class CheckpointTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.values = {
        'step': np.array(7, np.uint32),
        'w': self.np_rng.standard_normal((8, 16)).astype(np.float32),
        'b': self.np_rng.standard_normal((16,)).astype(np.float32),
        'count': np.array(3, np.int32),
        'mu_w': self.np_rng.standard_normal((8, 16)).astype(np.float32),
    }
    self.job_dir = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.job_dir, ignore_errors=True)

  def _shardings(self, mesh):
    return {k: NamedSharding(mesh, _SPECS.get(k, P())) for k in self.values}

  def _at_step(self, step):
    """States built from now on hold `step` (restores check it)."""
    self.values['step'] = np.array(step, np.uint32)

  def _state(self, mesh):
    shardings = self._shardings(mesh)
    return _state_tree(
        lambda k: jax.device_put(self.values[k], shardings[k]))

  def _abstract(self, mesh, shapes=None):
    shardings, shapes = self._shardings(mesh), shapes or {}
    return _state_tree(lambda k: jax.ShapeDtypeStruct(
        shapes.get(k, self.values[k].shape), self.values[k].dtype,
        sharding=shardings[k]))

  def _checkpointer(self, **kwargs):
    ckpt = checkpoints.Checkpointer(self.job_dir, **kwargs)
    self.addCleanup(ckpt.close)
    return ckpt

  def _saved_steps(self):
    root = checkpoint_paths.get_checkpoint_dir(self.job_dir)
    return sorted(checkpoint_paths.get_step_from_checkpoint_asset(p)
                  for p in root.iterdir()
                  if checkpoint_paths.is_checkpoint_asset(p))

  def test_names(self):
    self.assertEqual(checkpoint_paths.checkpoint_name(120),
                     'checkpoint_00000120')
    self.assertEqual(checkpoint_paths.checkpoint_name(
        120, checkpoints.CheckpointType.FLAX), 'checkpoint_120')
    self.assertEqual(checkpoint_paths.checkpoint_name(
        120, use_digit_step_subdirectory=True), '120')
    self.assertEqual(
        checkpoint_paths.make_checkpoint_step_dir('/a/checkpoints', 5),
        epath.Path('/a/checkpoints/checkpoint_00000005'))
    self.assertEqual(checkpoint_paths.get_step_from_checkpoint_asset(
        '/a/checkpoint_00000012.orbax-checkpoint-tmp-3'), 12)
    self.assertEqual(checkpoint_paths.get_step_from_checkpoint_asset(
        '/a/tmp_99.checkpoint_7'), 7)
    self.assertTrue(checkpoint_paths.is_checkpoint_asset('/x/17'))
    self.assertTrue(checkpoint_paths.is_checkpoint_asset('/x/checkpoint_0'))
    self.assertFalse(checkpoint_paths.is_checkpoint_asset(
        '/x/checkpoint_3.orbax-checkpoint-tmp-9'))
    self.assertFalse(checkpoint_paths.is_checkpoint_asset('/x/summaries'))
    self.assertIsNone(
        checkpoint_paths.latest_checkpoint_if_exists(self.job_dir / 'no'))
    with self.assertRaisesRegex(ValueError, 'does not exist'):
      checkpoint_paths.latest_checkpoint(self.job_dir / 'no')
    self.job_dir.mkdir(exist_ok=True)
    with self.assertRaisesRegex(ValueError, 'No checkpoints were found'):
      checkpoint_paths.retrieve_latest_checkpoint_step(self.job_dir)

  @absltest.skipIf(jax.device_count() < 8, 'needs 8 devices')
  def test_restore_onto_other_meshes(self):
    ckpt = self._checkpointer(save_interval_steps=10)
    self._at_step(10)
    self.assertTrue(ckpt.save(10, self._state(_mesh((2, 4)))))
    ckpt.wait_until_finished()
    step_dir = ckpt.directory / 'checkpoint_00000010'
    self.assertEqual(
        sorted(os.listdir(step_dir)),
        ['_CHECKPOINT_METADATA', 'commit_success.txt', 'metadata', 'state'])
    # Pax 1.4's layout: one zarr array per variable, named by its path.
    arrays = sorted(p for p in os.listdir(step_dir / 'state')
                    if (step_dir / 'state' / p / '.zarray').exists())
    self.assertEqual(arrays, [
        'mdl_vars.params.b', 'mdl_vars.params.w', 'opt_states_0.count',
        'opt_states_0.mu.w', 'step'])
    for shape in [(8, 1), (1, 1)]:
      mesh = _mesh(shape)
      state, input_state = ckpt.restore(abstract_state=self._abstract(mesh))
      self.assertIsNone(input_state)
      self.assertIsInstance(state, train_states.TrainState)
      self.assertIsInstance(state.mdl_vars['params'], NestedMap)
      self.assertIsInstance(state.opt_states[0].mu, NestedMap)
      self.assertArraysEqual(state, _state_tree(self.values.get))
      want = self._shardings(mesh)
      got = _state_tree(lambda k: k)
      for name, array in zip(jax.tree.leaves(got), jax.tree.leaves(state)):
        self.assertEqual(array.sharding, want[name], name)
        for shard in array.addressable_shards:  # Each device holds its slice.
          np.testing.assert_array_equal(
              shard.data, self.values[name][shard.index])

  def test_async_save_returns_before_commit_and_copies_the_state(self):
    ckpt = self._checkpointer(save_interval_steps=1)
    self._at_step(0)
    state = self._state(_mesh((2, 4)))
    big = np.arange(512 * 512, dtype=np.float32).reshape(512, 512)
    state = state.replace(extra_state=(jnp.asarray(big),))
    self.assertTrue(ckpt.save(0, state))
    step_dir = ckpt.directory / 'checkpoint_00000000'
    committed_at_return = step_dir.exists()
    # The training loop goes on and donates (frees) the state's buffers.
    for x in jax.tree.leaves(state):
      x.delete()
    ckpt.wait_until_finished()
    self.assertFalse(committed_at_return)
    self.assertTrue(step_dir.exists())
    abstract = self._abstract(_mesh((2, 4))).replace(extra_state=(
        jax.ShapeDtypeStruct(big.shape, big.dtype,
                             sharding=jax.sharding.SingleDeviceSharding(
                                 jax.devices()[0])),))
    restored, _ = ckpt.restore(0, abstract_state=abstract)
    self.assertArraysEqual(restored.extra_state[0], big)
    self.assertArraysEqual(restored.mdl_vars, _state_tree(self.values.get)
                           .mdl_vars)

  def test_interval_and_max_to_keep(self):
    ckpt = self._checkpointer(save_interval_steps=3, save_max_to_keep=2)
    state = self._state(_mesh((2, 4)))
    saved = [s for s in range(1, 11) if ckpt.save(s, state)]
    ckpt.wait_until_finished()
    # The first call always saves; then every multiple of 3.
    self.assertEqual(saved, [1, 3, 6, 9])
    self.assertEqual(self._saved_steps(), [6, 9])
    self.assertTrue(ckpt.save(10, state, force=True))
    self.assertFalse(ckpt.save(10, state, force=True))  # Never twice.
    ckpt.wait_until_finished()
    self.assertEqual(self._saved_steps(), [9, 10])
    self.assertEqual(ckpt.latest_step(), 10)

  def test_half_written_checkpoint_is_ignored(self):
    ckpt = self._checkpointer(save_interval_steps=10)
    self._at_step(10)
    ckpt.save(10, self._state(_mesh((2, 4))))
    ckpt.close()
    root = checkpoint_paths.get_checkpoint_dir(self.job_dir)
    # What a crash during Orbax's write of step 30 leaves behind.
    tmp = root / f'checkpoint_00000030{ocp.step.TMP_DIR_SUFFIX}-1700000000'
    (tmp / 'state').mkdir(parents=True)
    (tmp / 'state' / 'junk').write_text('half written')
    self.assertTrue(checkpoint_paths.is_tmp_checkpoint_asset(tmp))
    self.assertFalse(checkpoint_paths.is_tmp_checkpoint_asset(
        root / 'checkpoint_00000010'))
    self.assertEqual(checkpoint_paths.latest_checkpoint(root),
                     root / 'checkpoint_00000010')
    self.assertEqual(checkpoint_paths.retrieve_latest_checkpoint_step(root), 10)

    reopened = self._checkpointer(save_interval_steps=10)  # A restarted run.
    self.assertEqual(reopened.latest_step(), 10)
    mesh = _mesh((1, 1))
    state, _ = reopened.restore(abstract_state=self._abstract(mesh))
    self.assertArraysEqual(state, _state_tree(self.values.get))
    with self.assertRaisesRegex(FileNotFoundError, 'checkpoint_00000030'):
      reopened.restore(30, abstract_state=self._abstract(mesh))

  def test_no_checkpoint(self):
    ckpt = self._checkpointer()
    self.assertIsNone(ckpt.latest_step())
    with self.assertRaisesRegex(FileNotFoundError, 'No committed checkpoint'):
      ckpt.restore(abstract_state=self._abstract(_mesh((1, 1))))

  def test_mismatches_are_named(self):
    ckpt = self._checkpointer()
    self._at_step(0)
    ckpt.save(0, self._state(_mesh((2, 4))))
    ckpt.wait_until_finished()
    mesh = _mesh((1, 1))
    bad = self._abstract(mesh, shapes={'w': (8, 8)})
    with self.assertRaisesRegex(
        ValueError,
        r"'mdl_vars.params.w' has shape \(8, 16\) in the checkpoint but "
        r'\(8, 8\) in the model'):
      ckpt.restore(0, abstract_state=bad)
    more = self._abstract(mesh)
    more.mdl_vars['params']['extra'] = more.mdl_vars['params'].b
    with self.assertRaisesRegex(ValueError,
                                r"not in the checkpoint: \['mdl_vars.params"
                                r".extra'\]"):
      ckpt.restore(0, abstract_state=more)
    pax_slots = self._abstract(mesh)  # Pax's Adam m where optax's mu is.
    pax_slots.opt_states[0]['m'] = pax_slots.opt_states[0].pop('mu')
    with self.assertRaisesRegex(ValueError, r"optax's \(mu, nu\) where the "
                                r"model's optimizer keeps Pax's \(m, v\)"):
      ckpt.restore(0, abstract_state=pax_slots)
    unsharded = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self._abstract(mesh))
    with self.assertRaisesRegex(ValueError, r'abstract_state.*has no sharding'):
      ckpt.restore(0, abstract_state=unsharded)
    with self.assertRaisesRegex(ValueError, 'save_interval_steps'):
      checkpoints.Checkpointer(self.job_dir, save_interval_steps=0)

  def test_eval_state_restores_from_a_full_checkpoint(self):
    ckpt = self._checkpointer()
    self._at_step(0)
    ckpt.save(0, self._state(_mesh((2, 4))))
    ckpt.wait_until_finished()
    abstract = self._abstract(_mesh((1, 1))).to_eval_state()
    state, _ = ckpt.restore(0, abstract_state=abstract)
    self.assertEqual(state.opt_states, [])
    self.assertArraysEqual(state.mdl_vars,
                           _state_tree(self.values.get).mdl_vars)

  def test_flax_per_device_copies_that_differ_restore_as_stored(self):
    # Pax's Flax restore keeps every leaf as stored: a pmap state edited per
    # device keeps its device axis; equal copies restore as one.
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    w = np.arange(12.0, dtype=np.float32).reshape(2, 2, 3)  # Copies differ.
    saved = train_states.TrainState(
        step=np.full((2,), 5, np.int32), mdl_vars={'w': w}, opt_states=[])
    checkpoints.save_checkpoint(saved, tmp)
    want = train_states.TrainState(
        step=jax.ShapeDtypeStruct((), np.int32),
        mdl_vars={'w': jax.ShapeDtypeStruct((2, 3), np.float32)},
        opt_states=[])
    restored = checkpoints.restore_checkpoint(want, tmp)
    self.assertEqual(int(restored.step), 5)
    np.testing.assert_array_equal(restored.mdl_vars['w'], w)

  def test_input_state_round_trip(self):
    ckpt = self._checkpointer(save_interval_steps=1)
    self._at_step(1)
    state = self._state(_mesh((2, 4)))
    blob = bytes(range(256)) + b'{"iterator": 17}'
    ckpt.save(1, state, input_state=blob)
    self._at_step(2)
    ckpt.save(2, self._state(_mesh((2, 4))))
    ckpt.wait_until_finished()
    self.assertEqual(
        (ckpt.directory / 'checkpoint_00000001' / 'train_input' /
         'process_0-of-1.bin').read_bytes(), blob)
    abstract = self._abstract(_mesh((1, 1)))
    self.assertEqual(ckpt.restore(1, abstract_state=abstract)[1], blob)
    self.assertIsNone(ckpt.restore(2, abstract_state=abstract)[1])

  def test_reads_ocdbt_checkpoints_of_the_earlier_layout(self):
    # This project wrote `checkpoint_<step>/state` with Orbax's standard
    # handler (OCDBT, Orbax's names) before it wrote Pax's layout.
    state = self._state(_mesh((2, 4)))
    root = checkpoint_paths.get_checkpoint_dir(self.job_dir)
    ocp.Checkpointer(ocp.StandardCheckpointHandler()).save(
        root / 'checkpoint_7' / 'state', args=ocp.args.StandardSave(state))
    ckpt = self._checkpointer()
    self.assertEqual(ckpt.latest_step(), 7)
    restored, input_state = ckpt.restore(
        abstract_state=self._abstract(_mesh((1, 1))))
    self.assertIsNone(input_state)
    self.assertArraysEqual(restored, _state_tree(self.values.get))

  def _keep_type_handlers(self):
    """Puts the registered Orbax handlers and header name back after."""
    th = ocp.type_handlers
    kept = [(ty, th.get_type_handler(ty))
            for ty in (int, float, bytes, np.number, np.ndarray, jax.Array)]
    self.addCleanup(checkpoints.reregister_type_handlers, '.zarray')
    for ty, handler in kept:
      self.addCleanup(th.register_type_handler, ty, handler, override=True)

  def test_tensorstore_metadata_key_names_each_arrays_header(self):
    self._keep_type_handlers()
    checkpoints.reregister_type_handlers('header.json')
    ckpt = self._checkpointer()
    self._at_step(5)
    self.assertTrue(ckpt.save(5, self._state(_mesh((2, 4)))))
    ckpt.wait_until_finished()
    state_dir = ckpt.directory / 'checkpoint_00000005' / 'state'
    # The arrays, and Orbax's per-array metadata (the new handler kept it).
    names = ['step', 'mdl_vars.params.w', 'mdl_vars.params.b',
             'opt_states_0.count', 'opt_states_0.mu.w']
    self.assertEqual({p.name for p in state_dir.iterdir() if p.is_dir()},
                     {'array_metadatas', *names})
    for array_dir in (state_dir / name for name in names):
      self.assertTrue((array_dir / 'header.json').exists(), array_dir)
      self.assertFalse((array_dir / '.zarray').exists(), array_dir)
    restored, _ = self._checkpointer().restore(
        5, abstract_state=self._abstract(_mesh((1, 1))))
    self.assertArraysEqual(restored, _state_tree(self.values.get))

    # None changes nothing (as in Pax); the default name is `.zarray`.
    for key, step, header in ((None, 6, 'header.json'),
                              ('.zarray', 7, '.zarray')):
      checkpoints.reregister_type_handlers(key)
      ckpt = self._checkpointer()
      self._at_step(step)
      self.assertTrue(ckpt.save(step, self._state(_mesh((1, 1))), force=True))
      ckpt.wait_until_finished()
      self.assertTrue((ckpt.directory / f'checkpoint_0000000{step}' / 'state'
                       / 'mdl_vars.params.w' / header).exists(), header)
    # Step 5's headers are not found under the default name, and the error
    # says which name they have.
    with self.assertRaisesRegex(
        ValueError, r"no zarr header named '\.zarray' \(its files: "
        r"\['header\.json'\]\); set task\.train\.tensorstore_metadata_key"):
      ckpt.restore(5, abstract_state=self._abstract(_mesh((1, 1))))

  def test_tensorstore_metadata_key_must_be_a_file_name(self):
    self._keep_type_handlers()
    before = ocp.type_handlers.get_type_handler(jax.Array)
    for bad in ('', 'a/b', '..', 3):
      with self.assertRaisesRegex(ValueError, 'tensorstore_metadata_key'):
        checkpoints.reregister_type_handlers(bad)
    self.assertIs(ocp.type_handlers.get_type_handler(jax.Array), before)

  def test_sigterm_forces_a_save(self):
    old = signal.getsignal(signal.SIGTERM)
    self.addCleanup(signal.signal, signal.SIGTERM, old)
    self.addCleanup(checkpoints.uninstall_sigterm_handler)
    self.addCleanup(checkpoints.install_sigterm_handler)  # Clears the flag.
    self.assertTrue(checkpoints.install_sigterm_handler())
    self.assertFalse(checkpoints.preemption_requested())
    self.assertFalse(checkpoints.reached_preemption(5))
    ckpt = self._checkpointer(save_interval_steps=1000)
    state = self._state(_mesh((2, 4)))
    self.assertTrue(ckpt.save(0, state))
    self.assertFalse(ckpt.save(5, state))
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # The Python-level handler runs between bytecodes.
      if checkpoints.preemption_requested():
        break
    self.assertTrue(checkpoints.preemption_requested())
    self.assertTrue(checkpoints.reached_preemption(6))
    self.assertTrue(ckpt.save(6, state))
    ckpt.wait_until_finished()
    self.assertEqual(ckpt.latest_step(), 6)


if __name__ == '__main__':
  absltest.main()
