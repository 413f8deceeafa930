"""Choosing the next token from logits: greedy, temperature, top-k, top-p.

Public names: get_top_k, top_p_mask_logits, epsilon_mask_logits,
gumbel_max_sample, sample_from_top_p_given_top_k, sample_from_top_k_and_top_p,
BaseLogitsSampler, DefaultCategoricalLogitsSampler, BaseNextTokenSampler,
DefaultNextTokenSampler.

The math is pure functions of arrays. Sampling at temperature T uses the
Gumbel-max trick, `argmax(logits + T * gumbel_noise)`, which draws from
`softmax(logits / T)` (and is the argmax at T = 0):

  key = jax.random.PRNGKey(0)
  ids, logprobs = token_samplers.sample_from_top_k_and_top_p(
      logits, key, temperature=0.7, top_k=40, top_p=0.9)   # logits [B, V]

A next-token sampler is the configurable object a decoding loop calls; it
also takes its random key from the model (`model.next_prng_key()`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
import functools
from typing import Any

import jax
from jax import numpy as jnp

from praxis import base_hyperparams
from praxis import base_layer
from praxis import decoder_utils
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
PRNGKey = pytypes.PRNGKey


DUMMY_PRNG_KEY = decoder_utils.DUMMY_PRNG_KEY


def _large_negative(dtype: Any) -> JTensor:
  return py_utils.get_large_negative_number(dtype)


def _per_example(x: float | JTensor | None, ndim: int) -> Any:
  """A [B] per-example value as [B, 1, ...] against [B, ..., V] logits."""
  if isinstance(x, jax.Array) and x.ndim == 1 and ndim > 1:
    return x.reshape(x.shape + (1,) * (ndim - 1))
  return x


def _is_single_key(prng_key: PRNGKey) -> bool:
  if jax.dtypes.issubdtype(prng_key.dtype, jax.dtypes.prng_key):
    return prng_key.ndim == 0
  return prng_key.ndim == 1


def _batch_rngs_random_gumbel(rngs: PRNGKey, shape: Sequence[int]
                              ) -> JTensor:
  """Gumbel noise of `shape` from one key, or from one key per row.

  Args:
    rngs: One key ([2] raw or a typed key), or [B] keys, B = shape[0].
    shape: The noise shape.

  Returns:
    The noise.
  """
  if _is_single_key(rngs):
    return jax.random.gumbel(rngs, shape)
  if rngs.shape[0] != shape[0]:
    raise ValueError(f'Per-example keys {rngs.shape} do not match the '
                     f'batch of logits {tuple(shape)}.')
  return jax.vmap(lambda k: jax.random.gumbel(k, shape[1:]))(rngs)


def _get_argmax_ids(top_k_argmax_ids: JTensor, top_k_items: JTensor
                    ) -> JTensor:
  """`top_k_items[..., top_k_argmax_ids[...]]`: [...], [..., k] -> [...]."""
  return jnp.take_along_axis(top_k_items, top_k_argmax_ids[..., None],
                             axis=-1)[..., 0]


def get_top_k(
    logits: JTensor,
    top_k: int,
    per_example_top_k: JTensor | None = None,
    top_k_recall_target: float = 1.0,
) -> tuple[JTensor, JTensor]:
  """The `top_k` largest logits (descending) and their token ids.

  Args:
    logits: [B, V].
    top_k: How many to keep; 0 keeps all V (in vocabulary order).
    per_example_top_k: [B] smaller k per example; the logits past it are set
      to a large negative number.
    top_k_recall_target: Below 1, use `jax.lax.approx_max_k`.

  Returns:
    (top_k_logits [B, k], top_k_indices [B, k]).
  """
  if not top_k:
    ids = jnp.broadcast_to(jnp.arange(logits.shape[-1]), logits.shape)
    return logits, ids
  if top_k_recall_target < 1.0:
    if top_k_recall_target <= 0.0:
      raise ValueError(f'get_top_k: top_k_recall_target must be in (0, 1], '
                       f'got {top_k_recall_target}.')
    values, ids = jax.lax.approx_max_k(logits, top_k,
                                       recall_target=top_k_recall_target)
  else:
    values, ids = jax.lax.top_k(logits, top_k)
  if per_example_top_k is not None:
    k = jnp.minimum(per_example_top_k.astype(jnp.int32), top_k)
    keep = jnp.arange(top_k)[None, :] < k[:, None]
    values = jnp.where(keep, values, _large_negative(values.dtype))
  return values, ids


def top_p_mask_logits(
    logits: JTensor,
    p: float | JTensor,
    logits_sorted_in_descending_order: bool = False,
    logits_sum: JTensor | None = None,
) -> JTensor:
  """Nucleus filtering: the other logits get a large negative number.

  Unsorted logits are sorted ascending and the least likely tokens whose
  total probability stays <= 1 - p are dropped (what is kept has mass >= p).
  Logits already sorted descending keep the leading tokens up to and
  including the first whose cumulative probability exceeds p. Ties with the
  cut-off logit are kept.

  Args:
    logits: [B, V].
    p: A float, or [B, 1] (or [B]) per example. A float p >= 1 keeps all.
    logits_sorted_in_descending_order: `logits` are sorted descending.
    logits_sum: If given, the probabilities are `logits / logits_sum` (Pax's
      global normalization, with logits_sum = the sum of the whole
      vocabulary's logits); None: softmax over `logits`.

  Returns:
    The masked logits.
  """
  if not isinstance(p, jax.Array) and p >= 1.0:
    return logits
  p = _per_example(jnp.asarray(p, jnp.float32), 2)
  if logits_sorted_in_descending_order:
    sorted_logits, threshold = logits, p
  else:
    sorted_logits, threshold = jnp.sort(logits, axis=-1), 1.0 - p
  x = sorted_logits.astype(jnp.float32)
  probs = (jax.nn.softmax(x, axis=-1) if logits_sum is None
           else x / logits_sum)
  cut = jnp.sum(jnp.cumsum(probs, axis=-1) <= threshold, axis=-1,
                keepdims=True)
  cut = jnp.minimum(cut, logits.shape[-1] - 1)
  cutoff = jnp.take_along_axis(sorted_logits, cut, axis=-1)
  return jnp.where(logits < cutoff, _large_negative(logits.dtype), logits)


def epsilon_mask_logits(logits: JTensor, epsilon: float) -> JTensor:
  """Masks the tokens whose probability is below `epsilon` (if > 0)."""
  if epsilon <= 0:
    return logits
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.where(probs < epsilon, _large_negative(logits.dtype), logits)


def gumbel_max_sample(
    prng_key: PRNGKey, logits: JTensor, temperature: float | JTensor | None
) -> JTensor:
  """Samples ids from softmax(logits / temperature): argmax(logits + T * g).

  The Gumbel noise g is drawn even at temperature 0 (or None), where the
  result is the argmax.

  Args:
    prng_key: One key, or [B] keys (one per row).
    logits: [B, ..., V].
    temperature: A float, None (0), [B] or broadcastable to logits[..., :1].

  Returns:
    int32 ids [B, ...].
  """
  if temperature is None:
    temperature = 0.0
  noise = _batch_rngs_random_gumbel(prng_key, logits.shape).astype(
      logits.dtype)
  temperature = _per_example(temperature, logits.ndim)
  return jnp.argmax(logits + noise * temperature, axis=-1).astype(jnp.int32)


class BaseLogitsSampler(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Draws ids from (already filtered) logits."""

  @abc.abstractmethod
  def __call__(
      self,
      prng_key: PRNGKey,
      logits: JTensor,
      ids: JTensor | None,
      temperature: float | JTensor,
      decode_loop_state: NestedMap | None,
  ) -> tuple[JTensor, NestedMap]:
    """Returns (positions [B] along the last dim of `logits`, state updates).

    Args:
      prng_key: The random key.
      logits: [B, k] filtered logits.
      ids: [B, k] the token ids of those logits (None: the vocabulary).
      temperature: A float or [B].
      decode_loop_state: The decoding loop's state.
    """


class DefaultCategoricalLogitsSampler(BaseLogitsSampler):
  """Samples with temperature via the Gumbel-max trick."""

  def __call__(self, prng_key, logits, ids, temperature, decode_loop_state):
    del ids, decode_loop_state
    return gumbel_max_sample(prng_key, logits, temperature), NestedMap()


def _apply_top_p_given_top_k(
    top_k_logits: JTensor,
    top_k_indices: JTensor,
    top_p: float | JTensor | None = None,
    topk_is_sorted: bool = True,
    logits_sum: JTensor | None = None,
) -> tuple[JTensor, JTensor, JTensor]:
  """Top-p filtering of top-k logits.

  Args:
    top_k_logits: [B, k].
    top_k_indices: [B, k] their token ids.
    top_p: None, a float or [B, 1]; an array skips the masking (under
      `lax.cond`) when every entry is >= 1.
    topk_is_sorted: `top_k_logits` are sorted descending.
    logits_sum: See `top_p_mask_logits`.

  Returns:
    (top_p_logits [B, k], log_softmax(top_k_logits) [B, k], top_k_indices).
  """
  if top_p is None:
    top_p_logits = top_k_logits
  else:
    mask = functools.partial(
        top_p_mask_logits, top_k_logits, top_p,
        logits_sorted_in_descending_order=topk_is_sorted,
        logits_sum=logits_sum)
    if isinstance(top_p, jax.Array):
      top_p_logits = jax.lax.cond(jnp.any(top_p < 1.0), mask,
                                  lambda: top_k_logits)
    else:
      top_p_logits = mask()
  logprobs = jax.nn.log_softmax(top_k_logits.astype(jnp.float32))
  return top_p_logits, logprobs, top_k_indices


def _apply_top_k_and_top_p(
    logits: JTensor,
    top_k: int,
    top_p: float | JTensor | None = None,
    per_example_top_k: JTensor | None = None,
    global_normalize: bool = False,
    top_k_recall_target: float = 1.0,
) -> tuple[JTensor, JTensor, JTensor]:
  """Top-k, then top-p filtering.

  Args:
    logits: [B, V].
    top_k: Keep the k most likely tokens (0: all, unsorted).
    top_p: None, a float or [B, 1].
    per_example_top_k: [B] smaller k per example.
    global_normalize: Top-p with Pax's global normalization (probabilities
      `logit / sum of all V logits`) instead of a softmax over the top k.
    top_k_recall_target: Below 1, approximate top-k.

  Returns:
    (top_p_logits [B, k], log_softmax(top-k logits) [B, k], top_k_indices).
  """
  top_k_logits, top_k_indices = get_top_k(logits, top_k, per_example_top_k,
                                          top_k_recall_target)
  logits_sum = None
  if global_normalize:
    logits_sum = jnp.sum(logits.astype(jnp.float32), axis=-1, keepdims=True)
  return _apply_top_p_given_top_k(top_k_logits, top_k_indices, top_p,
                                  topk_is_sorted=True, logits_sum=logits_sum)


def _sample(
    filtered: tuple[JTensor, JTensor, JTensor],
    prng_key: PRNGKey,
    temperature: float | JTensor,
    logits_sampler: BaseLogitsSampler | None,
    decode_loop_state: NestedMap | None,
) -> tuple[JTensor, JTensor]:
  """Draws among filtered top-k logits: (ids, their top-k logprobs)."""
  top_p_logits, logprobs, top_k_indices = filtered
  sampler = logits_sampler or DefaultCategoricalLogitsSampler()
  pos, _ = sampler(prng_key, top_p_logits, top_k_indices, temperature,
                   decode_loop_state)
  return (_get_argmax_ids(pos, top_k_indices),
          _get_argmax_ids(pos, logprobs))


def sample_from_top_p_given_top_k(
    top_k_logits: JTensor,
    top_k_indices: JTensor,
    prng_key: PRNGKey,
    temperature: float | JTensor,
    top_p: float | JTensor | None = None,
    topk_is_sorted: bool = True,
    logits_sum: JTensor | None = None,
    logits_sampler: BaseLogitsSampler | None = None,
    decode_loop_state: NestedMap | None = None,
) -> tuple[JTensor, JTensor]:
  """Samples among top-k logits after top-p filtering.

  Args:
    top_k_logits: [B, k].
    top_k_indices: [B, k] their token ids.
    prng_key: The random key (or [B] keys).
    temperature: A float or [B, 1].
    top_p: None, a float or [B, 1].
    topk_is_sorted: `top_k_logits` are in descending order.
    logits_sum: See `top_p_mask_logits`.
    logits_sampler: Draws the ids (default: DefaultCategoricalLogitsSampler).
    decode_loop_state: Passed to the sampler.

  Returns:
    (ids [B], their log-probabilities under softmax(top_k_logits) [B]).
  """
  filtered = _apply_top_p_given_top_k(top_k_logits, top_k_indices, top_p,
                                      topk_is_sorted, logits_sum)
  return _sample(filtered, prng_key, temperature, logits_sampler,
                 decode_loop_state)


def sample_from_top_k_and_top_p(
    logits: JTensor,
    prng_key: PRNGKey,
    temperature: float | JTensor,
    top_k: int,
    top_p: float | JTensor | None = None,
    per_example_top_k: JTensor | None = None,
    global_normalize: bool = False,
    top_k_recall_target: float = 1.0,
    logits_sampler: BaseLogitsSampler | None = None,
    decode_loop_state: NestedMap | None = None,
) -> tuple[JTensor, JTensor]:
  """Top-k, then top-p filtering, then sampling at `temperature`.

  Args:
    logits: [B, V] (or [B, ..., V]).
    prng_key: The random key (or [B] keys).
    temperature: A float or [B, 1].
    top_k: Keep the k most likely tokens (0: all).
    top_p: None, a float or [B, 1]: then keep the nucleus of mass top_p.
    per_example_top_k: [B] smaller k per example.
    global_normalize: See `_apply_top_k_and_top_p`.
    top_k_recall_target: Below 1, use approximate top-k.
    logits_sampler: Draws the ids.
    decode_loop_state: Passed to the sampler.

  Returns:
    (ids [B], log-probabilities under softmax(top-k logits) [B]).
  """
  filtered = _apply_top_k_and_top_p(logits, top_k, top_p, per_example_top_k,
                                    global_normalize, top_k_recall_target)
  return _sample(filtered, prng_key, temperature, logits_sampler,
                 decode_loop_state)


class BaseNextTokenSampler(
    base_hyperparams.FiddleBaseParameterizable, metaclass=abc.ABCMeta
):
  """Chooses the next token of every sequence in a decoding loop."""

  @abc.abstractmethod
  def __call__(
      self,
      model: base_layer.BaseLayer,
      logits: JTensor,
      temperature: float | JTensor,
      decode_loop_state: NestedMap,
      **kwargs: Any,
  ) -> NestedMap:
    """Chooses the next ids.

    Args:
      model: The model being decoded (its RNG stream gives the key).
      logits: [B, V] logits of the next token.
      temperature: A float or [B].
      decode_loop_state: The loop's state.
      **kwargs: Sampler-specific per-example inputs.

    Returns:
      NestedMap(new_ids [B], logits [B, V] (possibly modified; the loop's
      log-probabilities come from them), optional logprobs_at_new_ids [B]).
    """

  def init_decode_loop_state(
      self, decode_loop_state: NestedMap, model: Any = None,
      batch_size: int | None = None, eos_id: Any = None,
  ) -> NestedMap:
    """Adds the sampler's own entries to the loop state (none here)."""
    del model, batch_size, eos_id
    return decode_loop_state

  def post_process_decode_loop_state(self, decode_loop_state: NestedMap
                                     ) -> NestedMap:
    """Removes the sampler's own entries from the final loop state."""
    return decode_loop_state

  @classmethod
  def get_extra_kwargs(cls, inputs: NestedMap, num_samples: int
                       ) -> dict[str, Any]:
    """Constructor arguments taken from the input batch (none here)."""
    del inputs, num_samples
    return {}

  def _get_prng_key(self, model: Any, prng_key: JTensor | None = None
                    ) -> JTensor:
    """The sampling key: the model's, unless per-example keys are given.

    Per-example keys [B, ...] that are all DUMMY_PRNG_KEY stand for "none
    given": the model's next key split B ways replaces them. The model's
    stream advances either way (as in Pax); with `model` None, the given keys
    are used as they are.
    """
    if prng_key is None:
      return model.next_prng_key()
    if model is None:
      return prng_key
    split = jax.random.split(model.next_prng_key(), prng_key.shape[0])
    split = split.astype(prng_key.dtype)
    return jax.lax.cond(jnp.all(prng_key == DUMMY_PRNG_KEY), lambda: split,
                        lambda: prng_key)


class DefaultNextTokenSampler(BaseNextTokenSampler):
  """Top-k / top-p / epsilon sampling at a temperature; top_k = 1 is greedy.

  Attributes:
    top_k: Sample among the k most likely tokens (0: all; 1: greedy).
    top_p: If set, then among the nucleus of probability mass top_p.
    epsilon_p: If positive, drop tokens less likely than this first.
    global_normalize: Top-p over probabilities normalized on the whole
      vocabulary instead of the top k.
    top_k_recall_target: Below 1, approximate top-k.
    use_top_k_for_logprobs: Also return `logprobs_at_new_ids`, computed from
      the top-k logits.
    logits_sampler: Draws the ids from the filtered logits.
  """

  top_k: int = 40
  top_p: float | JTensor | None = None
  epsilon_p: float = 0.0
  global_normalize: bool = False
  top_k_recall_target: float = 1.0
  use_top_k_for_logprobs: bool = False
  logits_sampler: BaseLogitsSampler = pax_fiddle.instance_field(
      DefaultCategoricalLogitsSampler)

  def __post_init__(self):
    if self.top_k < 0:
      raise ValueError(f'DefaultNextTokenSampler: top_k must be >= 0, got '
                       f'{self.top_k}.')

  def __call__(
      self,
      model: base_layer.BaseLayer,
      logits: JTensor,
      temperature: float | JTensor,
      decode_loop_state: NestedMap,
      per_example_top_p: JTensor | None = None,
      per_example_top_k: JTensor | None = None,
      gumbel_prng_key: JTensor | None = None,
  ) -> NestedMap:
    """Samples the next ids; see BaseNextTokenSampler.

    top_k > 1 samples among the top k (then top p); top_k = 0 among the
    nucleus of the whole vocabulary, greedily if temperature is a float <= 0;
    top_k = 1 is greedy. The random key (model's or per-example) is only
    drawn when sampling.
    """
    top_p = self.top_p if per_example_top_p is None else per_example_top_p
    filtered = epsilon_mask_logits(logits, self.epsilon_p)
    out = NestedMap(logits=logits)
    if self.top_k > 1:
      top_p_logits, logprobs, indices = _apply_top_k_and_top_p(
          filtered, self.top_k, top_p, per_example_top_k,
          self.global_normalize, self.top_k_recall_target)
      pos, updates = self.logits_sampler(
          self._get_prng_key(model, gumbel_prng_key), top_p_logits, indices,
          temperature, decode_loop_state)
      out.new_ids = _get_argmax_ids(pos, indices)
      if self.use_top_k_for_logprobs:
        out.logprobs_at_new_ids = _get_argmax_ids(pos, logprobs)
      out.update(updates)
      return out
    sampled = self.top_k == 0 and (
        isinstance(temperature, jax.Array) or temperature > 0.0)
    if not sampled:
      out.new_ids = jnp.argmax(
          filtered if self.top_k else _maybe_top_p(filtered, top_p),
          axis=-1).astype(jnp.int32)
      return out
    out.new_ids, updates = self.logits_sampler(
        self._get_prng_key(model, gumbel_prng_key),
        _maybe_top_p(filtered, top_p), None, temperature, decode_loop_state)
    out.update(updates)
    return out


def _maybe_top_p(logits: JTensor, top_p: float | JTensor | None) -> JTensor:
  return logits if top_p is None else top_p_mask_logits(logits, top_p)
