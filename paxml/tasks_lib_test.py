"""Tests of paxml.tasks_lib: configs, states, sharding, noise, legacy style."""

import functools
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import checkpoints
from paxml import tasks_lib
from paxml import trainer_lib
from praxis import base_hyperparams
from praxis import base_input
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis import test_utils

NestedMap = py_utils.NestedMap
PartitionSpec = jax.sharding.PartitionSpec
WeightHParams = base_layer.WeightHParams
instantiate = base_hyperparams.instantiate


class Linear(base_model.BaseModel):
  """y_hat = x @ w + b (w sharded by `weight_split_dims_mapping.wt`), MSE.

  Also a non-trainable `count` and, with `uneven`, a [3, 8] variable split
  over the 'data' axis.
  """

  uneven: bool = False

  def setup(self):
    self.create_variable('w', WeightHParams(
        shape=[4, 8], init=base_layer.WeightInit.Gaussian(0.3),
        mesh_shape=self.mesh_shape,
        tensor_split_dims_mapping=self.weight_split_dims_mapping.wt))
    self.create_variable('b', WeightHParams(
        shape=[8], init=base_layer.WeightInit.Constant(0.0)))
    self.create_variable('count', WeightHParams(
        shape=[], init=base_layer.WeightInit.Constant(0.0)), trainable=False)
    if self.uneven:
      self.create_variable('u', WeightHParams(
          shape=[3, 8], mesh_shape=self.mesh_shape,
          tensor_split_dims_mapping=['data', -1]))

  def compute_predictions(self, input_batch):
    return input_batch.x @ self.theta.w + self.theta.b

  def compute_loss(self, predictions, input_batch):
    loss = jnp.mean(jnp.square(predictions - input_batch.y))
    return {'mse': (loss, jnp.array(1.0))}, {}


def _task_p(name='task', **model_kwargs):
  task_p = tasks_lib.SingleTask.HParams(name=name)
  task_p.model = pax_fiddle.Config(Linear, name='linear', **model_kwargs)
  task_p.train.learner.loss_name = 'mse'
  task_p.train.learner.optimizer = optimizers.Adam.HParams(learning_rate=0.1)
  return task_p


def _batch(rng, n=4):
  x = rng.normal(size=(n, 4)).astype(np.float32)
  return NestedMap(x=x, y=(x.sum(-1, keepdims=True) * np.ones(8)).astype(
      np.float32))


def _np_vars(hps, rng):
  return jax.tree.map(
      lambda hp: rng.normal(size=hp.full_shape).astype(np.float32), hps,
      is_leaf=lambda x: isinstance(x, WeightHParams))


def _is_adam(node):
  """Pax's Adam state: NestedMap(count, m, v)."""
  return isinstance(node, dict) and set(node) == {'count', 'm', 'v'}


def _adam_state(tree):
  return next(x for x in jax.tree.leaves(tree, is_leaf=_is_adam)
              if _is_adam(x))


