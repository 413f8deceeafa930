"""GShard routing for mixture-of-experts layers, and sharding helpers.

Public names (Pax's `praxis.gshard_utils`):
  sharding: remove_dim;
  math: cum_sum, top_k;
  gating: top2_gating_on_logits, topk_gating_on_logits,
    expert_choice_gating_on_logits, expert_choice_gating_on_logits_v2,
    compute_gating (dispatches on `gating_func`).

Shapes use GShard's letters: G groups, S tokens per group, E experts, C the
capacity of each expert per group. Token-choice gating (top-2, top-k) sends
each token to its best experts, in token order, while an expert has room;
it returns (aux_loss, combine [G, S, E, C], dispatch [G, S, E, C], stats),
where combine holds the weight of token s in slot c of expert e and dispatch
is its 0/1 pattern:

  aux, combine, dispatch, _ = gshard_utils.top2_gating_on_logits(
      paddings=None, logits=logits,  # logits [G, S, E]
      experts_dim=E, expert_capacity_dim=C, fprop_dtype=jnp.float32)
  expert_in = jnp.einsum('GSEC,GSM->EGCM', dispatch, x)
  y = jnp.einsum('GSEC,EGCM->GSM', combine, expert_fn(expert_in))

Expert-choice gating lets each expert pick its best C tokens instead.
"""

from __future__ import annotations

from absl import logging
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from praxis import pytypes

JTensor = pytypes.JTensor

_SECOND_EXPERT_POLICIES = ('all', 'sampling', 'random')
_GATING_FUNCS = ('top2', 'expert_choice', 'expert_choice_v2')


def remove_dim(
    dim: int, split_dims_mapping: pytypes.SplitDimsMapping
) -> pytypes.SplitDimsMapping:
  """A copy of `split_dims_mapping` (as a list) without dimension `dim`.

  >>> remove_dim(-1, ('data', None, 'mdl'))
  ['data', None]
  """
  rank = len(split_dims_mapping)
  index = dim + rank if dim < 0 else dim
  if not 0 <= index < rank:
    raise ValueError(
        f'remove_dim: dim={dim} is out of range for a split_dims_mapping of '
        f'{rank} dimensions ({split_dims_mapping!r}).')
  return list(split_dims_mapping[:index]) + list(
      split_dims_mapping[index + 1:])


def cum_sum(elements: JTensor, axis: int = 0, exclusive: bool = False,
            reverse: bool = False) -> JTensor:
  """`jnp.cumsum` with tf.cumsum's `exclusive` and `reverse` options.

  exclusive: each output excludes its own element ([a, b, c] -> [0, a, a+b]);
  reverse: sums run from the end of `axis` towards its start.
  """
  x = jnp.flip(elements, axis=axis) if reverse else elements
  out = jnp.cumsum(x, axis=axis)
  if exclusive:
    out = out - x
  return jnp.flip(out, axis=axis) if reverse else out


def top_k(x: JTensor, k: int) -> tuple[JTensor, JTensor]:
  """The k largest values of the last axis and their indices, ascending."""
  iota = jnp.broadcast_to(np.arange(x.shape[-1]), x.shape)
  values, indices = lax.sort_key_val(x, iota)
  return values[..., -k:], indices[..., -k:]


# ---------------------------------------------------------------------------
# Shared pieces of the gating functions.
# ---------------------------------------------------------------------------


def _mask_dtype(mask_dtype, fprop_dtype):
  if mask_dtype is not None:
    return mask_dtype
  if fprop_dtype == jnp.bfloat16:
    raise ValueError(
        'mask_dtype=None would make the routing masks bfloat16 (fprop_dtype); '
        'pass an integer or float32 mask_dtype.')
  return fprop_dtype


def _f32_capped_logits(logits: JTensor, gating_logit_cap: float) -> JTensor:
  if logits.dtype != jnp.float32:
    logging.info('Upcasting gating logits')
    logits = logits.astype(jnp.float32)
  if gating_logit_cap > 0.0:
    cap = jnp.asarray(gating_logit_cap, dtype=logits.dtype)
    logits = cap * jnp.tanh(logits / cap)
  return logits


