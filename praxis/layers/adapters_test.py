"""Residual adapters: numpy math and the real Pax 1.4 on the same weights."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import adapters

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'adapters_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))


def _ref_vars(case):
  prefix = f'{case}/vars/'
  flat = {k[len(prefix):]: _REF[k] for k in _REF.files
          if k.startswith(prefix)}
  return flat, traverse_util.unflatten_dict(flat, sep='/')


def _adapter(case):
  spec = _CONFIGS[case]
  p = pax_fiddle.Config(adapters.MultitaskResidualAdapter, name='adapter',
                        **spec['fields'])
  if spec['norm'] is None:
    p.norm_tpl = None
  return base_layer.instantiate(p)


def _ffn(case):
  spec = _CONFIGS[case]
  p = pax_fiddle.Config(adapters.AdaptedTransformerFeedForward, name='ffn',
                        **spec['fields'])
  p.adapter_tpl = pax_fiddle.Config(
      adapters.MultitaskResidualAdapter, norm_tpl=None, input_dims=6,
      bottleneck_dims=3, num_tasks=3)
  return base_layer.instantiate(p)


def _np_adapter(params, x, tasks, layer_norm):
  """Per-token numpy adapter: norm, down, ReLU, up (no residual)."""
  if tasks.ndim == 1:
    tasks = np.broadcast_to(tasks[:, None], x.shape[:2])
  if layer_norm:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean)**2).mean(-1, keepdims=True)
    norm = params['norm']
    x = (x - mean) / np.sqrt(var + 1e-6) * (1 + norm['scale']) + norm['bias']
  out = np.zeros(x.shape, np.float64)
  for b in range(x.shape[0]):
    for t in range(x.shape[1]):
      k = tasks[b, t]
      h = np.maximum(x[b, t] @ params['down_w'][k] + params['down_b'][k], 0)
      out[b, t] = h @ params['up_w'][k] + params['up_b'][k]
  return out


class MultitaskResidualAdapterTest(parameterized.TestCase):

  @parameterized.product(case=['adapter_ln', 'adapter_nonorm'],
                         tasks=['tasks_b', 'tasks_bt'])
  def test_matches_numpy_and_real_pax(self, case, tasks):
    layer = _adapter(case)
    x, paddings = _REF['x'], _REF['paddings']
    ref_flat, variables = _ref_vars(case)
    ours = layer.init(jax.random.PRNGKey(0), x, paddings, _REF['tasks_b'])
    self.assertEqual(
        {k: v.shape for k, v in
         traverse_util.flatten_dict(ours, sep='/').items()},
        {k: v.shape for k, v in ref_flat.items()})
    out = layer.apply(variables, x, paddings, _REF[tasks])
    branch = _np_adapter(variables['params'], x.astype(np.float64),
                         _REF[tasks], _CONFIGS[case]['norm'] is not None)
    np.testing.assert_allclose(out, x + branch, rtol=1e-4, atol=1e-5)
    suffix = 'b' if tasks == 'tasks_b' else 'bt'
    np.testing.assert_allclose(out, _REF[f'{case}/out_{suffix}'], rtol=1e-5,
                               atol=1e-6)

  def test_without_residual(self):
    layer = _adapter('adapter_ln')
    _, variables = _ref_vars('adapter_ln')
    out = layer.apply(variables, _REF['x'], _REF['paddings'],
                      _REF['tasks_b'], add_residual=False)
    np.testing.assert_allclose(out, _REF['adapter_ln/out_b_nores'],
                               rtol=1e-5, atol=1e-6)

  def test_new_adapter_adds_only_up_b(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        adapters.MultitaskResidualAdapter, name='a', input_dims=4,
        bottleneck_dims=2))
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    out = layer.apply(variables, x)  # No tasks: one task.
    np.testing.assert_allclose(
        out, x + np.asarray(variables['params']['up_b'][0]), rtol=1e-6)

  def test_bad_tasks(self):
    layer = _adapter('adapter_ln')
    _, variables = _ref_vars('adapter_ln')
    with self.assertRaisesRegex(ValueError, 'num_tasks'):
      layer.apply(variables, _REF['x'])
    with self.assertRaisesRegex(ValueError, 'leading dims'):
      layer.apply(variables, _REF['x'], None, np.zeros([4], np.int32))


class AdaptedTransformerFeedForwardTest(parameterized.TestCase):

  @parameterized.parameters('sequential', 'parallel')
  def test_matches_real_pax(self, mode):
    case = f'ffn_{mode}'
    layer = _ffn(case)
    x, paddings, tasks = _REF['x'], _REF['paddings'], _REF['tasks_b']
    ref_flat, variables = _ref_vars(case)
    ours = layer.init(jax.random.PRNGKey(0), x, paddings, tasks=tasks)
    self.assertEqual(
        {k: v.shape for k, v in
         traverse_util.flatten_dict(ours, sep='/').items()},
        {k: v.shape for k, v in ref_flat.items()})
    out = layer.apply(variables, x, paddings, tasks=tasks)
    np.testing.assert_allclose(out, _REF[f'{case}/out'], rtol=1e-5,
                               atol=1e-5)

  def test_bad_mode(self):
    p = pax_fiddle.Config(
        adapters.AdaptedTransformerFeedForward, name='ffn', input_dims=6,
        hidden_dims=12, mode='serial',
        adapter_tpl=pax_fiddle.Config(adapters.MultitaskResidualAdapter,
                                      input_dims=6, bottleneck_dims=3))
    with self.assertRaisesRegex(ValueError, 'mode'):
      base_layer.instantiate(p).init(jax.random.PRNGKey(0), _REF['x'])


if __name__ == '__main__':
  absltest.main()
