"""Rematerialization (gradient checkpoint) policies for `jax.checkpoint`.

Public names: AutodiffCheckpointType, custom_policy.

Layers name the activations worth keeping with
`jax.ad_checkpoint.checkpoint_name` ('query_proj', 'context', 'out_proj',
'ffn1', ...); a policy chooses which of them the backward pass may reuse
instead of recomputing:

  policy = checkpoint_policy.custom_policy(
      checkpoint_policy.AutodiffCheckpointType.SAVE_CONTEXT_AND_OUT_PROJ)
  f = jax.checkpoint(f, policy=policy)
"""

from __future__ import annotations

from collections.abc import Callable
import enum
from typing import Any

import jax


@enum.unique
class AutodiffCheckpointType(str, enum.Enum):
  """Which residuals the backward pass keeps rather than recomputes."""

  SAVE_NOTHING = 'save_nothing'
  SAVE_UNET_ALL_CONV = 'save_unet_all_conv'
  SAVE_UNET_CONV = 'save_unet_conv'
  SAVE_EVERYTHING = 'save_everything'
  SAVE_QKV_OUT_PROJ = 'save_qkv_out_proj'
  SAVE_OUT_PROJ = 'save_out_proj'
  SAVE_CONTEXT = 'save_context'
  SAVE_CONTEXT_AND_OUT_PROJ = 'save_encoded_and_out_proj'
  SAVE_DOT_ONLY = 'save_dot_only'
  OFFLOAD_DOT_WITH_NO_BATCH_DIM = 'offload_dot_with_no_batch_dims'
  SAVE_DOT_WITH_NO_BATCH_DIM = 'save_dot_with_no_batch_dims'
  SAVE_DOT_FOR_MLPERF_200B = 'save_dot_for_mlperf_200b'
  SAVE_ITERATION_INPUT = 'save_iteration_input'
  SAVE_TRANSFORMER_LAYER_OUTPUT = 'save_transformer_layer_output'
  SAVE_QUANTIZED = 'save_quantized'
  SAVE_QKV_OUT_PROJ_SEPARATE = 'save_qkv_out_proj_separate'
  SAVE_DOT_EXCEPT_LOGITS_FFN1 = 'save_dot_except_logits_ffn1'
  SAVE_DOT_EXCEPT_LOGITS = 'save_dot_except_logits'


_T = AutodiffCheckpointType
_ATTENTION_DOTS = (
    'combined_qkv_proj',
    'query_proj',
    'value_proj',
    'key_proj',
    'context',
    'out_proj',
)
# Policies that keep only the activations named so (`checkpoint_name`).
_SAVED_NAMES = {
    _T.SAVE_QKV_OUT_PROJ: ('combined_qkv_proj', 'out_proj'),
    _T.SAVE_QKV_OUT_PROJ_SEPARATE: (
        'query_proj',
        'value_proj',
        'key_proj',
        'out_proj',
    ),
    _T.SAVE_CONTEXT: ('context',),
    _T.SAVE_OUT_PROJ: ('out_proj',),
    _T.SAVE_CONTEXT_AND_OUT_PROJ: ('context', 'out_proj'),
    _T.SAVE_DOT_FOR_MLPERF_200B: _ATTENTION_DOTS,
    _T.SAVE_QUANTIZED: (
        'context',
        'out_proj',
        'combined_qkv_proj',
        'qlhs',
        'qrhs',
        'lhs_scale',
        'rhs_scale',
    ),
    _T.SAVE_ITERATION_INPUT: ('iteration_input',),
    _T.SAVE_TRANSFORMER_LAYER_OUTPUT: ('transformer_layer_out',),
    _T.SAVE_DOT_EXCEPT_LOGITS_FFN1: _ATTENTION_DOTS + ('ffn2',),
    _T.SAVE_DOT_EXCEPT_LOGITS: _ATTENTION_DOTS + ('ffn1', 'ffn2'),
    _T.SAVE_UNET_CONV: ('conv_out',),
    _T.SAVE_UNET_ALL_CONV: ('conv_0', 'conv_1', 'conv_out'),
}


def custom_policy(
    checkpoint_policy: AutodiffCheckpointType | str,
) -> Callable[..., Any]:
  """The `jax.checkpoint` policy of `checkpoint_policy`.

  Args:
    checkpoint_policy: An `AutodiffCheckpointType` (or its string value).

  Returns:
    A policy from `jax.checkpoint_policies`.

  Raises:
    ValueError: for an unknown policy.
  """
  try:
    kind = AutodiffCheckpointType(checkpoint_policy)
  except ValueError:
    known = ', '.join(t.name for t in AutodiffCheckpointType)
    raise ValueError(
        f'Unknown checkpoint_policy {checkpoint_policy!r}; expected an '
        f'AutodiffCheckpointType: {known}.'
    ) from None
  policies = jax.checkpoint_policies
  if kind in _SAVED_NAMES:
    return policies.save_only_these_names(*_SAVED_NAMES[kind])
  if kind == _T.SAVE_EVERYTHING:
    return policies.everything_saveable
  if kind == _T.SAVE_DOT_ONLY:
    return policies.checkpoint_dots
  if kind == _T.SAVE_DOT_WITH_NO_BATCH_DIM:
    return policies.checkpoint_dots_with_no_batch_dims
  if kind == _T.OFFLOAD_DOT_WITH_NO_BATCH_DIM:
    return policies.offload_dot_with_no_batch_dims('device', 'pinned_host')
  return policies.nothing_saveable
