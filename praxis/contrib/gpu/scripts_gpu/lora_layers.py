"""LoRA (low-rank adaptation) versions of the projection layers.

Public: `LoraTheta`, `LoraThetaDescriptor`, `LoraLinear`,
`LoraAttentionProjection`, `LoraCombinedQKVProjection` (Pax's names and
variables). Each layer adds `lora_a` [in, rank] and `lora_b` [out, rank]
(zero-initialised, so a fresh adapter changes nothing) next to its weight
`w`; its `theta.w` reads `w + lora_a @ lora_b^T` (reshaped to `w`'s shape),
so the layer's own forward pass is unchanged. Train only the adapters by
setting the learner's `bprop_variable_inclusion=[r'^.*lora.*$']`
(`paxml.contrib.gpu.scripts_gpu.lora_utils.configure_lora` does it all):

  linear = pax_fiddle.Config(lora_layers.LoraLinear, name='ffn', rank=8)
  linear.copy_fields_from(original_linear_config)
"""

from __future__ import annotations

from typing import Any

from jax import numpy as jnp
from praxis import base_layer
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import linears

WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor


class LoraTheta(base_layer.Theta):
  """`theta` whose `w` includes the low-rank update `lora_a @ lora_b^T`."""

  @property
  def module(self) -> base_layer.BaseLayer:
    """The layer whose variables this reads."""
    return self._layer

  def _lora_initialized(self) -> bool:
    layer = self._layer
    return (layer.has_variable(base_layer.PARAMS, 'lora_a')
            and layer.has_variable(base_layer.PARAMS, 'lora_b'))

  def _lorafy_var(self, var: JTensor) -> JTensor:
    lora_a = super().__getattr__('lora_a')
    lora_b = super().__getattr__('lora_b')
    delta = jnp.einsum('...dr,...nr->...dn', lora_a, lora_b)
    return var + jnp.reshape(delta, var.shape).astype(var.dtype)

  def __getattr__(self, name: str) -> JTensor:
    var = super().__getattr__(name)
    if name == 'w' and self._lora_initialized():
      return self._lorafy_var(var)
    return var

  def __getitem__(self, name: str) -> JTensor:
    return self.__getattr__(name)


class LoraThetaDescriptor:
  """Makes `layer.theta` a `LoraTheta`."""

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    return self if obj is None else LoraTheta(obj)


def _check_rank(layer: base_layer.BaseLayer) -> None:
  if not isinstance(layer.rank, int) or layer.rank <= 0:
    raise ValueError(f'{type(layer).__name__}({layer.name!r}): rank must be a '
                     f'positive int, got {layer.rank!r}.')


def _create_adapters(layer: base_layer.BaseLayer, shape_a: list[int],
                     shape_b: list[int], init: WeightInit | None) -> None:
  """`lora_a` (drawn with `init`) and `lora_b` (zeros), replicated."""
  layer.create_variable('lora_a', WeightHParams(
      shape=shape_a, init=init, mesh_shape=layer.mesh_shape,
      tensor_split_dims_mapping=[None] * len(shape_a)))
  layer.create_variable('lora_b', WeightHParams(
      shape=shape_b, init=WeightInit.Constant(0.0),
      mesh_shape=layer.mesh_shape,
      tensor_split_dims_mapping=[None] * len(shape_b)))


def _w_init(layer: base_layer.BaseLayer) -> WeightInit | None:
  return layer._weight_hparams()['w'].init  # pylint: disable=protected-access


class LoraLinear(linears.Linear):
  """`Linear` with a LoRA update of `w` [input_dims, output_dims].

  Attributes:
    rank: The adapter rank r.
    lora_init: Initialiser of `lora_a` (None: the weight's).
  """

  rank: int = 0
  lora_init: WeightInit | None = None
  theta = LoraThetaDescriptor()

  def setup(self) -> None:
    _check_rank(self)
    super().setup()
    _create_adapters(self, [self.input_dims, self.rank],
                     [self.output_dims, self.rank],
                     self.lora_init or self.weight_init)


class LoraAttentionProjection(attentions.AttentionProjection):
  """`AttentionProjection` with a LoRA update of `w` [D, N, H].

  The update is [D, N * H] reshaped to `w`'s shape, as in Pax (so with
  `use_nhd_shape` it is reshaped to [N, H, D]).

  Attributes:
    rank: The adapter rank r.
    lora_init: Initialiser of `lora_a` (None: the weight's).
  """

  rank: int = 0
  lora_init: WeightInit | None = None
  theta = LoraThetaDescriptor()

  def setup(self) -> None:
    _check_rank(self)
    super().setup()
    _create_adapters(self, [self.input_dim, self.rank],
                     [self.dim_per_head * self.num_heads, self.rank],
                     self.lora_init or _w_init(self))


class LoraCombinedQKVProjection(attentions.CombinedQKVProjectionLayer):
  """`CombinedQKVProjectionLayer` with LoRA updates of `w` [3, D, N, H].

  Attributes:
    rank: The adapter rank r.
    lora_init: Initialiser of `lora_a` (None: the weight's).
  """

  rank: int = 0
  lora_init: WeightInit | None = None
  theta = LoraThetaDescriptor()

  def setup(self) -> None:
    _check_rank(self)
    super().setup()
    _create_adapters(self, [3, self.input_dim, self.rank],
                     [3, self.dim_per_head * self.num_heads, self.rank],
                     self.lora_init or _w_init(self))
