"""Tests of praxis.layers.normalizations against numpy references."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import normalizations

NON_TRAINABLE = base_layer.NON_TRAINABLE


def _make(cls, **kwargs):
  return base_layer.instantiate(pax_fiddle.Config(cls, name='norm', **kwargs))


def _init(layer, *inputs):
  return jax.jit(layer.init)(jax.random.PRNGKey(0), *inputs)


def _apply(layer, variables, *inputs, **kwargs):
  """`layer.apply` under one `jax.jit`; keyword arguments are static."""
  return jax.jit(lambda v, x: layer.apply(v, *x, **kwargs))(variables, inputs)


def _eval_apply(layer, variables, *inputs, **kwargs):
  context = base_layer.JaxContext.HParams(do_eval=True)
  with base_layer.JaxContext.new_context(hparams=context):
    return _apply(layer, variables, *inputs, **kwargs)


def _np_layer_norm(x, scale, bias, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * scale + bias


class ComputeMomentsTest(test_utils.TestCase):

  def test_padded_entries_are_excluded(self):
    x = self.np_rng.normal(size=(3, 4, 2)).astype(np.float32)
    pad = np.zeros((3, 4, 1), np.float32)
    pad[0, 2:] = 1.0
    pad[2, 1] = 1.0
    mean, var = normalizations.compute_moments(x, pad, [0, 1])
    keep = pad[..., 0] == 0
    valid = x[keep]  # [n, 2]
    self.assertAllClose(mean, valid.mean(0), atol=1e-6)
    self.assertAllClose(var, valid.var(0), atol=1e-6)

  def test_rank_mismatch_fails(self):
    with self.assertRaisesRegex(ValueError, 'same rank'):
      normalizations.compute_moments(jnp.ones((2, 3)), jnp.ones((2,)), [0])


class LayerNormTest(test_utils.TestCase):

  def test_matches_numpy_with_learned_scale_and_bias(self):
    x = self.np_rng.normal(size=(2, 3, 6)).astype(np.float32)
    layer = _make(normalizations.LayerNorm, dim=6, epsilon=1e-3)
    variables = _init(layer, x)
    self.assertAllClose(variables['params']['scale'], np.zeros(6))
    scale = self.np_rng.normal(size=6).astype(np.float32)
    bias = self.np_rng.normal(size=6).astype(np.float32)
    variables = {'params': {'scale': scale, 'bias': bias}}
    y = _apply(layer, variables, x)
    self.assertAllClose(y, _np_layer_norm(x, 1 + scale, bias, 1e-3), atol=1e-5)

  def test_direct_scale_without_bias(self):
    x = self.np_rng.normal(size=(4, 5)).astype(np.float32)
    layer = _make(
        normalizations.LayerNorm, dim=5, direct_scale=True, use_bias=False
    )
    variables = _init(layer, x)
    self.assertEqual(set(variables['params']), {'scale'})
    self.assertAllClose(variables['params']['scale'], np.ones(5))
    scale = self.np_rng.normal(size=5).astype(np.float32)
    y = _apply(layer, {'params': {'scale': scale}}, x)
    self.assertAllClose(y, _np_layer_norm(x, scale, 0.0, 1e-6), atol=1e-5)

  def test_reductions_in_fp32_keeps_dtype(self):
    x = self.np_rng.normal(size=(2, 8)).astype(np.float32)
    layer = _make(
        normalizations.LayerNorm, dim=8, reductions_in_fp32=True,
        use_scale=False, use_bias=False,
    )
    y = _apply(layer, {}, jnp.asarray(x, jnp.bfloat16))
    self.assertEqual(y.dtype, jnp.bfloat16)
    self.assertAllClose(
        np.asarray(y, np.float32), _np_layer_norm(x, 1.0, 0.0, 1e-6),
        atol=3e-2, rtol=3e-2,
    )

  def test_bad_config_names_field(self):
    layer = _make(normalizations.LayerNorm)
    with self.assertRaisesRegex(ValueError, 'LayerNorm .*`dim`'):
      _init(layer, jnp.ones((2, 3)))

  def test_wrong_input_dim_fails(self):
    layer = _make(normalizations.LayerNorm, dim=4)
    with self.assertRaisesRegex(ValueError, 'dim`=4'):
      _init(layer, jnp.ones((2, 3)))


class RmsNormTest(test_utils.TestCase):

  def test_matches_numpy(self):
    x = self.np_rng.normal(size=(3, 6)).astype(np.float32)
    scale = self.np_rng.normal(size=6).astype(np.float32)
    rms = np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
    for direct, multiplier in ((True, scale), (False, 1 + scale)):
      layer = _make(normalizations.RmsNorm, dim=6, direct_scale=direct)
      init_scale = _init(layer, x)['params']['scale']
      self.assertAllClose(init_scale, np.full(6, 1.0 if direct else 0.0))
      y = _apply(layer, {'params': {'scale': scale}}, x)
      self.assertAllClose(y, x / rms * multiplier, atol=1e-5)

  def test_no_scale(self):
    x = self.np_rng.normal(size=(3, 6)).astype(np.float32)
    layer = _make(normalizations.RmsNormNoScale, dim=6)
    variables = _init(layer, x)
    self.assertEqual(variables.get('params', {}), {})
    y = _apply(layer, variables, x)
    self.assertAllClose(
        y, x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6), atol=1e-5
    )

  def test_identity(self):
    x = self.np_rng.normal(size=(2, 3)).astype(np.float32)
    layer = _make(normalizations.IdentityNorm, dim=3)
    self.assertArraysEqual(_apply(layer, {}, x), x)


class BatchNormTest(test_utils.TestCase):

  def test_train_two_steps_then_eval(self):
    decay = 0.9
    layer = _make(normalizations.BatchNorm, dim=3, decay=decay)
    x1 = self.np_rng.normal(size=(2, 4, 3)).astype(np.float32) * 2 + 1
    x2 = self.np_rng.normal(size=(2, 4, 3)).astype(np.float32) - 3
    pad = np.zeros((2, 4), np.float32)
    pad[0, 3] = 1.0
    pad[1, 1:] = 1.0
    variables = _init(layer, x1, pad)
    self.assertAllClose(variables[NON_TRAINABLE]['moving_mean'], np.zeros(3))
    self.assertAllClose(
        variables[NON_TRAINABLE]['moving_variance'], np.ones(3)
    )
    gamma = self.np_rng.normal(size=3).astype(np.float32)
    beta = self.np_rng.normal(size=3).astype(np.float32)
    variables['params'] = {'gamma': gamma, 'beta': beta}

    keep = pad == 0
    moving_mean, moving_var = np.zeros(3), np.ones(3)
    for x in (x1, x2):
      y, updated = _apply(layer, variables, x, pad, mutable=[NON_TRAINABLE])
      variables = dict(variables, **updated)
      mean, var = x[keep].mean(0), x[keep].var(0)
      expected = (x - mean) / np.sqrt(var + 1e-3) * (1 + gamma) + beta
      expected *= (1 - pad)[..., None]
      self.assertAllClose(y, expected, atol=1e-5)
      moving_mean = decay * moving_mean + (1 - decay) * mean
      moving_var = decay * moving_var + (1 - decay) * var
      self.assertAllClose(
          variables[NON_TRAINABLE]['moving_mean'], moving_mean, atol=1e-6
      )
      self.assertAllClose(
          variables[NON_TRAINABLE]['moving_variance'], moving_var, atol=1e-6
      )

    y_eval = _eval_apply(layer, variables, x1)
    expected = (x1 - moving_mean) / np.sqrt(moving_var + 1e-3) * (
        1 + gamma
    ) + beta
    self.assertAllClose(y_eval, expected, atol=1e-5)

  def test_summaries(self):
    # As Pax (verbosity 4): the batch statistics in training, and the moving
    # ones after their update, in training and in eval.
    layer = _make(normalizations.BatchNorm, dim=2, decay=0.5)
    x = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)
    variables = _init(layer, x)
    context = base_layer.JaxContext.HParams(summary_verbosity=4)
    with base_layer.JaxContext.new_context(hparams=context):
      _, updated = _apply(layer, variables, x,
                          mutable=[NON_TRAINABLE, base_layer.SUMMARIES])
      summaries = updated[base_layer.SUMMARIES]
      self.assertEqual(set(summaries), {'mean_scalar', 'variance_scalar',
                                        'moving_mean_scalar',
                                        'moving_variance_scalar'})
      mean, var = np.array([2.0, 4.0]), np.array([1.0, 4.0])
      self.assertAllClose(summaries['mean_scalar'], mean)
      self.assertAllClose(summaries['variance_scalar'], var)
      self.assertAllClose(summaries['moving_mean_scalar'], 0.5 * mean)
      self.assertAllClose(summaries['moving_variance_scalar'],
                          0.5 + 0.5 * var)
    context = base_layer.JaxContext.HParams(summary_verbosity=4,
                                            do_eval=True)
    with base_layer.JaxContext.new_context(hparams=context):
      trained = dict(variables, **{NON_TRAINABLE: updated[NON_TRAINABLE]})
      _, updated = _apply(layer, trained, x, mutable=[base_layer.SUMMARIES])
    self.assertEqual(set(updated[base_layer.SUMMARIES]),
                     {'moving_mean_scalar', 'moving_variance_scalar'})
    self.assertAllClose(updated[base_layer.SUMMARIES]['moving_mean_scalar'],
                        0.5 * mean)

  def test_compute_and_update_moments(self):
    layer = _make(normalizations.BatchNorm, dim=2, decay=0.5)
    x = np.array([[1.0, 2.0], [3.0, 6.0], [9.0, 9.0]], np.float32)
    pad = np.array([[0.0], [0.0], [1.0]], np.float32)  # The last row padded.
    variables = _init(layer, x)
    (mean, var, beta, gamma), updated = layer.apply(
        variables, x, pad, method=layer.compute_and_update_moments,
        mutable=[NON_TRAINABLE])
    self.assertAllClose(mean, [2.0, 4.0])
    self.assertAllClose(var, [1.0, 4.0])
    self.assertAllClose(beta, variables['params']['beta'])
    self.assertAllClose(gamma, 1.0 + variables['params']['gamma'])
    self.assertAllClose(updated[NON_TRAINABLE]['moving_mean'], [1.0, 2.0])

  def test_moving_stats_are_non_trainable_and_mean_synced(self):
    layer = _make(normalizations.BatchNorm, dim=2)
    meta = layer.abstract_init_with_metadata(jnp.ones((2, 2)))
    self.assertEqual(set(meta['params']), {'beta', 'gamma'})
    moving = meta[NON_TRAINABLE]['moving_mean']
    self.assertTrue(base_layer.var_requires_mean_sync(moving))
    self.assertTrue(base_layer.var_not_trainable(moving))

  def test_force_eval_mode_keeps_moving_stats(self):
    layer = _make(normalizations.BatchNorm, dim=2, force_eval_mode=True)
    x = self.np_rng.normal(size=(4, 2)).astype(np.float32)
    variables = _init(layer, x)
    y, updated = _apply(layer, variables, x, mutable=[NON_TRAINABLE])
    self.assertAllClose(updated[NON_TRAINABLE]['moving_mean'], np.zeros(2))
    self.assertAllClose(y, x / np.sqrt(1 + 1e-3), atol=1e-6)

  def test_bad_decay_fails(self):
    layer = _make(normalizations.BatchNorm, dim=2, decay=1.5)
    with self.assertRaisesRegex(ValueError, '`decay`'):
      _init(layer, jnp.ones((2, 2)))


class GroupNormTest(test_utils.TestCase):

  def test_rank4_matches_numpy(self):
    x = self.np_rng.normal(size=(2, 3, 2, 8)).astype(np.float32)
    layer = _make(
        normalizations.GroupNorm, dim=8, num_groups=4, input_rank=4
    )
    variables = _init(layer, x)
    self.assertEqual(variables['params']['gamma'].shape, (1, 1, 1, 8))
    gamma = self.np_rng.normal(size=(1, 1, 1, 8)).astype(np.float32)
    beta = self.np_rng.normal(size=(1, 1, 1, 8)).astype(np.float32)
    y = _apply(layer, {'params': {'gamma': gamma, 'beta': beta}}, x)
    g = x.reshape(2, 3, 2, 4, 2)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    expected = ((g - mean) / np.sqrt(var + 1e-3)).reshape(x.shape)
    self.assertAllClose(y, expected * (1 + gamma) + beta, atol=1e-5)

  def test_rank3_with_paddings(self):
    x = self.np_rng.normal(size=(2, 5, 4)).astype(np.float32)
    pad = np.zeros((2, 5), np.float32)
    pad[1, 3:] = 1.0
    layer = _make(
        normalizations.GroupNorm, dim=4, num_groups=2, input_rank=3
    )
    variables = _init(layer, x, pad)
    y = _apply(layer, variables, x, pad)
    expected = np.zeros_like(x)
    for b in range(2):
      for grp in range(2):
        chans = slice(2 * grp, 2 * grp + 2)
        valid = x[b, pad[b] == 0, chans]
        normed = (x[b, :, chans] - valid.mean()) / np.sqrt(valid.var() + 1e-3)
        expected[b, :, chans] = normed * (1 - pad[b])[:, None]
    self.assertAllClose(y, expected, atol=1e-5)

  def test_cumulative_uses_past_steps_only(self):
    x = self.np_rng.normal(size=(1, 4, 2)).astype(np.float32)
    pad = np.zeros((1, 4), np.float32)
    layer = _make(
        normalizations.GroupNorm, dim=2, num_groups=1, input_rank=3,
        cumulative=True,
    )
    y = np.asarray(_apply(layer, {'params': {
        'gamma': np.zeros((1, 1, 2), np.float32),
        'beta': np.zeros((1, 1, 2), np.float32)}}, x, pad))
    # Step t uses the mean of steps <= t, and (as Pax) the sum over s <= t of
    # the squared deviations of step s from its own running mean.
    means = [x[0, :t + 1].mean() for t in range(4)]
    for t in range(4):
      sq = sum(((x[0, s] - means[s]) ** 2).sum() for s in range(t + 1))
      var = sq / (2 * (t + 1))
      expected = (x[0, t] - means[t]) / np.sqrt(var + 1e-3)
      self.assertAllClose(y[0, t], expected, atol=1e-5)
    # Later steps do not change earlier outputs.
    x2 = x.copy()
    x2[0, 2:] *= 5
    y2 = _apply(layer, {'params': {
        'gamma': np.zeros((1, 1, 2), np.float32),
        'beta': np.zeros((1, 1, 2), np.float32)}}, x2, pad)
    self.assertAllClose(np.asarray(y2)[0, :2], y[0, :2], atol=1e-6)

  def test_missing_input_rank_fails(self):
    layer = _make(normalizations.GroupNorm, dim=4, num_groups=2)
    with self.assertRaisesRegex(ValueError, '`input_rank`'):
      _init(layer, jnp.ones((1, 2, 4)))

  def test_indivisible_dim_fails(self):
    layer = _make(
        normalizations.GroupNorm, dim=6, num_groups=4, input_rank=3
    )
    with self.assertRaisesRegex(ValueError, '`num_groups`'):
      _init(layer, jnp.ones((1, 2, 6)))


class WeightNormTest(test_utils.TestCase):

  def test_weight_norm_l2(self):
    w = self.np_rng.normal(size=(3, 2, 4)).astype(np.float32)
    layer = _make(normalizations.WeightNormL2, dim=4)
    g = self.np_rng.normal(size=4).astype(np.float32)
    y = _apply(layer, {'params': {'g': g}}, w)
    norm = np.sqrt((w**2).sum(axis=(0, 1), keepdims=True))
    self.assertAllClose(y, w / norm * (1 + g), atol=1e-5)

  def test_spectral_norm_divides_by_top_singular_value(self):
    w = self.np_rng.normal(size=(5, 3)).astype(np.float32)
    _, singular_values, vt = np.linalg.svd(w)
    layer = _make(normalizations.SpectralNorm, dim=3)
    # Power iteration from a vector near the top right-singular vector.
    u0 = (vt[0] + 0.01 * self.np_rng.normal(size=3)).astype(np.float32)
    variables = {NON_TRAINABLE: {'u': u0}}
    y, updated = _apply(layer, variables, w, mutable=[NON_TRAINABLE])
    self.assertAllClose(y, w / singular_values[0], atol=1e-4)
    # The stored vector is one power-iteration step from u0.
    v1 = w @ u0 / np.linalg.norm(w @ u0)
    u1 = v1 @ w / np.linalg.norm(v1 @ w)
    self.assertAllClose(updated[NON_TRAINABLE]['u'], u1, atol=1e-5)


if __name__ == '__main__':
  absltest.main()
