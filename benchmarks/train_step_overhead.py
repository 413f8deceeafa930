"""How much the Pax runner costs over a hand-written `jax.jit` training loop.

Run: `python benchmarks/train_step_overhead.py [--model=mlp] [--repeats=40]`.

Both loops train the same model with the same Adam math on batches of the same
shapes, on whatever devices JAX sees. The model is a small TransformerLm
(`--model=transformer_lm`, the default: 2 layers, 128 wide, vocabulary 1024,
batch 8 x 64 tokens) or, for a harsher test with a shorter step, a 3-layer
MLP regression 512 wide (`--model=mlp`, batch 256):

* reference: `jax.jit` of `value_and_grad` of the praxis model's loss +
  `optax.adam`, state donated, numpy batches passed straight in;
* Pax: `SingleTaskTrainProgram.run` — the input's `get_next`, the partitioned
  `train_step_single_learner` (learner; metrics and summaries computed only
  on the steps that write them, the others run a loss-only variant), and the
  program's logging at `summary_interval_steps`.

After compilation the two loops alternate in short runs, `--repeats` times
`--steps` steps each, so that the machine's drift (other tenants of a shared
VM, clock changes) hits both alike. It prints each loop's median time per step
and main-thread CPU time per step (the host work), and the median of the
paired runs' ratios: the runner's overhead. A third loop, the runner with
`train.max_inflight_steps=0`, runs in the same alternation: the default (2,
as Pax) makes the host wait for the step two back before going on, which the
hand-written loop never does. So a fourth loop, the hand-written one bounded
as Pax bounds its steps (a queue of two losses: before each dispatch, when two
steps are in flight, it waits for the older), tells the bound's own cost from
the runner's: the runner's default is compared with both hand-written loops,
in time and in main-thread CPU a step (over the bounded loop: the runner's own
host work; over the unbounded one: that and what the bound costs). Then it
times the two compiled steps alone (one fixed batch already on the devices),
to tell the step's own math from the loop's host work.
"""

import collections
import pathlib
import statistics
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
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

_MODEL = flags.DEFINE_enum('model', 'transformer_lm', ['transformer_lm', 'mlp'],
                           'The model both loops train.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps per repeat.')
_REPEATS = flags.DEFINE_integer('repeats', 40, 'Alternating repeats.')

NestedMap = py_utils.NestedMap
_LR = 1e-3
_EXAMPLES = 4096


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


def mlp_setup(rng):
  """(model config, loss name, data, batch size) of the MLP regression."""
  width = 512
  x = rng.normal(size=(_EXAMPLES, width)).astype(np.float32)
  w = rng.normal(size=(width, width)).astype(np.float32)
  data = {'inputs': x, 'targets': np.tanh(x @ w / 30).astype(np.float32)}
  model = pax_fiddle.Config(MlpRegression, name='model', width=width)
  return model, 'loss', data, 256


def transformer_lm_setup(rng):
  """(model config, loss name, data, batch size) of a small TransformerLm."""
  vocab, seq_len, dims = 1024, 64, 128
  ids = rng.integers(2, vocab, size=(_EXAMPLES, seq_len + 1), dtype=np.int32)
  data = {
      'ids': ids[:, :-1], 'labels': ids[:, 1:],
      'paddings': np.zeros((_EXAMPLES, seq_len), np.float32),
      'weights': np.ones((_EXAMPLES, seq_len), np.float32),
  }
  lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=dims,
                         vocab_size=vocab)
  lm.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=2, model_dims=dims,
      hidden_dims=4 * dims, num_heads=4)
  model = pax_fiddle.Config(models.LanguageModel, name='lm', lm_tpl=lm)
  return model, 'total_loss', data, 8


def make_task(model_p, loss_name, max_inflight_steps=None):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='bench')
  if max_inflight_steps is not None:
    task_p.train.max_inflight_steps = max_inflight_steps
  model_p.params_init = base_layer.WeightInit.Gaussian(0.02)
  task_p.model = model_p
  task_p.train.summary_interval_steps = 100
  task_p.train.eval_interval_steps = 0
  task_p.train.num_train_steps = 10**9
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name=loss_name, grad_norm_summary=False,
      var_norm_summary=False, check_valid_step=False,
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=_LR, epsilon=1e-8,
          clip_threshold=0.0, sharded_adam=False,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  return base_layer.instantiate(task_p)


