"""Fused attention for GPUs through `jax.nn.dot_product_attention`.

Public: `fused_dot_product_attention` (the function) and the layers
`GpuCudnnFusedDotProductAttention`, `GpuCudnnFusedGroupedQueryAttention`,
`GpuTritonFusedDotProductAttention`, `GpuTritonFusedGroupedQueryAttention`,
`GpuTritonFusedMultiQueryDotProductAttention` and `GpuTritonFusedLayerNorm`
(Pax's names). They are the plain layers with the attention core swapped
for `jax.nn.dot_product_attention`: implementation 'cudnn' (flash attention)
on a GPU for bfloat16/float16 activations, 'xla' elsewhere, so a config runs
unchanged on CPU and GPU with the plain layers' numerics. Unlike Pax's
kernels they apply the attention mask (not just `is_causal`) and the
relative bias; options the fused kernel lacks (logit cap, extra logit,
`zero_fully_masked`, dropout while training) fall back to the plain math.
The fused path returns no probabilities (None), as in Pax.

  atten = pax_fiddle.Config(
      gpu_fast_attention.GpuCudnnFusedDotProductAttention, name='atten',
      input_dim=64, hidden_dim=64, num_heads=4)
  # Or in a transformer: tr_tpl.tr_atten_tpl = atten  (same fields)
"""

from __future__ import annotations

import jax
from jax import numpy as jnp
from praxis import py_utils
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import grouped_query_attention
from praxis.layers import multi_query_attention
from praxis.layers import normalizations

JTensor = pytypes.JTensor

_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def default_implementation(dtype: jnp.dtype) -> str:
  """'cudnn' on a GPU for bfloat16/float16, else 'xla'."""
  if jax.default_backend() == 'gpu' and dtype in _CUDNN_DTYPES:
    return 'cudnn'
  return 'xla'


def fused_dot_product_attention(
    query: JTensor,
    key: JTensor,
    value: JTensor,
    allowed: JTensor | None,
    *,
    bias: JTensor | None = None,
    scale: float = 1.0,
    is_causal: bool = False,
    implementation: str | None = None,
) -> JTensor:
  """Attention of query [B, T, N, H] over key/value [B, S, K, H] (K | N).

  Args:
    query: [B, T, N, H].
    key: [B, S, K, H].
    value: [B, S, K, H].
    allowed: Boolean [1|B, 1|N, 1|T, S], True where attention is allowed.
    bias: [1|B, N, T, S], added to the scaled logits.
    scale: Multiplies the logits q.k.
    is_causal: Also apply a causal mask (jax's: query i sees keys <= i,
      counted from the first key, so only right for T == S).
    implementation: 'cudnn', 'xla' or None (`default_implementation`).

  Returns:
    The context, [B, T, N, H].
  """
  impl = implementation or default_implementation(query.dtype)
  if bias is not None:
    bias = bias.astype(query.dtype)
  return jax.nn.dot_product_attention(
      query, key.astype(query.dtype), value.astype(query.dtype), bias=bias,
      mask=allowed, scale=scale, is_causal=is_causal, implementation=impl)


def _square_causal(is_causal: bool, query: JTensor, key: JTensor) -> bool:
  """`is_causal` where the queries are the keys' positions (T == S).

  A decoding step's query is the latest position of a longer cache, and the
  kernel's causal mask (counted from the first key) would hide all but the
  first key from it; the mask passed in, applied in any case, holds there.
  """
  return is_causal and query.shape[1] == key.shape[1]


def _allowed(atten_mask: JTensor) -> JTensor:
  """Additive mask (0 / large negative) -> boolean, True where allowed."""
  cutoff = py_utils.get_large_negative_number(jnp.float32) * 0.5
  return atten_mask >= cutoff