def _check_capacity(capacity_factor, expert_capacity_dim, where: str):
  if not (capacity_factor or expert_capacity_dim):
    raise ValueError(
        f'{where}: set expert_capacity_dim or capacity_factor (both are '
        'empty).')


def _capacity(expert_capacity_dim, capacity_factor, group_size: int,
              experts_dim: int) -> int:
  """expert_capacity_dim, raised to group_size * capacity_factor / experts_dim
  (rounded up to a multiple of 4) when capacity_factor asks for more."""
  capacity = 1 if expert_capacity_dim is None else expert_capacity_dim
  if capacity_factor is None:
    return capacity
  auto = int(group_size * capacity_factor / experts_dim)
  if capacity < auto:
    capacity = (auto + 3) // 4 * 4
    logging.info(
        'Setting expert_capacity_dim=%r (capacity_factor=%r '
        'group_size_dim=%r experts_dim=%r)', capacity, capacity_factor,
        group_size, experts_dim)
  return capacity


def _over_capacity_ratio(mask, position_in_expert, capacity) -> JTensor:
  """Fraction of the routed tokens in `mask` [G, S, E] that found no room."""
  over = jnp.sum(jnp.greater_equal(mask * position_in_expert, capacity))
  routed = jnp.sum(mask).astype(jnp.float32)
  return over.astype(jnp.float32) / jnp.maximum(
      jnp.asarray(1.0, jnp.float32), routed)


def _keep_within_capacity(mask, position, capacity: int):
  """Drops the tokens of `mask` [G, S, E] at `position` >= capacity.

  Returns (mask, the slot of each kept token [G, S] (0 if dropped), the number
  of kept tokens [G, S] (0 or 1)).
  """
  mask = mask * jnp.less(position, capacity).astype(mask.dtype)
  slot = jnp.einsum('GSE,GSE->GS', position, mask)
  kept = jnp.sum(mask, axis=-1, dtype=mask.dtype)
  return mask, slot, kept


def _combine_part(gate, kept, index, slot, experts_dim: int,
                  capacity: int) -> JTensor:
  """[G, S, E, C]: `gate` of each kept token at (its expert, its slot)."""
  weight = jnp.expand_dims(gate * kept.astype(jnp.float32), -1)
  per_expert = weight * jax.nn.one_hot(index, experts_dim, dtype=jnp.float32)
  per_slot = jax.nn.one_hot(slot.astype(np.int32), capacity,
                            dtype=jnp.float32)
  return jnp.einsum('GSE,GSC->GSEC', per_expert, per_slot)


def _aux_loss(first_mask, gate_proxy, experts_dim: int, denom) -> JTensor:
  """GShard's load-balancing loss: E^2 * mean over (G, E) of the fraction of
  tokens routed first to e times the mean router probability of e."""
  density = jnp.mean(first_mask.astype(jnp.float32), axis=-2) / denom
  proxy = jnp.mean(gate_proxy, axis=-2, dtype=jnp.float32) / denom
  return jnp.mean(proxy * density, dtype=jnp.float32) * (
      experts_dim * experts_dim)


# ---------------------------------------------------------------------------
# Token-choice gating.
# ---------------------------------------------------------------------------


