"""Paths for tests (Pax's `paxml.test_helper`).

Public: `test_src_dir_path`.
"""

import os
import pathlib


def test_src_dir_path(relative_path: str) -> str:
  """The path of `relative_path` inside the paxml package's sources.

  Pax's version reads Bazel's `$TEST_SRCDIR`; that variable is honoured when
  set (`$TEST_SRCDIR/__main__/paxml/<relative_path>`), otherwise the path is
  taken inside this installed `paxml` package.

  Args:
    relative_path: A path relative to the paxml package, e.g.
      'tasks/lm/testdata/x.json'.

  Returns:
    The path as a string.
  """
  src_dir = os.environ.get('TEST_SRCDIR')
  if src_dir:
    return os.path.join(src_dir, '__main__/paxml', relative_path)
  return str(pathlib.Path(__file__).resolve().parent / relative_path)
