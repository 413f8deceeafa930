"""Records the first train losses of `train_perf_test` (run before changes).

Run: `python paxml/testdata/record_train_losses.py` from the repository root
(8 virtual CPU devices); it prints the losses to paste into the test.
Recorded from the train program as it was before the lean/full step split
(commit eb4ad1c), so the test checks the split changed no number.
"""

import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

# pylint: disable=g-import-not-at-top
import pathlib
import tempfile

import jax
import numpy as np
from paxml import executors
from paxml import partitioning_test
from paxml import programs
from praxis import base_input


def run(steps=7, summary_interval_steps=3, compile_ahead=False):
  """(losses, final state); `compile_ahead`: as the executor starts a run."""
  task = partitioning_test._task(None, train_fields=dict(
      summary_interval_steps=summary_interval_steps, num_train_steps=100,
      eval_interval_steps=0))
  batches = list(partitioning_test._batches(4, batch=16))
  data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
  inp = base_input.InMemoryInput(name='train', batch_size=16, data=data,
                                 input_random_seed=1, is_training=True)
  partitioner = partitioning_test._partitioner(task)
  state = partitioning_test._init(partitioner)
  program = programs.SingleTaskTrainProgram()
  key = jax.random.PRNGKey(0)
  if compile_ahead:
    program.compile_ahead(
        task, inp, partitioner, executors.abstract_train_state(partitioner),
        key, 0)
  program.setup(task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
                key, key, 0, enable_summary_writer=False)
  losses = []
  for step in range(steps):
    out = program.run(state, step)
    state = out.state
    losses.append(float(out.loss))
  program.shutdown()
  return losses, state


if __name__ == '__main__':
  losses, state = run()
  print('losses', [float(np.float32(x)).hex() for x in losses])
  print('losses', losses)
  l2 = np.asarray(state.mdl_vars['params']['l2']['w'])
  print('l2 sum', float(l2.astype(np.float64).sum()))
