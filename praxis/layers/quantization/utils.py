"""Helpers of quantization: einsum parsing, int4 packing, dtypes, LoRA shapes.

Public: `INT4_TYPES`, `INT_TYPES`, `einsum_eqn_to_dimension_numbers`,
`pack_4bit`, `unpack_4bit`, `dtype_to_bits`, `bits_to_dtype`,
`get_smallest_matching_dtype`, `get_packed_shape`, `find_target_tpl`,
`get_lora_shape_and_eqn`, `get_left_weight_split_dims_mapping`,
`get_right_weight_split_dims_mapping`.
"""

from __future__ import annotations

import string
from typing import Any, Sequence

import fiddle as fdl
from jax import lax
import jax.numpy as jnp

JTensor = jnp.ndarray

INT4_TYPES = [jnp.int4, jnp.uint4]
INT_TYPES = [
    jnp.int4,
    jnp.uint4,
    jnp.int8,
    jnp.uint8,
    jnp.int16,
    jnp.uint16,
    jnp.int32,
    jnp.uint32,
]


def einsum_eqn_to_dimension_numbers(
    eqn: str,
) -> tuple[lax.DotDimensionNumbers, tuple[int, ...] | None]:
  """`lax.dot_general` dimension numbers of a two-operand einsum.

  Args:
    eqn: An einsum without '...', repeated names or one-sided contractions.

  Returns:
    (dimension numbers, the permutation that turns dot_general's output
    order into the einsum's, or None when they agree).
  """
  if '.' in eqn:
    raise NotImplementedError(
        f"Dynamic batch dims ('...') are not supported. Input eqn: {eqn}. "
    )
  inputs, out = eqn.split('->')
  if inputs.count(',') != 1:
    raise ValueError(
        f'einsum equation ({eqn}) expected two arguments, '
        f'but {inputs.count(",") + 1} found.'
    )
  lhs, rhs = inputs.split(',')
  for side in (lhs, rhs):
    if len(side) != len(set(side)):
      raise ValueError(f'Repeated dim names are not supported, got {side!r}')
  batch = [c for c in out if c in lhs and c in rhs]
  lhs_contract = set(lhs) - set(out)
  rhs_contract = set(rhs) - set(out)
  if lhs_contract != rhs_contract:
    raise ValueError(
        'Contraction dims must be present in both lhs and rhs, but got '
        f'{lhs_contract} and {rhs_contract}'
    )
  contract = sorted(lhs_contract)
  numbers = (
      (tuple(lhs.index(c) for c in contract),
       tuple(rhs.index(c) for c in contract)),
      (tuple(lhs.index(c) for c in batch), tuple(rhs.index(c) for c in batch)),
  )
  shared = set(batch) | set(contract)
  produced = (
      batch
      + [c for c in lhs if c not in shared]
      + [c for c in rhs if c not in shared]
  )
  perm = None
  if produced != list(out):
    perm = tuple(produced.index(c) for c in out)
  return numbers, perm


def _check_pack_args(shape, ndim, pack_dim, dtype_name, packed_dtype):
  if pack_dim > ndim - 1:
    raise ValueError(
        f'pack_dim must be <= input ndim - 1. input shape {shape} and'
        f' pack_dim {pack_dim}'
    )
  if packed_dtype != jnp.int32 and packed_dtype != jnp.int8:
    raise ValueError(
        f'{dtype_name} must be either int32 or int8. Given {packed_dtype}'
    )


def pack_4bit(
    x: JTensor, pack_dim: int, packed_dtype: jnp.dtype = jnp.int32
) -> JTensor:
  """Packs int4 values held in int8/uint8 into int32 (8) or int8 (2) words.

  Args:
    x: int8 or uint8 tensor of 4-bit values.
    pack_dim: The dimension packed; its size must divide by 8 (int32) or 2.
    packed_dtype: int32 or int8.

  Returns:
    The packed tensor, `pack_dim` shorter by the packing factor; value i of a
    word sits in bits [4i, 4i + 4).
  """
  if packed_dtype == jnp.int8 and x.dtype == jnp.uint8:
    raise ValueError(
        'only int8 input dtype is supported when packing into int8. '
        f'Given {x.dtype}'
    )
  if x.dtype != jnp.int8 and x.dtype != jnp.uint8:
    raise ValueError(
        f'input dtype must be either int8 or uint8. Given {x.dtype}'
    )
  _check_pack_args(x.shape, x.ndim, pack_dim, 'packed_dtype', packed_dtype)
  factor = 8 if packed_dtype == jnp.int32 else 2
  if x.shape[pack_dim] % factor:
    raise ValueError(
        f'input shape[pack_dim] must be divisible by {factor} when '
        f'target_type is {jnp.dtype(packed_dtype).name}. Given shape {x.shape}'
    )
  split = list(x.shape)
  split[pack_dim] //= factor
  split.insert(pack_dim + 1, factor)
  nibbles = (x & jnp.array(0x0F, packed_dtype)).astype(packed_dtype)
  nibbles = lax.reshape(nibbles, split)
  shifts = lax.broadcasted_iota(packed_dtype, split, pack_dim + 1) * 4
  words = nibbles << shifts
  # Nibbles occupy disjoint bits, so summing them packs them.
  return lax.reduce(
      words, jnp.array(0, packed_dtype), lax.add, [pack_dim + 1]
  )