def _timer(advance, state):
  """A function timing `steps` calls of `state = advance(state)`.

  It returns (wall time, this thread's CPU time) per call: the second is the
  host work of the loop (Python, input, dispatch), without XLA's threads.
  """
  holder = [state]

  def run(steps):
    state = holder[0]
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
      state = advance(state)
    jax.block_until_ready(state)
    holder[0] = state
    return ((time.perf_counter() - start) / steps,
            (time.thread_time() - start_cpu) / steps)

  run(3)  # Compile.
  return run


def pax_runners(task, data, batch):
  """Timers of the Pax train program, and of its compiled step alone."""
  inp = base_input.InMemoryInput(
      name='train', batch_size=batch, data=data, is_training=True,
      input_random_seed=1)
  partitioner = partitioning.create_partitioner(task)
  spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                      inp.peek_padded())
  partitioner.setup(task, None, spec)
  key = jax.random.PRNGKey(1)
  program = programs.SingleTaskTrainProgram()
  program.setup(task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
                key, key, 0, enable_summary_writer=False)

  def fresh_state():
    return partitioner.initialize_prng_key_and_train_state(
        jax.random.PRNGKey(0), None, None)[1]

  def program_step(state_and_step):
    state, step = state_and_step
    return program.run(state, step).state, step + 1

  loop = _timer(program_step, (fresh_state(), 0))
  # The variant the program runs off summary steps: the loss only.
  # pylint: disable=protected-access
  train_step, _ = partitioner.partition(programs._train_step, spec,
                                        is_eval=False)
  lean = programs._TrainStepStaticArgs(
      unpadded_global_batch_size=batch, with_summaries=False,
      with_per_example_out=False)
  # pylint: enable=protected-access
  fixed = jax.tree.map(
      lambda x: jax.device_put(x, partitioner.input_sharding(x.ndim)),
      inp.get_next())
  step_alone = _timer(lambda state: train_step(state, key, fixed, lean)[0],
                      fresh_state())
  return loop, step_alone


def reference_runners(task, loss_name, data, batch, max_inflight_steps=0):
  """Timers of a hand-written jit loop, and of its jitted step alone.

  With `max_inflight_steps` > 0 the loop bounds its steps in flight as Pax's
  train program does: before dispatching a step, with that many in flight,
  it waits for the oldest (`block_until_ready` of its loss).
  """
  model = task.model
  tx = optax.adam(_LR, eps=1e-8)

  def init():
    params = model.init(jax.random.PRNGKey(0),
                        NestedMap({k: v[:batch] for k, v in data.items()}))
    return params, tx.init(params)

  def loss_fn(p, batch_):
    metrics, _ = model.apply(p, NestedMap(batch_))
    return metrics[loss_name][0]

  def step_fn(p, o, batch_):
    loss, grads = jax.value_and_grad(loss_fn)(p, batch_)
    updates, o = tx.update(grads, o, p)
    return optax.apply_updates(p, updates), o, loss

  step_fn = jax.jit(step_fn, donate_argnums=(0, 1))
  rng = np.random.default_rng(1)

  def next_batch():
    idx = rng.integers(0, _EXAMPLES, size=batch)
    return {k: v[idx] for k, v in data.items()}

  in_flight = collections.deque()

  def advance(po):
    batch_ = next_batch()
    if max_inflight_steps > 0 and len(in_flight) >= max_inflight_steps:
      in_flight.popleft().block_until_ready()
    params, opt_state, loss = step_fn(*po, batch_)
    if max_inflight_steps > 0:
      in_flight.append(loss)
    return params, opt_state

  loop = _timer(advance, init())
  fixed = jax.device_put(next_batch())
  step_alone = _timer(lambda po: step_fn(*po, fixed)[:2], init())
  return loop, step_alone


