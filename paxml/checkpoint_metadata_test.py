"""Tests of checkpoint_metadata.py and checkpoint_version.py."""

import json
import shutil
import tempfile

from absl.testing import absltest
from etils import epath
import jax
import numpy as np
import optax
from paxml import checkpoint_metadata
from paxml import checkpoint_version
from paxml import train_states

ArrayMetadata = checkpoint_metadata.ArrayMetadata
PaxMetadata = checkpoint_metadata.PaxMetadata
Sds = jax.ShapeDtypeStruct


def _state(mdl_vars):
  return train_states.TrainState(step=0, mdl_vars=mdl_vars, opt_states=[])


class CheckpointMetadataTest(absltest.TestCase):

  def test_versions(self):
    self.assertEqual(checkpoint_version.get_version(False), 1.1)
    self.assertEqual(checkpoint_version.get_version(True), 1.2)
    self.assertEqual(checkpoint_version.get_version_key(), 'version')
    with self.assertRaisesRegex(ValueError, 'tensorstore_use_ocdbt'):
      checkpoint_version.get_version(None)

  def test_padded_and_unpadded_as_pax_writes_them(self):
    padded = _state({'w': np.zeros((4, 8), np.float32),
                     'm': optax.MaskedNode()})
    unpadded = _state({'w': Sds((3, 8), np.float32),
                       'm': optax.MaskedNode()})
    d = PaxMetadata.from_padded_and_unpadded(padded, unpadded, 1.1).to_dict()
    # Written by hand: what Pax 1.4 writes in metadata/metadata.
    self.assertEqual(json.loads(json.dumps(d)), {
        'version': 1.1,
        'train_state_metadata': {'mdl_vars': {
            'm': {'_array_metadata_tag': True,
                  'is_optax_masked_node': True},
            'w': {'_array_metadata_tag': True, 'dtype': 'float32',
                  'is_optax_masked_node': False, 'unpadded_shape': [3, 8]},
        }}})
    back = PaxMetadata.from_dict(d)
    self.assertEqual(back.train_state_metadata['mdl_vars']['w'],
                     ArrayMetadata(Sds((3, 8), np.float32), False))
    self.assertTrue(back.equals(PaxMetadata.from_dict(d)))

  def test_compatibility(self):
    def meta(shape, masked, version=1.1):
      return PaxMetadata(version, {'a': ArrayMetadata(
          None if masked else Sds(shape, np.float32), masked)})
    self.assertTrue(meta((2,), False).is_compatible(meta((2,), False, 1.2)))
    self.assertFalse(meta((2,), False).equals(meta((2,), False, 1.2)))
    self.assertFalse(meta((2,), False).is_compatible(meta((3,), False)))
    self.assertTrue(meta(None, True).is_compatible(meta(None, True)))
    self.assertFalse(meta(None, True).is_compatible(meta((2,), False)))

  def test_make_save_restore(self):
    state = _state({'w': np.ones((2, 2), np.int32)})
    self.assertEqual(checkpoint_metadata.make_metadata(1.0), {'version': 1.0})
    with self.assertRaisesRegex(ValueError, '`train_state` is required'):
      checkpoint_metadata.make_metadata(1.1)
    meta = checkpoint_metadata.make_metadata(
        train_state=state, tensorstore_use_ocdbt=False)
    self.assertEqual(
        meta['train_state_metadata']['mdl_vars']['w']['unpadded_shape'],
        [2, 2])
    tmp = epath.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, tmp)
    self.assertFalse(checkpoint_metadata.metadata_exists(tmp))
    with self.assertRaisesRegex(FileNotFoundError, 'metadata'):
      checkpoint_metadata.restore_metadata(tmp)
    checkpoint_metadata.save_metadata(tmp, meta)
    self.assertTrue(checkpoint_metadata.metadata_exists(tmp))
    self.assertEqual(checkpoint_metadata.restore_metadata(tmp), meta)
    (tmp / 'metadata' / 'metadata').write_text('{"version": 1.1, ')
    with self.assertRaisesRegex(ValueError, 'is not JSON'):
      checkpoint_metadata.restore_metadata(tmp)
    with self.assertRaisesRegex(ValueError, 'train_state_metadata'):
      PaxMetadata.from_dict({'version': 1.1})


if __name__ == '__main__':
  absltest.main()
