"""Tests of dump_hparams_lib on the regression experiment, and its CLI."""

import io
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
from paxml.tasks.test import regression
from paxml.tools import dump_hparams_lib

_ROOT = pathlib.Path(__file__).resolve().parents[2]


class DumpHparamsTest(absltest.TestCase):

  def test_sections(self):
    out = io.StringIO()
    dump_hparams_lib.write_hparams(regression.RegressionExperiment(), out)
    text = out.getvalue()
    self.assertTrue(text.startswith('============= Trainer / Evaler datasets.'))
    self.assertLess(text.index('Decode datasets.'),
                    text.index('num_train_steps : 40'))

  def test_post_init_lists_the_variables(self):
    out = io.StringIO()
    dump_hparams_lib.write_post_init_hparams(regression.RegressionExperiment(),
                                             out)
    self.assertRegex(out.getvalue(), r'proj.*w')
    self.assertIn('[4, 2]', out.getvalue().replace('(4, 2)', '[4, 2]'))

  def test_cls_vars(self):
    out = io.StringIO()
    dump_hparams_lib.write_cls_vars(regression.RegressionExperiment(), out)
    self.assertIn('NUM_TRAIN_STEPS: 40', out.getvalue())

  def test_command_line(self):
    path = pathlib.Path(tempfile.mkdtemp()) / 'p.txt'
    env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu')
    subprocess.run(
        [sys.executable, '-m', 'paxml.tools.dump_hparams',
         '--exp=tasks.test.regression.RegressionExperiment',
         f'--params_ofile={path}'], cwd=_ROOT, env=env, check=True,
        capture_output=True, timeout=300)
    self.assertIn('num_train_steps : 40', path.read_text())


if __name__ == '__main__':
  absltest.main()
