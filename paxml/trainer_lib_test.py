"""Tests of paxml.trainer_lib: steps checked against hand-written math."""

import functools
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from paxml import tasks_lib
from paxml import train_states
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils

NestedMap = py_utils.NestedMap
WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


class Regression(base_model.BaseModel):
  """y_hat = x @ w + b, loss = mean(scale * (y_hat - y)**2).

  With track_mean, a non-trainable running mean of x (0.9 / 0.1) is updated
  in training.
  """

  dims: int = 3
  outs: int = 2
  track_mean: bool = False

  def setup(self):
    self.create_variable('w', WeightHParams(
        shape=[self.dims, self.outs], init=WeightInit.Gaussian(0.5)))
    self.create_variable('b', WeightHParams(
        shape=[self.outs], init=WeightInit.Constant(0.1)))
    if self.track_mean:
      self.create_variable('x_mean', WeightHParams(
          shape=[self.dims], init=WeightInit.Constant(0.0)), trainable=False)

  def compute_predictions(self, input_batch):
    if self.track_mean and not self.do_eval:
      self.update_var('x_mean', 0.9 * self.get_var('x_mean')
                      + 0.1 * jnp.mean(input_batch.x, axis=0))
    pred = input_batch.x @ self.theta.w + self.theta.b
    self.add_summary('pred_mean', jnp.mean(pred))
    return pred

  def compute_loss(self, predictions, input_batch):
    sq = jnp.square(predictions - input_batch.y)
    loss = jnp.mean(input_batch.scale[:, None] * sq)
    n = jnp.array(input_batch.x.shape[0], jnp.float32)
    return {'loss': (loss, n)}, {'sq_err': jnp.sum(sq, -1)}

  def decode(self, input_batch):
    pred = self.compute_predictions(input_batch)
    mse = jnp.mean(jnp.square(pred - input_batch.y))
    return {'mse': (mse, jnp.array(1.0))}, NestedMap(pred=pred), {}


def _np_loss(params, batch):
  pred = batch.x @ params['w'] + params['b']
  return np.mean(batch.scale[:, None] * (pred - batch.y) ** 2)


def _np_grads(params, batch):
  """Gradients of `_np_loss`, derived by hand."""
  pred = batch.x @ params['w'] + params['b']
  d_pred = 2.0 * batch.scale[:, None] * (pred - batch.y) / pred.size
  return {'w': batch.x.T @ d_pred, 'b': d_pred.sum(0)}


def _task(optimizer, name='regression', model_kwargs=None, **learner_kwargs):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name=name)
  task_p.model = pax_fiddle.Config(Regression, name='model',
                                   **(model_kwargs or {}))
  task_p.train.learner.loss_name = 'loss'
  task_p.train.learner.optimizer = optimizer
  for k, v in learner_kwargs.items():
    setattr(task_p.train.learner, k, v)
  return task_p


_W_TRUE = np.array([[1.0, -1.0], [0.5, 2.0], [-1.5, 0.0]], np.float32)


def _batches(rng, k, n=8, scales=None):
  """`k` batches stacked on a leading axis; batch i has loss scale[i]."""
  x = rng.normal(size=(k, n, 3)).astype(np.float32)
  scales = np.ones(k, np.float32) if scales is None else np.asarray(scales)
  scale = np.repeat(scales[:, None], n, axis=1).astype(np.float32)
  return NestedMap(x=x, y=(x @ _W_TRUE + 0.5).astype(np.float32), scale=scale)


def _index(tree, i):
  return jax.tree.map(lambda a: np.asarray(a[i]), tree)


def _np_vars(task, batch, seed=0):
  """Initial variables drawn with numpy: params N(0, 0.5**2), the rest 0."""
  rng = np.random.default_rng(seed)
  hps = task.model.abstract_init_with_metadata(batch)
  def draw(path, hp):
    if path[0].key == base_layer.PARAMS:
      return (0.5 * rng.normal(size=hp.shape)).astype(np.float32)
    return np.zeros(hp.shape, np.float32)
  return jax.tree_util.tree_map_with_path(
      draw, hps, is_leaf=lambda x: isinstance(x, WeightHParams)), hps


