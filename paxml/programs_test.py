"""Tests of the train program's loop on 8 devices."""

import pathlib
import tempfile

from absl.testing import absltest
import jax
import numpy as np
from paxml import partitioning
from paxml import partitioning_test
from paxml import programs
from praxis import base_input


class TrainProgramTest(absltest.TestCase):

  def test_many_steps_between_summaries_on_eight_devices(self):
    # Without a bound on the steps in flight, hundreds of queued steps with
    # an all-reduce each made XLA:CPU's collective rendezvous abort the
    # process (all its threads were waiting on later steps).
    task = partitioning_test._task(  # Data parallel over 8 devices.
        None, train_fields=dict(summary_interval_steps=10**6,
                                num_train_steps=1000))
    batches = list(partitioning_test._batches(8, batch=16))
    data = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    inp = base_input.InMemoryInput(name='train', batch_size=16, data=data,
                                   is_training=True, input_random_seed=1)
    partitioner = partitioning.create_partitioner(task)
    self.assertEqual(partitioner.mesh.devices.size, 8)
    partitioner.setup(jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), inp.peek_padded()))
    state = partitioner.initialize_state(jax.random.PRNGKey(0))
    program = programs.SingleTaskTrainProgram(
        task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
        enable_summary_writer=False)
    first = None
    for step in range(task.train.num_train_steps):
      state, out = program.run(state, step)
      first = first if first is not None else float(out.loss)
    self.assertEqual(int(state.step), 1000)
    self.assertLess(float(out.loss), first)


if __name__ == '__main__':
  absltest.main()
