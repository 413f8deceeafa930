"""The ghost-norm protocol: parameters that carry per-example side values.

DP-SGD clips each example's gradient before averaging. Materialising one
gradient per example costs batch x parameters of memory; the ghost-norm trick
gets each example's gradient norm from the quantities that ordinary
back-propagation already has (a layer's input and its output gradient).

A layer takes part through a `jax.custom_vjp` rule, and the values cross the
custom-vjp boundary inside `ParamWithAux`:

* forward: a parameter may arrive as `ParamWithAux(param, aux)`, where `aux`
  is a [batch] vector of per-example weights (ones in the first pass of the
  two-pass algorithm, the clipping factors in the second);
* backward: the rule returns `ParamWithAux(grad, sq_norms)`, where `grad` is
  the gradient of the per-example-weighted loss and `sq_norms` [batch] the
  squared norms of each example's (unweighted-by-the-mean) gradient.

A parameter that arrives as a plain array means "no ghost norm here": the rule
then back-propagates as usual. Input gradients are never reweighted; each
layer weights only its own parameters' gradients.

Public names: ParamWithAux, get_param, get_aux.
"""

from __future__ import annotations

from flax import struct
import jax
from praxis import pytypes

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor


@struct.dataclass
class ParamWithAux:
  """A parameter (or its gradient) paired with a [batch] side vector.

  Attributes:
    param: The parameter, or in the backward pass its gradient.
    aux: Forward: per-example loss weights. Backward: per-example squared
      gradient norms. None: no per-example information.
  """

  param: JTensor
  aux: JTensor | None

  @property
  def dtype(self):
    return self.param.dtype

  @property
  def shape(self):
    return self.param.shape

  def astype(self, dtype) -> ParamWithAux:
    aux = None if self.aux is None else self.aux.astype(dtype)
    return self.replace(param=self.param.astype(dtype), aux=aux)

  def transpose(self) -> ParamWithAux:
    return self.replace(param=self.param.transpose())


def _is_wrapped(x) -> bool:
  return isinstance(x, ParamWithAux)


def get_param(params):
  """`params` with every `ParamWithAux` replaced by its `param`."""
  return jax.tree_util.tree_map(
      lambda x: x.param if _is_wrapped(x) else x, params, is_leaf=_is_wrapped
  )


def get_aux(params) -> JTensor | None:
  """The `aux` of the first leaf of `params` (None for a plain array)."""
  leaves = jax.tree_util.tree_leaves(params, is_leaf=_is_wrapped)
  if not leaves or not _is_wrapped(leaves[0]):
    return None
  return leaves[0].aux
