"""Tests of praxis.layers.repeats against explicit loops over the layers."""

import contextlib
import io

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import ad_checkpoint
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import checkpoint_policy
from praxis.layers import repeats

DECODE_CACHE = base_layer.DECODE_CACHE
instantiate = base_layer.instantiate


class TanhLayer(base_layer.BaseLayer):
  """tanh(x @ w + b); adds sum(w) as an auxiliary loss and a summary."""

  dim: int = 4

  def setup(self):
    self.create_variable('w', base_layer.WeightHParams(shape=[self.dim] * 2))
    self.create_variable('b', base_layer.WeightHParams(shape=[self.dim]))

  def __call__(self, x, scale=1.0):
    self.add_aux_loss('w_sum', jnp.sum(self.theta.w))
    self.add_summary('x_mean', jnp.mean(x))
    return jnp.tanh(scale * (x @ self.theta.w + self.theta.b))

  def doubled(self, x, scale=1.0):
    return self(x, 2.0 * scale)


class TwoInputs(TanhLayer):
  """Returns (tanh(x @ w + y), y + 1): both inputs are threaded."""

  def __call__(self, x, y):
    return jnp.tanh(x @ self.theta.w + y), y + 1.0


class RunningSum(base_layer.BaseLayer):
  """y_t = tanh(sum_{s<=t} x_s @ w), caching the running sum for decoding."""

  dim: int = 4

  def setup(self):
    self.create_variable('w', base_layer.WeightHParams(shape=[self.dim] * 2))

  def __call__(self, x):
    total = jnp.cumsum(x @ self.theta.w, axis=1)
    self.update_decode_state('total', total[:, -1])
    return jnp.tanh(total)

  def extend_step(self, x_t):
    total = self.get_decode_state('total') + x_t @ self.theta.w
    self.update_decode_state('total', total)
    return jnp.tanh(total)

  def transform_decode_state(self, fn):
    self.update_decode_state('total', fn(self.get_decode_state('total'), 0, 1))


def repeat_config(sub, x_times=3, **kwargs):
  return pax_fiddle.Config(
      repeats.Repeat, name='repeat', sub_tpl=sub, x_times=x_times, **kwargs
  )


def np_stack(params, x, scale=1.0):
  for w, b in zip(params['w'], params['b']):
    x = np.tanh(scale * (x @ w + b))
  return x


class RepeatTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = self.np_rng.standard_normal((2, 4)).astype(np.float32)

  def test_fprop_matches_loop_over_stacked_weights(self):
    layer = instantiate(repeat_config(pax_fiddle.Config(TanhLayer)))
    out, variables = test_utils.init_and_apply(layer, self.x, 0.5)
    params = variables['params']['sub']
    self.assertEqual(params['w'].shape, (3, 4, 4))
    # Each repetition is initialised with its own key.
    self.assertNotAllClose(params['w'][0], params['w'][1])
    self.assertAllClose(out, np_stack(params, self.x, 0.5), atol=1e-6)

  def test_metadata_reports_repeat_prefix(self):
    p = repeat_config(
        pax_fiddle.Config(TanhLayer), optimizer_dims_mapping=[None]
    )
    p.weight_split_dims_mapping.sub = ['data']
    meta = instantiate(p).abstract_init_with_metadata(self.x)
    w = meta['params']['sub']['w']
    self.assertEqual(w.shape, [4, 4])
    self.assertEqual(w.repeat_prefix, [3])
    self.assertEqual(w.full_shape, [3, 4, 4])
    self.assertEqual(tuple(w.repeat_prefix_split_dims_mapping), ('data',))
    self.assertEqual(tuple(w.repeat_optimizer_dims_mapping), (None,))
    # Without a sharding, the prefix is replicated, spelled out as in Pax.
    meta = instantiate(repeat_config(pax_fiddle.Config(TanhLayer))
                       ).abstract_init_with_metadata(self.x)
    self.assertEqual(
        meta['params']['sub']['w'].repeat_prefix_split_dims_mapping, (-1,))

  @parameterized.parameters(
      checkpoint_policy.AutodiffCheckpointType.SAVE_NOTHING,
      checkpoint_policy.AutodiffCheckpointType.SAVE_DOT_ONLY,
  )
  def test_gradients_match_unrolled_jnp(self, policy):
    layer = instantiate(
        repeat_config(pax_fiddle.Config(TanhLayer), checkpoint_policy=policy)
    )
    variables = layer.init(jax.random.PRNGKey(0), self.x)
    params = variables['params']

    def loss(params):
      return jnp.sum(layer.apply({'params': params}, self.x) ** 2)

    def ref_loss(params):
      x = self.x
      for i in range(3):
        x = jnp.tanh(x @ params['sub']['w'][i] + params['sub']['b'][i])
      return jnp.sum(x**2)

    self.assertAllClose(
        jax.grad(loss)(params), jax.grad(ref_loss)(params), atol=1e-6
    )

  def test_aux_losses_summed_and_summaries_unpacked(self):
    layer = instantiate(
        repeat_config(pax_fiddle.Config(TanhLayer), unpack_summaries=True)
    )
    variables = layer.init(jax.random.PRNGKey(0), self.x)
    _, updated = layer.apply(
        variables, self.x, mutable=[base_layer.AUX_LOSS, base_layer.SUMMARIES]
    )
    params = variables['params']['sub']
    aux = updated[base_layer.AUX_LOSS]['sub']['w_sum']
    self.assertAllClose(aux.value, np.sum(params['w']), atol=1e-5)
    self.assertAllClose(aux.weight, 3.0)
    # One summary per repetition, each of that repetition's input.
    means = updated[base_layer.SUMMARIES]['sub']['x_mean_scalar']
    self.assertLen(means, 3)
    self.assertAllClose(means[0][0], np.mean(self.x), atol=1e-6)
    first_two = {k: v[:2] for k, v in params.items()}
    self.assertAllClose(
        means[2][0], np.mean(np_stack(first_two, self.x)), atol=1e-6
    )

  def test_positional_args_as_scan_carry(self):
    layer = instantiate(
        repeat_config(
            pax_fiddle.Config(TwoInputs), positional_args_as_scan_carry=True
        )
    )
    y = np.ones((2, 4), np.float32)
    variables = layer.init(jax.random.PRNGKey(0), self.x, y)
    out_x, out_y = layer.apply(variables, self.x, y)
    ref_x, ref_y = self.x, y
    for w in variables['params']['sub']['w']:
      ref_x, ref_y = np.tanh(ref_x @ w + ref_y), ref_y + 1.0
    self.assertAllClose(out_x, ref_x, atol=1e-6)
    self.assertAllClose(out_y, ref_y)

  def test_return_intermediate_outputs(self):
    layer = instantiate(
        repeat_config(
            pax_fiddle.Config(TanhLayer), return_intermediate_outputs=True
        )
    )
    outs, variables = test_utils.init_and_apply(layer, self.x)
    params = variables['params']['sub']
    self.assertEqual(outs.shape, (3, 2, 4))
    for i in range(3):
      ref = np_stack({k: v[: i + 1] for k, v in params.items()}, self.x)
      self.assertAllClose(outs[i], ref, atol=1e-6)

  @parameterized.named_parameters(('scan', False), ('unrolled', True))
  def test_extend_step_continues_fprop(self, unroll):
    layer = instantiate(
        repeat_config(pax_fiddle.Config(RunningSum), unroll_in_decode=unroll)
    )
    x = self.np_rng.standard_normal((2, 5, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    expected = layer.apply(variables, x)
    _, cache = layer.apply(variables, x[:, :2], mutable=[DECODE_CACHE])
    cache_tree = cache[DECODE_CACHE]['sub']
    if unroll:
      self.assertEqual(set(cache_tree), {'layer0', 'layer1', 'layer2'})
    else:
      self.assertEqual(cache_tree['total'].shape, (3, 2, 4))
    for t in range(2, 5):
      out, cache = layer.apply(
          {**variables, **cache}, x[:, t], method=layer.extend_step,
          mutable=[DECODE_CACHE])
      self.assertAllClose(out, expected[:, t], atol=1e-5)

  @parameterized.named_parameters(('scan', False), ('unrolled', True))
  def test_transform_decode_state_reaches_every_layer(self, unroll):
    layer = instantiate(
        repeat_config(pax_fiddle.Config(RunningSum), unroll_in_decode=unroll)
    )
    x = self.np_rng.standard_normal((2, 3, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    _, cache = layer.apply(variables, x, mutable=[DECODE_CACHE])
    _, new_cache = layer.apply(
        {**variables, **cache}, lambda s, b, t: 2.0 * s,
        method=layer.transform_decode_state, mutable=[DECODE_CACHE])
    self.assertAllClose(
        new_cache, jax.tree.map(lambda s: 2.0 * s, cache), atol=1e-6
    )

  def test_nd_prefix_shape_stacks_on_several_dims(self):
    layer = instantiate(repeat_config(
        pax_fiddle.Config(TanhLayer), x_times=6, nd_prefix_shape=(2, 3)))
    meta = layer.abstract_init_with_metadata(self.x)['params']['sub']['w']
    self.assertEqual(meta.repeat_prefix, [2, 3])
    self.assertEqual(tuple(meta.repeat_prefix_split_dims_mapping), (-1, -1))
    out, variables = test_utils.init_and_apply(layer, self.x)
    params = variables['params']['sub']
    self.assertEqual(params['w'].shape, (2, 3, 4, 4))
    # The layers run in row-major order of the two dims.
    flat = {k: v.reshape((6,) + v.shape[2:]) for k, v in params.items()}
    self.assertAllClose(out, np_stack(flat, self.x), atol=1e-6)
    with self.assertRaisesRegex(ValueError, 'multiply to x_times=6'):
      bad = instantiate(repeat_config(
          pax_fiddle.Config(TanhLayer), x_times=6, nd_prefix_shape=(4, 2)))
      bad.init(jax.random.PRNGKey(0), self.x)

  def test_sublayer_intermediates_are_stacked(self):
    layer = instantiate(repeat_config(pax_fiddle.Config(TanhLayer),
                                      collect_intermediate_outputs=True))
    variables = layer.init(jax.random.PRNGKey(0), self.x)
    out, state = layer.apply(variables, self.x, capture_intermediates=True,
                             mutable=[base_layer.INTERMEDIATES])
    inter = state[base_layer.INTERMEDIATES]
    self.assertEqual(inter['sub']['__call__'][0].shape, (3, 2, 4))
    self.assertAllClose(inter['repeat_intermediates'][0][-1], out)
    ref = np_stack(variables['params']['sub'], self.x)
    self.assertAllClose(out, ref, atol=1e-6)

  def test_method_name_and_per_layer_kwargs(self):
    layer = instantiate(repeat_config(pax_fiddle.Config(TanhLayer)))
    variables = layer.init(jax.random.PRNGKey(0), self.x)
    params = variables['params']['sub']
    scales = np.array([0.5, 1.0, 3.0], np.float32)
    out = layer.apply(variables, self.x, method_name='doubled',
                      per_layer_kwargs={'scale': scales})
    ref = self.x
    for i in range(3):
      ref = np.tanh(2.0 * scales[i] * (ref @ params['w'][i] + params['b'][i]))
    self.assertAllClose(out, ref, atol=1e-6)
    out = layer.apply(variables, self.x,
                      reversed_per_layer_kwargs={'scale': scales})
    ref = self.x
    for i in range(3):
      ref = np.tanh(scales[2 - i] * (ref @ params['w'][i] + params['b'][i]))
    self.assertAllClose(out, ref, atol=1e-6)

  def test_bad_x_times_fails(self):
    layer = instantiate(repeat_config(pax_fiddle.Config(TanhLayer), x_times=0))
    with self.assertRaisesRegex(ValueError, r'Repeat \(repeat\): x_times'):
      layer.init(jax.random.PRNGKey(0), self.x)


class CheckpointPolicyTest(test_utils.TestCase):

  def test_every_type_gives_a_policy(self):
    for kind in checkpoint_policy.AutodiffCheckpointType:
      self.assertTrue(callable(checkpoint_policy.custom_policy(kind)))

  def test_save_out_proj_keeps_only_that_name(self):
    policy = checkpoint_policy.custom_policy(
        checkpoint_policy.AutodiffCheckpointType.SAVE_OUT_PROJ
    )

    def f(x):
      y = ad_checkpoint.checkpoint_name(jnp.sin(x), 'out_proj')
      z = ad_checkpoint.checkpoint_name(jnp.sin(y), 'context')
      return jnp.sum(jnp.sin(z))

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
      ad_checkpoint.print_saved_residuals(
          jax.checkpoint(f, policy=policy), jnp.ones(3)
      )
    lines = printed.getvalue().splitlines()
    named = [line for line in lines if 'named' in line]
    self.assertLen(named, 1)
    self.assertIn('out_proj', named[0])

  def test_unknown_policy_fails(self):
    with self.assertRaisesRegex(ValueError, 'checkpoint_policy'):
      checkpoint_policy.custom_policy('save_all_the_things')


if __name__ == '__main__':
  absltest.main()