def _run(task, batches, after=None):
  """Trains from `_np_vars` on each batch in turn, all under one jit.

  Args:
    task: The task.
    batches: Stacked batches (see `_batches`).
    after: Optional fn(task, final_state, first_batch) also run in the jit.

  Returns:
    (initial state, stacked states after each step, stacked outputs, the
    result of `after`).
  """
  init_vars, hps = _np_vars(task, _index(batches, 0))

  @jax.jit
  def run(batches):
    state = task.create_train_state(init_vars, hps)

    def body(state, batch):
      new_state, out = trainer_lib.train_step_single_learner(
          task, state, jax.random.PRNGKey(1), batch, var_weight_hparams=hps)
      return new_state, (new_state, out)

    final, (states, outs) = jax.lax.scan(body, state, batches)
    first = jax.tree.map(lambda a: a[0], batches)
    extra = after(task, final, first) if after else None
    return state, states, outs, extra

  return run(batches)


def _adam(tree):
  """Pax's Adam state, NestedMap(count, m, v), in an optimizer state."""
  is_adam = lambda n: isinstance(n, dict) and set(n) == {'count', 'm', 'v'}
  return next(x for x in jax.tree.leaves(tree, is_leaf=is_adam)
              if is_adam(x))


class TrainStepTest(test_utils.TestCase):

  def test_three_steps_equal_hand_written_adam(self):
    # Adam computes in float32: use the float32 values of its constants.
    lr, b1, b2, eps = (float(np.float32(c)) for c in (0.1, 0.9, 0.999, 1e-6))
    task = base_hyperparams.instantiate(_task(pax_fiddle.Config(
        optimizers.Adam, learning_rate=lr, beta1=b1, beta2=b2, epsilon=eps,
        sharded_adam=False)))
    batches = _batches(self.np_rng, 3)
    state0, states, outs, _ = _run(task, batches)

    params = jax.tree.map(lambda a: np.asarray(a, np.float64),
                          state0.mdl_vars['params'])
    m = jax.tree.map(np.zeros_like, params)
    v = jax.tree.map(np.zeros_like, params)
    for t in range(1, 4):
      batch = _index(batches, t - 1)
      self.assertAllClose(outs.loss[t - 1], _np_loss(params, batch),
                          rtol=1e-5)
      g = _np_grads(params, batch)
      for k in params:
        m[k] = b1 * m[k] + (1 - b1) * g[k]
        v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
        m_hat, v_hat = m[k] / (1 - b1**t), v[k] / (1 - b2**t)
        params[k] = params[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    self.assertAllClose(_index(states.mdl_vars, 2)['params'], params,
                        atol=1e-6, rtol=0)
    self.assertEqual(list(np.asarray(states.step)), [1, 2, 3])
    self.assertAllClose(outs.weighted_scalars['loss'][1], np.full(3, 8.0))
    self.assertEqual(outs.per_example_out['sq_err'].shape, (3, 8))
    summaries = outs.summary_tensors
    self.assertIn('pred_mean_scalar', summaries)
    self.assertAllClose(summaries['learning/lr_aggregate_scalar'],
                        np.full(3, lr))
    self.assertAllClose(summaries['learning/is_valid_step_aggregate_scalar'],
                        np.ones(3))
    self.assertIn('vars/params/w_scalar', summaries)

  def test_variable_norms_are_the_rms_after_every_step(self):
    # As Pax: computed on every call of the full step (the program calls it
    # only on summary steps), whatever the summary interval.
    task_p = _task(pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1))
    task_p.train.summary_interval_steps = 2
    task = base_hyperparams.instantiate(task_p)
    _, states, outs, _ = _run(task, _batches(self.np_rng, 3))
    norms = np.asarray(outs.summary_tensors['vars/params/w_scalar'])
    for i in range(3):
      w = np.asarray(states.mdl_vars['params']['w'][i], np.float64)
      self.assertAllClose(norms[i], np.sqrt(np.mean(w**2)), rtol=1e-6)

  def test_full_step_does_not_depend_on_the_run_length(self):
    # A restart with more steps must find the compiled step in the
    # persistent compilation cache: same program text for any
    # num_train_steps (the summary interval decides on the host).
    batch = _index(_batches(self.np_rng, 1), 0)
    texts = []
    for steps in (10, 12):
      task_p = _task(pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1))
      task_p.train.num_train_steps = steps
      task = base_hyperparams.instantiate(task_p)
      init_vars, hps = _np_vars(task, batch)
      state = task.create_train_state(init_vars, hps)
      step = functools.partial(trainer_lib.train_step_single_learner, task,
                               var_weight_hparams=hps)
      texts.append(jax.jit(step).lower(state, jax.random.PRNGKey(1),
                                       batch).as_text())
    self.assertIn('vars/params/w', str(jax.eval_shape(
        step, state, jax.random.PRNGKey(1), batch)[1].summary_tensors))
    self.assertEqual(texts[0], texts[1])

  @parameterized.named_parameters(
      ('adam', pax_fiddle.Config(optimizers.Adam, learning_rate=0.05)),
      ('sharded_adafactor', pax_fiddle.Config(
          optimizers.ShardedAdafactor, learning_rate=0.05,
          decay_method='adam', decay_adam=0.99, factored=True)),
      ('sgd', pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1)),
  )
  def test_loss_drops_below_one_percent_of_initial(self, optimizer):
    task = base_hyperparams.instantiate(_task(optimizer))
    batch = _batches(self.np_rng, 1, n=16)
    batches = jax.tree.map(lambda a: np.repeat(a, 150, axis=0), batch)
    state0, states, _, _ = _run(task, batches)
    initial = _np_loss(state0.mdl_vars['params'], _index(batch, 0))
    final = _np_loss(_index(states.mdl_vars, -1)['params'], _index(batch, 0))
    self.assertLess(final, 0.01 * initial)

  def test_excluded_variables_stay_bitwise_unchanged(self):
    state0, states, _, _ = _masked_run()
    adam = _adam(state0.opt_states)
    self.assertIsInstance(adam.m['params']['b'], py_utils.BpropMaskedNode)
    for i in range(4):
      params = _index(states.mdl_vars, i)['params']
      self.assertArraysEqual(params['b'], state0.mdl_vars['params']['b'])
      self.assertNotAllClose(params['w'], state0.mdl_vars['params']['w'])

  def test_zero_and_nan_gradients_skip_the_update(self):
    _, states, outs, _ = _masked_run()  # Step 2: zero gradients, 3: NaN.
    valid = outs.summary_tensors['learning/is_valid_step_aggregate_scalar']
    self.assertAllClose(valid, np.array([1.0, 0.0, 0.0, 1.0]))
    after_first = _index(states, 0)
    for i in (1, 2):
      skipped = _index(states, i)
      self.assertArraysEqual(skipped.mdl_vars, after_first.mdl_vars)
      self.assertArraysEqual(skipped.opt_states, after_first.opt_states)
      self.assertEqual(int(skipped.step), i + 1)
    self.assertNotAllClose(_index(states, 3).mdl_vars['params']['w'],
                           after_first.mdl_vars['params']['w'])

  def test_non_trainable_running_mean_is_carried(self):
    _, states, _, _, batches = _ema_run()
    expected = np.zeros(3, np.float32)
    for i in range(4):
      expected = 0.9 * expected + 0.1 * batches.x[i].mean(0)
      self.assertAllClose(
          _index(states.mdl_vars, i)['non_trainable']['x_mean'], expected)

  def test_ema_is_numpy_ema_of_trajectory_and_is_evaluated(self):
    state0, states, _, (ema_vars, eval_loss), batches = _ema_run()
    ema = jax.tree.map(np.asarray, state0.mdl_vars)
    before = ema
    for n in range(4):
      after_n = _index(states.mdl_vars, n)
      # The optimizer sees the params before the update and the statistics
      # after the forward pass.
      seen = {'params': before['params'],
              'non_trainable': after_n['non_trainable']}
      d = min(_EMA_DECAY, (1.0 + n) / (10.0 + n))
      ema = jax.tree.map(lambda e, x, d=d: d * e + (1 - d) * x, ema, seen)
      before = after_n
    self.assertAllClose(ema_vars, ema, atol=1e-6)
    self.assertAllClose(eval_loss, _np_loss(ema['params'],
                                            _index(batches, 0)), atol=1e-6)


  def test_bfloat16_step_keeps_the_state_dtypes(self):
    task = base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1),
        model_kwargs={'track_mean': True}))
    batch = _index(_batches(self.np_rng, 1), 0)
    init_vars, hps = _np_vars(task, batch)
    state = task.create_train_state(init_vars, hps)
    step = jax.jit(functools.partial(
        trainer_lib.train_step_single_learner, task,
        fprop_dtype=jnp.bfloat16, var_weight_hparams=hps))
    new_state, out = step(state, jax.random.PRNGKey(0), batch)
    dtypes = lambda t: jax.tree.map(lambda x: np.asarray(x).dtype, t)
    self.assertEqual(dtypes(new_state), dtypes(state))
    self.assertEqual(out.loss.dtype, jnp.float32)
    self.assertAllClose(out.loss, _np_loss(init_vars['params'], batch),
                        rtol=3e-2)


