"""Pruning masks: N:M structured, unstructured and channel-wise.

Public (Pax's names): `apply_sparsity`, `get_sparsity_mask` (N:M, with
`order`, `block_size` and `offset`), `get_sparsity_mask_unstructured`,
`get_sparsity_mask_channelwise`, `get_sparsity_mask_optimized_for_offset`,
`prune_inputs_n_m`, `compute_score`, `score_weight_magnitude`,
`score_activation_weighted`, `dtype_bitwidth`, `is_optimized_offset`.

A mask is True where a value is kept. N:M keeps the N largest magnitudes of
every group of M values along the last dim (order 'R') or down the columns
(order 'C'); with `offset` > 0 the M values of a group are `offset` apart.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from praxis.layers.quantization.sparsity import sparsity_hparams

SPARSITY_MASK_SUFFIX = '_sparsity_mask'
SPARSITY_METADATA_SUFFIX = '_sparsity_metadata'
SPARSITY_NZ_SUFFIX = '_sparsity_nz'
SPARSITY_CONFIG_SUFFIX = '_sparsity_config'
SparsityScore = sparsity_hparams.SparsityScore
_ConfigError = sparsity_hparams.SparsityConfigError


def _swap_last(x: jnp.ndarray) -> jnp.ndarray:
  return jnp.swapaxes(x, -1, -2)


def apply_sparsity(
    inputs: jnp.ndarray,
    mask: jnp.ndarray,
    channelwise_dim: int | None = None,
    pruned_value: jnp.ndarray | None = None,
) -> jnp.ndarray:
  """`inputs` where `mask`, else 0 (or `pruned_value`); with
  `channelwise_dim`, the kept channels only (the tensor shrinks)."""
  if channelwise_dim is not None:
    axis = channelwise_dim % inputs.ndim
    others = tuple(i for i in range(inputs.ndim) if i != axis)
    kept = jnp.any(mask, axis=others).reshape(-1)
    return jnp.take(inputs, jnp.nonzero(kept)[0], axis=channelwise_dim)
  fill = 0 if pruned_value is None else pruned_value
  return jnp.where(mask, inputs, fill * jnp.ones(inputs.shape, inputs.dtype))


def _check_n_m(length: int, n: int, m: int, order: str, offset: int) -> None:
  if n > m:
    raise _ConfigError(
        f'N must be lower than M for N:M ({n}:{m}) sparsity.')
  if order not in ('C', 'R'):
    raise ValueError(f'Index order {order} not supported.')
  if offset < 0:
    raise ValueError(f'Offset value must be positive. You provided {offset}.')
  if m <= 0 or length % m:
    raise ValueError(
        f'inputs size must be divisible by m, provided {length} and {m} '
        '(the M of WeightSparsityParams.prune_rate=(N, M)).')


def _block_scores(inputs, block_size: int, order: str):
  """Sum of |x| over blocks of `block_size` along the last dim ('R') or
  down the columns ('C')."""
  x = inputs if order == 'R' else _swap_last(inputs)
  scores = jnp.sum(jnp.abs(x.reshape(-1, block_size)), axis=-1)
  scores = scores.reshape(x.shape[:-1] + (x.shape[-1] // block_size,))
  return scores if order == 'R' else _swap_last(scores)


def _top_n_of_groups(groups: jnp.ndarray, n: int, m: int) -> jnp.ndarray:
  """[..., M] groups -> mask of each group's N largest."""
  _, top = jax.lax.top_k(groups, k=n)
  return jnp.any(jax.nn.one_hot(top, m, dtype=jnp.bool_), axis=-2)


