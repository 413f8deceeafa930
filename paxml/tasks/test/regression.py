"""A tiny linear-regression experiment for runner tests and smoke runs.

Public names: LinearRegressionModel, RegressionExperiment.

`python -m paxml.main --exp=tasks.test.regression.RegressionExperiment
--job_log_dir=/tmp/reg --eval_on_test --decode_during_train` trains it for 40
steps on a fixed synthetic problem in a few seconds, with eval, decode,
checkpoints and summaries.
"""

import os

import jax.numpy as jnp
import numpy as np
from paxml import base_experiment
from paxml import experiment_registry
from paxml import learners
from paxml import tasks_lib
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import linears

NestedMap = py_utils.NestedMap

_IN, _OUT = 4, 2


def make_data(num_examples: int, seed: int) -> dict[str, np.ndarray]:
  """y = x @ W_true + 0.01 noise, with a fixed W_true."""
  w_true = np.arange(_IN * _OUT, dtype=np.float32).reshape(_IN, _OUT) / 8.0
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(num_examples, _IN)).astype(np.float32)
  y = x @ w_true + 0.01 * rng.normal(size=(num_examples, _OUT))
  return {'inputs': x, 'targets': y.astype(np.float32)}


class LinearRegressionModel(base_model.BaseModel):
  """Predicts `targets` from `inputs` with one Linear layer; loss = MSE.

  Attributes:
    input_dims: Width of `inputs`.
    output_dims: Width of `targets`.
    hidden_dims: If positive, a linear `hidden` layer of this width comes
      first (still a linear model; it changes the variables' shapes).
  """

  input_dims: int = _IN
  output_dims: int = _OUT
  hidden_dims: int = 0

  def setup(self):
    proj_in = self.input_dims
    if self.hidden_dims > 0:
      self.create_child('hidden', pax_fiddle.Config(
          linears.Linear, input_dims=self.input_dims,
          output_dims=self.hidden_dims))
      proj_in = self.hidden_dims
    self.create_child('proj', pax_fiddle.Config(
        linears.Linear, input_dims=proj_in, output_dims=self.output_dims))

  def compute_predictions(self, input_batch):
    x = input_batch.inputs
    if self.hidden_dims > 0:
      x = self.hidden(x)
    return self.proj(x)

  def compute_loss(self, predictions, input_batch):
    weights = input_batch.get('eval_sample_weights')
    if weights is None:
      weights = jnp.ones(predictions.shape[0])
    err = jnp.sum((predictions - input_batch.targets) ** 2, axis=-1)
    total = jnp.maximum(jnp.sum(weights), 1e-6)
    mse = jnp.sum(err * weights) / total
    self.add_summary('mean_prediction', jnp.mean(predictions))
    return NestedMap(loss=(mse, total)), NestedMap(err=err)

  def decode(self, input_batch):
    predictions = self.compute_predictions(input_batch)
    err = jnp.mean(jnp.abs(predictions - input_batch.targets))
    return (NestedMap(mae=(err, jnp.array(1.0))),
            NestedMap(predictions=predictions, targets=input_batch.targets),
            NestedMap())

  def process_decode_out(self, input_obj, decode_out):
    del input_obj
    pairs = [(f'example_{i}', {'prediction': p.tolist(), 'target': t.tolist()})
             for i, (p, t) in enumerate(zip(decode_out.predictions,
                                            decode_out.targets))]
    return NestedMap(), pairs, NestedMap()


def _input(name: str, is_training: bool, seed: int, **kwargs):
  return pax_fiddle.Config(
      base_input.InMemoryInput, name=name, is_training=is_training,
      batch_size=8, data=make_data(64, seed), input_random_seed=seed,
      **kwargs)