@functools.cache
def _masked_run():
  """Adam with params/b excluded and zero gradients skipped, 4 steps."""
  task = base_hyperparams.instantiate(_task(
      pax_fiddle.Config(optimizers.Adam, learning_rate=0.1),
      bprop_variable_exclusion=['params/b'], skip_zero_gradients=True))
  rng = np.random.default_rng(1)
  return _run(task, _batches(rng, 4, scales=[1.0, 0.0, np.nan, 1.0]))


_EMA_DECAY = 0.9


@functools.cache
def _ema_run():
  """Adam with EMA on the running-mean model, 4 steps, then an eval step."""
  task_p = _task(pax_fiddle.Config(optimizers.Adam, learning_rate=0.1,
                                   ema_decay=_EMA_DECAY),
                 model_kwargs={'track_mean': True})
  task_p.train.eval_use_ema_states = True
  task = base_hyperparams.instantiate(task_p)

  def after(task, state, batch):
    _, out = trainer_lib.eval_step_single_learner(
        task, state, jax.random.PRNGKey(0), batch)
    return tasks_lib.extract_ema(state).mdl_vars, out.loss

  batches = _batches(np.random.default_rng(2), 4)
  return _run(task, batches, after) + (batches,)


class InitAndDecodeTest(test_utils.TestCase):

  def test_initialize_from_shapes_and_metadata(self):
    task = base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1),
        model_kwargs={'track_mean': True}))
    batch = _index(_batches(self.np_rng, 1), 0)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                          batch)
    state, provenance = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), shapes, discard_opt_states=True)
    self.assertEqual(int(state.step), 0)
    self.assertEqual(state.opt_states, [])
    self.assertEqual(state.mdl_vars['params']['w'].shape, (3, 2))
    self.assertAllClose(state.mdl_vars['params']['b'], np.full(2, 0.1))
    self.assertAllClose(state.mdl_vars['non_trainable']['x_mean'],
                        np.zeros(3))
    self.assertEqual(repr(provenance.mdl_vars['params']['w']),
                     '"(random_init)"')

    meta = trainer_lib.create_train_state_metadata(task, shapes)
    self.assertEqual(meta.var_weight_hparams['params']['w'].shape, [3, 2])
    self.assertEqual(meta.unpadded_global_shapes.mdl_vars['params']['w'].shape,
                     (3, 2))
    self.assertEqual(meta.partition_specs.mdl_vars['params']['w'],
                     jax.sharding.PartitionSpec())
    self.assertIs(meta.partitioned_specs, meta.partition_specs)

  def test_decode_step_returns_model_outputs_and_summaries(self):
    task = base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1)))
    batch = _index(_batches(self.np_rng, 1), 0)
    init_vars, _ = _np_vars(task, batch)
    state = train_states.TrainState(step=0, mdl_vars=init_vars, opt_states=[])
    (scalars, results, metrics), updated = trainer_lib.decode_step(
        task.model, state, jax.random.PRNGKey(0), None, batch)
    params = jax.tree.map(np.asarray, state.mdl_vars['params'])
    pred = batch.x @ params['w'] + params['b']
    self.assertAllClose(results.pred, pred, atol=1e-6)
    self.assertAllClose(scalars['mse'][0], np.mean((pred - batch.y) ** 2),
                        atol=1e-6)
    self.assertEqual(metrics, {})
    self.assertAllClose(updated[base_layer.SUMMARIES]['pred_mean_scalar'],
                        pred.mean(), atol=1e-6)
    _, out = trainer_lib.decode_step_for_partitioner(
        task, state, jax.random.PRNGKey(0), batch)
    self.assertIsNone(out.loss)
    self.assertAllClose(out.per_example_out.pred, pred, atol=1e-6)
    self.assertIn('pred_mean_scalar', out.summary_tensors)

  def test_two_learners_are_rejected(self):
    task = base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1)))
    task._learners = task.learners * 2  # pylint: disable=protected-access
    batch = _index(_batches(self.np_rng, 1), 0)
    with self.assertRaisesRegex(ValueError, 'exactly one learner'):
      trainer_lib.train_step_single_learner(task, None, None, batch)


