"""Layers that log when their outputs overflow a range (float16 by default).

Public: `OverflowLimits`, `OverflowChecker`, `FeedForwardOverflowCheck`,
`AttentionProjectionOverflowCheck`, `CombinedQKVProjectionLayerOverflowCheck`,
`OneHeadedAttentionProjectionOverflowCheck` (needs
`praxis.layers.multi_query_attention`), `add_overflow_checks`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from absl import logging
import jax
from jax import numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import linears

instance_field = base_layer.instance_field
JTensor = pytypes.JTensor


@dataclasses.dataclass
class OverflowLimits:
  """The range outputs must stay in.

  Attributes:
    max_val: Largest allowed value.
    min_val: Smallest allowed value.
  """

  max_val: float = float(jnp.finfo(jnp.float16).max)
  min_val: float = float(jnp.finfo(jnp.float16).min)


def _log_overflow(class_name, name, max_val, min_val):
  # Formatted here (not lazily): callers match the record's `msg`, as Pax's.
  message = (f'Overflow in: {class_name}, {name}, max_val: {max_val}, '
             f'min_val: {min_val}')
  logging.warning(message)


class OverflowChecker(base_layer.BaseLayer):
  """Mixin: `check_overflow` logs (from inside jit) out-of-range outputs.

  Attributes:
    overflow_limits: The allowed range.
  """

  overflow_limits: OverflowLimits = instance_field(OverflowLimits)

  def check_overflow(self, inputs: JTensor, class_name: str, name: str) -> None:
    """Logs a warning when `inputs` leaves `overflow_limits`."""
    max_val, min_val = jnp.max(inputs), jnp.min(inputs)
    overflow = jnp.logical_or(max_val > self.overflow_limits.max_val,
                              min_val < self.overflow_limits.min_val)

    def report(hi, lo):
      jax.debug.callback(
          lambda a, b: _log_overflow(class_name, name, a, b), hi, lo
      )

    jax.lax.cond(overflow, report, lambda hi, lo: None, max_val, min_val)


class FeedForwardOverflowCheck(linears.FeedForward, OverflowChecker):
  """`FeedForward` with overflow checks."""

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    self.check_overflow(out, 'FeedForward', self.name)
    return out


class AttentionProjectionOverflowCheck(
    attentions.AttentionProjection, OverflowChecker
):
  """`AttentionProjection` with overflow checks."""

  def __call__(self, inputs: JTensor) -> JTensor:
    out = super().__call__(inputs)
    self.check_overflow(out, 'AttentionProjection', self.name)
    return out

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> JTensor:
    del time_step
    return self(inputs)


class CombinedQKVProjectionLayerOverflowCheck(
    attentions.CombinedQKVProjectionLayer, OverflowChecker
):
  """`CombinedQKVProjectionLayer` with overflow checks."""

  def __call__(self, inputs: JTensor) -> tuple[JTensor, JTensor, JTensor]:
    q, k, v = super().__call__(inputs)
    for label, t in (('q', q), ('k', k), ('v', v)):
      self.check_overflow(t, f'CombinedQKVProjection {label}', self.name)
    return q, k, v

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> Any:
    del time_step
    return self(inputs)


def _mqa():
  return importlib.import_module('praxis.layers.multi_query_attention')


def __getattr__(name: str) -> Any:
  # Built on first use: it subclasses a layer of multi_query_attention.
  if name != 'OneHeadedAttentionProjectionOverflowCheck':
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  global OneHeadedAttentionProjectionOverflowCheck

  class OneHeadedAttentionProjectionOverflowCheck(  # pylint: disable=redefined-outer-name
      _mqa().OneHeadedAttentionProjection, OverflowChecker
  ):
    """`OneHeadedAttentionProjection` with overflow checks."""

    def __call__(self, inputs: JTensor) -> JTensor:
      out = super().__call__(inputs)
      self.check_overflow(out, 'OneHeadedAttentionProjection', self.name)
      return out

  OneHeadedAttentionProjectionOverflowCheck.__module__ = __name__
  return OneHeadedAttentionProjectionOverflowCheck


def add_overflow_checks(
    task_p: Any,
    max_val: float = float(jnp.finfo(jnp.float16).max),
    min_val: float = float(jnp.finfo(jnp.float16).min),
) -> Any:
  """A copy of an LM task config whose FFN and attention layers check
  their outputs for overflow."""
  task_p = task_p.clone()
  layer_p = (task_p.model.lm_tpl.stacked_transformer_tpl.block
             .transformer_layer_params_tpl)
  limits = OverflowLimits(max_val=max_val, min_val=min_val)
  layer_p.tr_fflayer_tpl.fflayer_tpl = pax_fiddle.Config(
      FeedForwardOverflowCheck, overflow_limits=limits)
  atten_p = layer_p.tr_atten_tpl
  atten_p.proj_tpl = pax_fiddle.Config(
      AttentionProjectionOverflowCheck, overflow_limits=limits)
  atten_cls = atten_p.cls
  try:
    mqa = _mqa()
  except ImportError:
    mqa = None
  if mqa is not None and issubclass(
      atten_cls, mqa.MultiQueryDotProductAttention):
    atten_p.headless_proj_tpl = pax_fiddle.Config(
        __getattr__('OneHeadedAttentionProjectionOverflowCheck'),
        overflow_limits=limits)
  if issubclass(atten_cls, attentions.DotProductAttention):
    atten_p.combined_qkv_proj_tpl = pax_fiddle.Config(
        CombinedQKVProjectionLayerOverflowCheck, overflow_limits=limits)
  return task_p
