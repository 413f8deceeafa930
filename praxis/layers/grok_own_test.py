"""Tests of praxis.layers.grok: the configs it builds and the model they make.

Grok postdates Pax 1.4 (no recorded reference); the expected variables are
derived by hand from the shapes the builder asks for.
"""

from absl.testing import absltest
import fiddle as fdl
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import py_utils
from praxis.layers import grok
from praxis.layers import multi_query_attention
from praxis.layers import normalizations
from praxis.layers import transformers

_DIMS = dict(vocab_size=32, model_dim=8, ff_dim=16, attention_num_heads=4,
             attention_num_groups=2, attention_key_value_dim=2)


class GrokTest(absltest.TestCase):

  def test_block_config(self):
    p = grok.GrokStackedTransformerHParams(
        model_dim=8, ff_dim=16, attention_num_heads=4,
        attention_num_groups=2, attention_key_value_dim=2, moe=True,
        e_dim=4, c_dim=8, moe_hidden_dim=12)
    self.assertEqual((p.num_layers, p.moe_layers, p.num_experts), (1, [0], 4))
    atten = p.transformer_layer_params_tpl.tr_atten_tpl
    self.assertIs(fdl.get_callable(atten),
                  multi_query_attention.MultiQueryDotProductAttention)
    self.assertEqual((atten.num_kv_heads, atten.combine_qkv), (2, False))
    self.assertTrue(atten.proj_tpl.use_bias)
    moe = p.moe_layer_tpl
    self.assertEqual((moe.hidden_dims, moe.use_gated_activation), (12, True))
    self.assertIs(fdl.get_callable(moe.ln_tpl), normalizations.RmsNorm)
    self.assertTrue(moe.ln_tpl.direct_scale)

  def test_moe_lm_variables_and_loss(self):
    lm = base_layer.instantiate(grok.GrokUniTransformerLmHParams(
        **_DIMS, num_transformer_layers=2, moe=True, e_dim=4, c_dim=8))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 32, size=(2, 6))
    paddings = np.zeros((2, 6), np.float32)
    labels = py_utils.NestedMap(class_ids=rng.integers(0, 32, size=(2, 6)),
                                class_weights=1 - paddings)
    with base_layer.JaxContext.new_context():
      variables = lm.init(jax.random.PRNGKey(0), ids, paddings,
                          labels=labels)
      out, _ = lm.apply(variables, ids, paddings, labels=labels,
                        mutable=[base_layer.AUX_LOSS])
    layer = variables['params']['transformer']['repeat']['sub']['x_layers_0']
    shapes = jax.tree.map(jnp.shape, layer)
    # Two repeats; 4 query heads, 2 key/value heads of depth 2; 4 experts.
    self.assertEqual(shapes['self_attention']['query']['w'], (2, 8, 4, 2))
    self.assertEqual(shapes['self_attention']['key']['w'], (2, 8, 2, 2))
    self.assertEqual(shapes['self_attention']['value']['b'], (2, 2, 2))
    self.assertEqual(shapes['ff_layer']['wi_gate_0'], (2, 4, 8, 16))
    self.assertEqual(shapes['ff_layer']['wo_0'], (2, 4, 16, 8))
    self.assertNotIn('relative_bias', shapes['self_attention'])
    # The MoE load-balancing (and softmax z-) losses are collected.
    self.assertTrue(np.isfinite(float(out.avg_xent)))
    self.assertGreater(float(out.aux_loss), 0.0)

  def test_pipeline_config(self):
    p = grok.GrokUniTransformerLmHParams(
        **_DIMS, num_transformer_layers=4, moe=True, e_dim=2,
        num_pipeline_stages=2, num_pipeline_microbatches=2)
    stack = p.stacked_transformer_tpl
    self.assertIs(fdl.get_callable(stack), transformers.PipelinedTransformer)
    self.assertEqual(
        (stack.pipeline_stage.num_layers, stack.pipeline_stage.moe_layers),
        (2, [0, 1]))
    with self.assertRaisesRegex(ValueError, 'must divide'):
      grok.GrokUniTransformerLmHParams(
          **_DIMS, num_transformer_layers=3, num_pipeline_stages=2)


if __name__ == '__main__':
  absltest.main()
