"""Layers for platform-aware AutoML search.

Public names: AutoMLSelect.

An AutoMLSelect holds several interchangeable branches and runs the one
named by its non-trainable `decision` variable (an AutoML controller sets
it). No pyglove is needed here; the search itself lives in paxml.
"""

from typing import Any, Sequence

from flax import linen as nn
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = pax_fiddle.template_field


class AutoMLSelect(base_layer.BaseLayer):
  """Runs the branch `decision` (a uint8 non-trainable variable) picks.

  Example:

    p = pax_fiddle.Config(searchable.AutoMLSelect, search_options_tpl=[
        pax_fiddle.Config(linears.Linear, input_dims=4, output_dims=4),
        pax_fiddle.Config(linears.Linear, input_dims=4, output_dims=4)])

  Attributes:
    search_options_tpl: The branches (children `search_options_<i>`); they
      take and return the same shapes.
  """

  search_options_tpl: Sequence[LayerTpl] | None = template_field(None)

  def setup(self) -> None:
    if not self.search_options_tpl:
      raise AttributeError(f'AutoMLSelect ({self.name}): search_options_tpl '
                           'must list at least one search option.')
    self.create_children('search_options', self.search_options_tpl)
    self.create_variable(
        'decision',
        WeightHParams(shape=[], init=WeightInit.Constant(0), dtype=jnp.uint8,
                      mesh_shape=self.mesh_shape),
        trainable=False)

  def __call__(self, x: JTensor, *args: Any, **kwargs: Any) -> NestedJTensor:
    """The chosen branch applied to x (extra arguments are ignored)."""
    del args, kwargs

    def branch(i: int):
      return lambda module, inputs: module.search_options[i](inputs)

    branches = [branch(i) for i in range(len(self.search_options))]
    if self.is_mutable_collection(base_layer.PARAMS):
      for fn in branches:  # Create every branch's variables.
        fn(self, x)
    return nn.switch(self.get_var('decision'), branches, self, x)
