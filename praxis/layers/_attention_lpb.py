"""`DotProductAttentionWithLPB`: attention with lazy prefix broadcast.

Public (re-exported by `praxis.layers.attentions`): DotProductAttentionWithLPB.

Several samples decoded from one prompt share the prompt's keys and values.
`lazy_broadcast_prefix(n, length)` freezes the decoder cache as a prefix
chunk (collection `prefix_decoder_cache`, entries `<name>_<i>_pfx`) and
starts a new chunk of `length` steps for n samples per row. As in Pax, the
chunks keep the sample dims: after broadcasts by n_1 and n_2 the chunks of
`key_state` are [b, L_0, N, H] (`key_state_0_pfx`), [b, n_1, L_1, N, H]
(`key_state_1_pfx`) and [b, n_1, n_2, L_2, N, H] (`key_state`), and
`extend_step` takes a flat batch of b * n_1 * n_2 rows. `time_step` counts
from the start of the first chunk and the mask spans all chunks.

Each prefix chunk is stored once; inside the attention it is broadcast to the
rows of its samples, and the attention math is `DotProductAttention`'s
(`attentions.dot_product_attention`), so a step equals plain attention over
the expanded cache.

  lpb_p = pax_fiddle.Config(attentions.DotProductAttentionWithLPB)
  lpb_p.copy_fields_from(layer_p.tr_atten_tpl)   # a DotProductAttention
  layer_p.tr_atten_tpl = lpb_p
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import pytypes
from praxis.layers import attentions

JTensor = pytypes.JTensor
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
DecodeStateTransformFn = base_layer.DecodeStateTransformFn


def _where(layer: base_layer.BaseLayer) -> str:
  return f'{type(layer).__name__}({layer.name!r})'


def _broadcast_chunk(chunk: JTensor, chunk_id: int,
                     batch_dims: tuple[int, ...]) -> JTensor:
  """Chunk [b, n_1..n_i, L, ...] -> [b * n_1 * ... * n_k, L, ...]."""
  k = len(batch_dims) - 1
  inner = chunk.shape[chunk_id + 1:]
  chunk = chunk.reshape(batch_dims[:chunk_id + 1] + (1,) * (k - chunk_id)
                        + inner)
  chunk = jnp.broadcast_to(chunk, batch_dims + inner)
  return chunk.reshape((math.prod(batch_dims),) + inner)


class DotProductAttentionWithLPB(attentions.DotProductAttention):
  """`DotProductAttention` with lazy prefix broadcast for decoding.

  Same fields and variables as `DotProductAttention`. Without a broadcast
  prefix, `extend_step` of one step is `DotProductAttention.extend_step`;
  after `lazy_broadcast_prefix` it attends over every chunk (see the module
  doc). `extend_step` also takes T steps at once ([B, T, D], e.g. to score
  a suffix after decoding). A post-attention `ngrammer_tpl` works in the
  forward pass and in one-step `extend_step` without a broadcast prefix (as
  Pax, which refuses it after `lazy_broadcast_prefix`).
  """

  # One step without a broadcast prefix is DotProductAttention.extend_step,
  # which applies the n-grammer; the other cases refuse it.
  _extend_step_applies_ngrammer = True

  # -- Chunks -----------------------------------------------------------------

  @property
  def _broadcast_prefixes_count(self) -> int:
    """How many prefix chunks `lazy_broadcast_prefix` has made."""
    count = 0
    while self.has_variable(PREFIX_DECODE_CACHE, f'value_state_{count}_pfx'):
      count += 1
    return count

  def _prefix_chunk(self, name: str, chunk_id: int) -> JTensor:
    return self.get_variable(PREFIX_DECODE_CACHE, f'{name}_{chunk_id}_pfx')

  def _broadcast_prefix_length(self) -> int:
    """The total length of the prefix chunks."""
    return sum(self._prefix_chunk('value_state', i).shape[i + 1]
               for i in range(self._broadcast_prefixes_count))

  def _batch_dims(self) -> tuple[int, ...]:
    """(b, n_1, ..., n_k) of the current chunk."""
    state = self.get_decode_state('value_state')
    return tuple(state.shape[:self._broadcast_prefixes_count + 1])

  def decoding_state_sequence_length(self) -> int:
    """The length of all chunks together."""
    pfx = self._broadcast_prefixes_count
    current = self.get_decode_state('value_state').shape[pfx + 1]
    return current + self._broadcast_prefix_length()

  def _full_state(self, name: str) -> JTensor:
    """Every chunk of `name`, broadcast and joined: [B, S, ...]."""
    batch_dims = self._batch_dims()
    chunks = [_broadcast_chunk(self._prefix_chunk(name, i), i, batch_dims)
              for i in range(len(batch_dims) - 1)]
    chunks.append(_broadcast_chunk(self.get_decode_state(name),
                                   len(batch_dims) - 1, batch_dims))
    return jnp.concatenate(chunks, axis=1) if len(chunks) > 1 else chunks[0]

  def _shard_blnh(self, x: JTensor) -> JTensor:
    """As DotProductAttention's, with sample dims [b, n_1.., L, N, H]."""
    if x.ndim == 4:
      return super()._shard_blnh(x)
    blnh = self.activation_split_dims_mapping.blnh
    if blnh is None:
      return x
    heads = blnh[2] if x.shape[-2] == self.num_heads else None
    mapping = [blnh[0]] + [None] * (x.ndim - 4) + [blnh[1], heads, blnh[3]]
    return base_layer.maybe_shard(x, mapping, self.mesh_axis_names)

  # -- Decode-state transforms ------------------------------------------------

  def transform_decode_state(
      self, transform_fn: DecodeStateTransformFn) -> None:
    """`transform_fn(state, 0, k + 1)` on the current chunk's states."""
    time_dim = self._broadcast_prefixes_count + 1
    cache = self.variables.get(base_layer.DECODE_CACHE, {})
    for name, state in cache.items():
      if isinstance(state, jax.Array):
        self.update_decode_state(
            name, self._shard_blnh(transform_fn(state, 0, time_dim)))

  def _check_prefix_mutable(self, what: str) -> None:
    if not self.is_mutable_collection(PREFIX_DECODE_CACHE):
      raise ValueError(
          f'{_where(self)}: {what} needs the {PREFIX_DECODE_CACHE!r} '
          'collection mutable (apply(..., mutable=[DECODE_CACHE, '
          'PREFIX_DECODE_CACHE])).')

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int) -> None:
    """Freezes the cache as a prefix chunk; starts one for the samples.

    Args:
      num_suffix_samples: Samples per row of the current batch; the batch of
        later steps is this many times larger.
      suffix_length: Steps the new chunk holds.
    """
    attentions._check_positive(  # pylint: disable=protected-access
        self, num_suffix_samples=num_suffix_samples,
        suffix_length=suffix_length)
    self._check_prefix_mutable('lazy_broadcast_prefix')
    pfx = self._broadcast_prefixes_count
    cache = dict(self.variables.get(base_layer.DECODE_CACHE, {}))
    for name, state in cache.items():
      if not isinstance(state, jax.Array):
        continue
      self.put_variable(PREFIX_DECODE_CACHE, f'{name}_{pfx}_pfx', state)
      shape = (state.shape[:pfx + 1] + (num_suffix_samples, suffix_length)
               + state.shape[pfx + 2:])
      self.update_decode_state(name, jnp.zeros(shape, state.dtype))

  def _left_concat_decode_state(
      self, name: str, max_prefix_size: int) -> JTensor:
    """The current chunk of `name` after the last `max_prefix_size` prefix
    steps (broadcast to its sample dims): [b, n_1.., W + L, ...]."""
    state = self.get_decode_state(name)
    pfx = self._broadcast_prefixes_count
    batch_dims = state.shape[:pfx + 1]
    windows, left = [state], max_prefix_size
    for chunk_id in reversed(range(pfx)):
      if left <= 0:
        break
      chunk = self._prefix_chunk(name, chunk_id)
      length = chunk.shape[chunk_id + 1]
      take = min(length, left)
      left -= take
      chunk = jax.lax.slice_in_dim(chunk, length - take, length,
                                   axis=chunk_id + 1)
      inner = chunk.shape[chunk_id + 1:]
      chunk = chunk.reshape(batch_dims[:chunk_id + 1]
                            + (1,) * (pfx - chunk_id) + inner)
      windows.insert(0, jnp.broadcast_to(chunk, batch_dims + inner))
    return jnp.concatenate(windows, axis=pfx + 1)

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int,
      right_align_fn: DecodeStateTransformFn) -> None:
    """Moves the last `max_prefix_size` prefix steps into the current chunk
    and right-aligns it with `right_align_fn(state, 0, 1)` on the merged
    batch; the prefix chunks become empty (length 0), as in Pax.

    Args:
      max_prefix_size: How many prefix steps to keep.
      right_align_fn: The transform (e.g. decoder_utils.right_align_state_fn).
    """
    pfx = self._broadcast_prefixes_count
    if pfx:
      self._check_prefix_mutable('right_align_decode_state_with_prefix')
    cache = dict(self.variables.get(base_layer.DECODE_CACHE, {}))
    for name, state in cache.items():
      if not isinstance(state, jax.Array):
        continue
      joined = self._left_concat_decode_state(name, max_prefix_size)
      shape = joined.shape
      merged = joined.reshape((math.prod(shape[:pfx + 1]),)
                              + shape[pfx + 1:])
      aligned = right_align_fn(merged, 0, 1).reshape(shape)
      self.update_decode_state(name, aligned)
      for i in range(pfx):
        chunk = self._prefix_chunk(name, i)
        empty = list(chunk.shape)
        empty[i + 1] = 0
        self.put_variable(PREFIX_DECODE_CACHE, f'{name}_{i}_pfx',
                          jnp.zeros(empty, chunk.dtype))

  # -- Decoding ---------------------------------------------------------------

  def _write_step(self, name: str, value: JTensor, local_step: JTensor,
                  batch_dims: tuple[int, ...]) -> None:
    """Writes [B, (T,) N, H] at `local_step` of the current chunk."""
    value = value.reshape(batch_dims + value.shape[1:])
    self.extend_decode_state(name, value, local_step, len(batch_dims))

  def _positions(self, time_step: JTensor, batch: int, steps: int | None,
                 segment_pos: JTensor | None) -> JTensor:
    """[B] (one step) or [B, T] positions of the new step(s)."""
    if segment_pos is not None:
      return segment_pos
    if steps is None:
      return jnp.broadcast_to(time_step, [batch])
    return jnp.broadcast_to(time_step + jnp.arange(steps), [batch, steps])

  def _dconv_lpb(self, query: JTensor, time_step: JTensor,
                 segment_pos: JTensor | None, write: Any
                 ) -> tuple[JTensor, JTensor]:
    """Primer convolutions over all chunks at `time_step`."""
    write('query_state', query)
    step = {'axis': 1, 'step': time_step, 'segment_pos': segment_pos}
    query = self.dconv_q.extend_step(self._full_state('query_state'), **step)
    key = self.dconv_k.extend_step(self._full_state('key_state'), **step)
    value = self.dconv_v.extend_step(self._full_state('value_state'), **step)
    write('key_post_dconv', key)
    write('value_post_dconv', value)
    return query, key

  def _check_step_mask(self, atten_mask: JTensor, steps: int | None,
                       batch: int, length: int) -> JTensor:
    want = '[1|B, 1, S]' if steps is None else '[1|B, 1, T, S]'
    ndim = 3 if steps is None else 4
    if (atten_mask.ndim != ndim or atten_mask.shape[0] not in (1, batch)
        or atten_mask.shape[-1] < length):
      raise ValueError(
          f'{_where(self)}: extend_step atten_mask {atten_mask.shape} must '
          f'be {want} with B={batch} and S >= {length} (all chunks).')
    # As Pax, a mask longer than the chunks is cut to them.
    return atten_mask[..., :length]

  def extend_step(
      self,
      query_vec: JTensor,
      *,
      atten_mask: JTensor,
      time_step: JTensor,
      segment_pos: JTensor | None,
      is_cross_attention: bool = False,
  ) -> JTensor:
    """Attends from the step(s) at `time_step` over all chunks.

    Args:
      query_vec: [B, D] (one step) or [B, T, D] (T steps from time_step);
        B = b * n_1 * ... * n_k, sample-major within each row.
      atten_mask: [1|B, 1, S] (or [1|B, 1, T, S]) over all chunks (a longer
        S is cut).
      time_step: Scalar, the 0-based step counted from the first chunk.
      segment_pos: [B] (or [B, T]) positions (None: time_step onwards).
      is_cross_attention: Only without a broadcast prefix (one step).

    Returns:
      encoded: [B, D] (or [B, T, D]).
    """
    pfx = self._broadcast_prefixes_count
    if pfx == 0 and query_vec.ndim == 2:
      return super().extend_step(
          query_vec, atten_mask=atten_mask, time_step=time_step,
          segment_pos=segment_pos, is_cross_attention=is_cross_attention)
    steps = query_vec.shape[1] if query_vec.ndim == 3 else None
    if self.ngrammer_tpl is not None:
      raise NotImplementedError(
          f'{_where(self)}: the post-attention n-grammer decodes one step '
          'at a time without a broadcast prefix (Pax refuses it after '
          'lazy_broadcast_prefix too).')
    if query_vec.ndim not in (2, 3) or is_cross_attention:
      raise ValueError(
          f'{_where(self)}: extend_step takes query_vec [B, D] or [B, T, D] '
          f'for self-attention, got {query_vec.shape} (is_cross_attention='
          f'{is_cross_attention}).')
    time_step = jnp.asarray(time_step)
    batch_dims = self._batch_dims()
    batch = math.prod(batch_dims)
    if query_vec.shape[0] != batch:
      raise ValueError(
          f'{_where(self)}: extend_step query batch {query_vec.shape[0]} '
          f'must be {batch} (the cache batch dims {batch_dims}).')
    local = time_step - self._broadcast_prefix_length()
    write = lambda n, v: self._write_step(n, v, local, batch_dims)
    query, key, value = self._project_step(query_vec, time_step, False)
    if not self.consolidate_rope_key_state:
      write('key_state', key)
    write('value_state', value)
    key_name, value_name = 'key_state', 'value_state'
    if self.dconv_qkv:
      if steps is not None:
        raise NotImplementedError(f'{_where(self)}: extending several steps '
                                  'with dconv_qkv is not supported.')
      key_name, value_name = 'key_post_dconv', 'value_post_dconv'
      query, key = self._dconv_lpb(query, time_step, segment_pos, write)
    if self.use_rotary_position_emb:
      key_name = self._rotary_key_name()
      position = self._positions(time_step, batch, steps, segment_pos)
      rope = self.rotary_position_emb
      rotate = rope.extend_step if steps is None else rope
      query, key = rotate(query, position), rotate(key, position)
      write(key_name, key)
    relative_bias = None
    if self.relative_bias_tpl is not None:
      if steps is not None:
        raise NotImplementedError(f'{_where(self)}: extending several steps '
                                  'with a relative bias is not supported.')
      relative_bias = self.relative_bias.extend_step(
          seq_length=self.decoding_state_sequence_length(),
          time_step=time_step)
    encoded = self._attend_chunks(query, key_name, value_name, atten_mask,
                                  relative_bias, steps)
    encoded = self.post(encoded)
    return self._shard_bd(encoded) if steps is None else self._shard_bld(
        encoded)

  def _attend_chunks(
      self, query: JTensor, key_name: str, value_name: str,
      atten_mask: JTensor, relative_bias: JTensor | None,
      steps: int | None) -> JTensor:
    """Query [B, (T,) N, H] over every chunk -> the same shape."""
    key = self._shard_blnh(self._full_state(key_name))
    value = self._shard_blnh(self._full_state(value_name))
    atten_mask = self._check_step_mask(atten_mask, steps, query.shape[0],
                                       key.shape[1])
    if relative_bias is not None:
      relative_bias = relative_bias[..., :key.shape[1]]
    if steps is None:
      query, atten_mask = query[:, None], atten_mask[:, :, None]
    if self.ln_tpl is not None:
      query, key = self.layer_norm_q(query), self.layer_norm_k(key)
    encoded, _ = self._attend(query, key, value, atten_mask, relative_bias,
                              dropout=False)
    return encoded[:, 0] if steps is None else encoded