class GpuCudnnFusedDotProductAttention(attentions.DotProductAttention):
  """`DotProductAttention` with a fused (cuDNN on GPU) attention core.

  Attributes:
    is_causal: Also let the kernel apply a causal mask, skipping the blocks
      above the diagonal (the mask passed in is applied in any case; not in
      decoding steps).
  """

  is_causal: bool = False

  def _fusable(self, dropout: bool) -> bool:
    return not (
        (self.atten_logit_cap and self.atten_logit_cap > 0)
        or self.attention_extra_logit is not None
        or self.zero_fully_masked
        or (dropout and self.atten_dropout_prob > 0 and not self.do_eval))

  def _attend_scaled(self, query, key, value, atten_mask, relative_bias,
                     dropout):
    if not self._fusable(dropout):
      return super()._attend_scaled(query, key, value, atten_mask,
                                    relative_bias, dropout)
    scale = query.shape[-1]**-0.5 if self.scale_logits_by_head_dims else 1.0
    if relative_bias is not None:
      relative_bias = relative_bias * scale  # The plain layer scales it too.
    encoded = fused_dot_product_attention(
        query, key, value, _allowed(atten_mask), bias=relative_bias,
        scale=scale, is_causal=_square_causal(self.is_causal, query, key))
    return self._shard_blnh(encoded), None


class GpuTritonFusedDotProductAttention(GpuCudnnFusedDotProductAttention):
  """Pax 1.4's name for the fused attention (here through cuDNN/XLA).

  Attributes:
    use_flash_decoding: Accepted for compatibility; decoding steps use the
      same fused call.
    flash_decoding_k_splits: Accepted for compatibility (unused).
  """

  use_flash_decoding: bool = False
  flash_decoding_k_splits: int = 16


class GpuTritonFusedMultiQueryDotProductAttention(
    multi_query_attention.MultiQueryDotProductAttention):
  """`MultiQueryDotProductAttention` with a fused attention core.

  Attributes:
    use_flash_decoding: Accepted for compatibility (unused).
    flash_decoding_k_splits: Accepted for compatibility (unused).
  """

  use_flash_decoding: bool = False
  flash_decoding_k_splits: int = 16

  def _attention(self, query, key, value, atten_mask, relative_bias,
                 dropout):
    if ((self.atten_logit_cap and self.atten_logit_cap > 0)
        or self.attention_extra_logit is not None
        or (dropout and self.atten_dropout_prob > 0 and not self.do_eval)):
      return super()._attention(query, key, value, atten_mask,
                                relative_bias, dropout)
    encoded = fused_dot_product_attention(
        self._scale_query(query), key, value, _allowed(atten_mask),
        bias=relative_bias)
    return encoded, None


class GpuCudnnFusedGroupedQueryAttention(
    grouped_query_attention.GroupedQueryAttention):
  """`GroupedQueryAttention` with a fused attention core.

  Attributes:
    is_causal: Also let the kernel apply a causal mask, skipping the blocks
      above the diagonal (the mask passed in is applied in any case; not in
      decoding steps).
  """

  is_causal: bool = False

  def _attend(self, q, k, v, atten_mask):
    if (self.atten_logit_cap > 0
        or (self.atten_dropout_prob > 0 and not self.do_eval)):
      return super()._attend(q, k, v, atten_mask)
    scale = self.dim_per_head**-0.5 / self.atten_temp
    allowed = jnp.logical_not(atten_mask.astype(bool))
    encoded = fused_dot_product_attention(
        q * jnp.asarray(scale, q.dtype), k, v, allowed,
        is_causal=_square_causal(self.is_causal, q, k))
    btnh = self.activation_split_dims_mapping.btnh
    return self._shard(encoded, btnh), None


class GpuTritonFusedGroupedQueryAttention(GpuCudnnFusedGroupedQueryAttention):
  """Pax 1.4's name for the fused grouped-query attention.

  Attributes:
    use_flash_decoding: Accepted for compatibility (unused).
    flash_decoding_k_splits: Accepted for compatibility (unused).
  """

  use_flash_decoding: bool = False
  flash_decoding_k_splits: int = 16


class GpuTritonFusedLayerNorm(normalizations.LayerNorm):
  """Pax 1.4's name for a fused LayerNorm: XLA fuses the plain one."""

