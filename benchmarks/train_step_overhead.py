"""How much the Pax runner costs over a hand-written `jax.jit` training loop.

Run: `python benchmarks/train_step_overhead.py [--steps=300]`.

Both loops train the same model (a 3-layer MLP regression, 512 wide) with the
same Adam math on the same batches, on whatever devices JAX sees:

* reference: `jax.jit` of `value_and_grad` + `optax.adam`, state donated,
  numpy batches passed straight in;
* Pax: `SingleTaskTrainProgram.run` — input `get_next`, host-to-mesh batch
  assembly, the partitioned `train_step_single_learner` (learner, metrics,
  summaries), and the program's logging at `summary_interval_steps`.

It prints the steady-state time per step of each (after compilation, best of
several repeats, the two loops alternating) and their ratio: the runner's
overhead.
"""

import pathlib
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import optax
from paxml import learners
from paxml import partitioning
from paxml import programs
from paxml import tasks_lib
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import activations
from praxis.layers import linears

_STEPS = flags.DEFINE_integer('steps', 300, 'Timed steps per repeat.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Repeats (best one counts).')
_WIDTH = flags.DEFINE_integer('width', 512, 'Hidden width of the MLP.')
_BATCH = flags.DEFINE_integer('batch', 256, 'Global batch size.')

NestedMap = py_utils.NestedMap
_LR = 1e-3


class MlpRegression(base_model.BaseModel):
  """MSE of an MLP's prediction of `targets` from `inputs`."""

  width: int = 512

  def setup(self):
    ff = pax_fiddle.Config(linears.FeedForward, input_dims=self.width,
                           output_dims=self.width,
                           activation_tpl=pax_fiddle.Config(activations.ReLU))
    self.create_child('mlp', pax_fiddle.Config(
        linears.MLPBlock, num_layers=3, hidden_dims=self.width, ff_tpl=ff,
        activate_final=False))

  def compute_predictions(self, input_batch):
    return self.mlp(input_batch.inputs)

  def compute_loss(self, predictions, input_batch):
    mse = jnp.mean((predictions - input_batch.targets) ** 2)
    return NestedMap(loss=(mse, jnp.array(1.0))), NestedMap()


def make_data(n, width, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, width)).astype(np.float32)
  y = np.tanh(x @ rng.normal(size=(width, width)).astype(np.float32) / 30)
  return {'inputs': x, 'targets': y.astype(np.float32)}


def make_task(width):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='bench')
  task_p.model = pax_fiddle.Config(
      MlpRegression, name='model', width=width,
      params_init=base_layer.WeightInit.Gaussian(0.02))
  task_p.train.summary_interval_steps = 100
  task_p.train.eval_interval_steps = 0
  task_p.train.num_train_steps = 10**9
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='loss', grad_norm_summary=False,
      var_norm_summary=False, check_valid_step=False,
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=_LR, epsilon=1e-8,
          clip_threshold=0.0, sharded_adam=False,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  return base_layer.instantiate(task_p)


def pax_runner(task, data, batch):
  """A function timing `steps` steps of the Pax train program."""
  inp = base_input.InMemoryInput(
      name='train', batch_size=batch, data=data, is_training=True,
      input_random_seed=1)
  partitioner = partitioning.create_partitioner(task)
  spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                      inp.peek_padded())
  partitioner.setup(spec)
  state = partitioner.initialize_state(jax.random.PRNGKey(0))
  program = programs.SingleTaskTrainProgram(
      task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
      enable_summary_writer=False)
  holder = {'state': state, 'step': 0}

  def run(steps):
    state, step = holder['state'], holder['step']
    start = time.perf_counter()
    for _ in range(steps):
      state, _ = program.run(state, step)
      step += 1
    jax.block_until_ready(state)
    holder.update(state=state, step=step)
    return (time.perf_counter() - start) / steps

  run(3)  # Compile.
  return run


def reference_runner(task, data, batch):
  """A function timing `steps` steps of a hand-written jit loop."""
  model = task.model
  x0 = {k: v[:batch] for k, v in data.items()}
  params = model.init(jax.random.PRNGKey(0), NestedMap(x0))
  tx = optax.adam(_LR, eps=1e-8)
  opt_state = tx.init(params)

  def loss_fn(p, batch_):
    metrics, _ = model.apply(p, NestedMap(batch_))
    return metrics['loss'][0]

  @jax.jit
  def step_fn(p, o, batch_):
    loss, grads = jax.value_and_grad(loss_fn)(p, batch_)
    updates, o = tx.update(grads, o, p)
    return optax.apply_updates(p, updates), o, loss

  step_fn = jax.jit(step_fn.__wrapped__, donate_argnums=(0, 1))
  rng = np.random.default_rng(1)
  n = len(data['inputs'])

  def next_batch():
    idx = rng.integers(0, n, size=batch)
    return {k: v[idx] for k, v in data.items()}

  holder = {'params': params, 'opt_state': opt_state}

  def run(steps):
    params, opt_state = holder['params'], holder['opt_state']
    start = time.perf_counter()
    for _ in range(steps):
      params, opt_state, _ = step_fn(params, opt_state, next_batch())
    jax.block_until_ready(params)
    holder.update(params=params, opt_state=opt_state)
    return (time.perf_counter() - start) / steps

  run(3)  # Compile.
  return run


def main(argv):
  del argv
  width, batch = _WIDTH.value, _BATCH.value
  data = make_data(4096, width)
  task = make_task(width)
  run_ref = reference_runner(task, data, batch)
  run_pax = pax_runner(task, data, batch)
  # Alternate the two so that drift of the machine hits both alike.
  ref = pax = float('inf')
  for _ in range(_REPEATS.value):
    ref = min(ref, run_ref(_STEPS.value))
    pax = min(pax, run_pax(_STEPS.value))
  print(f'devices: {jax.device_count()} x {jax.devices()[0].device_kind}')
  print(f'model: 3-layer MLP width {width}, batch {batch}, Adam')
  print(f'hand-written jax.jit loop: {ref * 1e3:.3f} ms/step')
  print(f'Pax SingleTaskTrainProgram: {pax * 1e3:.3f} ms/step')
  print(f'runner overhead: {100 * (pax / ref - 1):+.1f}% '
        f'(ratio {pax / ref:.3f})')


if __name__ == '__main__':
  app.run(main)