@experiment_registry.register
class RegressionExperiment(base_experiment.BaseExperiment):
  """40 Adam steps on a 4 -> 2 linear regression."""

  NUM_TRAIN_STEPS = 40

  def datasets(self):
    return [_input('train', True, 1),
            _input('test', False, 2, reset_for_eval=True)]

  def decode_datasets(self):
    return [_input('decode', False, 3, reset_for_eval=True)]

  def task(self):
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='regression')
    task_p.model = pax_fiddle.Config(
        LinearRegressionModel, name='model',
        params_init=base_layer.WeightInit.Gaussian(0.1))
    train = task_p.train
    train.num_train_steps = self.NUM_TRAIN_STEPS
    train.save_interval_steps = 10
    train.save_max_to_keep = 10
    train.summary_interval_steps = 10
    train.eval_interval_steps = 20
    train.decode_interval_steps = 20
    train.learner = pax_fiddle.Config(
        learners.Learner, loss_name='loss',
        optimizer=pax_fiddle.Config(
            optimizers.Adam, learning_rate=0.05,
            lr_schedule=pax_fiddle.Config(schedules.Constant)))
    return task_p


class SignalAtBatchInput(base_input.InMemoryInput):
  """An InMemoryInput that sends its own process a signal at one batch.

  Simulates a preemption (SIGTERM) or a crash (SIGKILL) at a known point of
  training, for the runner's resume tests.

  Attributes:
    signal_at_batch: The batch (0-based, counted in this process) at which
      to send the signal; -1 never.
    signal_number: The signal, e.g. `signal.SIGKILL`.
  """

  signal_at_batch: int = -1
  signal_number: int = 9

  def __post_init__(self):
    super().__post_init__()
    self._batches_read = 0

  def get_next(self):
    if self._batches_read == self.signal_at_batch:
      os.kill(os.getpid(), self.signal_number)
    self._batches_read += 1
    return super().get_next()


@experiment_registry.register
class RegressionSignalExperiment(RegressionExperiment):
  """RegressionExperiment whose training input signals itself (see above).

  Set the batch and signal with
  `--fdl_set=datasets[0].signal_at_batch=13 --fdl_set=datasets[0].signal_number=9`.
  """

  def datasets(self):
    train, test = super().datasets()
    train.cls = SignalAtBatchInput
    return [train, test]

  def task(self):
    task_p = super().task()
    task_p.train.summary_interval_steps = 1
    return task_p


class GlobalBatchInput(base_input.BaseInput):
  """Draws global batch t from (seed, t); each host feeds its slice of it.

  So the global batches are the same whatever the number of hosts, and a run
  on 2 processes sees the same data as a run on 1 (multi-host tests).

  Attributes:
    data: Global arrays, examples first.
    signal_at_batch: As `SignalAtBatchInput`: -1 never.
    signal_number: The signal to send.
  """

  data: dict[str, np.ndarray] | None = None
  signal_at_batch: int = -1
  signal_number: int = 9

  def __post_init__(self):
    super().__post_init__()
    self._t = 0
    self._batches_read = 0

  def get_next(self):
    if self._batches_read == self.signal_at_batch:
      os.kill(os.getpid(), self.signal_number)
    self._batches_read += 1
    num = len(next(iter(self.data.values())))
    rng = np.random.default_rng([self.input_random_seed or 0, self._t])
    idx = rng.integers(0, num, size=self.batch_size * self.num_infeed_hosts)
    mine = idx[self.infeed_host_index * self.batch_size:][:self.batch_size]
    self._t += 1
    return NestedMap({k: v[mine] for k, v in self.data.items()})

  def _get_state_internal(self) -> bytes:
    return str(self._t).encode()

  def _set_state_internal(self, state: bytes) -> None:
    self._t = int(state.decode())


@experiment_registry.register
class RegressionGlobalBatchExperiment(RegressionExperiment):
  """RegressionExperiment fed by `GlobalBatchInput`, per-step summaries.

  Pass `--fdl_set=datasets[0].batch_size=4` on each of 2 hosts for the same
  global batch of 8 as one host.
  """

  def datasets(self):
    train = pax_fiddle.Config(
        GlobalBatchInput, name='train', is_training=True, batch_size=8,
        data=make_data(64, 1), input_random_seed=1)
    return [train, super().datasets()[1]]

  def task(self):
    task_p = super().task()
    task_p.train.summary_interval_steps = 1
    return task_p