class _CountedRegression(Regression):
  """Regression that records each trace of its forward pass."""

  traces = []

  def compute_predictions(self, input_batch):
    _CountedRegression.traces.append(self.do_eval)
    return super().compute_predictions(input_batch)


class _OwnInitRegression(_CountedRegression):
  """A model with its own `init` (the runner may not replay its trace)."""

  def init(self, rngs, *args, **kwargs):
    return super().init(rngs, *args, **kwargs)


class InitTraceTest(test_utils.TestCase):

  def _traces_and_states(self, cls, **model_kwargs):
    task_p = _task(pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1))
    task_p.model = pax_fiddle.Config(cls, name='model', track_mean=True,
                                     **model_kwargs)
    task = base_hyperparams.instantiate(task_p)
    batch = _index(_batches(self.np_rng, 1), 0)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                          batch)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    _CountedRegression.traces.clear()
    meta = trainer_lib.create_train_state_metadata(task, shapes)
    sharded, _ = trainer_lib.initialize_partitioned_model_states(
        task, jax.random.PRNGKey(3), shapes, meta.partition_specs,
        global_mesh=mesh, var_weight_hparams=meta.var_weight_hparams)
    traces = len(_CountedRegression.traces)
    # The reference: `model.init` traced on its own, outside any jit.
    plain, _ = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(3), shapes)
    return traces, meta, sharded, plain

  def test_metadata_and_sharded_init_trace_the_model_once(self):
    for kwargs in ({}, {'fprop_dtype': jnp.bfloat16}):
      traces, meta, sharded, plain = self._traces_and_states(
          _CountedRegression, **kwargs)
      self.assertEqual(traces, 1, kwargs)
      self.assertEqual(meta.var_weight_hparams['params']['w'].shape, [3, 2])
      self.assertEqual(
          meta.var_weight_hparams['non_trainable']['x_mean'].shape, [3])
      jax.tree.map(self.assertArraysEqual, jax.device_get(sharded),
                   jax.device_get(plain))

  def test_a_model_with_its_own_init_is_traced_by_it(self):
    traces, _, sharded, plain = self._traces_and_states(_OwnInitRegression)
    self.assertEqual(traces, 2)
    jax.tree.map(self.assertArraysEqual, jax.device_get(sharded),
                 jax.device_get(plain))


