"""Tests of praxis.layers.resnets against numpy convolutions and batch norm."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import convolutions
from praxis.layers import normalizations
from praxis.layers import resnets

_EPS = 1e-3  # BatchNorm's variance epsilon.
_DECAY = 0.9


# ----------------------------------------------------------------------------
# numpy reference.
# ----------------------------------------------------------------------------


def np_conv(x, w, stride):
  """SAME conv (pad k-1, low half first) of NHWC x with HWIO w, by loops."""
  k = w.shape[0]
  lo = (k - 1) // 2
  xp = np.pad(x, [(0, 0), (lo, k - 1 - lo), (lo, k - 1 - lo), (0, 0)])
  b, h, wd, _ = x.shape
  oh, ow = -(-h // stride), -(-wd // stride)
  out = np.zeros((b, oh, ow, w.shape[-1]), np.float64)
  for i in range(oh):
    for j in range(ow):
      patch = xp[:, i * stride:i * stride + k, j * stride:j * stride + k, :]
      out[:, i, j, :] = np.einsum('bhwc,hwco->bo', patch, w)
  return out


def np_bn(x, bn, train):
  """Batch norm with scale 1 + gamma; returns (y, batch mean, batch var)."""
  mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
  if not train:
    mean, var = bn['moving_mean'], bn['moving_variance']
  y = (x - mean) / np.sqrt(var + _EPS) * (1.0 + bn['gamma']) + bn['beta']
  return y, x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))


def relu(x):
  return np.maximum(x, 0.0)


def np_conv_bn(x, v, name, stride, train, stats):
  """conv -> bn of child `name` of `v` (merged variables); records stats."""
  p = v[name]
  y, mean, var = np_bn(np_conv(x, p['w'], stride), p['bn'], train)
  stats[name] = (mean, var)
  return y


def merged(variables):
  """params and non_trainable as one nested dict of float64 numpy arrays."""

  def merge(a, b):
    out = dict(a)
    for k, val in b.items():
      out[k] = merge(out.get(k, {}), val) if isinstance(val, dict) else val
    return out

  tree = merge(variables['params'], variables.get('non_trainable', {}))
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


# ----------------------------------------------------------------------------
# Helpers.
# ----------------------------------------------------------------------------


def conv_params():
  return pax_fiddle.Config(
      convolutions.ConvBNAct,
      batch_norm_tpl=pax_fiddle.Config(
          normalizations.BatchNorm, decay=_DECAY
      ),
  )


def _is_hparams(a):
  return isinstance(a, base_layer.WeightHParams)


def make_variables(layer, x, rng, randomize=True):
  """Variables of `layer` for input `x`, from its declarations (no init).

  Args:
    layer: The layer.
    x: An input.
    rng: numpy Generator.
    randomize: Random values everywhere (variances in [0.5, 1.5]); if False,
      constant-initialized variables get their constant.

  Returns:
    {'params': ..., 'non_trainable': ...} of float32 numpy arrays.
  """
  hparams = layer.abstract_init_with_metadata(x)

  def make(path, hp):
    if not randomize and hp.init.method == 'constant':
      return np.full(hp.shape, hp.init.scale, np.float32)
    if 'variance' in jax.tree_util.keystr(path):
      return rng.uniform(0.5, 1.5, size=hp.shape).astype(np.float32)
    return (0.5 * rng.normal(size=hp.shape)).astype(np.float32)

  return jax.tree_util.tree_map_with_path(make, hparams, is_leaf=_is_hparams)


def run_train_and_eval(layer, variables, x, seed=0):
  """One compiled call: ((train out, updated vars), (eval out, updated))."""

  def run(variables, x, do_eval):
    context = base_layer.JaxContext.HParams(do_eval=do_eval)
    with base_layer.JaxContext.new_context(hparams=context):
      return layer.apply(
          variables, x, rngs={base_layer.RANDOM: jax.random.PRNGKey(seed)},
          mutable=[base_layer.NON_TRAINABLE],
      )

  both = jax.jit(lambda v, x: (run(v, x, False), run(v, x, True)))
  return jax.tree.map(np.asarray, both(variables, x))


def output_shape(cfg, x_shape):
  """Output shape(s) of init + apply of `cfg`, traced without compiling."""
  layer = base_layer.instantiate(cfg)

  def init_and_apply(x):
    key = jax.random.PRNGKey(0)
    variables = layer.init({base_layer.PARAMS: key, base_layer.RANDOM: key}, x)
    return layer.apply(variables, x, rngs={base_layer.RANDOM: key})

  out = jax.eval_shape(init_and_apply, jax.ShapeDtypeStruct(x_shape,
                                                            jnp.float32))
  return jax.tree.map(lambda a: a.shape, out)


def count(tree):
  return sum(
      int(np.prod(hp.shape))
      for hp in jax.tree.leaves(
          tree, is_leaf=lambda a: isinstance(a, base_layer.WeightHParams)
      )
  )


def conv_bn_params(k, cin, cout):
  """Trainable parameters of a bias-free k x k conv and its batch norm."""
  return k * k * cin * cout + 2 * cout


class ResNetBlockTest(test_utils.TestCase):

  def _block(self, cls, **kwargs):
    p = pax_fiddle.Config(cls, name='block', conv_params=conv_params(),
                          **kwargs)
    return base_layer.instantiate(p)

  def test_bottleneck_block_matches_numpy_train_and_eval(self):
    block = self._block(resnets.ResNetBlock, input_dim=3, output_dim=8,
                        stride=2, kernel_size=3)
    x = self.np_rng.normal(size=(2, 5, 5, 3)).astype(np.float32)
    variables = make_variables(block, x, self.np_rng)
    v, x64 = merged(variables), x.astype(np.float64)
    # Bottleneck width 8 // 4; the kxk conv and the shortcut stride.
    self.assertEqual(v['body_1']['w'].shape, (3, 3, 2, 2))
    self.assertEqual(v['shortcut']['w'].shape, (1, 1, 3, 8))

    def reference(train):
      stats = {}
      h = relu(np_conv_bn(x64, v, 'body_0', 1, train, stats))
      h = relu(np_conv_bn(h, v, 'body_1', 2, train, stats))
      h = np_conv_bn(h, v, 'body_2', 1, train, stats)
      s = np_conv_bn(x64, v, 'shortcut', 2, train, stats)
      return relu(h + s), stats

    (out, updated), (eval_out, eval_updated) = run_train_and_eval(
        block, variables, x)
    expected, stats = reference(train=True)
    self.assertEqual(out.shape, (2, 3, 3, 8))
    self.assertAllClose(out, expected, atol=1e-4, rtol=1e-4)
    # Moving statistics move towards the batch statistics by 1 - decay.
    for name, (mean, var) in stats.items():
      new = updated[base_layer.NON_TRAINABLE][name]['bn']
      old = v[name]['bn']
      self.assertAllClose(
          new['moving_mean'],
          _DECAY * old['moving_mean'] + (1 - _DECAY) * mean,
          atol=1e-5, rtol=1e-5,
      )
      self.assertAllClose(
          new['moving_variance'],
          _DECAY * old['moving_variance'] + (1 - _DECAY) * var,
          atol=1e-5, rtol=1e-5,
      )
    # Eval normalizes with the moving statistics and leaves them alone.
    self.assertAllClose(eval_out, reference(train=False)[0], atol=1e-4,
                        rtol=1e-4)
    self.assertAllClose(eval_updated[base_layer.NON_TRAINABLE],
                        variables['non_trainable'])

  def test_basic_block_identity_shortcut_and_droppath(self):
    block = self._block(resnets.ResNetBasicBlock, input_dim=4, output_dim=4,
                        residual_droppath_prob=0.5)
    x = self.np_rng.normal(size=(16, 2, 2, 4)).astype(np.float32)
    variables = make_variables(block, x, self.np_rng)
    self.assertEqual(sorted(variables['params']), ['body_0', 'body_1'])
    self.assertEqual(variables['params']['body_1']['w'].shape, (3, 3, 4, 4))
    v, x64 = merged(variables), x.astype(np.float64)

    def residual(train):
      h = relu(np_conv_bn(x64, v, 'body_0', 1, train, {}))
      return np_conv_bn(h, v, 'body_1', 1, train, {})

    (out, _), (eval_out, _) = run_train_and_eval(block, variables, x, seed=3)
    # Eval: the plain block, relu(x + residual).
    self.assertAllClose(eval_out, relu(x64 + residual(False)), atol=1e-4,
                        rtol=1e-4)
    # Train: each example's residual is dropped or scaled by 1 / 0.5.
    kept, dropped = relu(x64 + residual(True) / 0.5), relu(x64)
    is_kept = [np.allclose(o, k, atol=1e-4) for o, k in zip(out, kept)]
    is_dropped = [np.allclose(o, d, atol=1e-6) for o, d in zip(out, dropped)]
    self.assertTrue(all(a or b for a, b in zip(is_kept, is_dropped)))
    self.assertTrue(any(is_kept) and any(is_dropped))

  def test_zero_init_residual_starts_as_shortcut(self):
    for cls, dim in ((resnets.ResNetBlock, 8), (resnets.ResNetBasicBlock, 4)):
      block = self._block(cls, input_dim=dim, output_dim=dim,
                          zero_init_residual=True)
      x = self.np_rng.normal(size=(2, 3, 3, dim)).astype(np.float32)
      variables = make_variables(block, x, self.np_rng, randomize=False)
      last = f'body_{len(variables["params"]) - 1}'
      # BatchNorm scales by 1 + gamma.
      self.assertAllClose(variables['params'][last]['bn']['gamma'],
                          -np.ones(dim))
      (out, _), _ = run_train_and_eval(block, variables, x)
      self.assertAllClose(out, relu(x), atol=1e-6)

  def test_bad_block_configs_fail_early(self):
    x = jax.ShapeDtypeStruct((1, 2, 2, 4), jnp.float32)
    cases = [
        ({'input_dim': 4, 'output_dim': 6}, 'output_dim'),
        ({'input_dim': 0, 'output_dim': 8}, 'input_dim'),
        ({'input_dim': 4, 'output_dim': 8, 'residual_droppath_prob': 1.0},
         'residual_droppath_prob'),
    ]
    for kwargs, field in cases:
      block = self._block(resnets.ResNetBlock, **kwargs)
      with self.assertRaisesRegex(ValueError, f'ResNetBlock.*{field}'):
        block.abstract_init_with_metadata(x)
    no_bn = conv_params().set(batch_norm_tpl=None)
    block = base_layer.instantiate(pax_fiddle.Config(
        resnets.ResNetBlock, name='b', conv_params=no_bn, input_dim=4,
        output_dim=4, zero_init_residual=True))
    with self.assertRaisesRegex(NotImplementedError, 'batch_norm_tpl'):
      block.abstract_init_with_metadata(x)


class ResNetTest(test_utils.TestCase):

  def test_resnet5_shapes_and_children(self):
    p = resnets.ResNet.HParamsResNet5().set(name='resnet')
    # 8x8 -> entry conv (stride 2) 4x4 -> max pool 2x2 -> pooled [B, 16].
    self.assertEqual(output_shape(p, (2, 8, 8, 3)), (2, 16))
    unpooled = p.clone().set(output_spatial_pooling_params=None)
    self.assertEqual(output_shape(unpooled, (2, 8, 8, 3)), (2, 2, 2, 16))
    # Pax's entry_max_pool=False skips the entry max pool: 4x4 stays.
    no_entry_pool = unpooled.clone().set(entry_max_pool=False)
    self.assertEqual(output_shape(no_entry_pool, (2, 8, 8, 3)),
                     (2, 4, 4, 16))
    hparams = base_layer.instantiate(p).abstract_init_with_metadata(
        jax.ShapeDtypeStruct((2, 8, 8, 3), jnp.float32))['params']
    self.assertEqual(sorted(hparams), ['entryflow_conv', 'stage_0_block_0'])
    # Bottleneck blocks: the entry conv writes channels[0] // 4.
    self.assertEqual(hparams['entryflow_conv']['w'].shape, [7, 7, 3, 4])
    self.assertEqual(hparams['stage_0_block_0']['body_1']['w'].shape,
                     [1, 1, 4, 4])

  def test_block_features_and_cifar_layout(self):
    p = resnets.ResNet.HParamsResNet56().set(
        name='resnet', blocks=(1, 1, 1), return_block_features=True)
    # No max pool, stride-1 3x3 entry: stages at 8x8, 4x4, 2x2.
    self.assertEqual(
        output_shape(p, (2, 8, 8, 3)),
        {2: (2, 8, 8, 16), 3: (2, 4, 4, 32), 4: (2, 2, 2, 64)},
    )
    p.return_block_features = False
    self.assertEqual(output_shape(p, (2, 8, 8, 3)), (2, 64))

  def test_preset_depths(self):
    # Depth = convs on the main path + the classifier layer.
    presets = {
        5: (resnets.ResNet.HParamsResNet5, 3),
        18: (resnets.ResNet.HParamsResNet18, 2),
        34: (resnets.ResNet.HParamsResNet34, 2),
        50: (resnets.ResNet.HParamsResNet50, 3),
        56: (resnets.ResNet.HParamsResNet56, 2),
        83: (resnets.ResNet.HParamsResNet83, 3),
        101: (resnets.ResNet.HParamsResNet101, 3),
        152: (resnets.ResNet.HParamsResNet152, 3),
    }
    for depth, (fn, convs_per_block) in presets.items():
      p = fn()
      self.assertIs(p.cls, resnets.ResNet)
      block_convs = 3 if p.block_params.cls is resnets.ResNetBlock else 2
      self.assertEqual(block_convs, convs_per_block, msg=str(depth))
      self.assertEqual(block_convs * sum(p.blocks) + 2, depth)

  def test_resnet18_parameter_count(self):
    net = base_layer.instantiate(
        resnets.ResNet.HParamsResNet18().set(name='resnet'))
    hparams = net.abstract_init_with_metadata(
        jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32))
    expected = conv_bn_params(7, 3, 64)
    in_dim = 64
    for out_dim, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
      for block in range(2):
        expected += conv_bn_params(3, in_dim, out_dim)
        expected += conv_bn_params(3, out_dim, out_dim)
        if block == 0 and (in_dim != out_dim or stride != 1):
          expected += conv_bn_params(1, in_dim, out_dim)
        in_dim = out_dim
    # torchvision's 11,689,512 less its 512 x 1000 + 1000 classifier.
    self.assertEqual(expected, 11_689_512 - 513_000)
    self.assertEqual(count(hparams['params']), expected)
    # Two moving statistics per batch-norm channel (= 2 trainable ones).
    bn_channels = sum(
        hp.shape[0]
        for path, hp in jax.tree_util.tree_leaves_with_path(
            hparams['params'],
            is_leaf=lambda a: isinstance(a, base_layer.WeightHParams))
        if 'gamma' in jax.tree_util.keystr(path))
    self.assertEqual(count(hparams['non_trainable']), 2 * bn_channels)

  def test_bad_resnet_configs_fail_early(self):
    x = jnp.zeros((1, 8, 8, 3))
    cases = [
        ({'channels': (16, 32)}, 'channels'),
        ({'kernels': (1, 3)}, 'kernels'),
        ({'entryflow_conv_kernel': (3, 3)}, 'entryflow_conv_kernel'),
        ({'entryflow_conv_stride': (2,)}, 'entryflow_conv_stride'),
    ]
    for kwargs, field in cases:
      p = resnets.ResNet.HParamsResNet5().set(name='r', **kwargs)
      with self.assertRaisesRegex(ValueError, f"ResNet 'r'.*{field}"):
        base_layer.instantiate(p).init(jax.random.PRNGKey(0), x)


if __name__ == '__main__':
  absltest.main()
