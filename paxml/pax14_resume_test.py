"""Training resumes a real Pax 1.4 checkpoint, optimizer slots included.

testdata/pax14_checkpoints/<kind>/checkpoints holds the step-2 checkpoint the
real Pax 1.4 wrote for the tiny LM of testdata/pax14_fixture_lm.py, and
`continuation.json` the train losses of steps 3 and 4 when the real Pax
resumes it with a constant learning rate of 0.05 and float32 activations
(testdata/make_pax14_continuation.py). Here this project resumes
the same checkpoint: its Adam moments (Pax's bias-corrected `m`, `v`) and
step counts must be read one to one for the losses to agree. A checkpoint
this project then writes has exactly the real Pax's variable names.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax
import numpy as np
from paxml import _checkpoint_pax_format
from tensorboard.backend.event_processing import event_accumulator

_FIXTURES = pathlib.Path(__file__).parent / 'testdata' / 'pax14_checkpoints'
_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _losses(summary_dir):
  acc = event_accumulator.EventAccumulator(str(summary_dir))
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars('loss')}


def _resume(kind):
  """(job dir, {step: loss}) of `paxml.main` resuming the fixture to step 4.

  A subprocess on one CPU device, as the real Pax ran it.
  """
  ref = json.loads((_FIXTURES / kind / 'ref.json').read_text())
  job = pathlib.Path(tempfile.mkdtemp())
  [ckpt] = list((_FIXTURES / kind / 'checkpoints').iterdir())
  shutil.copytree(ckpt, job / 'checkpoints' / ckpt.name)
  env = dict(os.environ, JAX_PLATFORMS='cpu', FIXTURE_STEPS='4',
             FIXTURE_SAVE_EVERY='2', FIXTURE_LR='0.05', FIXTURE_FP32='1',
             PYTHONPATH=os.pathsep.join([str(_ROOT), str(_FIXTURES.parent)]))
  env.pop('XLA_FLAGS', None)
  result = subprocess.run(
      [sys.executable, '-m', 'paxml.main', f'--exp={ref["experiment"]}',
       f'--job_log_dir={job}'], cwd=_ROOT, env=env, capture_output=True,
      text=True, timeout=600)
  if result.returncode:
    raise AssertionError(f'paxml.main failed:\n{result.stderr[-3000:]}')
  return job, _losses(job / 'summaries' / 'train')


class ResumeRealPaxCheckpointTest(absltest.TestCase):

  def _check(self, kind):
    want = json.loads((_FIXTURES / kind / 'continuation.json').read_text())
    job, got = _resume(kind)
    self.addCleanup(shutil.rmtree, job, ignore_errors=True)
    for step, loss in want.items():
      # float32: the same to ~1e-7. Fresh moments instead of the restored
      # ones (count 0) change the step-4 loss by 3e-4.
      np.testing.assert_allclose(got[int(step)], loss, rtol=1e-5,
                                 err_msg=f'step {step}')
    return job

  def test_spmd_checkpoint_continues_as_the_real_pax(self):
    job = self._check('spmd')
    # Our step-4 checkpoint has the real Pax's names, one array each.
    [pax] = list((_FIXTURES / 'spmd' / 'checkpoints').iterdir())
    ours = job / 'checkpoints' / 'checkpoint_00000004' / 'state'
    self.assertEqual(_checkpoint_pax_format.stored_shapes(ours),
                     _checkpoint_pax_format.stored_shapes(pax / 'state'))

  def test_pmap_checkpoint_continues_as_the_real_pax(self):
    self._check('pmap')


if __name__ == '__main__':
  jax.config.parse_flags_with_absl()
  absltest.main()
