"""Per-example squared gradient norms from inputs and output gradients."""

import jax.numpy as jnp
from praxis import pytypes

JTensor = pytypes.JTensor


def weight_per_example(scales: JTensor, g: JTensor) -> JTensor:
  """g[b, ...] * scales[b]."""
  return g * scales.reshape((-1,) + (1,) * (g.ndim - 1)).astype(g.dtype)


def projection_sq_norms(x: JTensor, g: JTensor) -> JTensor:
  """||x_b^T g_b||_F^2 for each b, for the projection y = x @ w.

  The gradient of example b w.r.t. w is sum_t x[b, t]^T g[b, t]. Its squared
  Frobenius norm is computed without forming the [in, out] matrix when the
  Gram form sum_{t,s} <x_t, x_s><g_t, g_s> is cheaper (few positions).

  Args:
    x: [batch, ..., in] projection inputs.
    g: [batch, ..., out] output gradients.

  Returns:
    [batch] squared norms.
  """
  batch = x.shape[0]
  if x.ndim == 2:
    return jnp.sum(x * x, axis=1) * jnp.sum(g * g, axis=1)
  xs = x.reshape(batch, -1, x.shape[-1])
  gs = g.reshape(batch, -1, g.shape[-1])
  positions = xs.shape[1]
  if positions * positions <= x.shape[-1] * g.shape[-1]:
    xx = jnp.einsum('bti,bsi->bts', xs, xs)
    gg = jnp.einsum('bto,bso->bts', gs, gs)
    return jnp.sum(xx * gg, axis=(1, 2))
  per_example = jnp.einsum('bti,bto->bio', xs, gs)
  return jnp.sum(per_example * per_example, axis=(1, 2))


def lookup_sq_norms(ids: JTensor, g: JTensor, num_rows: int) -> JTensor:
  """Squared norms of each example's gradient of a table lookup table[ids].

  Positions of one example that look up the same row add up before the norm
  is taken: ||sum_t e_{id_t} g_t^T||^2 = sum_{t,s: id_t = id_s} <g_t, g_s>.
  Ids outside [0, num_rows) contribute nothing.

  Args:
    ids: [batch, ...] integer ids.
    g: [batch, ..., dims] gradients of the looked-up rows.
    num_rows: Rows of the table.

  Returns:
    [batch] squared norms.
  """
  batch = ids.shape[0]
  flat_ids = ids.reshape(batch, -1)
  gs = g.reshape(batch, flat_ids.shape[1], g.shape[-1])
  valid = (flat_ids >= 0) & (flat_ids < num_rows)
  gs = jnp.where(valid[..., None], gs, 0)
  same_row = flat_ids[:, :, None] == flat_ids[:, None, :]
  gg = jnp.einsum('btd,bsd->bts', gs, gs)
  return jnp.sum(jnp.where(same_row, gg, 0), axis=(1, 2))
