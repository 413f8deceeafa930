"""`SparsityBaseLayer`: the sparsity hooks of quantized layers.

Public: `SparsityBaseLayer` (field `sparsity`, `create_sparsity_variables`,
`sparsifiy`). Layers without `sparsity` are unchanged by these hooks.
"""

from __future__ import annotations

from typing import Any, Sequence

from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor


class SparsityBaseLayer(base_layer.BaseLayer):
  """Adds weight sparsity (pruning masks) to a layer.

  Attributes:
    sparsity: The layer's sparsity (a `SparsityHParams`); None: dense.
  """

  sparsity: Any | None = None

  def _check_sparsity_supported(self) -> None:
    if self.sparsity is not None:
      raise NotImplementedError(
          f'{type(self).__name__}.sparsity is set, but sparse training is '
          'not available in this release; set sparsity=None.'
      )

  def create_sparsity_variables(
      self,
      name: str,
      weight_hparams: base_layer.WeightHParams,
      scale_shape: Sequence[int] | None = None,
  ) -> None:
    """Creates the mask variables of weight `name` (none when dense)."""
    del name, weight_hparams, scale_shape
    self._check_sparsity_supported()

  def sparsifiy(
      self,
      weight: JTensor,
      name: str,
      inputs: JTensor | None = None,
      layer_idx: int | None = None,
  ) -> JTensor:
    """`weight` with its mask applied (unchanged when dense)."""
    del name, inputs, layer_idx
    self._check_sparsity_supported()
    return weight
