"""Tests of MobileNetV2: channel rounding, blocks, residuals, real Pax."""

import json
import os

from absl.testing import absltest
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import convolutions
from praxis.layers import mobilenet


_REF = os.path.join(os.path.dirname(__file__), 'testdata', 'vision_ref.npz')


def _ref_case(name):
  """(fields, variables, outputs, data) of a case of vision_ref.npz (written
  by testdata/make_ref_vision.py under the real Pax)."""
  ref = np.load(_REF)
  fields = json.loads(str(ref['meta']))[name]
  variables, outputs = {}, {}
  for key in ref.files:
    if key.startswith(f'{name}/vars/'):
      variables[key[len(f'{name}/vars/'):]] = ref[key]
    elif key.startswith(f'{name}/out'):
      outputs[key[len(f'{name}/out'):].lstrip('/')] = ref[key]
  variables = traverse_util.unflatten_dict(variables, sep='/')
  return fields, variables, outputs, ref


def _shapes(tree):
  return jax.tree.map(lambda a: tuple(a.shape), tree)


class MakeDivisibleTest(test_utils.TestCase):

  def test_hand_values(self):
    # 11.2 rounds to 8, which loses > 10%, so one more step: 16.
    self.assertEqual(mobilenet._make_divisible(32 * 0.35, 8), 16)
    self.assertEqual(mobilenet._make_divisible(24, 8), 24)
    self.assertEqual(mobilenet._make_divisible(100, 8), 104)
    self.assertEqual(mobilenet._make_divisible(3, 8), 8)
    # 3 rounds to 0, raised to min_value 2, still < 90% of 3: 2 + 8.
    self.assertEqual(mobilenet._make_divisible(3, 8, min_value=2), 10)


class InvertedResidualBlockTest(test_utils.TestCase):

  def _block(self, **kwargs):
    conv = pax_fiddle.Config(convolutions.ConvBNAct, batch_norm_tpl=None)
    p = pax_fiddle.Config(
        mobilenet.InvertedResidualBlock, name='block', conv_params=conv,
        **kwargs)
    return base_layer.instantiate(p)

  def test_variables_and_residual(self):
    block = self._block(input_dim=4, output_dim=4, expansion=3)
    x = np.random.default_rng(0).normal(size=(2, 5, 5, 4)).astype(np.float32)
    variables = block.init(jax.random.PRNGKey(0), x)
    self.assertEqual(_shapes(variables['params']), {'body': {
        'layers_0': {'w': (1, 1, 4, 12)},  # expansion
        'layers_1': {'w': (3, 3, 1, 12)},  # depthwise
        'layers_2': {'w': (1, 1, 12, 4)},  # project
    }})
    # A zero projection leaves only the residual: the block is the identity.
    zeroed = jax.tree.map(lambda a: a, variables)
    zeroed['params']['body']['layers_2']['w'] = jnp.zeros((1, 1, 12, 4))
    self.assertAllClose(block.apply(zeroed, x), x)

  def test_depthwise_matches_numpy(self):
    block = self._block(input_dim=2, output_dim=3, expansion=1, stride=2)
    x = np.random.default_rng(1).normal(size=(1, 4, 4, 2)).astype(np.float32)
    variables = block.init(jax.random.PRNGKey(1), x)
    params = variables['params']['body']
    self.assertNotIn('layers_2', params)  # expansion 1: no expansion conv.
    dw = np.asarray(params['layers_0']['w'])[:, :, 0, :]  # [3, 3, 2]
    pw = np.asarray(params['layers_1']['w'])[0, 0]  # [2, 3]
    # SAME padding of a 3x3 filter: one row/column each side; stride 2.
    xp = np.pad(x[0], ((1, 1), (1, 1), (0, 0)))
    depthwise = np.zeros((2, 2, 2), np.float32)
    for i in range(2):
      for j in range(2):
        patch = xp[2 * i:2 * i + 3, 2 * j:2 * j + 3]
        depthwise[i, j] = np.sum(patch * dw, axis=(0, 1))
    want = np.minimum(np.maximum(depthwise, 0), 6) @ pw
    self.assertAllClose(block.apply(variables, x)[0], want, atol=1e-5)


class MobileNetTest(test_utils.TestCase):

  def test_small_net_shapes_and_names(self):
    p = pax_fiddle.Config(
        mobilenet.MobileNet, name='net', expansions=(1, 6), strides=(1, 2),
        channels=(16, 24), output_channels=32, num_classes=5,
        multiplier=0.5)
    net = base_layer.instantiate(p)
    x = jnp.ones((2, 16, 16, 3))
    variables = net.init(jax.random.PRNGKey(0), x)
    params = _shapes(variables['params']['body'])
    self.assertEqual(params['layers_0']['w'], (3, 3, 3, 16))  # 32 * 0.5
    self.assertEqual(params['layers_1']['body']['layers_1']['w'],
                     (1, 1, 16, 8))  # block 0: 16 * 0.5
    self.assertEqual(params['layers_3']['w'], (1, 1, 16, 32))  # final conv
    self.assertEqual(params['layers_5']['linear']['w'], (32, 5))
    logits, _ = net.apply(variables, x, mutable=True)
    self.assertEqual(logits.shape, (2, 5))

  def test_mismatched_block_lists_are_named(self):
    p = pax_fiddle.Config(mobilenet.MobileNet, name='net', strides=(1, 2))
    with self.assertRaisesRegex(ValueError, '`strides` has 2 entries'):
      base_layer.instantiate(p).init(
          jax.random.PRNGKey(0), jnp.ones((1, 8, 8, 3)))


  def test_matches_real_pax(self):
    # Pax's mobilenet.py (after 1.4) run on Pax 1.4's layers: same seed and
    # config give the same variables and training-mode logits.
    fields, want_vars, want_out, ref = _ref_case('mobilenet')
    fields = {k: tuple(v) if isinstance(v, list) else v
              for k, v in fields.items()}
    net = base_layer.instantiate(
        pax_fiddle.Config(mobilenet.MobileNet, name='mobilenet', **fields))
    # Pax's JAX (0.4.26) drew random bits with threefry_partitionable off.
    with jax.threefry_partitionable(False):
      variables = net.init(jax.random.PRNGKey(1234), ref['images'])
    jax.tree.map(lambda a, b: self.assertAllClose(a, b, atol=1e-6),
                 jax.device_get(variables), want_vars)
    logits, _ = net.apply(variables, ref['images'], mutable=True)
    self.assertAllClose(logits, want_out[''], atol=1e-4)


if __name__ == '__main__':
  absltest.main()