def _alternate(loops, repeats, steps):
  """`repeats` rounds of one run of each of `loops`: per loop, the list of
  its runs' (wall, host CPU) per step."""
  times = [[] for _ in loops]
  for _ in range(repeats):
    for run, out in zip(loops, times):
      out.append(run(steps))
  return times


def _medians(runs):
  """Median (wall, host CPU) per step of a loop's runs."""
  return tuple(statistics.median(t[i] for t in runs) for i in (0, 1))


def _ratio(runs, ref_runs):
  """(median, (first, third) quartiles) of the paired runs' wall ratios."""
  ratios = [r[0] / q[0] for r, q in zip(runs, ref_runs)]
  quartiles = statistics.quantiles(ratios, n=4)
  return statistics.median(ratios), (quartiles[0], quartiles[2])


def _overhead(ratio_and_quartiles):
  ratio, (low, high) = ratio_and_quartiles
  return (f'{100 * (ratio - 1):+.1f}% (median ratio {ratio:.3f}; quartiles '
          f'{low:.3f}-{high:.3f})')


def main(argv):
  del argv
  setup = {'mlp': mlp_setup, 'transformer_lm': transformer_lm_setup}
  model_p, loss_name, data, batch = setup[_MODEL.value](
      np.random.default_rng(0))
  task = make_task(model_p, loss_name)
  bound = task.train.max_inflight_steps
  ref_loop, ref_step = reference_runners(task, loss_name, data, batch)
  bounded_ref_loop, _ = reference_runners(task, loss_name, data, batch,
                                          max_inflight_steps=bound)
  pax_loop, pax_step = pax_runners(task, data, batch)
  # The same runner with no bound on the steps in flight (the hand-written
  # loop never waits; the runner, as Pax, waits for the step
  # `train.max_inflight_steps` = 2 back).
  unbounded_loop, _ = pax_runners(
      make_task(model_p, loss_name, max_inflight_steps=0), data, batch)
  ref, bounded_ref, pax, unbounded = _alternate(
      [ref_loop, bounded_ref_loop, pax_loop, unbounded_loop],
      _REPEATS.value, _STEPS.value)
  print(f'devices: {jax.device_count()} x {jax.devices()[0].device_kind}')
  print(f'model: {_MODEL.value}, batch {batch}, Adam; {_REPEATS.value} '
        f'alternating runs of {_STEPS.value} steps')

  def times(runs):
    wall, cpu = _medians(runs)
    return (f'{wall * 1e3:.3f} ms/step, host thread CPU {cpu * 1e3:.3f} '
            'ms/step (medians)')

  print(f'hand-written jax.jit loop: {times(ref)}')
  print(f'hand-written loop, at most {bound} steps in flight (as Pax): '
        f'{times(bounded_ref)}; {_overhead(_ratio(bounded_ref, ref))} over '
        'the unbounded one')
  print(f'Pax SingleTaskTrainProgram: {times(pax)}; overhead '
        f'{_overhead(_ratio(pax, ref))}; over the bounded hand-written loop '
        f'{_overhead(_ratio(pax, bounded_ref))}')
  print(f'Pax, train.max_inflight_steps=0: {times(unbounded)}; overhead '
        f'{_overhead(_ratio(unbounded, ref))}')
  # The runner's own host work, apart from what the bound costs any loop.
  cpu = {name: _medians(runs)[1] * 1e3 for name, runs in
         (('ref', ref), ('bounded', bounded_ref), ('pax', pax),
          ('unbounded', unbounded))}
  print(f"runner's main-thread CPU a step over the hand-written loop: "
        f"{cpu['pax'] - cpu['bounded']:+.3f} ms over the bounded one, "
        f"{cpu['pax'] - cpu['ref']:+.3f} ms over the unbounded one; "
        f"with max_inflight_steps=0, {cpu['unbounded'] - cpu['ref']:+.3f} ms "
        'over the unbounded one')
  # The compiled steps alone (one fixed batch on the devices, no input, no
  # logging): how much of the difference is the step's own math.
  ref_alone, pax_alone = _alternate([ref_step, pax_step], _REPEATS.value,
                                    _STEPS.value)
  print(f'compiled steps alone: {_overhead(_ratio(pax_alone, ref_alone))}')


if __name__ == '__main__':
  app.run(main)