def unpack_4bit(
    packed: JTensor, pack_dim: int, original_dtype: jnp.dtype
) -> JTensor:
  """Inverse of `pack_4bit`: int8/uint8 values, `pack_dim` 8x (or 2x) longer."""
  if packed.dtype != jnp.int32 and packed.dtype != jnp.int8:
    raise ValueError(
        f'packed dtype must be either int32 or int8. Given {packed.dtype}'
    )
  if original_dtype != jnp.int8 and original_dtype != jnp.uint8:
    raise ValueError(
        f'original_dtype must be either int8 or uint8. Given {original_dtype}'
    )
  _check_pack_args(
      packed.shape, packed.ndim, pack_dim, 'packed dtype', packed.dtype
  )
  word_bits = 32 if packed.dtype == jnp.int32 else 8
  factor = word_bits // 4
  split = list(packed.shape)
  split.insert(pack_dim + 1, factor)
  words = jnp.broadcast_to(jnp.expand_dims(packed, pack_dim + 1), split)
  # Move nibble i to the top of the word, then shift it down (sign aware).
  up = (factor - 1 - lax.broadcasted_iota(packed.dtype, split, pack_dim + 1))
  words = words << (up * 4)
  words = lax.collapse(words, pack_dim, pack_dim + 2)
  down = jnp.array(word_bits - 4, packed.dtype)
  if jnp.issubdtype(original_dtype, jnp.signedinteger):
    values = lax.shift_right_arithmetic(words, down)
  else:
    values = lax.shift_right_logical(words, down)
  return values.astype(original_dtype)


def dtype_to_bits(dtype: Any) -> int:
  """Bits of one value of `dtype` (4 for int4/uint4)."""
  dtype = jnp.dtype(dtype)
  return 4 if dtype in INT4_TYPES else dtype.itemsize * 8


def bits_to_dtype(bits: int, signed: bool = True) -> jnp.dtype:
  """The smallest int dtype holding `bits` bits."""
  if not 1 <= bits <= 32:
    raise ValueError(f'bits={bits} must be between 1 and 32')
  for width, s, u in (
      (4, jnp.int4, jnp.uint4),
      (8, jnp.int8, jnp.uint8),
      (16, jnp.int16, jnp.uint16),
  ):
    if bits <= width:
      return s if signed else u
  return jnp.int32 if signed else jnp.uint32


def get_smallest_matching_dtype(lhs: JTensor, rhs: JTensor) -> jnp.dtype:
  """The smallest int dtype that represents every value of both operands."""
  for name, t in (('lhs', lhs), ('rhs', rhs)):
    if t.dtype not in INT_TYPES:
      raise ValueError(f'{name}.dtype={t.dtype} is not an int type: {INT_TYPES}')
  lhs_signed = jnp.issubdtype(lhs.dtype, jnp.signedinteger)
  rhs_signed = jnp.issubdtype(rhs.dtype, jnp.signedinteger)
  if lhs_signed == rhs_signed:
    if dtype_to_bits(lhs.dtype) >= dtype_to_bits(rhs.dtype):
      return lhs.dtype
    return rhs.dtype
  signed, unsigned = (rhs, lhs) if rhs_signed else (lhs, rhs)
  signed_bits = dtype_to_bits(signed.dtype)
  unsigned_bits = dtype_to_bits(unsigned.dtype)
  if unsigned_bits < signed_bits:
    return signed.dtype
  if unsigned_bits < 32:
    return bits_to_dtype(unsigned_bits * 2, signed=True)
  return jnp.int32  # No int64 by default: uint32 goes to int32 as in XLA.


