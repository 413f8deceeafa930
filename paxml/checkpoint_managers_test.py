"""Tests of checkpoint_managers.py: checkpoints of the real Pax 1.4 here.

The fixtures in testdata/pax14_checkpoints were written by the real Pax 1.4
(testdata/make_pax14_checkpoints.py); `ref.json` holds, for every variable,
its path, shape, dtype and the sum of its values as the real Pax restored it.
"""

import importlib
import json
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
from etils import epath
import jax
import numpy as np
from paxml import checkpoint_managers
from paxml import checkpoint_metadata
from paxml import checkpoints
from paxml import experiment_registry
from paxml import train_states
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils
from praxis import test_utils

_FIXTURES = epath.Path(__file__).parent / 'testdata' / 'pax14_checkpoints'
CheckpointType = checkpoints.CheckpointType


def _ref(kind):
  return json.loads((_FIXTURES / kind / 'ref.json').read_text())


def _insert(tree, path, leaf):
  """Puts `leaf` at `path` ([kind, key] pairs: seq -> list, else dict)."""
  if not path:
    return leaf
  (kind, key), rest = path[0], path[1:]
  if tree is None:
    tree = [] if kind == 'seq' else {}
  if kind == 'seq':
    while len(tree) <= key:
      tree.append(None)
  else:
    tree.setdefault(key, None)
  tree[key] = _insert(tree[key], rest, leaf)
  return tree


def _abstract_state(ref, sharding_fn=lambda shape: None):
  """The TrainState of ShapeDtypeStructs described by ref.json."""
  fields = {'step': None, 'mdl_vars': None, 'opt_states': None}
  for leaf in ref['leaves']:
    shape = tuple(leaf['shape'])
    sds = jax.ShapeDtypeStruct(shape, np.dtype(leaf['dtype']),
                               sharding=sharding_fn(shape))
    fields[leaf['field']] = _insert(fields[leaf['field']], leaf['path'], sds)
  return train_states.TrainState(step=fields['step'],
                                 mdl_vars=fields['mdl_vars'],
                                 opt_states=fields['opt_states'] or [])


def _sums(state):
  return [float(np.asarray(x, np.float64).sum())
          for x in jax.tree.leaves(state)]


