"""Fiddle tags of Praxis: named groups of config values set all at once.

Public names: BaseDType, ParamsDType, ActivationDType, WeightInit,
ParamsSplitDimsMapping, ActivationSplitDimsMapping, DropoutRate.

Example:

  cfg = pax_fiddle.Config(Layer, dtype=fiddle_tags.ParamsDType.new(jnp.float32))
  fdl.set_tagged(cfg, tag=fiddle_tags.BaseDType, value=jnp.bfloat16)
"""

import fiddle as fdl


class BaseDType(fdl.Tag):
  """A JAX dtype; its subclasses tag the dtype of parameters or activations."""


class ParamsDType(BaseDType):
  """The dtype of parameters."""


class ActivationDType(BaseDType):
  """The dtype of activations."""


class WeightInit(fdl.Tag):
  """A weight initialiser (a `base_layer.WeightInit`)."""


class ParamsSplitDimsMapping(fdl.Tag):
  """The sharding (split-dims mapping) of parameters."""


class ActivationSplitDimsMapping(fdl.Tag):
  """The sharding (split-dims mapping) of activations."""


class DropoutRate(fdl.Tag):
  """A dropout rate."""