def top2_gating_on_logits(
    paddings,
    logits,
    experts_dim,
    expert_capacity_dim,
    fprop_dtype,
    prng_key=None,
    second_expert_policy='all',
    second_expert_threshold=0.0,
    legacy_mtf_behavior=True,
    capacity_factor=None,
    importance=None,
    mask_dtype=jnp.int32,
    gating_logit_cap=0.0,
):
  """GShard's top-2 gating (Algorithm 2 of arxiv.org/abs/2006.16668).

  Each token goes to its best expert, then to its second best, in token
  order while the expert has fewer than C tokens (first choices of all
  tokens take their slots before any second choice).

  Args:
    paddings: [G, S], 1 at padded tokens (which are routed nowhere), or None.
    logits: [G, S, E] router logits (computed in float32).
    experts_dim: E.
    expert_capacity_dim: C, tokens per expert per group (None with
      capacity_factor set).
    fprop_dtype: dtype of combine, dispatch (and of `importance`).
    prng_key: needed by the 'sampling' and 'random' policies.
    second_expert_policy: 'all': always the second best expert; 'sampling':
      the second expert sampled from the softmax without the first; 'random':
      the second best expert, kept with probability gate_2 /
      second_expert_threshold (always when above the threshold).
    second_expert_threshold: the threshold of the 'random' policy.
    legacy_mtf_behavior: True: the two gates are renormalized to sum to 1
      before capacity drops a token (Mesh TensorFlow's behaviour), and the
      load-balancing densities divide by S; False: renormalized after, and the
      densities divide by the mean importance.
    capacity_factor: if set, C grows to at least S * capacity_factor / E
      (rounded up to a multiple of 4).
    importance: [G, S] token weights; only tokens of importance 1 take a first
      expert (None: 1 for every unpadded token).
    mask_dtype: dtype of the routing masks (None: fprop_dtype).
    gating_logit_cap: > 0: logits become cap * tanh(logits / cap).

  Returns:
    (aux_loss: float32 scalar; combine_tensor [G, S, E, C]; dispatch_tensor
    [G, S, E, C]; (over_capacity_1, over_capacity_2: fractions of first and
    second choices dropped for lack of room, dispatch_0, dispatch_1,
    dispatch_2: numbers of unpadded tokens sent to 0, 1 and 2 experts)).
  """
  _check_capacity(capacity_factor, expert_capacity_dim,
                  'top2_gating_on_logits')
  if second_expert_policy not in _SECOND_EXPERT_POLICIES:
    raise ValueError(
        f'second_expert_policy must be one of {_SECOND_EXPERT_POLICIES}, '
        f'got {second_expert_policy!r}.')
  if second_expert_policy != 'all' and prng_key is None:
    raise ValueError(
        f'second_expert_policy={second_expert_policy!r} needs a prng_key.')
  mask_dtype = _mask_dtype(mask_dtype, fprop_dtype)
  logits = _f32_capped_logits(logits, gating_logit_cap)
  raw_gates = jax.nn.softmax(logits, axis=-1)
  capacity = _capacity(expert_capacity_dim, capacity_factor, logits.shape[1],
                       experts_dim)

  index_1 = jnp.argmax(raw_gates, axis=-1)
  mask_1 = jax.nn.one_hot(index_1, experts_dim, dtype=mask_dtype)
  gate_proxy = raw_gates
  if importance is not None:
    routable = jnp.equal(importance, 1.0)[..., None]
    mask_1 = mask_1 * routable.astype(mask_1.dtype)
    gate_proxy = gate_proxy * routable.astype(gate_proxy.dtype)
  else:
    importance = jnp.ones(mask_1.shape[:2], dtype=fprop_dtype)
    if paddings is not None:
      importance = 1.0 - paddings
      mask_1 = mask_1 * importance[..., None].astype(mask_1.dtype)
      gate_proxy = gate_proxy * importance[..., None].astype(gate_proxy.dtype)
  if importance.dtype != fprop_dtype:
    raise ValueError(
        f'top2_gating_on_logits: importance (or 1 - paddings) has dtype '
        f'{importance.dtype}, expected fprop_dtype {fprop_dtype}.')

  gate_1 = jnp.einsum('GSE,GSE->GS', raw_gates, mask_1.astype(jnp.float32))
  without_1 = raw_gates * (1.0 - mask_1.astype(jnp.float32))
  if second_expert_policy == 'sampling':
    prng_key, key = jax.random.split(prng_key)
    uniform = jax.random.uniform(key, logits.shape, dtype=logits.dtype)
    gumbel = -jnp.log(-jnp.log(uniform))
    excluded = jnp.full_like(logits, -0.7 * np.finfo(logits.dtype).max)
    index_2 = jnp.argmax(
        jnp.where(mask_1 > 0, excluded, logits) + gumbel, axis=-1)
  else:
    index_2 = jnp.argmax(without_1, axis=-1)
  mask_2 = jax.nn.one_hot(index_2, experts_dim, dtype=mask_dtype)
  if paddings is not None:
    mask_2 = mask_2 * (importance > 0.0)[..., None].astype(mask_2.dtype)
  gate_2 = jnp.einsum('GSE,GSE->GS', without_1, mask_2.astype(jnp.float32))

  if legacy_mtf_behavior:
    denom = gate_1 + gate_2 + 1e-9
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom
    density_denom = jnp.asarray(1.0, dtype=jnp.float32)
  else:
    density_denom = jnp.mean(
        importance, axis=1, dtype=jnp.float32)[:, None] + 1e-6
  aux_loss = _aux_loss(mask_1, gate_proxy, experts_dim, density_denom)

  position_1 = cum_sum(mask_1, axis=-2, exclusive=True)
  over_capacity_1 = _over_capacity_ratio(mask_1, position_1, capacity)
  mask_1, slot_1, kept_1 = _keep_within_capacity(mask_1, position_1, capacity)

  if second_expert_policy == 'random':
    prng_key, key = jax.random.split(prng_key)
    sampled = jnp.less(
        jax.random.uniform(key, gate_2.shape, dtype=gate_2.dtype),
        gate_2 / max(second_expert_threshold, 1e-9))
    gate_2 = gate_2 * sampled.astype(gate_2.dtype)
    mask_2 = mask_2 * sampled[..., None].astype(mask_2.dtype)

  position_2 = cum_sum(mask_2, axis=-2, exclusive=True) + jnp.sum(
      mask_1, axis=-2, keepdims=True)
  over_capacity_2 = _over_capacity_ratio(mask_2, position_2, capacity)
  mask_2, slot_2, kept_2 = _keep_within_capacity(mask_2, position_2, capacity)

  gate_1 = gate_1 * kept_1.astype(gate_1.dtype)
  gate_2 = gate_2 * kept_2.astype(gate_2.dtype)
  if not legacy_mtf_behavior:
    denom = gate_1 + gate_2
    denom = jnp.where(denom > 0, denom, jnp.ones_like(denom))
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom

  combine = (
      _combine_part(gate_1, kept_1, index_1, slot_1, experts_dim, capacity)
      + _combine_part(gate_2, kept_2, index_2, slot_2, experts_dim, capacity))
  experts_per_token = jnp.sum(combine.astype(bool).astype(jnp.int32),
                              axis=(-2, -1))
  dispatch_0 = jnp.sum(experts_per_token == 0)
  if paddings is not None:
    dispatch_0 -= jnp.sum(paddings.astype(jnp.int32))
  stats = (over_capacity_1, over_capacity_2, dispatch_0,
           jnp.sum(experts_per_token == 1), jnp.sum(experts_per_token == 2))
  dispatch = combine.astype(bool).astype(fprop_dtype)
  return aux_loss, combine.astype(fprop_dtype), dispatch, stats