class Pax14FixtureTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

  def _check_values(self, state, ref):
    # Leaves are in flattening order, like ref.json (dict keys sorted).
    want = [leaf['sum'] for leaf in ref['leaves']]
    np.testing.assert_allclose(_sums(state), want, rtol=1e-6, atol=1e-6)
    self.assertEqual(int(state.step), 2)

  def test_restore_gda_fixture_onto_one_device_and_a_1x2x4_mesh(self):
    ref = _ref('spmd')
    ckpt_dir = _FIXTURES / 'spmd' / 'checkpoints'
    self.assertEqual(checkpoints.retrieve_latest_checkpoint_step(ckpt_dir), 2)
    state = checkpoints.restore_checkpoint(
        _abstract_state(ref), ckpt_dir, checkpoint_type=CheckpointType.GDA)
    self._check_values(state, ref)
    if jax.device_count() < 8:
      return
    mesh = jax.sharding.Mesh(
        np.array(jax.devices()[:8]).reshape(1, 2, 4),
        ('replica', 'data', 'mdl'))

    def sharding(shape):  # Split the last dim over 'mdl' where it divides.
      spec = [None] * len(shape)
      if shape and shape[-1] % 4 == 0:
        spec[-1] = 'mdl'
      return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))

    sharded = checkpoints.restore_checkpoint(
        _abstract_state(ref, sharding), ckpt_dir,
        checkpoint_type=CheckpointType.GDA, step=2)
    self._check_values(sharded, ref)
    w = sharded.mdl_vars['params']['lm']['softmax']['logits_ffn']['linear']['w']
    self.assertEqual(w.shape, (8, 32))
    self.assertEqual(len(w.addressable_shards), 8)
    self.assertEqual(w.addressable_shards[0].data.shape, (8, 8))
    self.assertArraysEqual(
        w, state.mdl_vars['params']['lm']['softmax']['logits_ffn']['linear']
        ['w'])

  def test_restore_ocdbt_fixture(self):
    # Version 1.2: the real Pax with --tensorstore_use_ocdbt.
    ref = _ref('spmd_ocdbt')
    ckpt_dir = _FIXTURES / 'spmd_ocdbt' / 'checkpoints'
    state = checkpoints.restore_checkpoint(
        _abstract_state(ref), ckpt_dir, checkpoint_type=CheckpointType.GDA)
    self._check_values(state, ref)
    [step_dir] = list(ckpt_dir.iterdir())
    self.assertEqual(
        checkpoint_metadata.restore_metadata(step_dir)['version'], 1.2)

  def test_restore_flax_fixture(self):
    ref = _ref('pmap')
    state = checkpoints.restore_checkpoint(
        _abstract_state(ref), _FIXTURES / 'pmap' / 'checkpoints')
    self._check_values(state, ref)

  def _round_trip(self, kind, checkpoint_type):
    ref = _ref(kind)
    src = _FIXTURES / kind / 'checkpoints'
    state = checkpoints.restore_checkpoint(_abstract_state(ref), src,
                                           checkpoint_type=checkpoint_type)
    checkpoints.save_checkpoint(state, self.tmp,
                                checkpoint_type=checkpoint_type)
    [src_step] = os.listdir(src)
    [new_step] = [p for p in os.listdir(self.tmp) if p.startswith('check')]
    self.assertEqual(new_step, src_step)  # Pax's name, padded or not.
    again = checkpoints.restore_checkpoint(_abstract_state(ref), self.tmp,
                                           checkpoint_type=checkpoint_type)
    self.assertArraysEqual(again, state)
    saved = checkpoint_metadata.restore_metadata(self.tmp / new_step)
    written = checkpoint_metadata.restore_metadata(src / src_step)
    self.assertTrue(checkpoint_metadata.PaxMetadata.from_dict(saved).equals(
        checkpoint_metadata.PaxMetadata.from_dict(written)))
    return src / src_step, self.tmp / new_step

  def test_gda_round_trip_keeps_pax_names_and_values(self):
    src, new = self._round_trip('spmd', CheckpointType.GDA)
    arrays = lambda d: sorted(p.name for p in (d / 'state').iterdir()
                              if (p / '.zarray').exists())
    self.assertEqual(arrays(new), arrays(src))
    self.assertLen(arrays(src), len(_ref('spmd')['leaves']))
    # No Orbax tree file: Pax 1.4 would read it as the state's structure.
    self.assertFalse((new / 'state' / '_METADATA').exists())

  def test_flax_round_trip(self):
    _, new = self._round_trip('pmap', CheckpointType.FLAX)
    self.assertTrue((new / 'state' / 'checkpoint').is_file())

  def test_bad_input_is_named(self):
    ref = _ref('spmd')
    src = _FIXTURES / 'spmd' / 'checkpoints'
    state = _abstract_state(ref)
    params = state.mdl_vars['params']['lm']
    params['final_ln']['scale'] = jax.ShapeDtypeStruct((9,), np.float32)
    with self.assertRaisesRegex(
        ValueError, r"'mdl_vars.params.lm.final_ln.scale' has shape \(8,\) "
        r'in the checkpoint but \(9,\) in the model'):
      checkpoints.restore_checkpoint(state, src,
                                     checkpoint_type=CheckpointType.GDA)
    with self.assertRaisesRegex(ValueError, 'No committed checkpoint of '
                                'step 7'):
      checkpoints.restore_checkpoint(_abstract_state(ref), src, step=7,
                                     checkpoint_type=CheckpointType.GDA)
    with self.assertRaisesRegex(ValueError, 'Unexpected checkpoint_type'):
      checkpoints.restore_checkpoint(_abstract_state(ref), src,
                                     checkpoint_type='persistence')
    with self.assertRaisesRegex(ValueError, 'must be a subclass of'):
      checkpoints.restore_checkpoint((_abstract_state(ref), []), src)
    # As in Pax, what the state names is read, the rest ignored.
    fewer = _abstract_state(ref).replace(opt_states=[])
    restored = checkpoints.restore_checkpoint(
        fewer, src, checkpoint_type=CheckpointType.GDA)
    self.assertEqual(restored.opt_states, [])
    with self.assertRaisesRegex(ValueError, r"not in the model: \['opt_states"):
      checkpoint_managers.read_state(
          src / 'checkpoint_00000002' / 'state', fewer, strict=True)
    more = _abstract_state(ref)
    more.mdl_vars['params']['extra'] = jax.ShapeDtypeStruct((2,), np.float32)
    with self.assertRaisesRegex(
        ValueError, r"not in the checkpoint: \['mdl_vars.params.extra'\]"):
      checkpoints.restore_checkpoint(more, src,
                                     checkpoint_type=CheckpointType.GDA)

  def test_truncated_flax_checkpoint_is_named(self):
    src = _FIXTURES / 'pmap' / 'checkpoints'
    shutil.copytree(src, self.tmp, dirs_exist_ok=True)
    [step_dir] = list(self.tmp.iterdir())
    msgpack = step_dir / 'state' / 'checkpoint'
    msgpack.write_bytes(msgpack.read_bytes()[:100])
    with self.assertRaisesRegex(ValueError, 'not a Pax Flax checkpoint'):
      checkpoints.restore_checkpoint(_abstract_state(_ref('pmap')), self.tmp)