def get_sparsity_mask(
    inputs: jnp.ndarray,
    n_sparsity: int = 0,
    m_sparsity: int = 0,
    order: str = 'R',
    block_size: int = 0,
    offset: int = 0,
) -> jnp.ndarray:
  """The N:M mask of `inputs` (True: kept).

  Args:
    inputs: The array (its magnitudes are ranked).
    n_sparsity: N, values kept per group.
    m_sparsity: M, values per group.
    order: 'R' (groups along the last dim) or 'C' (down the columns).
    block_size: Rank blocks of this many values (by their sum of |x|)
      instead of single values (0 or 1: off).
    offset: Distance between the members of a group (0: adjacent).

  Returns:
    A boolean mask shaped like `inputs`.
  """
  n, m = n_sparsity, m_sparsity
  _check_n_m(inputs.size, n, m, order, offset)
  if block_size > 1:
    inputs = _block_scores(inputs, block_size, order)
  length = inputs.size
  if offset > 0 and length % (offset * m):
    raise ValueError(
        'When offset > 0, we only support an array size (length) equal to '
        f'(offset * m_sparsity). Provided offset = {offset}, '
        f'm_sparsity = {m}, length = {length}.')
  x = jnp.abs(inputs)
  if order == 'C':
    x = _swap_last(x)
  shape = x.shape
  step = max(offset, 1)
  if shape[-1] % (m * step) == 0:
    lead = shape[:-1]
    per_row = shape[-1] // m
  else:  # Groups run across rows: flatten.
    lead, per_row = (), length // m
  if offset > 0:
    # [..., per_row / offset, M, offset] -> groups of M strided by offset.
    x = _swap_last(x.reshape(lead + (per_row // offset, m, offset)))
    mask = _top_n_of_groups(x, n, m)
    mask = _swap_last(mask)
  else:
    mask = _top_n_of_groups(x.reshape(lead + (per_row, m)), n, m)
  mask = mask.reshape(shape)
  if order == 'C':
    mask = _swap_last(mask)
  if block_size > 0:
    mask = jnp.repeat(mask, block_size, axis=-1 if order == 'R' else -2)
  return mask


@jax.jit
def _topk_mask(scores: jnp.ndarray, prune_rate: float) -> jnp.ndarray:
  """Keeps the round((1 - rate) * size) highest scores (>= 1); among equal
  scores at the threshold, the first ones."""
  flat = scores.reshape(-1)
  keep = jnp.maximum(1, jnp.round(flat.size * (1 - prune_rate)).astype(int))
  last = jnp.argsort(-flat)[keep - 1]
  threshold = flat[last]
  by_value = scores >= threshold
  by_index = (jnp.arange(flat.size) <= last) | (flat != threshold)
  return by_value * by_index.reshape(scores.shape)


@functools.partial(jax.jit, static_argnames=['channel_dim'])
def get_sparsity_mask_channelwise(
    inputs: jnp.ndarray, prune_rate: float, channel_dim: int = -1
) -> jnp.ndarray:
  """Mask keeping the channels (along `channel_dim`) of highest sums."""
  axis = channel_dim % inputs.ndim
  others = tuple(i for i in range(inputs.ndim) if i != axis)
  scores = jnp.sum(inputs, axis=others, keepdims=True)
  return (_topk_mask(scores, prune_rate) * jnp.ones_like(inputs)).astype(
      jnp.bool_)


def get_sparsity_mask_unstructured(
    inputs: jnp.ndarray,
    mask: jnp.ndarray | None,
    prune_rate: jnp.ndarray | float,
) -> jnp.ndarray:
  """Mask of the values above the `prune_rate` percentile (0-100) of |x|;
  already pruned values (`mask`) stay pruned."""
  if mask is not None:
    inputs = apply_sparsity(inputs, mask)
  magnitude = jnp.abs(inputs)
  return magnitude > jnp.percentile(magnitude, prune_rate)


def prune_inputs_n_m(
    inputs: jnp.ndarray,
    *,
    n: int,
    m: int,
    order: sparsity_hparams.SparsityOrder | str = (
        sparsity_hparams.SparsityOrder.C),
    offset: int = 0,
) -> jnp.ndarray:
  """`inputs` with all but N of every M values (see get_sparsity_mask) 0."""
  mask = get_sparsity_mask(inputs, n, m, order=order, offset=offset)
  return jnp.where(mask, inputs, jnp.zeros(inputs.shape, inputs.dtype))


def score_weight_magnitude(weight: jnp.ndarray) -> jnp.ndarray:
  """|weight|."""
  return jnp.abs(weight)


def score_activation_weighted(
    weight: jnp.ndarray, inputs: jnp.ndarray
) -> jnp.ndarray:
  """|weight| [C_in, C_out] times the summed |activation| of its input."""
  if not (weight.ndim == 2 and inputs.shape[-1] == weight.shape[0]):
    raise ValueError(
        'ACTIVATION_WEIGHTED score function only supports Linear layers for'
        ' now: a [C_in, C_out] weight and inputs [..., C_in]; got '
        f'{weight.shape} and {inputs.shape}.')
  return jnp.einsum('...j,jk->jk', jnp.abs(inputs), jnp.abs(weight))


def compute_score(
    weights: jnp.ndarray,
    score_func: SparsityScore = SparsityScore.MAGNITUDE,
    inputs: jnp.ndarray | None = None,
) -> jnp.ndarray:
  """The importance of each weight (higher: kept first)."""
  if score_func == SparsityScore.ACTIVATION_WEIGHTED:
    if inputs is None:
      raise ValueError('`inputs` must be given for `ACTIVATION_WEIGHTED`.')
    return score_activation_weighted(weights, inputs)
  if score_func == SparsityScore.MAGNITUDE:
    return score_weight_magnitude(weights)
  raise ValueError(f'Unknown sparsity score function {score_func!r}.')


_BITS = {'float32': 32, 'int32': 32, 'bfloat16': 16, 'int8': 8, 'int4': 4}


def dtype_bitwidth(dtype: jnp.dtype) -> int:
  """Bits of the dtypes sparse kernels handle."""
  name = jnp.dtype(dtype).name
  if name not in _BITS:
    raise ValueError(f'Unsupported dtype {dtype}')
  return _BITS[name]


def is_optimized_offset(
    order: str, offset: int, input_dtype: jnp.dtype = jnp.float32
) -> bool:
  """Whether `get_sparsity_mask_optimized_for_offset` handles `offset`."""
  if order == 'C':
    stride = 8 * (32 // dtype_bitwidth(input_dtype))
    return offset != 0 and offset % stride == 0
  if order == 'R':
    return offset != 0 and offset % 128 == 0
  return False


@functools.partial(jax.jit,
                   static_argnames=['n_sparsity', 'm_sparsity', 'order',
                                    'offset'])
def get_sparsity_mask_optimized_for_offset(
    inputs: jnp.ndarray,
    n_sparsity: int = 0,
    m_sparsity: int = 0,
    order: str = 'R',
    offset: int = 0,
) -> jnp.ndarray:
  """`get_sparsity_mask` of a 2D array with `offset` > 0, by slicing.

  Groups take M slices `offset` wide along dim 1 ('R') or 0 ('C'); in each,
  the N largest (ties: the first) are kept.
  """
  n, m = n_sparsity, m_sparsity
  _check_n_m(inputs.size, n, m, order, offset)
  if inputs.ndim != 2 or offset <= 0:
    raise ValueError('Needs a 2D input and offset > 0.')
  axis = 0 if order == 'C' else 1
  if inputs.shape[axis] % (m * offset):
    raise ValueError(
        f'Dim {axis} ({inputs.shape[axis]}) must divide by M * offset = '
        f'{m * offset}.')
  masks = []
  for group in jnp.split(jnp.abs(inputs), inputs.shape[axis] // (m * offset),
                         axis):
    slices = jnp.stack(jnp.split(group, m, axis))  # [M, ...]
    keep = jnp.zeros(slices.shape, jnp.bool_)
    remaining = slices
    for _ in range(n):
      best = jnp.argmax(remaining, axis=0)  # First of equal maxima.
      chosen = jax.nn.one_hot(best, m, axis=0, dtype=jnp.bool_)
      keep = keep | chosen
      remaining = jnp.where(chosen, -1, remaining)
    masks.extend(list(keep))
  return jnp.concatenate(masks, axis=axis)
