"""The fused attention layers equal the plain ones (on CPU: 'xla')."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import attentions
from praxis.layers import gpu_fast_attention as gfa
from praxis.layers import grouped_query_attention as gqa
from praxis.layers import multi_query_attention as mqa

DECODE_CACHE = base_layer.DECODE_CACHE


def pair(plain_cls, fused_cls, x, mask, fused_kw=None, **kw):
  """(plain output, fused output) with the same variables.

  `kw` configures both layers, `fused_kw` the fused one only.
  """
  plain = base_layer.instantiate(pax_fiddle.Config(plain_cls, name='a', **kw))
  fused = base_layer.instantiate(pax_fiddle.Config(
      fused_cls, name='a', **kw, **(fused_kw or {})))
  variables = plain.init(jax.random.PRNGKey(0), x, x, x, mask)
  return (plain.apply(variables, x, x, x, mask),
          fused.apply(variables, x, x, x, mask), variables, plain, fused)


class FusedAttentionTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype(
        np.float32)
    paddings = np.zeros((2, 6), np.float32)
    paddings[1, 4:] = 1
    self.mask = jnp.minimum(attentions.causal_mask(self.x),
                            attentions.convert_paddings_to_mask(paddings))

  @parameterized.parameters(
      dict(),
      dict(num_kv_heads=2, use_rotary_position_emb=True),
      dict(relative_bias_tpl=pax_fiddle.Config(attentions.RelativeBias),
           scale_logits_by_head_dims=True),
      dict(is_causal=True),
  )
  def test_dot_product_attention_equals_plain(self, **kw):
    extra = {'is_causal': kw.pop('is_causal')} if 'is_causal' in kw else {}
    fused_cls = (gfa.GpuTritonFusedDotProductAttention if extra else
                 gfa.GpuCudnnFusedDotProductAttention)
    (want, probs), (got, fused_probs), *_ = pair(
        attentions.DotProductAttention, fused_cls, self.x, self.mask,
        fused_kw=extra, input_dim=8, hidden_dim=8, num_heads=4, **kw)
    self.assertIsNotNone(probs)
    self.assertIsNone(fused_probs)
    self.assertAllClose(got, want, atol=1e-5)

  @parameterized.parameters(False, True)
  def test_decoding_equals_plain(self, is_causal):
    # A decoding step's one query attends to all the cached keys its mask
    # allows: the kernel's causal mode (square) must not apply there.
    kw = dict(input_dim=8, hidden_dim=8, num_heads=4)
    _, _, variables, plain, fused = pair(
        attentions.DotProductAttention, gfa.GpuCudnnFusedDotProductAttention,
        self.x, self.mask, fused_kw=dict(is_causal=is_causal), **kw)
    outs = []
    for layer in (plain, fused):
      _, cache = layer.apply(variables, self.x, self.x, self.x, self.mask,
                             mutable=[DECODE_CACHE])
      state = py_utils.merge_dict(cache, variables)
      outs.append(layer.apply(
          state, method=layer.extend_step, query_vec=self.x[:, 3],
          atten_mask=self.mask[:, :, 3], time_step=3, segment_pos=None))
    self.assertAllClose(outs[1], outs[0], atol=1e-5)

  def test_logit_cap_falls_back(self):
    (want, _), (got, probs), *_ = pair(
        attentions.DotProductAttention, gfa.GpuCudnnFusedDotProductAttention,
        self.x, self.mask, input_dim=8, hidden_dim=8, num_heads=4,
        atten_logit_cap=1.0)
    self.assertIsNotNone(probs)
    self.assertAllClose(got, want)

  @parameterized.parameters(1, 2)
  def test_multi_query_equals_plain(self, k):
    (want, _), (got, probs), *_ = pair(
        mqa.MultiQueryDotProductAttention,
        gfa.GpuTritonFusedMultiQueryDotProductAttention, self.x, self.mask,
        input_dim=8, hidden_dim=8, num_heads=4, num_kv_heads=k)
    self.assertIsNone(probs)
    self.assertAllClose(got, want, atol=1e-5)

  def test_grouped_query_equals_plain(self):
    bool_mask = self.mask < -1.0  # True where masked, as GQA takes it.
    (want, _), (got, probs), *_ = pair(
        gqa.GroupedQueryAttention, gfa.GpuCudnnFusedGroupedQueryAttention,
        self.x, bool_mask, input_dim=8, num_heads=4, num_kv_heads=2,
        dim_per_head=2)
    self.assertIsNone(probs)
    self.assertAllClose(got, want, atol=1e-5)

  def test_grouped_query_decoding_with_is_causal_equals_plain(self):
    bool_mask = self.mask < -1.0
    kw = dict(input_dim=8, num_heads=4, num_kv_heads=2, dim_per_head=2)
    _, _, variables, plain, fused = pair(
        gqa.GroupedQueryAttention, gfa.GpuCudnnFusedGroupedQueryAttention,
        self.x, bool_mask, fused_kw=dict(is_causal=True), **kw)
    outs = []
    for layer in (plain, fused):
      (full, _), cache = layer.apply(variables, self.x, self.x, self.x,
                                     bool_mask, mutable=[DECODE_CACHE])
      state = py_utils.merge_dict(cache, variables)
      outs.append((full, layer.apply(
          state, method=layer.extend_step, query_vec=self.x[:, 3],
          atten_mask=bool_mask[:, :, 3], time_step=3, segment_pos=None)))
    self.assertAllClose(outs[1][0], outs[0][0], atol=1e-5)  # Whole sequence.
    self.assertAllClose(outs[1][1], outs[0][1], atol=1e-5)  # One step.

  @absltest.skipIf(jax.default_backend() != 'gpu',
                   'cuDNN attention needs a GPU (CI has none); conftest.py '
                   'pins the CPU unless JAX_PLATFORMS is set (=cuda).')
  def test_cudnn_bf16_equals_plain_on_gpu(self):
    # Shapes cuDNN's flash attention accepts: head dim 64, sequence 128.
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 128, 256)).astype(np.float32)
    paddings = np.zeros((2, 128), np.float32)
    paddings[1, 100:] = 1
    mask = jnp.minimum(attentions.causal_mask(x),
                       attentions.convert_paddings_to_mask(paddings))
    kw = dict(input_dim=256, hidden_dim=256, num_heads=4,
              fprop_dtype=jnp.bfloat16)
    self.assertEqual(gfa.default_implementation(jnp.bfloat16), 'cudnn')
    for is_causal in (False, True):  # The kernel's causal mode, mask kept.
      with self.subTest(is_causal=is_causal):
        (want, _), (got, _), *_ = pair(
            attentions.DotProductAttention,
            gfa.GpuCudnnFusedDotProductAttention, x, mask,
            fused_kw=dict(is_causal=is_causal), **kw)
        self.assertAllClose(np.asarray(got, np.float32)[:, :100],
                            np.asarray(want, np.float32)[:, :100],
                            atol=3e-2, rtol=3e-2)

  def test_implementation_choice(self):
    expected = 'cudnn' if jax.default_backend() == 'gpu' else 'xla'
    self.assertEqual(gfa.default_implementation(jnp.bfloat16), expected)
    self.assertEqual(gfa.default_implementation(jnp.float32), 'xla')


if __name__ == '__main__':
  absltest.main()