def _model_loss(kind):
  """(our loss, the real Pax's loss) of the fixture's model and first batch.

  The model is built here from the same experiment the real Pax ran, its
  variables read from the real Pax's checkpoint.
  """
  ref = _ref(kind)
  sys.path.insert(0, str(_FIXTURES.parent))
  importlib.import_module('pax14_fixture_lm')
  exp = experiment_registry.get(ref['experiment'])()
  task = base_hyperparams.instantiate(exp.task())
  batch = py_utils.NestedMap(
      {k: np.asarray(v) for k, v in ref['batch'].items()})
  for k, v in batch.items():
    batch[k] = v.astype(np.float32 if v.dtype == np.float64 else np.int32)
  specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                       batch)
  with base_layer.JaxContext.new_context():
    weights = task.model.abstract_init_with_metadata(specs)
  mdl_vars = jax.tree.map(
      lambda w: jax.ShapeDtypeStruct(
          tuple(w.repeat_prefix or ()) + tuple(w.shape), w.dtype),
      weights, is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))
  abstract = train_states.TrainState(
      step=jax.ShapeDtypeStruct((), np.uint32), mdl_vars=mdl_vars,
      opt_states=[])
  [step_dir] = list((_FIXTURES / kind / 'checkpoints').iterdir())
  state = checkpoint_managers.read_state(step_dir / 'state', abstract,
                                         strict=False)
  dtype = task.model.fprop_dtype  # Floats go in as Pax's trainer casts them.
  batch = jax.tree.map(
      lambda x: x.astype(dtype) if x.dtype == np.float32 else x, batch)
  with base_layer.JaxContext.new_context():
    (metrics, _), _ = task.model.apply(
        state.mdl_vars, batch, rngs={'dropout': jax.random.PRNGKey(1),
                                     'random': jax.random.PRNGKey(2)},
        mutable=True)
  return float(metrics['total_loss'][0]), ref['loss']


class Pax14ModelTest(test_utils.TestCase):

  def test_spmd_model_on_the_real_pax_variables_gives_its_loss(self):
    ours, theirs = _model_loss('spmd')
    self.assertAllClose(ours, theirs, rtol=1e-3)  # bfloat16 activations.

  def test_ocdbt_checkpoint_gives_the_real_pax_loss(self):
    ours, theirs = _model_loss('spmd_ocdbt')
    self.assertAllClose(ours, theirs, rtol=1e-3)

  def test_pmap_model_on_the_real_pax_variables_gives_its_loss(self):
    ours, theirs = _model_loss('pmap')
    self.assertAllClose(ours, theirs, rtol=1e-3)


