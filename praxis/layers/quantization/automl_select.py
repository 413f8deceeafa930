"""`AutoMLSelect`: switches between quantizers by an AutoML decision.

Public: `BaseAutoMLSelect`, `AutoMLSelect`.
"""

from __future__ import annotations

from typing import Sequence

from flax import linen as nn
import jax.numpy as jnp
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
template_field = pax_fiddle.template_field
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams


class BaseAutoMLSelect(base_layer.BaseLayer):
  """Branches (children `search_options_*`) picked by the `decision` variable.

  Attributes:
    search_options_tpl: One layer per branch (same input and output shapes).
  """

  search_options_tpl: Sequence[LayerTpl] | None = template_field(None)

  def setup(self) -> None:
    if not self.search_options_tpl:
      raise AttributeError(
          f'{type(self).__name__}.search_options_tpl: set at least one '
          'search option.'
      )
    self.create_children('search_options', self.search_options_tpl)
    self.create_variable('decision', WeightHParams(
        shape=[], init=WeightInit.Constant(0), dtype=jnp.uint8,
        mesh_shape=self.mesh_shape), trainable=False)
    self.create_variable('rl_variables', WeightHParams(
        shape=[len(self.search_options_tpl)], init=WeightInit.Constant(0),
        dtype=jnp.float32, mesh_shape=self.mesh_shape), trainable=False)


class AutoMLSelect(BaseAutoMLSelect):
  """Selects one of several `TensorQuantizer`s (`quantize` of the chosen)."""

  def __call__(
      self,
      x: JTensor,
      contract_dims: int | Sequence[int],
      squeeze_scale: bool = True,
      quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    def branch(i):
      def quantize(module, inputs):
        return module.search_options[i].quantize(
            inputs, contract_dims, squeeze_scale, quantized_dtype
        )
      return quantize

    branches = [branch(i) for i in range(len(self.search_options))]
    return nn.switch(self.get_var('decision'), branches, self, x)

  def quantize(
      self,
      x: JTensor,
      contract_dims: int | Sequence[int],
      squeeze_scale: bool = True,
      quantized_dtype: jnp.dtype | None = None,
  ) -> tuple[JTensor, JTensor, JTensor | None]:
    """Same as calling the layer."""
    return self(x, contract_dims, squeeze_scale, quantized_dtype)
