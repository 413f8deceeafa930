"""Summary statistics of a tensor over its valid (unpadded) entries.

Public names: compute_stats.
"""

from jax import numpy as jnp
from praxis import py_utils
from praxis import pytypes

JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap


def compute_stats(inputs: JTensor, padding: JTensor | None = None
                  ) -> NestedMap:
  """Mean, standard deviation and largest magnitude of the valid entries.

  Args:
    inputs: Any shape; computed in float32.
    padding: Same rank as `inputs` (broadcastable); 1 marks an entry to skip.

  Returns:
    NestedMap(mean_v, std_v, max_v) of scalars.
  """
  x = inputs.astype(jnp.float32)
  if padding is None:
    padding = jnp.zeros_like(x)
  if padding.ndim != x.ndim:
    raise ValueError(f'compute_stats: padding {padding.shape} must have the '
                     f'rank of inputs {x.shape}.')
  keep = 1.0 - padding.astype(jnp.float32)
  count = jnp.maximum(1.0, jnp.sum(jnp.broadcast_to(keep, x.shape)))
  mean = jnp.sum(x * keep) / count
  variance = jnp.sum(jnp.square((x - mean) * keep)) / count
  return NestedMap(mean_v=mean, std_v=jnp.sqrt(variance),
                   max_v=jnp.max(jnp.abs(x * keep)))