class _FakeModel:
  """Stands for a model in the post-init file test (its two parts)."""

  def abstract_init_with_mdl_config(self, shapes, do_eval=False):
    return {'layer': {'dims': shapes['x'].shape[-1], 'do_eval': do_eval}}


class ScaledByOwg(base_model.BaseModel):
  """loss = sum(x @ w) + x[0, 0] * g * n; g overwritten with its gradient."""

  def setup(self):
    self.create_variable('w', WeightHParams(shape=[3, 2]))
    self.create_variable('g', WeightHParams(
        shape=[1], init=WeightInit.Constant(0.0), collections=[
            base_layer.WeightHParamsCollection.OVERWRITE_WITH_GRADIENT]))

  def compute_predictions(self, input_batch):
    return input_batch.x @ self.theta.w + input_batch.x[0, 0] * self.theta.g

  def compute_loss(self, predictions, input_batch):
    return {'loss': (jnp.sum(predictions), jnp.array(1.0))}, NestedMap()


class OverwriteWithGradientTest(test_utils.TestCase):

  def test_variable_takes_its_gradient_and_has_no_optimizer_state(self):
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='owg')
    task_p.model = pax_fiddle.Config(ScaledByOwg, name='model')
    task_p.train.learner.loss_name = 'loss'
    task_p.train.learner.optimizer = pax_fiddle.Config(
        optimizers.Adam, learning_rate=0.5)
    task = base_hyperparams.instantiate(task_p)
    x = self.np_rng.normal(size=(4, 3)).astype(np.float32)
    batch = NestedMap(x=x)
    state, _ = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), batch)
    adam = _adam(state.opt_states)
    self.assertIsInstance(adam.m['params']['g'], py_utils.BpropMaskedNode)
    w0 = np.asarray(state.mdl_vars['params']['w'])
    for _ in range(2):
      state, _ = trainer_lib.train_step_single_learner(
          task, state, jax.random.PRNGKey(1), batch)
      # d loss / d g = x[0, 0] * (batch * outputs), whatever g was.
      self.assertAllClose(state.mdl_vars['params']['g'],
                          [x[0, 0] * 4 * 2], rtol=1e-5)
    # w still moves with Adam: about lr per step, against its gradient.
    grad_sign = np.sign(x.sum(0))[:, None] * np.ones((1, 2))
    self.assertAllClose(np.asarray(state.mdl_vars['params']['w']) - w0,
                        -2 * 0.5 * grad_sign, atol=1e-3)