class ConfigTest(test_utils.TestCase):

  def test_defaults_follow_pax(self):
    task = instantiate(_task_p())
    train = task.train
    self.assertEqual(train.num_train_steps, 1e7)
    self.assertEqual(train.save_interval_steps, 5000)
    self.assertEqual(train.save_keep_interval_duration, '12h')
    self.assertEqual(train.eval_interval_steps, 100)
    self.assertEqual(train.random_seed, 1234)
    self.assertEqual(train.init_from_checkpoint_rules, {})
    self.assertEqual(train.apply_mutable_list,
                     ['aux_loss', 'summaries', 'non_trainable', 'batch_stats',
                      'params_axes'])
    self.assertEqual(task.evaluate.apply_mutable_list,
                     ['aux_loss', 'summaries', 'non_trainable'])
    self.assertEqual(task.decode.apply_mutable_list,
                     ['decoder_cache', 'summaries'])
    self.assertEqual(task.decode.metrics_prefix, 'Metrics/')
    self.assertEqual((task.vn.vn_scale, task.vn.vn_regex,
                      task.vn.vn_start_step), (0.0, '', 0))
    self.assertEqual(task.summary_verbosity, 3)
    self.assertEqual(task.infer.random_seed, 1234)
    learner = task.learners[0]
    self.assertEqual(learner.name, 'learner_0')
    self.assertEqual(learner.bprop_variable_exclusion, [])
    self.assertTrue(learner.vectorize_on_repeat_prefix)
    self.assertEqual(learner.repeat_prefix_sep, '#')
    self.assertIsInstance(task.metrics_aggregator,
                          tasks_lib.base_metrics.MeanMetrics)
    self.assertEqual(task.loss_aggregator_inst.loss_key, 'mse')
    self.assertFalse(task.has_ema_decay)
    self.assertIsInstance(tasks_lib.SingleTask.TrainHParams(),
                          pax_fiddle.Config)
    self.assertEqual(
        tasks_lib.SingleTask.VariationalNoiseHParams(vn_scale=1.0).vn_scale,
        1.0)

  def test_bad_configs_name_the_field(self):
    with self.assertRaisesRegex(ValueError, '`name`'):
      instantiate(_task_p(name=''))
    task_p = _task_p()
    task_p.train.learner.loss_name = None
    with self.assertRaisesRegex(ValueError, 'loss_name'):
      instantiate(task_p)
    task_p = _task_p()
    task_p.loss_aggregator = pax_fiddle.Config(
        tasks_lib.base_metrics.LossAggregator, loss_key='mse')
    with self.assertRaisesRegex(ValueError, 'loss_name must be None'):
      instantiate(task_p)
    task_p = _task_p()
    task_p.model = None
    with self.assertRaisesRegex(ValueError, '`model`'):
      instantiate(task_p)
    task_p = _task_p()
    task_p.train.learner.optimizer = None
    with self.assertRaisesRegex(ValueError, '`optimizer`'):
      instantiate(task_p)


class TrainStateTest(test_utils.TestCase):

  def test_excluded_and_non_trainable_vars_have_no_opt_state(self):
    task_p = _task_p()
    task_p.train.learner.bprop_variable_inclusion = ['params/w']
    task = instantiate(task_p)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    state = task.create_train_state(_np_vars(hps, self.np_rng), hps)
    self.assertEqual(int(state.step), 0)
    adam = _adam_state(state.opt_states)
    self.assertEqual(adam.m['params']['w'].shape, (4, 8))
    self.assertIsInstance(adam.m['params']['b'], py_utils.BpropMaskedNode)
    self.assertIsInstance(adam.m['non_trainable']['count'],
                          py_utils.BpropMaskedNode)
    grad_mask, opt_mask = trainer_lib.get_excluded_var_masks(
        hps, task.learners[0])
    self.assertEqual(grad_mask, {'params': {'w': False, 'b': True},
                                 'non_trainable': {'count': True}})
    self.assertEqual(opt_mask, grad_mask)
    eval_state = state.to_eval_state()
    self.assertEqual(eval_state.opt_states, [])

  def test_kept_optimizer_state_does_not_make_excluded_vars_trainable(self):
    task_p = _task_p()
    task_p.train.learner.bprop_variable_exclusion = ['params/b']
    task_p.train.learner.keep_optimizer_state_for_excluded_vars = True
    task = instantiate(task_p)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    grad_mask, opt_mask = trainer_lib.get_excluded_var_masks(
        hps, task.learners[0])
    self.assertEqual(grad_mask, {'params': {'w': False, 'b': True},
                                 'non_trainable': {'count': True}})
    self.assertEqual(opt_mask, {'params': {'w': False, 'b': False},
                                'non_trainable': {'count': False}})

  def test_ema_covers_non_trainable_vars_and_is_extracted(self):
    task_p = _task_p()
    task_p.train.learner.optimizer.ema_decay = 0.5
    task_p.train.learner.bprop_variable_exclusion = 'params/b'
    task = instantiate(task_p)
    self.assertTrue(task.has_ema_decay)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    _, opt_mask = trainer_lib.get_excluded_var_masks(hps, task.learners[0])
    self.assertEqual(opt_mask, {'params': {'w': False, 'b': True},
                                'non_trainable': {'count': False}})
    variables = _np_vars(hps, self.np_rng)
    state = task.create_train_state(variables, hps)
    ema = tasks_lib.extract_ema(state)
    # b has no EMA (excluded): extract_ema takes its current value.
    self.assertAllClose(ema.mdl_vars, variables)
    self.assertEqual(ema.opt_states, [])


  def test_extract_ema_merges_stacked_variable_groups(self):
    task_p = _task_p()
    task_p.train.learner.optimizer.ema_decay = 0.5
    learner = instantiate(task_p).learners[0]
    hps = {'params': {'w': WeightHParams(shape=[4], repeat_prefix=[2]),
                      'b': WeightHParams(shape=[3], repeat_prefix=[5])}}
    variables = _np_vars(hps, self.np_rng)
    state = tasks_lib.create_state(variables, hps, False, [learner])
    self.assertTrue(tasks_lib.is_vectorized(state))
    self.assertEqual(set(state.opt_states[0]),
                     {'no_prefix', 'p#2#i-1', 'p#5#i-1'})
    self.assertAllClose(tasks_lib.extract_ema(state).mdl_vars, variables)