def topk_gating_on_logits(
    paddings,
    logits,
    experts_dim,
    expert_capacity_dim,
    fprop_dtype,
    capacity_factor=None,
    mask_dtype=jnp.int32,
    k=2,
    gating_logit_cap=0.0,
):
  """Top-k gating: each token goes to its k best experts while they have room.

  The k gates are renormalized to sum to 1 before capacity drops any; the
  i-th choices of all tokens take their slots before any (i+1)-th choice.
  Arguments as `top2_gating_on_logits`, plus k (the experts per token).

  Returns:
    (aux_loss (fprop_dtype scalar), combine_tensor [G, S, E, C],
    dispatch_tensor [G, S, E, C], [k over-capacity fractions]).
  """
  _check_capacity(capacity_factor, expert_capacity_dim,
                  'topk_gating_on_logits')
  if k < 1 or k > experts_dim:
    raise ValueError(f'topk_gating_on_logits: k={k} must be in [1, '
                     f'experts_dim={experts_dim}].')
  mask_dtype = _mask_dtype(mask_dtype, fprop_dtype)
  logits = _f32_capped_logits(logits, gating_logit_cap)
  raw_gates = jax.nn.softmax(logits, axis=-1)
  capacity = _capacity(expert_capacity_dim, capacity_factor, logits.shape[1],
                       experts_dim)
  keep = None if paddings is None else (1.0 - paddings)[..., None]

  def choose(gates):
    index = jnp.argmax(gates, axis=-1)
    mask = jax.nn.one_hot(index, experts_dim, dtype=mask_dtype)
    if keep is not None:
      mask = mask * keep.astype(mask.dtype)
    return index, mask, jnp.einsum('GSE,GSE->GS', gates,
                                   mask.astype(gates.dtype))

  index, mask, gate = choose(raw_gates)
  gate_proxy = raw_gates if keep is None else raw_gates * keep.astype(
      raw_gates.dtype)
  aux_loss = _aux_loss(mask, gate_proxy, experts_dim, 1.0)
  choices = [(index, mask, gate)]
  denom = gate + 1e-9 if k > 1 else 1.0
  remaining = raw_gates
  for _ in range(1, k):
    remaining = remaining * (1.0 - choices[-1][1].astype(remaining.dtype))
    choices.append(choose(remaining))
    denom = denom + choices[-1][2]

  combine = jnp.zeros(logits.shape + (capacity,), dtype=jnp.float32)
  over_capacity = []
  taken = 0  # [G, 1, E]: slots of each expert taken by earlier choices.
  for index, mask, gate in choices:
    position = cum_sum(mask, axis=-2, exclusive=True) + taken
    over_capacity.append(_over_capacity_ratio(mask, position, capacity))
    mask, slot, kept = _keep_within_capacity(mask, position, capacity)
    taken = taken + jnp.sum(mask, axis=-2, keepdims=True)
    gate = gate / denom * kept.astype(jnp.float32)
    combine += _combine_part(gate, kept, index, slot, experts_dim, capacity)
  combine = combine.astype(fprop_dtype)
  dispatch = combine.astype(bool).astype(fprop_dtype)
  return aux_loss.astype(fprop_dtype), combine, dispatch, over_capacity


