"""Multi-host training through jax.distributed: 2 processes on 127.0.0.1.

Each process has 2 CPU devices and feeds half of every global batch; the
collectives run over gloo. The run must match a 1-process run of the same
experiment step for step, checkpoint collectively, and resume in both
processes after both are killed.
"""

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile

from absl.testing import absltest
from tensorboard.backend.event_processing import event_accumulator

_EXP = 'tasks.test.regression.RegressionGlobalBatchExperiment'
_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _env(num_devices: int) -> dict[str, str]:
  env = dict(os.environ, PYTHONPATH=str(_ROOT), JAX_PLATFORMS='cpu')
  env['XLA_FLAGS'] = f'--xla_force_host_platform_device_count={num_devices}'
  return env


def _start(job_dir, *flags, num_devices):
  return subprocess.Popen(
      [sys.executable, '-m', 'paxml.main', f'--exp={_EXP}',
       f'--job_log_dir={job_dir}', *flags],
      cwd=_ROOT, env=_env(num_devices), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True)


def _run_two_hosts(job_dir, *flags) -> list[tuple[int, str]]:
  """Runs 2 processes of 2 devices each; returns (returncode, log) of each."""
  port = _free_port()
  procs = [
      _start(job_dir, f'--server_addr=127.0.0.1:{port}', '--num_hosts=2',
             f'--host_idx={i}', '--fdl_set=datasets[0].batch_size=4', *flags,
             num_devices=2)
      for i in range(2)]
  results = []
  for proc in procs:
    out, _ = proc.communicate(timeout=300)
    results.append((proc.returncode, out))
  return results


def _losses(job_dir: pathlib.Path) -> dict[int, float]:
  acc = event_accumulator.EventAccumulator(str(job_dir / 'summaries' / 'train'))
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars('loss')}


class TwoProcessTest(absltest.TestCase):

  def test_matches_one_process_and_resumes_after_kill(self):
    tmp = pathlib.Path(tempfile.mkdtemp())
    single = _start(tmp / 'single', num_devices=4)
    out, _ = single.communicate(timeout=300)
    self.assertEqual(single.returncode, 0, out[-3000:])
    reference = _losses(tmp / 'single')
    self.assertLen(reference, 40)

    # Both processes kill themselves while reading the batch of step 14.
    killed = _run_two_hosts(tmp / 'multi',
                            '--fdl_set=datasets[0].signal_at_batch=14')
    for code, log in killed:
      self.assertNotEqual(code, 0, log[-2000:])
    self.assertIn(-signal.SIGKILL, [code for code, _ in killed])

    resumed = _run_two_hosts(tmp / 'multi')
    restored = []
    for code, log in resumed:
      self.assertEqual(code, 0, log[-3000:])
      line = [x for x in log.splitlines() if 'Restored the checkpoint' in x]
      self.assertLen(line, 1, log[-3000:])
      restored.append(line[0].rsplit('step ', 1)[1])
    self.assertEqual(restored[0], restored[1])  # Both resumed the same step.
    self.assertIn(restored[0], ('1.', '10.'))

    losses = _losses(tmp / 'multi')
    self.assertEqual(sorted(losses), list(range(1, 41)))
    for step in range(1, 41):
      self.assertAlmostEqual(losses[step], reference[step], places=5,
                             msg=f'step {step}')


if __name__ == '__main__':
  absltest.main()