class StepHooksTest(test_utils.TestCase):
  """train_step_single_learner's grad_fn, apply_fn and expose arguments."""

  def _setup(self, **optimizer_kwargs):
    task = base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1,
                          **optimizer_kwargs),
        model_kwargs={'track_mean': True}))
    batch = _index(_batches(self.np_rng, 1), 0)
    state, _ = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), batch)
    return task, batch, state

  def test_custom_grad_fn_and_apply_fn(self):
    task, batch, state = self._setup()
    applied = []

    def apply_fn(model, variables, inputs, mutable, rngs):
      applied.append(mutable)
      return model.apply(variables, inputs, method=model.__call__,
                         mutable=mutable, rngs=rngs)

    def grad_fn(loss_fn, learner, mdl_vars, inputs, prng_key):
      del learner
      values = loss_fn(mdl_vars, inputs, prng_key)
      ones = jax.tree.map(jnp.ones_like, mdl_vars['params'])
      return values, {**mdl_vars, 'params': ones}

    new, out = trainer_lib.train_step_single_learner(
        task, state, jax.random.PRNGKey(1), batch, grad_fn=grad_fn,
        apply_fn=apply_fn)
    self.assertLen(applied, 1)
    self.assertAllClose(out.loss, _np_loss(
        jax.tree.map(np.asarray, state.mdl_vars['params']), batch))
    # Plain SGD on gradients of ones: every weight drops by the rate.
    self.assertAllClose(new.mdl_vars['params']['w'],
                        state.mdl_vars['params']['w'] - 0.1)

  def test_hidden_non_trainables_leave_their_ema_unchanged(self):
    task, batch, state = self._setup(ema_decay=0.5)
    emas = {}
    for expose in (True, False):
      new, _ = trainer_lib.train_step_single_learner(
          task, state, jax.random.PRNGKey(1), batch,
          expose_updated_nontrainables_to_learner=expose)
      expected = 0.1 * np.mean(batch.x, axis=0)  # 0.9 * 0 + 0.1 * mean.
      self.assertAllClose(new.mdl_vars['non_trainable']['x_mean'], expected)
      emas[expose] = tasks_lib.extract_ema(new).mdl_vars['non_trainable']
    self.assertNotAllClose(emas[True]['x_mean'], np.zeros(3))
    self.assertAllClose(emas[False]['x_mean'], np.zeros(3))


