"""Repeat: one sub-layer applied `x_times` in a row, with stacked variables.

Public names: Repeat, SCAN_VARIABLE_AXES.

The loop is an `nn.scan` (one compiled body however deep the stack), the
body rematerialized with a `checkpoint_policy`. Each variable of the
sub-layer gains a leading dim of size `x_times`, recorded as `repeat_prefix`
in its `WeightHParams`:

  repeat = base_layer.instantiate(pax_fiddle.Config(
      repeats.Repeat, name='repeat', x_times=4,
      sub_tpl=pax_fiddle.Config(linears.FeedForward, input_dims=8,
                                output_dims=8)))
  repeat.abstract_init_with_metadata(x)['params']['sub']['linear']['w']
  # WeightHParams(shape=[8, 8], repeat_prefix=[4], ...)

`__call__` can call another method of the sub-layer (`method_name`) and
give each repetition its own slice of stacked keyword inputs
(`per_layer_kwargs`, `reversed_per_layer_kwargs`).

Decoder caches are stacked likewise, or, with `unroll_in_decode`, kept per
layer (`decoder_cache/<name>/layer{i}/...`) and decoded by a Python loop,
which avoids copying the cache through a loop in every decoding step.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
import copy
import functools
import math
from typing import Any

from flax import linen as nn
import jax
from jax import numpy as jnp

from praxis import asserts
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import checkpoint_policy

JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
SplitDimsMapping = pytypes.SplitDimsMapping
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType

PARAMS = base_layer.PARAMS
AUX_LOSS = base_layer.AUX_LOSS
SUMMARIES = base_layer.SUMMARIES
NON_TRAINABLE = base_layer.NON_TRAINABLE
RANDOM = base_layer.RANDOM
DECODE_CACHE = base_layer.DECODE_CACHE
PREFIX_DECODE_CACHE = base_layer.PREFIX_DECODE_CACHE
INTERMEDIATES = base_layer.INTERMEDIATES

SCAN_VARIABLE_AXES = {
    PARAMS: 0,
    AUX_LOSS: 0,
    SUMMARIES: 0,
    NON_TRAINABLE: 0,
    DECODE_CACHE: 0,
    PREFIX_DECODE_CACHE: 0,
    INTERMEDIATES: 0,
}
_CACHES = (DECODE_CACHE, PREFIX_DECODE_CACHE)


def _sum_over_layers(tree: Any) -> Any:
  """Auxiliary losses of the stacked layers, summed over the stack."""
  return jax.tree.map(lambda x: jnp.sum(x, axis=0), tree)


def _unpack(tree: Any, x_times: int) -> Any:
  """Stacked summaries [x_times, ...] -> lists of x_times values."""
  return jax.tree.map(lambda x: list(jnp.split(x, x_times)), tree)


def _repack(tree: Any) -> Any:
  """Lists of per-layer summaries -> stacked arrays."""
  return jax.tree.map(
      lambda x: jnp.concatenate(x) if isinstance(x, list) else x,
      tree,
      is_leaf=lambda x: isinstance(x, list),
  )


def _merge_prefix(tree: Any, n: int) -> Any:
  """Variables stacked on n leading dims -> on one (the scan's)."""
  return jax.tree.map(lambda x: jnp.reshape(x, (-1,) + x.shape[n:]), tree)


def _split_meta(hp: base_layer.WeightHParams, nd: tuple[int, ...]) -> Any:
  """The declaration of a variable scanned once, stacked on `nd` instead."""
  hp = copy.deepcopy(hp)
  n, rest = len(nd), list(hp.repeat_prefix)[1:]
  mapping = hp.repeat_prefix_split_dims_mapping or (-1,) * (1 + len(rest))
  hp.repeat_prefix = list(nd) + rest
  hp.repeat_prefix_split_dims_mapping = (-1,) * n + tuple(mapping)[1:]
  if hp.repeat_optimizer_dims_mapping is not None:
    hp.repeat_optimizer_dims_mapping = (-1,) * n + tuple(
        hp.repeat_optimizer_dims_mapping)[1:]
  for field in ('fan_in_axes', 'fan_out_axes'):
    axes = getattr(hp, field)
    if axes is not None:
      setattr(hp, field, [a + n - 1 for a in axes])
  return hp


def _split_prefix(tree: Any, nd: tuple[int, ...]) -> Any:
  """Variables stacked on the scan's one dim -> on the `nd` dims."""

  def one(x):
    if isinstance(x, base_layer.BoxedParam):
      value = jnp.reshape(x.value, nd + x.value.shape[1:])
      return x.replace(value=value, meta=_split_meta(x.meta, nd))
    return jnp.reshape(x, nd + x.shape[1:])

  return jax.tree.map(
      one, tree, is_leaf=lambda x: isinstance(x, base_layer.BoxedParam))


def _ensure_tuple(x: Any) -> tuple[Any, ...]:
  return x if isinstance(x, tuple) else (x,)


class Repeat(base_layer.BaseLayer):
  """Applies the sub-layer `x_times`, each time with its own variables.

  The sub-layer maps its first input to an output of the same structure;
  other inputs are passed to every repetition unchanged.

  Attributes:
    sub_tpl: Template of the sub-layer.
    x_times: Number of repetitions.
    unpack_summaries: Report each summary as x_times values (else one
      stacked array).
    checkpoint_policy: Which activations the backward pass keeps (the body is
      rematerialized with `checkpoint_policy.custom_policy`).
    unroll_in_decode: Decode with a Python loop over per-layer caches.
    sublayer_name: Name of the sub-layer (part of the variable paths).
    optimizer_dims_mapping: Sharding of the repeat dim in the optimizer
      states.
    collect_intermediate_outputs: Sow each repetition's output as
      `intermediates/repeat_intermediates`.
    return_intermediate_outputs: Return every repetition's output, stacked
      [x_times, ...], instead of the last.
    nd_prefix_shape: If set (multiplying to x_times), the variables are
      stacked on these leading dims (e.g. [stages, layers per stage]); the
      layers still run in one scan, in row-major order.
    positional_args_as_scan_carry: Thread all positional inputs through the
      repetitions (the sub-layer returns a tuple of them).
  """

  sub_tpl: LayerTpl | None = base_layer.template_field(None)
  x_times: int = 0
  unpack_summaries: bool = False
  checkpoint_policy: AutodiffCheckpointType = (
      AutodiffCheckpointType.SAVE_NOTHING
  )
  unroll_in_decode: bool = False
  sublayer_name: str = 'sub'
  optimizer_dims_mapping: SplitDimsMapping = None
  collect_intermediate_outputs: bool = False
  return_intermediate_outputs: bool = False
  nd_prefix_shape: Sequence[int] | None = None
  positional_args_as_scan_carry: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the stacked variables.

    Attributes:
      sub: Sharding of the repeat dim, e.g. [None] or ['stage'].
    """

    sub: SplitDimsMapping = None

  def setup(self) -> None:
    where = f'Repeat ({self.name})'
    if self.x_times <= 0:
      raise ValueError(f'{where}: x_times must be positive, got '
                       f'{self.x_times}.')
    if self.sub_tpl is None:
      raise ValueError(f'{where}: sub_tpl must be set.')
    nd = self.nd_prefix_shape
    if nd is not None and (not nd or math.prod(nd) != self.x_times):
      raise ValueError(f'{where}: nd_prefix_shape {nd} must multiply to '
                       f'x_times={self.x_times}.')
    if self._nd_shape() and (
        self.weight_split_dims_mapping.sub is not None
        or self.optimizer_dims_mapping is not None or self.unroll_in_decode):
      raise ValueError(
          f'{where}: nd_prefix_shape {nd} cannot be combined with '
          'weight_split_dims_mapping.sub, optimizer_dims_mapping or '
          'unroll_in_decode.')
    sub = self.weight_split_dims_mapping.sub
    if sub is not None and len(sub) != 1:
      raise ValueError(f'{where}: weight_split_dims_mapping.sub must have one '
                       f'entry, got {sub}.')
    self.create_child(self.sublayer_name, self.sub_tpl)

  def _nd_shape(self) -> tuple[int, ...] | None:
    """The variables' prefix shape if it has several dims, else None."""
    nd = self.nd_prefix_shape
    return tuple(nd) if nd is not None and len(nd) > 1 else None

  @property
  def sublayer(self) -> base_layer.BaseLayer:
    """The repeated layer."""
    return getattr(self, self.sublayer_name)

  # -- Scans ------------------------------------------------------------------

  def _scan(self, body_fn: Callable[..., Any], remat: bool) -> Callable:
    """`body_fn(sub, carry) -> (carry, y)` scanned over the stack."""
    if remat:
      body_fn = nn.remat(
          body_fn,
          prevent_cse=False,
          policy=checkpoint_policy.custom_policy(self.checkpoint_policy),
      )
    initializing = self.is_initializing()
    scan_fn = nn.scan(
        body_fn,
        variable_axes=SCAN_VARIABLE_AXES,
        split_rngs={PARAMS: initializing, RANDOM: True},
        length=self.x_times,
        metadata_params={
            'is_initializing': initializing,
            'sub_weight_split_dims_mapping': self.weight_split_dims_mapping.sub,
            'x_times': self.x_times,
            'optimizer_dims_mapping': self.optimizer_dims_mapping,
        },
    )
    nd = self._nd_shape()
    if nd:  # One scan over all the layers; variables stored on nd dims.
      scan_fn = nn.map_variables(
          scan_fn, [PARAMS, NON_TRAINABLE], mutable=True,
          trans_in_fn=functools.partial(_merge_prefix, n=len(nd)),
          trans_out_fn=functools.partial(_split_prefix, nd=nd))
    scan_fn = nn.map_variables(
        scan_fn,
        SUMMARIES,
        mutable=self.is_mutable_collection(SUMMARIES),
        trans_in_fn=_repack if self.unpack_summaries else lambda t: t,
        trans_out_fn=(
            functools.partial(_unpack, x_times=self.x_times)
            if self.unpack_summaries
            else lambda t: t
        ),
    )
    return nn.map_variables(
        scan_fn,
        AUX_LOSS,
        mutable=self.is_mutable_collection(AUX_LOSS),
        trans_out_fn=_sum_over_layers,
    )

  def _per_layer_caches(self, fn: Callable) -> Callable:
    """Stores the scanned (stacked) caches of `fn` as `layer{i}` subtrees."""

    def unstack(tree: dict[str, Any]) -> dict[str, Any]:
      return {
          collection: {
              f'layer{i}': jax.tree.map(lambda x, i=i: x[i], subtree)
              for i in range(self.x_times)
          }
          for collection, subtree in tree.items()
      }

    return nn.map_variables(
        fn,
        list(_CACHES),
        mutable=True,
        trans_in_fn=lambda tree: {},
        trans_out_fn=unstack,
    )

  def __call__(
      self,
      inputs: NestedJTensor,
      *args: Any,
      method_name: str | None = None,
      per_layer_kwargs: dict[str, NestedJTensor] | None = None,
      reversed_per_layer_kwargs: dict[str, NestedJTensor] | None = None,
      **kwargs: Any,
  ) -> Any:
    """Runs the stack on `inputs`.

    Args:
      inputs: The first input of the sub-layer, threaded through the stack.
      *args: Further positional inputs, the same for every repetition (or
        threaded too, with `positional_args_as_scan_carry`).
      method_name: Call this method of the sub-layer instead of `__call__`.
      per_layer_kwargs: Keyword inputs stacked [x_times, ...]: repetition i
        gets slice i.
      reversed_per_layer_kwargs: The same, stacked in reverse: repetition i
        gets slice x_times - 1 - i.
      **kwargs: Keyword inputs, the same for every repetition.

    Returns:
      The last repetition's output (or all of them, stacked, with
      `return_intermediate_outputs`).
    """
    if method_name is None:
      factory = lambda sub: sub
    else:
      factory = lambda sub: getattr(sub, method_name)
    return self.call_with_custom_method(
        inputs, *args, method_factory=factory,
        per_layer_kwargs=per_layer_kwargs,
        reversed_per_layer_kwargs=reversed_per_layer_kwargs, **kwargs)

  def _layer_kwargs(self, idx: JTensor | None, per_layer: Any,
                    reversed_per_layer: Any) -> dict[str, Any]:
    """The keyword inputs of repetition `idx` (traced) from stacked ones."""
    if idx is None:
      return {}
    kw = jax.tree.map(lambda x: jnp.asarray(x)[idx], dict(per_layer or {}))
    kw.update(jax.tree.map(lambda x: jnp.asarray(x)[self.x_times - 1 - idx],
                           dict(reversed_per_layer or {})))
    return kw

  def call_with_custom_method(
      self,
      inputs: NestedJTensor,
      *args: Any,
      method_factory: Callable[[base_layer.BaseLayer], Callable[..., Any]],
      per_layer_kwargs: dict[str, NestedJTensor] | None = None,
      reversed_per_layer_kwargs: dict[str, NestedJTensor] | None = None,
      **kwargs: Any,
  ) -> Any:
    """`__call__` with `method_factory(sub)` as each repetition's method."""
    indexed = (per_layer_kwargs is not None
               or reversed_per_layer_kwargs is not None)
    collect = (
        self.collect_intermediate_outputs or self.return_intermediate_outputs
    )

    def body_fn(sub, carry):
      layer_in, idx = carry if indexed else (carry, None)
      fn = method_factory(sub)
      layer_kw = self._layer_kwargs(idx, per_layer_kwargs,
                                    reversed_per_layer_kwargs)
      if self.positional_args_as_scan_carry:
        layer_out = _ensure_tuple(fn(*layer_in, **kwargs, **layer_kw))
      else:
        layer_out = fn(layer_in, *args, **kwargs, **layer_kw)
      asserts.assert_same_structure(layer_in, layer_out)
      new_carry = (layer_out, idx + 1) if indexed else layer_out
      return new_carry, layer_out if collect else None

    scan_fn = self._scan(body_fn, remat=True)
    if self.unroll_in_decode and self.is_mutable_collection(DECODE_CACHE):
      scan_fn = self._per_layer_caches(scan_fn)
    carry = (inputs,) + args if self.positional_args_as_scan_carry else inputs
    if indexed:
      carry = (carry, jnp.zeros((), jnp.int32))
    layer_out, intermediates = scan_fn(self.sublayer, carry)
    if indexed:
      layer_out = layer_out[0]
    if self.return_intermediate_outputs:
      return intermediates
    if self.collect_intermediate_outputs:
      self.sow(INTERMEDIATES, 'repeat_intermediates', intermediates)
    return layer_out

  # -- Decoding ---------------------------------------------------------------

  def _run_layer(self, fn: Callable, i: int, inputs: Any) -> Any:
    """`fn(sub, inputs)` on layer i's variables and its `layer{i}` caches."""
    key, saved = f'layer{i}', {}

    def select_layer(tree: dict[str, Any]) -> dict[str, Any]:
      saved.update(tree)
      return {col: dict(sub).get(key, {}) for col, sub in tree.items()}

    def restore_layer(tree: dict[str, Any]) -> dict[str, Any]:
      out = {col: dict(sub) for col, sub in saved.items()}
      for col, sub in tree.items():
        out.setdefault(col, {})[key] = sub
      return out

    mapped = nn.map_variables(
        fn,
        list(_CACHES),
        mutable=True,
        trans_in_fn=select_layer,
        trans_out_fn=restore_layer,
    )
    mapped = nn.map_variables(
        mapped,
        [PARAMS, NON_TRAINABLE],
        mutable=False,
        trans_in_fn=lambda tree: jax.tree.map(lambda x: x[i], tree),
    )
    mapped = nn.map_variables(mapped, [SUMMARIES, AUX_LOSS], mutable=False)
    return mapped(self.sublayer, inputs)

  def _run_unrolled(self, fn: Callable, inputs: Any) -> Any:
    out = inputs
    for i in range(self.x_times):
      out, _ = self._run_layer(fn, i, out)
    return out

  def _for_each_layer(self, fn: Callable[[base_layer.BaseLayer], None]):
    """Runs `fn(sub)` on every layer (decoding-state updates)."""

    def body_fn(sub, carry):
      fn(sub)
      return carry, None

    if self.unroll_in_decode:
      self._run_unrolled(body_fn, None)
    else:
      self._scan(body_fn, remat=False)(self.sublayer, None)

  def _quantize_fn(self, return_pspec: bool) -> Any:
    """The sub-layer's quantized variables (or their specs), stacked."""

    def body_fn(sub, carry):
      if return_pspec:
        return carry, sub.quantized_partition_specs()
      return carry, sub.quantize_weight()

    _, res = self._scan(body_fn, remat=False)(self.sublayer, None)
    res = {c: {self.sublayer_name: res[c]}
           for c in (PARAMS, NON_TRAINABLE) if c in res}
    if return_pspec:  # The stacking dim is not sharded.
      res = jax.tree.map(
          lambda x: base_layer.BoxedPartitionSpec(
              meta=jax.sharding.PartitionSpec(None, *x.meta)),
          res, is_leaf=lambda x: isinstance(x, base_layer.BoxedPartitionSpec))
    return res

  def quantize_weight(self) -> NestedJTensor:
    """The repeated sub-layer's quantized variables, stacked (MATERIALIZE)."""
    return self._quantize_fn(return_pspec=False)

  def quantized_partition_specs(self) -> Any:
    """Partition specs of `quantize_weight`, with the repeat dim unsharded."""
    return self._quantize_fn(return_pspec=True)

  def init_states(self, *args: Any, **kwargs: Any) -> None:
    """Calls `sub.init_states(*args, **kwargs)` on every layer."""
    self._for_each_layer(lambda sub: sub.init_states(*args, **kwargs))

  def extend_step(
      self, step_inputs: NestedJTensor, *args: Any, **kwargs: Any
  ) -> Any:
    """Runs `sub.extend_step` through the stack.

    Args:
      step_inputs: The first input of the bottom layer's `extend_step`.
      *args: Further positional inputs of every layer.
      **kwargs: Keyword inputs of every layer.

    Returns:
      The output of the top layer.
    """

    def body_fn(sub, layer_in):
      layer_out = sub.extend_step(layer_in, *args, **kwargs)
      asserts.assert_same_structure(layer_in, layer_out)
      return layer_out, None

    if self.unroll_in_decode:
      return self._run_unrolled(body_fn, step_inputs)
    scan_fn = nn.map_variables(
        self._scan(body_fn, remat=False), PREFIX_DECODE_CACHE, mutable=False
    )
    layer_out, _ = scan_fn(self.sublayer, step_inputs)
    return layer_out

  def transform_decode_state(
      self, transform_fn: Callable[[JTensor, int, int], JTensor]
  ) -> None:
    """Calls `sub.transform_decode_state(transform_fn)` on every layer."""
    self._for_each_layer(lambda sub: sub.transform_decode_state(transform_fn))

  def lazy_broadcast_prefix(
      self, num_suffix_samples: int, suffix_length: int
  ) -> None:
    """Calls `sub.lazy_broadcast_prefix` on every layer."""
    self._for_each_layer(
        lambda sub: sub.lazy_broadcast_prefix(num_suffix_samples, suffix_length)
    )

  def right_align_decode_state_with_prefix(
      self, max_prefix_size: int, right_align_fn: Callable[..., JTensor]
  ) -> None:
    """Calls `sub.right_align_decode_state_with_prefix` on every layer."""
    self._for_each_layer(
        lambda sub: sub.right_align_decode_state_with_prefix(
            max_prefix_size, right_align_fn
        )
    )