class OrbaxCheckpointManagerTest(test_utils.TestCase):

  def test_options_and_types(self):
    tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    with self.assertRaisesRegex(ValueError, 'Unexpected checkpoint_type'):
      checkpoint_managers.OrbaxCheckpointManager(tmp)
    manager = checkpoint_managers.OrbaxCheckpointManager(
        tmp, checkpoint_type=CheckpointType.GDA,
        options=checkpoint_managers.CheckpointManagerOptions(
            save_interval_steps=2, enable_async_checkpointing=False))
    self.addCleanup(manager.close)
    self.assertEqual(manager.version, 1.1)
    state = train_states.TrainState(
        step=jax.numpy.array(0, np.uint32),
        mdl_vars={'params': {'w': jax.numpy.arange(6.0).reshape(2, 3)}},
        opt_states=[])
    saved = [s for s in range(5) if manager.save(s, state)]
    self.assertEqual(saved, [0, 2, 4])
    self.assertEqual(manager.latest_step(), 4)
    self.assertEqual(sorted(manager.all_steps()), [0, 2, 4])
    self.assertTrue((tmp / 'checkpoint_00000004' / 'state' /
                     'mdl_vars.params.w').is_dir())
    meta = checkpoint_metadata.restore_metadata(tmp / 'checkpoint_00000004')
    self.assertEqual(
        meta['train_state_metadata']['mdl_vars']['params']['w'],
        {'_array_metadata_tag': True, 'dtype': 'float32',
         'is_optax_masked_node': False, 'unpadded_shape': [2, 3]})
    restored = manager.restore(4, state)
    self.assertArraysEqual(restored.mdl_vars, state.mdl_vars)


  def test_replicated_arrays_are_saved_whole_without_compiling(self):
    # One process, 8 devices: a data-parallel state, every array replicated.
    # Orbax's replica-parallel default would write each in 8 slices, each
    # slice made by an eager program compiled on first use.
    tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    replicated = jax.sharding.NamedSharding(mesh,
                                            jax.sharding.PartitionSpec())
    w = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)
    state = train_states.TrainState(
        step=jax.device_put(np.uint32(7), replicated),
        mdl_vars={'params': {'w': jax.device_put(w, replicated),
                             'b': jax.device_put(w[0] - 5, replicated)}},
        opt_states=[])
    manager = checkpoint_managers.OrbaxCheckpointManager(
        tmp, checkpoint_type=CheckpointType.GDA,
        options=checkpoint_managers.CheckpointManagerOptions(
            enable_async_checkpointing=False))
    self.addCleanup(manager.close)
    compiles = []
    listener = lambda event, *_, **__: compiles.append(event)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
      self.assertTrue(manager.save(0, state))
    finally:
      jax.monitoring.unregister_event_duration_listener(listener)
    self.assertNotIn('/jax/core/compile/backend_compile_duration', compiles)
    zarrays = {name: json.loads(
        (tmp / 'checkpoint_00000000' / 'state' / name / '.zarray').read_text())
               for name in ('mdl_vars.params.w', 'mdl_vars.params.b')}
    self.assertEqual(zarrays['mdl_vars.params.w']['chunks'], [16, 24])
    self.assertEqual(zarrays['mdl_vars.params.b']['chunks'], [24])
    restored = manager.restore(0, state)
    np.testing.assert_array_equal(restored.mdl_vars['params']['w'], w)
    np.testing.assert_array_equal(restored.mdl_vars['params']['b'], w[0] - 5)
    self.assertEqual(int(restored.step), 7)

  def test_flax_replicated_state_restores_unreplicated(self):
    # Pax's tests save a pmap state with its device axis (one copy each).
    tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    replicated = train_states.TrainState(
        step=np.zeros((2,), np.int32), mdl_vars={'w': np.stack([w, w])},
        opt_states=[])
    checkpoints.save_checkpoint(replicated, tmp)
    want = train_states.TrainState(
        step=jax.ShapeDtypeStruct((), np.int32),
        mdl_vars={'w': jax.ShapeDtypeStruct((2, 3), np.float32)},
        opt_states=[])
    restored = checkpoints.restore_checkpoint(want, tmp)
    np.testing.assert_array_equal(restored.mdl_vars['w'], w)
    bad = want.replace(mdl_vars={'w': jax.ShapeDtypeStruct((3, 3),
                                                           np.float32)})
    with self.assertRaisesRegex(ValueError, r"\['w'\] has shape \(2, 2, 3\)"):
      checkpoints.restore_checkpoint(bad, tmp)

  def test_state_checkpointer(self):
    tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    state = train_states.TrainState(
        step=np.uint32(1), mdl_vars={'w': np.ones((2, 2), np.float32)},
        opt_states=[])
    ckpt = checkpoints.get_checkpointer(CheckpointType.GDA)
    ckpt.save(tmp / 'state', args=checkpoint_managers.state_save_args(state))
    self.assertTrue((tmp / 'state' / 'mdl_vars.w' / '.zarray').exists())
    restored = ckpt.restore(
        tmp / 'state', args=checkpoint_managers.state_restore_args(state))
    np.testing.assert_array_equal(restored.mdl_vars['w'], np.ones((2, 2)))
    with self.assertRaisesRegex(ValueError, 'Unexpected checkpoint_type'):
      checkpoints.get_checkpointer(CheckpointType.PERSISTENCE)

  def test_host_values_in_both_layouts(self):
    # Pax's tests save states of numpy arrays and Python scalars.
    state = train_states.TrainState(
        step=3, mdl_vars={'params': {'w': np.arange(4.0, dtype=np.float32)}},
        opt_states=[{'count': np.int32(2)}])
    for checkpoint_type in (CheckpointType.GDA, CheckpointType.FLAX):
      tmp = epath.Path(tempfile.mkdtemp())
      self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
      checkpoints.save_checkpoint(state, tmp, checkpoint_type=checkpoint_type)
      restored = checkpoints.restore_checkpoint(
          state, tmp, checkpoint_type=checkpoint_type)
      self.assertEqual(int(restored.step), 3)
      self.assertEqual(int(restored.opt_states[0]['count']), 2)
      np.testing.assert_array_equal(restored.mdl_vars['params']['w'],
                                    [0.0, 1.0, 2.0, 3.0])


if __name__ == '__main__':
  absltest.main()