class _Specs(base_input.BaseInputSpecsProvider):
  """Input specs of `_batch`."""

  def get_input_specs(self):
    return NestedMap(x=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                     y=jax.ShapeDtypeStruct((4, 8), jnp.float32))


class InitFromCheckpointTest(test_utils.TestCase):
  """Warm starts from a checkpoint written by another task."""

  def _saved(self, ema_decay=0.0, step=7):
    """(task config, state) of a run saved under a temp dir at `step`."""
    src_p = _task_p('src')
    src_p.train.learner.optimizer.ema_decay = ema_decay
    src = instantiate(src_p)
    hps = src.model.abstract_init_with_metadata(_batch(self.np_rng))
    state = src.create_train_state(_np_vars(hps, self.np_rng), hps)
    # Variables moved away from their EMA, and Adam's nu away from zero, as
    # after training.
    state = state.replace(
        step=jnp.array(step, jnp.uint32),
        mdl_vars=jax.tree.map(lambda v: v + 1.0, state.mdl_vars),
        opt_states=jax.tree.map(
            lambda n: py_utils.NestedMap(
                n, v=jax.tree.map(lambda v: v + 2.0, n.v))
            if _is_adam(n) else n, state.opt_states, is_leaf=_is_adam))
    ckpt_dir = tempfile.mkdtemp()
    checkpoints.save_checkpoint(state, ckpt_dir)
    return src_p, state, ckpt_dir

  def _init(self, rules_by_dir, ema_decay=0.0):
    task_p = _task_p('dst')
    task_p.train.learner.optimizer.ema_decay = ema_decay
    task_p.train.init_from_checkpoint_rules = rules_by_dir
    task = instantiate(task_p)
    return trainer_lib.initialize_model_state(
        task, jax.random.PRNGKey(3), _batch(self.np_rng))

  def _rules(self, src_p, load_rules, **kwargs):
    return tasks_lib.CheckpointLoadingRules(
        task_p=src_p, load_rules=load_rules,
        input_specs_provider_p=pax_fiddle.Config(_Specs), **kwargs)

  def test_variables_step_and_provenance_follow_the_rules(self):
    src_p, saved, ckpt_dir = self._saved()
    state, provenance = self._init({ckpt_dir: self._rules(
        src_p, [('params/w', 'params/w')], load_step=True,
        ignore_rules=['params/b'])})
    self.assertArraysEqual(state.mdl_vars['params']['w'],
                           saved.mdl_vars['params']['w'])
    self.assertNotAllClose(state.mdl_vars['params']['b'],
                           saved.mdl_vars['params']['b'])
    self.assertEqual(int(state.step), 7)
    self.assertEqual(repr(provenance.mdl_vars['params']['w']),
                     f'"({ckpt_dir}:latest)"')
    self.assertEqual(repr(provenance.mdl_vars['params']['b']),
                     '"(random_init)"')
    # Fresh Adam moments for the loaded weights (none were loaded).
    self.assertArraysEqual(_adam_state(state.opt_states).m['params']['w'],
                           np.zeros((4, 8)))

  def test_ema_values_and_partial_optimizer_states(self):
    src_p, saved, ckpt_dir = self._saved(ema_decay=0.5)
    saved_ema = tasks_lib.extract_ema(saved).mdl_vars['params']
    self.assertAllClose(saved_ema['b'], saved.mdl_vars['params']['b'] - 1.0)
    state, provenance = self._init({ckpt_dir: self._rules(
        src_p, [(r'params/(.*)', 'ema/params/{}'),
                (r'(.*)/m/params/w', '{}/v/params/w')],
        partial_load_opt_states=True)}, ema_decay=0.5)
    self.assertArraysEqual(state.mdl_vars['params']['b'], saved_ema['b'])
    self.assertArraysEqual(state.mdl_vars['params']['w'], saved_ema['w'])
    # m of w is read from the saved v of w (2.0 + 0); v stays fresh.
    adam = _adam_state(state.opt_states)
    self.assertArraysEqual(adam.m['params']['w'], np.full((4, 8), 2.0))
    self.assertArraysEqual(adam.v['params']['w'], np.zeros((4, 8)))
    came_from = _adam_state(provenance.opt_states)
    self.assertEqual(repr(came_from.m['params']['w']),
                     f'"({ckpt_dir}:latest)"')
    self.assertEqual(repr(came_from.v['params']['w']), '"(random_init)"')

  def test_wrong_patterns_and_missing_ema_are_named(self):
    src_p, _, ckpt_dir = self._saved()
    with self.assertRaisesRegex(ValueError, r"wrong pattern\(s\): "
                                r"\{'params/_\(\.\*\)'\}"):
      self._init({ckpt_dir: self._rules(src_p, [(r'params/_(.*)', '{}')],
                                        safe_load=True)})
    with self.assertRaisesRegex(RuntimeError, 'keeps no EMA'):
      self._init({ckpt_dir: self._rules(src_p, [(r'(.*)', 'ema/{}')])})


