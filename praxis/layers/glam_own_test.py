"""Tests of praxis.layers.glam against the real Pax 1.4's GLaM models.

The recorded variables and outputs come from testdata/make_ref_glam.py
(testdata/glam_ref.npz).
"""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import fiddle as fdl
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import py_utils
from praxis.layers import glam
from praxis.layers import transformers

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'glam_ref.npz'))
_CFG = json.loads(str(_REF['configs']))


def _context(do_eval):
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=do_eval))


def _labels(labels, paddings):
  return py_utils.NestedMap(class_ids=labels, class_weights=1.0 - paddings)


class GlamMatchesPaxTest(parameterized.TestCase):

  @parameterized.parameters(*_CFG['cases'])
  def test_lm(self, name):
    lm = base_layer.instantiate(glam.GlamUniTransformerLmHParams(
        **_CFG['common'], **_CFG['cases'][name]))
    ids, labels = _REF['input/ids'], _REF['input/labels']
    paddings = _REF['input/paddings']
    prefix = f'{name}/var/'
    ref = traverse_util.unflatten_dict(
        {k[len(prefix):]: _REF[k] for k in _REF if k.startswith(prefix)},
        sep='/')
    params = {'params': jax.tree.map(jnp.asarray, ref)}
    with _context(do_eval=True):
      ours = lm.init(jax.random.PRNGKey(0), ids, paddings,
                     labels=_labels(labels, paddings))
      # The same variable names and shapes as Pax's GLaM.
      self.assertEqual(jax.tree.map(jnp.shape, ours['params']),
                       jax.tree.map(jnp.shape, ref))
      out = lm.apply(params, ids, paddings, labels=_labels(labels, paddings))
    for key in ('logits', 'per_example_xent', 'avg_xent'):
      np.testing.assert_allclose(out[key], _REF[f'{name}/out/{key}'],
                                 rtol=1e-4, atol=1e-5, err_msg=key)
    with _context(do_eval=False):
      train, _ = lm.apply(params, ids, paddings,
                          labels=_labels(labels, paddings),
                          mutable=[base_layer.AUX_LOSS])
      nopad, _ = lm.apply(params, ids, np.zeros_like(paddings),
                          labels=_labels(labels, np.zeros_like(paddings)),
                          mutable=[base_layer.AUX_LOSS])
    np.testing.assert_allclose(train['logits'], _REF[f'{name}/out/logits'],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        nopad['aux_loss'], _REF[f'{name}/out/train_nopad_aux_loss'],
        rtol=1e-4, atol=1e-7)
    self.assertGreater(float(nopad['aux_loss']), 0.0)
    # With paddings, the padded tokens are left out of the MoE's routing
    # statistics (Pax: 0.01715; counting them gave 0.02343).
    np.testing.assert_allclose(
        train['aux_loss'], _REF[f'{name}/out/train_aux_loss'],
        rtol=1e-4, atol=1e-7)


class GlamConfigTest(absltest.TestCase):

  def test_block_structure(self):
    p = glam.GlamStackedTransformerHParams(
        model_dim=8, ff_dim=16, attention_num_heads=2,
        attention_key_value_dim=4, moe=True, e_dim=4, c_dim=8,
        moe_hidden_dim=12)
    self.assertEqual((p.num_layers, p.moe_layers, p.num_experts), (2, [0], 4))
    self.assertEqual(p.moe_layer_tpl.hidden_dims, 12)
    self.assertFalse(p.transformer_layer_params_tpl.tr_atten_tpl.use_bias)
    dense = glam.GlamStackedTransformerHParams(
        model_dim=8, ff_dim=16, attention_num_heads=2,
        attention_key_value_dim=4)
    self.assertEqual((dense.num_layers, dense.moe_layers), (1, None))

  def test_unrepeated_moe_every_other_layer(self):
    p = glam.GlamUniTransformerLmHParams(
        vocab_size=32, model_dim=8, ff_dim=16, attention_num_heads=2,
        attention_key_value_dim=4, num_transformer_layers=6, moe=True,
        e_dim=2, repeat=False)
    stack = p.stacked_transformer_tpl
    self.assertIs(fdl.get_callable(stack), transformers.StackedTransformer)
    self.assertEqual((stack.num_layers, stack.moe_layers), (6, [0, 2, 4]))

  def test_pipeline_stages_must_divide_blocks(self):
    with self.assertRaisesRegex(ValueError, 'must divide the 3 blocks'):
      glam.GlamUniTransformerLmHParams(
          vocab_size=32, model_dim=8, ff_dim=16, attention_num_heads=2,
          attention_key_value_dim=4, num_transformer_layers=6, moe=True,
          e_dim=2, num_pipeline_stages=2)


if __name__ == '__main__':
  absltest.main()
