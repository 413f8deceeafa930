"""Cutting a sequence axis into fixed-size chunks, and back.

Public names: chunk, unchunk.
"""

import jax
from jax import numpy as jnp
from praxis import pytypes

JTensor = pytypes.JTensor


def chunk(x: JTensor, *, chunk_size: int, axis: int = 1) -> JTensor:
  """[..., L, ...] -> [ceil(L / C), ..., C, ...], zero-padding L to a multiple.

  Args:
    x: The tensor; `axis` is the one cut.
    chunk_size: C.
    axis: The axis of length L.

  Returns:
    The chunks, stacked on a new leading axis.
  """
  if chunk_size < 1:
    raise ValueError(f'chunk: chunk_size must be positive, got {chunk_size}.')
  axis = axis % x.ndim
  pad = -x.shape[axis] % chunk_size
  if pad:
    widths = [(0, pad if i == axis else 0) for i in range(x.ndim)]
    x = jnp.pad(x, widths)
  shape = x.shape[:axis] + (x.shape[axis] // chunk_size, chunk_size)
  x = jnp.reshape(x, shape + x.shape[axis + 1:])
  return jnp.moveaxis(x, axis, 0)


def unchunk(chunk_x: JTensor, axis: int = 1,
            seqlen: int | None = None) -> JTensor:
  """Inverse of `chunk`: [L / C, ..., C, ...] -> [..., L, ...].

  Args:
    chunk_x: Chunks as `chunk` returns them.
    axis: The axis (of the result) that was cut.
    seqlen: The original length, to drop the padding (None: keep it).

  Returns:
    The sequence.
  """
  x = jnp.moveaxis(chunk_x, 0, axis)
  x = jnp.reshape(x, x.shape[:axis] + (-1,) + x.shape[axis + 2:])
  if seqlen is not None and seqlen < x.shape[axis]:
    x = jax.lax.slice_in_dim(x, 0, seqlen, axis=axis)
  return x