class OptaxRulesTest(test_utils.TestCase):

  def test_optax_adam_names_map_to_praxis_adam_names(self):
    mapped = {}
    for name in ('0/2/0/mu/params/w', '0/2/0/nu/params/a/b', '0/2/0/count'):
      for pattern, ref in tasks_lib.get_optax_opt_load_rules():
        if match := pattern.match(name):
          mapped[name] = ref.format(*match.groups())
          break
    self.assertEqual(mapped, {'0/2/0/mu/params/w': '0/2/m/params/w',
                              '0/2/0/nu/params/a/b': '0/2/v/params/a/b'})
    praxis = tasks_lib.get_praxis_opt_state_regex()
    self.assertTrue(any(p.match('0/2/m/params/w') for p in praxis))
    self.assertFalse(any(p.match('0/2/0/mu/params/w') for p in praxis))


class FlattenDictTest(test_utils.TestCase):

  def test_keys_are_dot_joined_in_dict_order(self):
    tree = {'params': {'b': 1, 'a': {'x': 2}}, 'step': 3}
    self.assertEqual(tasks_lib._flatten_dict(tree),  # pylint: disable=protected-access
                     [('params.b', 1), ('params.a.x', 2), ('step', 3)])
    self.assertEqual(tasks_lib._flatten_dict(5), [('', 5)])  # pylint: disable=protected-access


class PartitionSpecTest(test_utils.TestCase):

  def _specs(self, mesh, discard=False, **model_kwargs):
    task_p = _task_p(**model_kwargs)
    task_p.train.learner.optimizer.ema_decay = 0.9
    if mesh:
      task_p.model.ici_mesh_shape = [1, 2, 4]
      task_p.model.mesh_axis_names = ['replica', 'data', 'mdl']
      task_p.model.weight_split_dims_mapping.wt = [1, 2]
    task = instantiate(task_p)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    return task, hps, task.create_train_state_partition_specs(hps, discard)

  def test_annotated_weights_and_adam_moments(self):
    task, hps, specs = self._specs(mesh=True)
    w_spec = PartitionSpec('data', 'mdl')
    self.assertEqual(specs.mdl_vars['params']['w'], w_spec)
    self.assertEqual(specs.mdl_vars['params']['b'], PartitionSpec(None))
    self.assertEqual(specs.step, PartitionSpec())
    adam = _adam_state(specs.opt_states)
    self.assertEqual(adam.m['params']['w'], w_spec)
    self.assertEqual(adam.v['params']['w'], w_spec)
    self.assertEqual(adam.count, PartitionSpec())
    ema = tasks_lib.optimizers.extract_ema(specs.opt_states[0])
    self.assertEqual(ema['params']['w'], w_spec)

    # The specs match the state leaf for leaf and shard it on 8 devices.
    shapes = task.create_train_state_unpadded_shapes(hps)
    self.assertEqual(jax.tree.structure(specs), jax.tree.structure(shapes))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(1, 2, 4),
                             ('replica', 'data', 'mdl'))
    state = task.create_train_state(_np_vars(hps, self.np_rng), hps)
    placed = jax.device_put(state, jax.tree.map(
        lambda s: jax.sharding.NamedSharding(mesh, s), specs))
    w = placed.mdl_vars['params']['w']
    self.assertEqual(w.sharding.shard_shape(w.shape), (2, 2))

  def test_without_mesh_everything_is_replicated(self):
    _, _, specs = self._specs(mesh=False)
    leaves = jax.tree.leaves(specs)
    self.assertNotEmpty(leaves)
    self.assertTrue(all(s == PartitionSpec() for s in leaves))
    _, _, specs = self._specs(mesh=False, discard=True)
    self.assertEqual(specs.opt_states, [])

  def test_uneven_dims_are_padded(self):
    task, hps, _ = self._specs(mesh=True, uneven=True)
    padded = task.create_train_state_padded_shapes(hps)
    unpadded = task.create_train_state_unpadded_shapes(hps)
    self.assertEqual(unpadded.mdl_vars['params']['u'].shape, (3, 8))
    self.assertEqual(padded.mdl_vars['params']['u'].shape, (4, 8))
    self.assertEqual(padded.mdl_vars['params']['w'].shape, (4, 8))


