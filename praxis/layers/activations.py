"""Activation layers.

Public names: BaseActivation, ReLU, SineReLU, ReLU6, SquaredReLU, CubedReLU,
LeakyReLU, ELU, Sigmoid, Tanh, GELU, SiLU, Swish, Softplus, Exp, Identity.

Each is a parameter-free layer; templates select one, e.g.
`activation_tpl = pax_fiddle.Config(activations.GELU, approximate=False)`,
or by name: `BaseActivation.get_subclass_by_name('cubed_relu')`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from praxis import base_layer
from praxis import pytypes

JTensor = pytypes.JTensor


class BaseActivation(base_layer.BaseLayer):
  """Base class of the activation layers: `__call__(inputs) -> outputs`."""

  def __call__(self, inputs: JTensor) -> JTensor:
    raise NotImplementedError(f'{type(self).__name__} must define __call__.')

  @classmethod
  def get_subclass_by_name(cls, name: str) -> type[BaseActivation]:
    """The direct subclass named `name`, ignoring case and underscores.

    Args:
      name: E.g. 'swish' or 'cubed_relu'.

    Returns:
      The subclass.

    Raises:
      KeyError: If no subclass, or more than one, has that name.
    """
    wanted = name.replace('_', '').lower()
    found = [c for c in cls.__subclasses__() if c.__name__.lower() == wanted]
    if len(found) > 1:
      names = [f'{c.__module__}:{c.__qualname__}' for c in found]
      raise KeyError(f'Found >1 activation layers named {name}: {names}')
    if not found:
      known = sorted(c.__name__ for c in cls.__subclasses__())
      raise KeyError(
          f'Cannot find an activation layer named {name!r}; known: {known}.'
      )
    return found[0]


class ReLU(BaseActivation):
  """max(x, 0)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.relu(inputs)


class SineReLU(BaseActivation):
  """sin(max(x, 0))."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.sin(jax.nn.relu(inputs))


class ReLU6(BaseActivation):
  """min(max(x, 0), 6)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.relu6(inputs)


class SquaredReLU(BaseActivation):
  """max(x, 0) ** 2."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.square(jax.nn.relu(inputs))


class CubedReLU(BaseActivation):
  """max(x, 0) ** 3."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.relu(inputs) ** 3


class LeakyReLU(BaseActivation):
  """x for x >= 0, negative_slope * x otherwise.

  Attributes:
    negative_slope: Slope for negative inputs.
  """

  negative_slope: float = 0.01

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.leaky_relu(inputs, negative_slope=self.negative_slope)


class ELU(BaseActivation):
  """x for x > 0, exp(x) - 1 otherwise."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.elu(inputs)


class Sigmoid(BaseActivation):
  """1 / (1 + exp(-x))."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.sigmoid(inputs)


class Tanh(BaseActivation):
  """tanh(x)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.tanh(inputs)


class GELU(BaseActivation):
  """Gaussian error linear unit.

  Attributes:
    approximate: Use the tanh approximation (True) or the exact erf form.
  """

  approximate: bool = True

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.gelu(inputs, approximate=self.approximate)


class SiLU(BaseActivation):
  """x * sigmoid(x)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.silu(inputs)


class Swish(BaseActivation):
  """x * sigmoid(x) (the same function as SiLU)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.swish(inputs)


class Softplus(BaseActivation):
  """log(1 + exp(x))."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jax.nn.softplus(inputs)


class Exp(BaseActivation):
  """exp(x)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return jnp.exp(inputs)


class Identity(BaseActivation):
  """x (no non-linearity)."""

  def __call__(self, inputs: JTensor) -> JTensor:
    return inputs
