"""Conformer layers: against the real Pax 1.4 and explicit attention masks."""

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
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import conformers

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))
_CASES = sorted(
    k for k, v in _CONFIGS.items()
    if v['cls'] in ('Conformer', 'SelfAttentionWithNormAndResidual'))


def _ref_config(case):
  spec = _CONFIGS[case]
  cfg = pax_fiddle.Config(getattr(conformers, spec['cls']), name='layer',
                          **spec['fields'])
  if spec['cls'] == 'SelfAttentionWithNormAndResidual':
    cfg.self_atten_tpl = pax_fiddle.Config(
        conformers.DotProductAttentionWithContext, input_dim=8, hidden_dim=8,
        num_heads=2, left_context=2, right_context=1)
    cfg.norm_tpl.dim = 8
  if spec['fields'].get('input_dims') == 6:
    cfg.fflayer_start_tpl.add_skip_connection = False
  return cfg


def _eval(fn):
  context = base_layer.JaxContext.HParams(do_eval=True)
  with base_layer.JaxContext.new_context(hparams=context):
    return fn()


class RealPaxTest(test_utils.TestCase):
  """Same config, weights and inputs as the real Pax 1.4: same outputs."""

  @parameterized.parameters(*_CASES)
  def test_matches_real_pax(self, case):
    layer = base_layer.instantiate(_ref_config(case))
    x = _REF['conformer/x6' if case == 'conformer_proj_in' else 'conformer/x8']
    paddings = _REF['conformer/paddings']
    prefix = f'{case}/vars/'
    variables = traverse_util.unflatten_dict(
        {k[len(prefix):]: _REF[k] for k in _REF.files
         if k.startswith(prefix)}, sep='/')
    ours = _eval(lambda: layer.init(jax.random.PRNGKey(0), x, paddings))
    self.assertEqual(jax.tree.map(jnp.shape, ours),
                     jax.tree.map(jnp.shape, variables))
    y = _eval(lambda: layer.apply(variables, x, paddings))
    self.assertAllClose(y, _REF[f'{case}/y'], atol=1e-4)


class ContextTest(test_utils.TestCase):

  @parameterized.parameters(
      (conformers.DotProductAttentionWithContext,
       attentions.DotProductAttention, {}, 2, 1),
      (conformers.DotProductAttentionWithContext,
       attentions.DotProductAttention, {}, None, 0),
      (conformers.DotProductAttentionWithContextXL,
       attentions.DotProductAttentionXL, dict(rel_pos_emb_dim=4), 3, None))
  def test_context_equals_explicit_mask(self, cls, global_cls, extra, left,
                                        right):
    fields = dict(input_dim=8, hidden_dim=8, num_heads=2, **extra)
    local = base_layer.instantiate(pax_fiddle.Config(
        cls, name='a', left_context=left, right_context=right, **fields))
    full = base_layer.instantiate(pax_fiddle.Config(global_cls, name='a',
                                                    **fields))
    x = self.np_rng.normal(size=(2, 6, 8)).astype(np.float32)
    pad = attentions.convert_paddings_to_mask(jnp.zeros((2, 6)))
    variables = full.init(jax.random.PRNGKey(1), x, x, x, pad)
    # Hand-made mask: key j visible from query i iff i - left < j <= i + right.
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    visible = np.ones((6, 6), bool)
    if left is not None:
      visible &= j > i - left
    if right is not None:
      visible &= j <= i + right
    # Pax's masks are additive and 'large negative' means -0.7 * max float.
    big_negative = -0.7 * np.finfo(np.float32).max
    mask = np.where(visible, 0.0, big_negative).astype(np.float32)[None, None]
    got = local.apply(variables, x, x, x, pad)[0]
    want = full.apply(variables, x, x, x, jnp.minimum(pad, mask))[0]
    self.assertAllClose(got, want, atol=1e-5)
    self.assertNotAllClose(got, full.apply(variables, x, x, x, pad)[0])

  def test_errors_are_named(self):
    with self.assertRaisesRegex(ValueError, 'layer_order'):
      base_layer.instantiate(pax_fiddle.Config(
          conformers.Conformer, name='c', input_dims=8, model_dims=8,
          layer_order='bad')).init(jax.random.PRNGKey(0), jnp.ones((1, 2, 8)),
                                   jnp.zeros((1, 2)))
    with self.assertRaisesRegex(ValueError, 'norm_policy'):
      base_layer.instantiate(pax_fiddle.Config(
          conformers.SelfAttentionWithNormAndResidual, name='s',
          norm_policy='pre')).init(jax.random.PRNGKey(0), jnp.ones((1, 2, 8)),
                                   jnp.zeros((1, 2)))


if __name__ == '__main__':
  absltest.main()