class SetupHelpersTest(test_utils.TestCase):

  def _task(self):
    return base_hyperparams.instantiate(_task(
        pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1)))

  def _shapes(self):
    batch = _index(_batches(self.np_rng, 1), 0)
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        batch)

  def test_running_mode_detect_and_flags(self):
    mode = trainer_lib.RunningMode
    self.assertEqual(mode.detect(False, False, False), mode.UNKNOWN)
    both = mode.detect(True, False, True)
    self.assertEqual(both, mode.TRAIN | mode.DECODE)
    self.assertEqual((both.has_train, both.has_eval, both.has_decode),
                     (True, False, True))

  def test_post_init_file_has_layer_configs_then_variables(self):
    meta = trainer_lib.create_train_state_metadata(self._task(),
                                                   self._shapes())
    out = self.enter_context(tempfile.TemporaryDirectory())
    trainer_lib.write_post_init_model_hparams_file(_FakeModel(), meta, out,
                                                   do_eval=True)
    with open(f'{out}/post_init_model_params.txt') as f:
      configs, variables = f.read().split('\n\n')
    self.assertEqual(configs.strip(),
                     base_hyperparams.nested_struct_to_text(
                         {'layer': {'dims': 3, 'do_eval': True}}).strip())
    self.assertIn('params.w.shape : [3, 2]', variables)

  def test_provenance_file_lists_each_tensor_once(self):
    task = self._task()
    _, provenance = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), self._shapes())
    out = self.enter_context(tempfile.TemporaryDirectory())
    trainer_lib.write_train_provenance_file(provenance, out)
    with open(f'{out}/train_state_provenance.txt') as f:
      text = f.read()
    self.assertIn("Mdl vars\n['params']['b']: \"(random_init)\"", text)
    self.assertTrue(text.startswith('Step\n'))

  def test_replicated_and_partitioned_initialisation(self):
    task = self._task()
    shapes = self._shapes()
    plain, _ = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), shapes)
    replicated = trainer_lib.initialize_replicate_model_state(
        task, jax.random.PRNGKey(0), shapes)
    n = jax.local_device_count()
    self.assertEqual(replicated.mdl_vars['params']['w'].shape, (n, 3, 2))
    for i in range(n):
      self.assertArraysEqual(replicated.mdl_vars['params']['w'][i],
                             plain.mdl_vars['params']['w'])
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    specs = task.create_train_state_partition_specs(
        trainer_lib.create_train_state_metadata(task, shapes)
        .var_weight_hparams)
    sharded, provenance = trainer_lib.initialize_partitioned_model_states(
        task, jax.random.PRNGKey(0), shapes, specs, discard_opt_states=True,
        global_mesh=mesh)
    self.assertEqual(sharded.opt_states, [])
    self.assertArraysEqual(sharded.mdl_vars['params']['w'],
                           plain.mdl_vars['params']['w'])
    self.assertEqual(sharded.mdl_vars['params']['w'].sharding.mesh, mesh)
    self.assertEqual(repr(provenance.step), '"(random_init)"')

  def test_init_checkpoint_rules_need_the_other_task(self):
    task_p = _task(pax_fiddle.Config(optimizers.Sgd, learning_rate=0.1))
    task_p.train.init_from_checkpoint_rules = {
        '/ckpt': tasks_lib.CheckpointLoadingRules(
            task_p=None, load_rules=[tasks_lib.LOAD_ALL])}
    task = base_hyperparams.instantiate(task_p)
    with self.assertRaisesRegex(ValueError, "'/ckpt': task_p and "
                                'input_specs_provider_p are required'):
      trainer_lib.initialize_model_state(task, jax.random.PRNGKey(0),
                                         self._shapes())
    state, _ = trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(0), self._shapes(),
        do_init_checkpoint_rules=False)
    self.assertEqual(int(state.step), 0)

  def test_input_partition_specs(self):
    P = jax.sharding.PartitionSpec  # pylint: disable=invalid-name
    specs = trainer_lib.get_input_partition_specs(
        ('data', 'mdl'), {'a': np.zeros((4, 2)), 'b': np.zeros(4)})
    self.assertEqual(specs, {'a': P(('data', 'mdl'), None),
                             'b': P(('data', 'mdl'))})
    with self.assertRaisesRegex(ValueError, 'batch dimension'):
      trainer_lib.shard_on_batch_dim_partition_spec(('data',), np.zeros(()))
    x = jnp.ones((2, 3))
    self.assertIs(trainer_lib.reshard_input_based_on_rank_fn(None, (), x), x)
    self.assertIs(trainer_lib.reshard_input_based_on_rank_fn(
        {'map_2d': None}, ('data',), x), x)
    with self.assertRaisesRegex(ValueError, "no 'map_2d'"):
      trainer_lib.reshard_input_based_on_rank_fn({'map_1d': None}, (), x)

  def test_input_shapes_names_and_small_batches(self):
    data = {'x': np.arange(12, dtype=np.float32).reshape(6, 2)}
    input_p = base_input.InMemoryInput.HParams(
        name='a', batch_size=3, data=data)
    per_host, global_ = trainer_lib.get_inputs_shape_dtype(input_p)
    self.assertEqual(per_host['x'].shape, (3, 2))
    self.assertEqual(global_['x'].shape, (3 * jax.process_count(), 2))
    padded = trainer_lib.adjust_input_params_for_small_batch(input_p, None)
    devices = jax.local_device_count()
    self.assertEqual(padded.batch_padding_size, -(-3 // devices) * devices - 3)
    inputs = [base_hyperparams.instantiate(input_p)] * 2
    with self.assertRaisesRegex(ValueError, "Two inputs are named 'a'"):
      trainer_lib.check_unique_names(inputs)

  def test_bind_mesh_runs_under_the_mesh(self):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    seen = []

    def body(x):
      seen.append(jax.sharding.get_abstract_mesh().axis_names)
      return x * 2

    fn = trainer_lib.bind_mesh(jax.jit(body), mesh)
    self.assertEqual(float(fn(1.5)), 3.0)
    self.assertEqual(seen, [('data',)])
    self.assertIsNotNone(fn.lower(2.0))



class DpSummariesTest(absltest.TestCase):

  def test_dp_statistics_become_dp_metrics_summaries(self):
    with base_layer.JaxContext.new_context():
      trainer_lib._add_dp_summaries({  # pylint: disable=protected-access
          'frac_clipped': jnp.float32(0.25),
          'per_core_grad_norm': jnp.float32(3.0),
          'mean_layer_grad_norms': {'w': jnp.float32(1.0),
                                    'b': jnp.float32(2.0)}})
      summaries = base_layer.all_global_summaries()
    values = {k.rsplit('_', 1)[0] if k.endswith('_scalar') else k: float(v)
              for k, v in summaries.items()}
    self.assertEqual(values, {
        'dp_metrics/frac_clipped': 0.25,
        'dp_metrics/mean_per_core_grad_norm': 3.0,
        'dp_metrics/mean_layer_grad_norms/w': 1.0,
        'dp_metrics/mean_layer_grad_norms/b': 2.0})


if __name__ == '__main__':
  absltest.main()
