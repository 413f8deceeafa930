"""Switching an experiment's transformer to LoRA fine-tuning.

Public: `LORA_VARIABLES` (the regex of the adapter variables),
`configure_lora` (a config edit) and `LoRAMixin` (Pax's experiment mixin,
with `USE_LORA`, `LORA_RANK`, `LORA_TARGET_LAYERS`). `configure_lora`
swaps the transformer's feed-forward `linear_tpl` ('mlp'), attention
`proj_tpl` and `combined_qkv_proj_tpl` ('attention') for their LoRA
versions, keeping every field, and sets the learner's
`bprop_variable_inclusion` to the adapters, so the base weights stay frozen:

  task_p = configure_lora(MyExperiment().task(), rank=8, target_layers='all')

Restoring base weights from a checkpoint without adapters needs the new
variables ignored: pass `LORA_VARIABLES` in the experiment's
init-from-checkpoint ignore rules (the mixin sets `CHECKPOINT_IGNORE_RULES`
or `INIT_IGNORE_RULES` when the experiment has them).
"""

from __future__ import annotations

from typing import Any

import fiddle as fdl
from praxis import pax_fiddle
from praxis.contrib.gpu.scripts_gpu import lora_layers
from praxis.layers import transformers

LORA_VARIABLES = r'^.*lora.*$'
TARGET_LAYERS = ('all', 'attention', 'mlp')


def _transformer_layer(task_p: Any) -> Any:
  """The transformer-layer template of `task_p.model.lm_tpl`."""
  try:
    stacked = task_p.model.lm_tpl.stacked_transformer_tpl
  except AttributeError as e:
    raise ValueError(
        'configure_lora: task_p.model.lm_tpl.stacked_transformer_tpl is '
        f'needed (a language model), got model {task_p.model}.') from e
  if issubclass(fdl.get_callable(stacked),
                transformers.StackedTransformerRepeated):
    stacked = stacked.block
  return stacked.transformer_layer_params_tpl


def _swap(template: Any, lora_cls: type[Any], name: str, rank: int) -> Any:
  new = pax_fiddle.Config(lora_cls, name=name, rank=rank)
  new.copy_fields_from(template)
  return new


def configure_lora(task_p: Any, rank: int = 8,
                   target_layers: str = 'all') -> Any:
  """Turns `task_p`'s transformer into LoRA layers; trains only adapters.

  Args:
    task_p: A `pax_fiddle.Config` of a SingleTask with an LM model.
    rank: The adapter rank.
    target_layers: 'all', 'attention' or 'mlp'.

  Returns:
    `task_p`, edited in place.
  """
  if target_layers not in TARGET_LAYERS:
    raise ValueError(f'configure_lora: target_layers must be one of '
                     f'{TARGET_LAYERS}, got {target_layers!r}.')
  if not isinstance(rank, int) or rank <= 0:
    raise ValueError(f'configure_lora: rank must be a positive int, got '
                     f'{rank!r}.')
  layer_p = _transformer_layer(task_p)
  if target_layers in ('all', 'mlp'):
    ff = layer_p.tr_fflayer_tpl.fflayer_tpl
    ff.linear_tpl = _swap(ff.linear_tpl, lora_layers.LoraLinear,
                          'lora_linear', rank)
  if target_layers in ('all', 'attention'):
    atten = layer_p.tr_atten_tpl
    if hasattr(atten, 'combined_qkv_proj_tpl'):
      atten.combined_qkv_proj_tpl = _swap(
          atten.combined_qkv_proj_tpl, lora_layers.LoraCombinedQKVProjection,
          'lora_qkv_projection', rank)
    if not hasattr(atten, 'proj_tpl'):
      raise ValueError(
          f'configure_lora: the attention {fdl.get_callable(atten).__name__} '
          'has no proj_tpl to put LoRA into; use target_layers=\'mlp\'.')
    atten.proj_tpl = _swap(atten.proj_tpl, lora_layers.LoraAttentionProjection,
                           'lora_attention_projection', rank)
  learner = task_p.train.learner
  if learner.bprop_variable_exclusion:
    raise ValueError(
        'configure_lora: the learner sets bprop_variable_exclusion '
        f'{learner.bprop_variable_exclusion!r}; LoRA trains by '
        'bprop_variable_inclusion, which cannot be combined with it.')
  learner.bprop_variable_inclusion = [LORA_VARIABLES]
  return task_p


class LoRAMixin:
  """Pax's mixin: `configure_lora(task_p)` when `USE_LORA` is set.

  Attributes:
    USE_LORA: Whether `configure_lora` changes the task.
    LORA_RANK: The adapter rank.
    LORA_TARGET_LAYERS: 'all', 'attention' or 'mlp'.
  """

  USE_LORA = False
  LORA_RANK = 8
  LORA_TARGET_LAYERS = 'all'

  def configure_lora(self, task_p: Any) -> Any:
    """Applies `configure_lora` (module function) if `USE_LORA`."""
    if not self.USE_LORA:
      return task_p
    for rules in ('CHECKPOINT_IGNORE_RULES', 'INIT_IGNORE_RULES'):
      if hasattr(self, rules):
        setattr(self, rules, [LORA_VARIABLES])
    return configure_lora(task_p, self.LORA_RANK, self.LORA_TARGET_LAYERS)
