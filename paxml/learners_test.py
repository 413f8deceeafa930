"""Tests of paxml.learners against numpy and per-layer references."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import learners
from praxis import base_hyperparams
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import test_utils

WeightHParams = base_layer.WeightHParams
NON_TRAINABLE = base_layer.WeightHParamsCollection.NON_TRAINABLE


def _learner(optimizer, cls=learners.Learner, **kwargs):
  return base_hyperparams.instantiate(pax_fiddle.Config(
      cls, name='learner', loss_name='loss', optimizer=optimizer, **kwargs))


def _sgd(lr, **kwargs):
  return pax_fiddle.Config(optimizers.Sgd, learning_rate=lr, **kwargs)


def _context():
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=False))


def _step(learner, grads, variables, hps, opt_state=None):
  """One learner update; returns (new vars, new opt state, summaries)."""
  with _context():
    if opt_state is None:
      opt_state = learner.get_grad_tx(hps).init(variables)
    updates, opt_state = learner.update_states(grads, opt_state, variables,
                                               hps)
    new_vars = learner.apply_gradient(variables, updates, hps)
    return new_vars, opt_state, base_layer.all_global_summaries()


class LearnerTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.vars = {
        'params': {'w': self.np_rng.normal(size=(2, 3)).astype(np.float32)},
        'non_trainable': {'s': np.ones(3, np.float32)},
    }
    self.hps = {
        'params': {'w': WeightHParams(shape=[2, 3])},
        'non_trainable': {'s': WeightHParams(shape=[3],
                                             collections=[NON_TRAINABLE])},
    }
    self.grads = {
        'params': {'w': self.np_rng.normal(size=(2, 3)).astype(np.float32)},
        'non_trainable': {'s': np.full(3, 5.0, np.float32)},
    }

  def test_sgd_update_and_summaries(self):
    learner = _learner(_sgd(0.5))
    new_vars, _, summaries = _step(learner, self.grads, self.vars, self.hps)
    w, g = self.vars['params']['w'], self.grads['params']['w']
    self.assertAllClose(new_vars['params']['w'], w - 0.5 * g)
    self.assertArraysEqual(new_vars['non_trainable']['s'],
                           self.vars['non_trainable']['s'])
    all_g = np.concatenate([g.ravel(), np.full(3, 5.0)])
    all_v = np.concatenate([w.ravel(), np.ones(3)])
    self.assertAllClose(summaries['learning/raw_grad_norm_aggregate_scalar'],
                        np.linalg.norm(all_g))
    self.assertAllClose(summaries['learning/var_norm_aggregate_scalar'],
                        np.linalg.norm(all_v))
    self.assertAllClose(summaries['learning/grad_scale_aggregate_scalar'], 1.0)
    self.assertAllClose(summaries['learning/is_valid_step_aggregate_scalar'],
                        1.0)

  def test_per_variable_norm_summaries(self):
    learner = _learner(_sgd(0.5), grad_norm_individual_vars=True,
                       var_norm_individual_vars=True)
    _, _, summaries = _step(learner, self.grads, self.vars, self.hps)
    for tree, prefix in ((self.grads, 'per_var_grad_norm'),
                         (self.vars, 'per_var_norm')):
      self.assertAllClose(
          summaries[f'{prefix}/params/w_aggregate_scalar'],
          np.linalg.norm(tree['params']['w']))
      self.assertAllClose(
          summaries[f'{prefix}/non_trainable/s_aggregate_scalar'],
          np.linalg.norm(tree['non_trainable']['s']))

  def test_clip_by_global_and_single_norm(self):
    g = {'a': np.array([3.0, 4.0], np.float32),
         'b': np.array([0.0, 12.0], np.float32)}  # Global norm 13.
    with _context():
      learner = _learner(_sgd(1.0, clip_gradient_norm_to_value=6.5))
      clipped, valid = learner.scale_gradients(g)
      summaries = base_layer.all_global_summaries()
    self.assertTrue(bool(valid))
    self.assertAllClose(clipped, jax.tree.map(lambda x: x * 0.5, g))
    self.assertAllClose(summaries['learning/grad_scale_aggregate_scalar'], 0.5)
    self.assertAllClose(
        summaries['learning/clipped_grad_norm_aggregate_scalar'], 6.5)
    with _context():
      learner = _learner(_sgd(1.0, clip_gradient_single_norm_to_value=6.0))
      clipped, _ = learner.scale_gradients(g)
    self.assertAllClose(clipped, {'a': g['a'], 'b': g['b'] * 0.5})

  def test_anomalies_and_large_norms_skip_the_step(self):
    adam = pax_fiddle.Config(optimizers.Adam, learning_rate=0.1)
    variables = {'w': np.ones(3, np.float32)}
    hps = {'w': WeightHParams(shape=[3])}
    first = {'w': np.array([1.0, -1.0, 2.0], np.float32)}
    for kwargs, bad in (({}, np.array([1.0, np.inf, 0.0], np.float32)),
                        ({'skip_step_gradient_norm_value': 10.0},
                         np.array([100.0, 0.0, 0.0], np.float32))):
      learner = _learner(adam, **kwargs)
      v1, s1, _ = _step(learner, first, variables, hps)
      v2, s2, summaries = _step(learner, {'w': bad}, v1, hps, s1)
      self.assertArraysEqual(v2, v1)
      self.assertArraysEqual(s2, s1)
      self.assertAllClose(
          summaries['learning/is_valid_step_aggregate_scalar'], 0.0)

  def test_skip_zero_gradients(self):
    adam = pax_fiddle.Config(optimizers.Adam, learning_rate=0.1)
    variables = {'w': np.ones(3, np.float32)}
    hps = {'w': WeightHParams(shape=[3])}
    first = {'w': np.array([1.0, -1.0, 2.0], np.float32)}
    zero = {'w': np.zeros(3, np.float32)}
    skipping = _learner(adam, skip_zero_gradients=True)
    v1, s1, _ = _step(skipping, first, variables, hps)
    v2, s2, _ = _step(skipping, zero, v1, hps, s1)
    self.assertArraysEqual((v2, s2), (v1, s1))
    # Without it, Adam's momentum still moves the variables.
    plain = _learner(adam)
    v2, _, _ = _step(plain, zero, v1, hps, s1)
    self.assertNotAllClose(v2['w'], v1['w'])

  def test_bad_configs_fail_early(self):
    with self.assertRaisesRegex(ValueError, 'optimizer'):
      base_hyperparams.instantiate(
          pax_fiddle.Config(learners.Learner, name='l', loss_name='loss'))
    with self.assertRaisesRegex(ValueError, 'not both'):
      _learner(_sgd(0.1), bprop_variable_exclusion=['a'],
               bprop_variable_inclusion=['b'])


class RepeatPrefixTest(test_utils.TestCase):

  def test_stacked_layers_are_optimized_one_by_one(self):
    opt = base_hyperparams.instantiate(pax_fiddle.Config(
        optimizers.ShardedAdafactor, learning_rate=0.1, decay_method='adam',
        decay_adam=0.99, factored=True))
    hps = {'w': WeightHParams(shape=[4, 5], repeat_prefix=[3]),
           'v': WeightHParams(shape=[5])}
    variables = {'w': self.np_rng.normal(size=(3, 4, 5)).astype(np.float32),
                 'v': self.np_rng.normal(size=(5,)).astype(np.float32)}
    grads = {'w': self.np_rng.normal(size=(3, 4, 5)).astype(np.float32),
             'v': self.np_rng.normal(size=(5,)).astype(np.float32)}
    learner = _learner(opt)
    tx = learner.get_grad_tx(hps)

    @jax.jit
    def run(variables, grads):
      state = tx.init(variables)
      updates, state = tx.update(grads, state, variables)
      base = opt.get_grad_transformation()  # Reference: each layer alone.
      per_layer = []
      for i in range(3):
        one = {'w': variables['w'][i]}
        u, _ = base.update({'w': grads['w'][i]}, base.init(one), one)
        per_layer.append(u['w'])
      one = {'v': variables['v']}
      u, _ = base.update({'v': grads['v']}, base.init(one), one)
      stacked = {'w': variables['w']}
      whole, _ = base.update({'w': grads['w']}, base.init(stacked), stacked)
      return state, updates, jnp.stack(per_layer), u['v'], whole['w']

    state, updates, per_layer, v_update, unvectorized = run(variables, grads)
    self.assertEqual(set(state), {learners.NO_PREFIX_KEY, 'p#3#i-1'})
    self.assertAllClose(updates['w'], per_layer)
    self.assertAllClose(updates['v'], v_update)
    self.assertNotAllClose(updates['w'], unvectorized)

    # The sharding specs describe the vectorized state leaf by leaf.
    specs = tx.init_partition_spec(hps)
    spec_leaves = jax.tree.leaves(
        specs, is_leaf=lambda x: isinstance(x, WeightHParams))
    state_leaves = jax.tree.leaves(state)
    self.assertLen(spec_leaves, len(state_leaves))
    for spec, leaf in zip(spec_leaves, state_leaves):
      self.assertEqual(tuple(spec.full_shape), leaf.shape)


class ApplyGradientTest(test_utils.TestCase):

  def test_scale_update_by_var_norm_and_overwrite(self):
    learner = _learner(_sgd(1.0), scale_update_by_var_norm=True)
    overwrite = base_layer.WeightHParamsCollection.OVERWRITE_WITH_GRADIENT
    hps = {
        'g': WeightHParams([2, 2], init=base_layer.WeightInit.Gaussian(0.5)),
        'f': WeightHParams(
            [4, 2], init=base_layer.WeightInit.GaussianSqrtFanIn(2.0)),
        'x': WeightHParams(
            [4, 2], init=base_layer.WeightInit.Xavier(1.0)),
        'b': WeightHParams([3]),
        'o': WeightHParams([2], collections=[overwrite]),
    }
    old = {k: np.ones(hp.shape, np.float32) for k, hp in hps.items()}
    upd = {k: np.full(hp.shape, 2.0, np.float32) for k, hp in hps.items()}
    with _context():
      new = learner.apply_gradient(old, upd, hps)
    # Init scales: 0.5; 2 / sqrt(fan_in 4); sqrt(6 / (4 + 2)); rank 1: 1.
    for k, scale in (('g', 0.5), ('f', 1.0), ('x', 1.0), ('b', 1.0)):
      self.assertAllClose(new[k], 1.0 + 2.0 * scale * np.ones(hps[k].shape))
    self.assertAllClose(new['o'], upd['o'])
    with self.assertRaisesRegex(ValueError, "'c'.*uniform"):
      learner.apply_gradient(
          {'c': old['g']}, {'c': upd['g']},
          {'c': WeightHParams([2, 2], init=base_layer.WeightInit.Uniform(1))})

  def test_force_repeat_prefix_structure(self):
    with self.assertRaisesRegex(ValueError, 'vectorize_on_repeat_prefix'):
      _learner(_sgd(0.1), force_repeat_prefix_structure=True,
               vectorize_on_repeat_prefix=False)
    learner = _learner(_sgd(0.1), force_repeat_prefix_structure=True)
    hps = {'w': WeightHParams(shape=[2])}
    state = learner.get_grad_tx(hps).init({'w': np.zeros(2, np.float32)})
    self.assertEqual(set(state), {learners.NO_PREFIX_KEY})


class MultiOptimizerLearnerTest(test_utils.TestCase):

  def test_auxiliary_optimizer_takes_matching_variables(self):
    learner = _learner(
        _sgd(0.1), cls=learners.MultiOptimizerLearner,
        auxiliary_optimizers=[_sgd(1.0)], auxiliary_regex=['params/emb.*'],
        auxiliary_names=['emb'])
    hps = {'params': {'emb': WeightHParams(shape=[2]),
                      'w': WeightHParams(shape=[2])}}
    variables = {'params': {'emb': np.zeros(2, np.float32),
                            'w': np.zeros(2, np.float32)}}
    grads = {'params': {'emb': np.array([1.0, 2.0], np.float32),
                        'w': np.array([3.0, 4.0], np.float32)}}
    new_vars, _, summaries = _step(learner, grads, variables, hps)
    self.assertAllClose(new_vars['params']['emb'], np.array([-1.0, -2.0]))
    self.assertAllClose(new_vars['params']['w'], np.array([-0.3, -0.4]))
    del summaries
    with _context():
      learner.plot_learning_rate(0)
      lrs = base_layer.all_global_summaries()
    self.assertAllClose(lrs['learning/lr_emb_aggregate_scalar'], 1.0)
    self.assertAllClose(lrs['learning/lr_main_aggregate_scalar'], 0.1)

  def test_separate_scaling_clips_each_optimizer_alone(self):
    learner = _learner(
        _sgd(0.1, clip_gradient_norm_to_value=1.0),
        cls=learners.MultiOptimizerLearner,
        auxiliary_optimizers=[_sgd(1.0, clip_gradient_norm_to_value=10.0)],
        auxiliary_regex=['params/emb.*'], auxiliary_names=['emb'],
        apply_separate_scaling=True)
    hps = {'params': {'emb': WeightHParams(shape=[2]),
                      'w': WeightHParams(shape=[2])}}
    grads = {'params': {'emb': np.array([3.0, 4.0], np.float32),
                        'w': np.array([6.0, 8.0], np.float32)}}
    with _context():
      scaled, valid = learner.scale_gradients_by_optimizer(grads, hps)
      summaries = base_layer.all_global_summaries()
    self.assertTrue(bool(valid))
    # emb's norm 5 is under its own clip of 10; w's 10 is clipped to 1.
    self.assertAllClose(scaled['params']['emb'], grads['params']['emb'])
    self.assertAllClose(scaled['params']['w'], grads['params']['w'] / 10.0)
    self.assertAllClose(
        summaries['learning/emb/raw_grad_norm_aggregate_scalar'], 5.0)
    self.assertAllClose(
        summaries['learning/main/raw_grad_norm_aggregate_scalar'], 10.0)

  def test_overlapping_regexes_fail(self):
    learner = _learner(
        _sgd(0.1), cls=learners.MultiOptimizerLearner,
        auxiliary_optimizers=[_sgd(1.0), _sgd(2.0)],
        auxiliary_regex=['params/.*', 'params/w'], auxiliary_names=['a', 'b'])
    with self.assertRaisesRegex(ValueError, 'overlap'):
      learner.get_grad_tx({'params': {'w': WeightHParams(shape=[2])}})
    with self.assertRaisesRegex(ValueError, 'same length'):
      _learner(_sgd(0.1), cls=learners.MultiOptimizerLearner,
               auxiliary_optimizers=[_sgd(1.0)], auxiliary_regex=[],
               auxiliary_names=[])


if __name__ == '__main__':
  absltest.main()