class VariationalNoiseTest(test_utils.TestCase):

  def test_noise_only_from_start_step_on_matching_vars(self):
    task_p = _task_p()
    task_p.vn.vn_scale = 0.5
    task_p.vn.vn_regex = 'params/w'
    task_p.vn.vn_start_step = 2
    task_p.model.uneven = True  # Adds params/u, which must stay clean.
    task = instantiate(task_p)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    variables = _np_vars(hps, self.np_rng)
    variables['params']['w'] = np.zeros((4, 8), np.float32)

    @jax.jit
    @jax.vmap
    def adjust(step):
      return task.maybe_adjust_train_state(step, variables, hps,
                                           jax.random.PRNGKey(3))

    stacked = adjust(jnp.array([1, 2, 5], jnp.uint32))
    before, at, after = (jax.tree.map(lambda a, i=i: a[i], stacked)
                         for i in range(3))
    self.assertArraysEqual(before, variables)
    for noisy in (at, after):
      for path in (('params', 'b'), ('params', 'u'),
                   ('non_trainable', 'count')):
        self.assertArraysEqual(noisy[path[0]][path[1]],
                               variables[path[0]][path[1]])
      noise = np.asarray(noisy['params']['w'])
      self.assertGreater(np.abs(noise).min(), 0.0)
      self.assertBetween(noise.std(), 0.35, 0.65)  # vn_scale 0.5, 32 draws.

  def test_regex_matching_nothing_fails(self):
    task_p = _task_p()
    task_p.vn.vn_scale = 0.5
    task_p.vn.vn_regex = 'decoder/.*'
    task = instantiate(task_p)
    hps = task.model.abstract_init_with_metadata(_batch(self.np_rng))
    with self.assertRaisesRegex(ValueError, 'vn_regex'):
      task.maybe_adjust_train_state(0, _np_vars(hps, self.np_rng), hps,
                                    jax.random.PRNGKey(0))


class LegacyStyleTest(test_utils.TestCase):

  def test_old_hparams_style_builds_and_trains(self):
    # As in the Pax 101 tutorial (with a short warm-up).
    task_p = tasks_lib.SingleTask.HParams(name='translation')
    task_p.model = Linear.HParams(name='linear')
    learner_p = task_p.train.learner
    learner_p.loss_name = 'mse'
    learner_p.optimizer = optimizers.Adam.HParams(
        beta1=0.9, beta2=0.98, epsilon=1e-9, clip_gradient_norm_to_value=5.0,
        learning_rate=1.0)
    learner_p.optimizer.lr_schedule = schedules.Transformer.HParams(
        warmup_steps=5, model_dim=16)
    jax_task = instantiate(task_p)
    self.assertIsInstance(jax_task, tasks_lib.SingleTask)

    batch = _batch(self.np_rng, n=8)
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                          batch)
    step = functools.partial(trainer_lib.train_step_single_learner, jax_task)

    @jax.jit
    def train(key):
      state, _ = trainer_lib.initialize_model_state(jax_task, key, shapes)

      def body(state, _):
        state, out = step(state, key, batch)
        return state, out.loss

      return jax.lax.scan(body, state, None, length=20)[1]

    losses = np.asarray(train(jax.random.PRNGKey(0)))
    self.assertLess(losses[-1], 0.5 * losses[0])


if __name__ == '__main__':
  absltest.main()
