"""The sequence-layer families on a mesh of 8 CPU devices equal one device.

Each family goes into a small TransformerLm, sharded with Pax's
`TransformerLm.set_sharding_params_v1` (data axis 4 x model axis 2); the
sharded forward pass must give the single-device logits, and the weights
must really be split.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.contrib.gpu.scripts_gpu import lora_layers
from praxis.layers import multi_query_attention
from praxis.layers import ssm
from praxis.layers import ssm_transformers
from praxis.layers import transformer_models
from praxis.layers.transformer_models_test import random_variables
from praxis.layers.transformer_models_test import sharded_logits
from praxis.layers import transformers

instantiate = base_layer.instantiate
VOCAB, D, HEADS, HIDDEN, B, T = 32, 16, 4, 32, 4, 8
MESH_SHAPE = [1, 4, 2]  # 2 model shards: the grouped-query KV heads.


def _lm(family: str) -> pax_fiddle.Config:
  p = pax_fiddle.Config(transformer_models.TransformerLm, name='lm',
                        model_dims=D, vocab_size=VOCAB)
  stack = p.stacked_transformer_tpl
  stack.set(num_layers=2, num_heads=HEADS, hidden_dims=HIDDEN,
            dim_per_head=D // HEADS)
  layer = stack.transformer_layer_params_tpl
  if family in ('multi_query', 'grouped_query'):
    layer.tr_atten_tpl = pax_fiddle.Config(
        multi_query_attention.MultiQueryDotProductAttention,
        num_kv_heads=1 if family == 'multi_query' else 2)
  elif family == 'moe':
    stack.set(moe_layers=[1], num_experts=4, num_groups=1)
  elif family == 'ssm':
    stack.transformer_layer_params_tpl = pax_fiddle.Config(
        ssm_transformers.SSMGated, ssm_tpl=pax_fiddle.Config(ssm.SSM),
        ssm_nheads=4, ssm_dim=D, ssm_l_max=T, ssm_hippo_type='ss4d-1d-legs',
        ssm_step_size=0.01, decode_num_samples=1)
  elif family == 'lora':
    for holder, field, cls in (
        (layer.tr_fflayer_tpl.fflayer_tpl, 'linear_tpl',
         lora_layers.LoraLinear),
        (layer.tr_atten_tpl, 'proj_tpl', lora_layers.LoraAttentionProjection)):
      lora = pax_fiddle.Config(cls, rank=2)
      lora.copy_fields_from(getattr(holder, field))
      setattr(holder, field, lora)
  elif family != 'dense':
    raise ValueError(family)
  return p


class ShardedFamiliesTest(test_utils.TestCase):

  @parameterized.parameters('dense', 'multi_query', 'grouped_query', 'moe',
                            'ssm', 'lora')
  def test_sharded_forward_equals_single_device(self, family):
    ids = jnp.asarray(self.np_rng.integers(0, VOCAB, (B, T)), jnp.int32)
    paddings = jnp.zeros((B, T))
    plain = instantiate(_lm(family))
    variables = random_variables(self.np_rng, plain, ids, paddings)
    expected = jax.jit(plain.apply)(variables, ids, paddings).logits

    sharded, logits = sharded_logits(_lm(family), variables, ids, paddings,
                                     MESH_SHAPE)
    self.assertAllClose(logits, expected, atol=2e-5, rtol=2e-5)
    # The feed-forward (or expert) weights are split over the model axis.
    split = [leaf for leaf in jax.tree.leaves(sharded)
             if leaf.ndim >= 2 and leaf.addressable_shards[0].data.size
             < leaf.size]
    self.assertNotEmpty(split)
    layer = sharded['params']['transformer']['x_layers_1']
    if family == 'ssm':  # Its gated feed-forward keeps its own sharding.
      split_one = sharded['params']['softmax']['logits_ffn']['linear']['w']
    elif family == 'moe':
      split_one = layer['ff_layer']['wi_0']
    else:  # LoRA: the base weight; the rank-2 adapters are replicated.
      split_one = layer['self_attention']['query']['w']
    self.assertLess(split_one.addressable_shards[0].data.size, split_one.size)
    if family == 'lora':
      self.assertIn('lora_a', layer['ff_layer']['ffn_layer1']['linear'])


if __name__ == '__main__':
  absltest.main()