def get_packed_shape(
    shape: Sequence[int], pack_dim: int, packing_factor: int
) -> list[int]:
  """`shape` with `shape[pack_dim]` divided by `packing_factor`."""
  if shape[pack_dim] % packing_factor:
    raise ValueError(
        f'Packing supported for dim {pack_dim} size % {packing_factor} == 0'
        f' cases only. Given shape {shape}.'
    )
  return [
      d // packing_factor if i == pack_dim else d for i, d in enumerate(shape)
  ]


def find_target_tpl(config: Any, targets: Any) -> list[fdl.Config]:
  """Every `fdl.Config` in `config` whose callable subclasses a target."""
  targets = list(targets) if hasattr(targets, '__iter__') else [targets]
  found = []
  for node, _ in fdl.daglish.iterate(config):
    if isinstance(node, fdl.Config):
      fn = fdl.get_callable(node)
      if isinstance(fn, type) and any(issubclass(fn, t) for t in targets):
        found.append(node)
  return found


def _unused_letters(used: str, count: int) -> list[str]:
  return [c for c in string.ascii_lowercase if c not in used][:count]


def get_lora_shape_and_eqn(
    shape: Sequence[int], lora_size: int, eqn: str, max_reduction: bool = True
) -> tuple[str, str, list[int], list[int], list[int], list[int]]:
  """Splits the weight of `eqn` into LoRA factors w_left (x) w_right.

  Args:
    shape: The weight's shape.
    lora_size: The LoRA rank.
    eqn: The einsum of activation and weight, e.g. '...y,yz->...z'.
    max_reduction: With two contraction dims, factor only the larger one
      (else both).

  Returns:
    (eqn of w_left, eqn of w_right, w_left's shape, w_right's shape, the
    LoRA dims of w_left, the LoRA dims of w_right).
  """
  ins, out = eqn.split('->')
  left, right = ins.split(',')
  left_names = left.replace('.', '')
  l1, l2 = _unused_letters(left_names + right, 2)
  reductions = [c for c in left_names if c in right]
  if not reductions:
    raise ValueError(f'{eqn!r} has no contraction dim to factor.')
  if len(reductions) > 2:
    raise ValueError(
        f'Unsupported number of reduction dims: {len(reductions)}'
    )
  if len(reductions) == 2 and max_reduction:
    reductions = [max(reductions, key=lambda c: shape[right.index(c)])]
  lora_letters = [l1, l2][: len(reductions)]
  offset = 3 if left.startswith('...') else 0
  new_left = list(left)
  new_right = list(right)
  right_dims = []
  for red, lora in zip(reductions, lora_letters):
    new_left[left_names.index(red) + offset] = lora
    new_right[right.index(red)] = lora
    right_dims.append(right.index(red))
  eqn_left = f'{left},{"".join(reductions + lora_letters)}->{"".join(new_left)}'
  eqn_right = f'{"".join(new_left)},{"".join(new_right)}->{out}'
  left_shape = [shape[d] for d in right_dims] + [lora_size] * len(right_dims)
  right_shape = list(shape)
  for d in right_dims:
    right_shape[d] = lora_size
  left_dims = list(range(len(right_dims), 2 * len(right_dims)))
  return eqn_left, eqn_right, left_shape, right_shape, left_dims, right_dims


def get_left_weight_split_dims_mapping(
    weight_split_dims_mapping: tuple[str | None, ...] | None,
    eqn_left_ind: list[int],
) -> tuple[str | None, ...] | None:
  """Sharding of w_left: the weight's leading dims, LoRA dims unsharded."""
  if weight_split_dims_mapping is None:
    return None
  n = len(eqn_left_ind)
  if n not in (1, 2):
    raise ValueError(f'Usupported number of reduction dims {n}')
  return tuple(weight_split_dims_mapping[:n]) + (None,) * n


def get_right_weight_split_dims_mapping(
    weight_split_dims_mapping: tuple[str | None, ...] | None,
    eqn_right_ind: list[int],
) -> tuple[str | None, ...] | None:
  """Sharding of w_right: the weight's, LoRA dims unsharded."""
  if weight_split_dims_mapping is None:
    return None
  mapping = list(weight_split_dims_mapping)
  for i in eqn_right_ind:
    mapping[i] = None
  return tuple(mapping)
