"""paxml.checkpoint_paths.PaxStepNameFormat: finding Pax's step directories."""

import tempfile

from absl.testing import absltest
from etils import epath
from paxml import checkpoint_paths


class PaxStepNameFormatTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.base = epath.Path(tempfile.mkdtemp())
    (self.base / 'checkpoint_00000007').mkdir()
    (self.base / 'checkpoint_00000012').mkdir()
    # Orbax's name for a save still in progress: not a committed step.
    (self.base / 'checkpoint_00000009.orbax-checkpoint-tmp-1234').mkdir()
    (self.base / 'summaries').mkdir()
    self.fmt = checkpoint_paths.name_format()

  def test_find_metadata(self):
    found = self.fmt.find_metadata(self.base, 7)
    self.assertEqual(found.step, 7)
    self.assertEqual(found.path, self.base / 'checkpoint_00000007')
    self.assertIsNone(self.fmt.find_metadata(self.base, 8))  # Not there.
    self.assertIsNone(self.fmt.find_metadata(self.base, 9))  # Not committed.

  def test_build_metadata(self):
    meta = self.fmt.build_metadata(self.base / 'checkpoint_00000012')
    self.assertEqual(meta.step, 12)
    self.assertIsNone(self.fmt.build_metadata(self.base / 'summaries'))
    self.assertIsNone(self.fmt.build_metadata(
        self.base / 'checkpoint_00000009.orbax-checkpoint-tmp-1234'))
    # A step that names another directory than the path's.
    self.assertIsNone(self.fmt.build_metadata(
        self.base / 'checkpoint_00000012', step=7))

  def test_find_all_and_find_step(self):
    self.assertEqual(sorted(m.step for m in self.fmt.find_all(self.base)),
                     [7, 12])
    self.assertEqual(self.fmt.find_step(self.base, 12).step, 12)
    with self.assertRaisesRegex(ValueError, 'step 9'):
      self.fmt.find_step(self.base, 9)


if __name__ == '__main__':
  absltest.main()
