"""Quantized layers whose precision is searched (mixed-precision AutoML).

Public: `SearchableQuantizedLayer`, `SearchableLinear`,
`SearchableAttentionProjection`, `SearchableCombinedQKVProjectionLayer`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers.quantization import attentions
from praxis.layers.quantization import automl_select
from praxis.layers.quantization import linears
from praxis.layers.quantization import quantization_hparams
from praxis.layers.quantization import quantizer

QuantizationParams = quantization_hparams.QuantizationParams
template_field = pax_fiddle.template_field

_SUPPORTED_PRECISIONS = (2, 4, 8)


def _quantizer_options(
    precisions: Sequence[int], base: QuantizationParams
) -> tuple[list[Any], list[Any]]:
  """(activation quantizer configs, weight quantizer configs), one per
  precision."""
  if not precisions:
    raise AttributeError('Must specify at least 1 precisions.')
  acts, weights = [], []
  for precision in precisions:
    if precision not in _SUPPORTED_PRECISIONS:
      raise AttributeError(
          f'Precision {precision} is not supported (precisions must be in '
          f'{_SUPPORTED_PRECISIONS}).'
      )
    if base.act_params and base.act_params.precision:
      act = quantizer.create_tensor_quantizer(
          f'act_quantizer_int{precision}', base.act_params
      )
      act.precision = precision
      acts.append(act)
    weight = quantizer.create_tensor_quantizer(
        f'weight_quantizer_int{precision}', base.weight_params
    )
    weight.precision = precision
    weights.append(weight)
  return acts, weights


class SearchableQuantizedLayer(base_layer.BaseLayer):
  """Mixin: the tensor quantizers become `AutoMLSelect`s over `precisions`.

  Attributes:
    precisions: The candidate precisions (bits, among 2, 4, 8).
  """

  precisions: Sequence[int] = dataclasses.field(default_factory=list)

  def create_tensor_quantizers(self) -> None:
    acts, weights = _quantizer_options(self.precisions, self.quantization)
    if acts:
      self.create_child('act_quantizer', pax_fiddle.Config(
          automl_select.AutoMLSelect, search_options_tpl=acts))
    else:
      self.create_child('act_quantizer', quantizer.create_tensor_quantizer(
          'aqt_quantizer', self.quantization.act_params))
    self.create_child('weight_quantizer', pax_fiddle.Config(
        automl_select.AutoMLSelect, search_options_tpl=weights))


class SearchableLinear(SearchableQuantizedLayer, linears.Linear):
  """Quantized `Linear` with searchable precision."""


class SearchableAttentionProjection(
    SearchableQuantizedLayer, attentions.AttentionProjection
):
  """Quantized `AttentionProjection` with searchable precision."""


class SearchableCombinedQKVProjectionLayer(
    SearchableQuantizedLayer, attentions.CombinedQKVProjectionLayer
):
  """Quantized `CombinedQKVProjectionLayer` with searchable precision."""