# ---------------------------------------------------------------------------
# Expert-choice gating (arxiv.org/abs/2202.09368).
# ---------------------------------------------------------------------------


def expert_choice_gating_on_logits(
    logits,
    experts_dim,
    expert_capacity_dim,
    fprop_dtype,
    capacity_factor=None,
    mask_dtype=jnp.int32,
):
  """Each expert takes the (S // E) * capacity_factor tokens it rates best.

  Returns:
    (0.0 as aux_loss; gates [G, E, K] of each expert's K tokens, ascending;
    their one-hot positions [G, E, K, S]).
  """
  _check_capacity(capacity_factor, expert_capacity_dim,
                  'expert_choice_gating_on_logits')
  if capacity_factor is None:
    raise ValueError('expert_choice_gating_on_logits needs capacity_factor.')
  mask_dtype = _mask_dtype(mask_dtype, fprop_dtype)
  logits = _f32_capped_logits(logits, 0.0)
  raw_gates = jax.nn.softmax(logits, axis=-1).astype(fprop_dtype)
  group_size = logits.shape[1]
  bucket_size = int(group_size // experts_dim * capacity_factor)
  gates, indices = top_k(jnp.swapaxes(raw_gates, 1, 2), bucket_size)
  positions = jax.nn.one_hot(indices, group_size, dtype=mask_dtype)
  return jnp.asarray(0.0, dtype=fprop_dtype), gates, positions


def expert_choice_gating_on_logits_v2(
    paddings,
    logits,
    experts_dim,
    expert_capacity_dim,
    fprop_dtype,
    capacity_factor=None,
    mask_dtype=jnp.int32,
    gating_logit_cap=0.0,
):
  """Expert choice in GShard's combine/dispatch layout.

  Each expert picks the C unpadded tokens with its highest router
  probabilities; a picked token sits in slot c of expert e, c counting the
  expert's picked tokens before it in token order, weighted by its router
  probability of e. Padded tokens are never picked.

  Returns:
    (0.0 as aux_loss, combine_tensor [G, S, E, C], dispatch_tensor
    [G, S, E, C]).
  """
  _check_capacity(capacity_factor, expert_capacity_dim,
                  'expert_choice_gating_on_logits_v2')
  mask_dtype = _mask_dtype(mask_dtype, fprop_dtype)
  logits = _f32_capped_logits(logits, gating_logit_cap)
  gates = jax.nn.softmax(logits, axis=-1)
  group_size = logits.shape[1]
  nonpaddings = jnp.ones(logits.shape[:2], dtype=logits.dtype)
  scores = gates
  if paddings is not None:
    nonpaddings = 1.0 - paddings
    scores = scores * nonpaddings[..., None].astype(logits.dtype)
  if capacity_factor is not None:
    capacity = _capacity(expert_capacity_dim, capacity_factor, group_size,
                         experts_dim)
  else:
    capacity = expert_capacity_dim
  _, picked = top_k(jnp.swapaxes(scores, 1, 2), capacity)  # [G, E, C]
  # [G, S, E]: 1 where expert e picked token s.
  mask = jnp.swapaxes(
      jnp.sum(jax.nn.one_hot(picked, group_size, dtype=mask_dtype), axis=-2),
      1, 2)
  mask = mask * nonpaddings[..., None].astype(mask.dtype)
  position = cum_sum(mask, axis=-2, exclusive=True)
  position = position * jnp.less(position, capacity).astype(position.dtype)
  weight = (gates * mask.astype(gates.dtype)).astype(fprop_dtype)
  slots = jax.nn.one_hot(position * mask, capacity) * mask[..., None]
  combine = weight[..., None] * slots.astype(fprop_dtype)
  dispatch = combine.astype(bool).astype(fprop_dtype)
  return jnp.asarray(0.0, dtype=fprop_dtype), combine, dispatch


def compute_gating(
    paddings,
    logits,
    experts_dim,
    expert_capacity_dim,
    fprop_dtype,
    gating_func='top2',
    prng_key=None,
    second_expert_policy='all',
    second_expert_threshold=0.0,
    legacy_mtf_behavior=True,
    capacity_factor=None,
    mask_dtype=jnp.int32,
    gating_logit_cap=0.0,
):
  """Runs the gating named by `gating_func` ('top2', 'expert_choice' or
  'expert_choice_v2'); the expert-choice functions use int32 masks, and
  'expert_choice_v2' no logit cap, as in Pax."""
  if gating_func == 'top2':
    return top2_gating_on_logits(
        paddings=paddings,
        logits=logits.astype(jnp.float32),
        experts_dim=experts_dim,
        expert_capacity_dim=expert_capacity_dim,
        fprop_dtype=fprop_dtype,
        prng_key=prng_key,
        second_expert_policy=second_expert_policy,
        second_expert_threshold=second_expert_threshold,
        legacy_mtf_behavior=legacy_mtf_behavior,
        capacity_factor=capacity_factor,
        mask_dtype=mask_dtype,
        gating_logit_cap=gating_logit_cap)
  if gating_func == 'expert_choice':
    return expert_choice_gating_on_logits(
        logits=logits.astype(jnp.float32),
        experts_dim=experts_dim,
        expert_capacity_dim=expert_capacity_dim,
        fprop_dtype=fprop_dtype,
        capacity_factor=capacity_factor,
        mask_dtype=jnp.int32)
  if gating_func == 'expert_choice_v2':
    return expert_choice_gating_on_logits_v2(
        paddings=paddings,
        logits=logits.astype(jnp.float32),
        experts_dim=experts_dim,
        expert_capacity_dim=expert_capacity_dim,
        fprop_dtype=fprop_dtype,
        capacity_factor=capacity_factor,
        mask_dtype=jnp.int32,
        gating_logit_cap=0.0)
  raise ValueError(
      f'Unsupported gating function type: {gating_func!r} (gating_func must '
      f'be one of {_GATING_FUNCS}).')
