"""SSMTransformer and SSMGated against the real Pax 1.4 (fprop and decoding)."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import attentions
from praxis.layers import ssm_transformers

DECODE_CACHE = base_layer.DECODE_CACHE
_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'ssm_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))
_CASES = sorted(k for k, v in _CONFIGS.items()
                if v['cls'] in ('SSMTransformer', 'SSMGated'))


def _layer(cls_name, **fields):
  return base_layer.instantiate(pax_fiddle.Config(
      getattr(ssm_transformers, cls_name), name='layer', **fields))


def _run(case):
  """(fprop outputs, step outputs or None, our vs Pax variable shapes)."""
  spec = _CONFIGS[case]
  layer = _layer(spec['cls'], **spec['fields'])
  x, paddings = _REF['tx'], _REF['tpaddings']
  mask = jnp.minimum(attentions.causal_mask(jnp.asarray(x)),
                     attentions.convert_paddings_to_mask(paddings))
  kw = {}
  cross_mask = None
  if spec['fields'].get('use_cross_attention'):
    cross_mask = attentions.convert_paddings_to_mask(_REF['tcross_paddings'])
    kw = dict(cross_inputs=_REF['tcross'], cross_attention_mask=cross_mask)
  prefix = f'{case}/vars/'
  ref_flat = {k[len(prefix):]: _REF[k] for k in _REF.files
              if k.startswith(prefix)}
  variables = traverse_util.unflatten_dict(ref_flat, sep='/')
  with base_layer.JaxContext.new_context():
    ours = layer.init(jax.random.PRNGKey(0), x, paddings, mask, **kw)
    shapes = ({k: v.shape for k, v in
               traverse_util.flatten_dict(ours['params'], sep='/').items()},
              {k[len('params/'):]: v.shape for k, v in ref_flat.items()})
    (out, probs), state = layer.apply(variables, x, paddings, mask,
                                      mutable=[DECODE_CACHE], **kw)
    assert probs is None
    step_vars = py_utils.merge_dict(state, variables)
    steps = []
    for t in range(x.shape[1]):
      step_kw = {}
      if cross_mask is not None:
        step_kw['cross_attention_mask'] = cross_mask
      y, state = layer.apply(
          step_vars, x[:, t], time_step=t, attention_mask=mask[:, :, t],
          method=layer.extend_step, mutable=[DECODE_CACHE], **step_kw)
      step_vars = py_utils.merge_dict(state, variables)
      steps.append(y)
  return out, np.stack(steps, 1), shapes


class RealPaxTest(parameterized.TestCase):

  @parameterized.parameters(*_CASES)
  def test_matches_real_pax(self, case):
    out, steps, (ours, ref) = _run(case)
    self.assertEqual(ours, ref)
    np.testing.assert_allclose(out, _REF[f'{case}/out'], rtol=1e-4,
                               atol=1e-4)
    if f'{case}/steps' in _REF.files:
      np.testing.assert_allclose(steps, _REF[f'{case}/steps'], rtol=1e-4,
                                 atol=1e-4)
    else:
      # Pax's extend_step fails for norm_policy='post'; ours decodes, and
      # matches Pax's fprop wherever the fprop's padding plays no part.
      np.testing.assert_allclose(steps[:, :4], _REF[f'{case}/out'][:, :4],
                                 rtol=1e-4, atol=1e-4)


class ConfigTest(absltest.TestCase):

  def test_ssm_dim_must_equal_input_dims(self):
    layer = _layer('SSMTransformer', input_dims=8, hidden_dims=8, num_heads=2,
                   ssm_nheads=2, ssm_dim=4, ssm_l_max=4)
    x = np.zeros([1, 4, 8], np.float32)
    with self.assertRaisesRegex(ValueError, 'ssm_dim'):
      layer.init(jax.random.PRNGKey(0), x, np.zeros([1, 4]), None)

  def test_bad_norm_policy(self):
    layer = _layer('SSMGated', input_dims=8, hidden_dims=8, num_heads=2,
                   ssm_nheads=2, ssm_dim=4, ssm_l_max=4,
                   norm_policy='post_skip')
    x = np.zeros([1, 4, 8], np.float32)
    with self.assertRaisesRegex(ValueError, 'norm_policy'):
      layer.init(jax.random.PRNGKey(0), x, np.zeros([1, 4]), None)


if __name__ == '__main__':
  absltest.main()
