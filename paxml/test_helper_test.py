"""Tests of paxml.test_helper.test_src_dir_path."""

import os
import pathlib
from unittest import mock

from absl.testing import absltest
from paxml import test_helper


class TestSrcDirPathTest(absltest.TestCase):

  def test_inside_the_package(self):
    with mock.patch.dict(os.environ, {}, clear=False):
      os.environ.pop('TEST_SRCDIR', None)
      path = test_helper.test_src_dir_path('main.py')
    self.assertEqual(pathlib.Path(path),
                     pathlib.Path(test_helper.__file__).parent / 'main.py')
    self.assertTrue(os.path.exists(path))

  def test_bazel_srcdir_is_honoured(self):
    with mock.patch.dict(os.environ, {'TEST_SRCDIR': '/runfiles'}):
      self.assertEqual(test_helper.test_src_dir_path('a/b.txt'),
                       '/runfiles/__main__/paxml/a/b.txt')


if __name__ == '__main__':
  absltest.main()
