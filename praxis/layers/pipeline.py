"""Pipeline parallelism over stages of layers (GPipe and circular schedules).

Public names: LayerwiseShardablePipelined, CircularLayerwiseShardablePipelined,
num_layers_per_stage.

A pipeline holds `num_stages` copies of one stage's layer, their variables
stacked along a leading `num_stages` dim (recorded in `repeat_prefix`, sharded
by `weight_split_dims_mapping.stages`, e.g. ['stage']). The batch is cut into
microbatches; in each of `num_microbatches + num_stages - 1` iterations every
stage runs on its own microbatch (one `nn.vmap` over the stage dim) and hands
its output to the next stage by rotating the stage dim, which XLA turns into
a collective permute when that dim is sharded. The stages idle at both ends
(the bubbles) compute on values that are thrown away; their variable updates,
summaries, auxiliary losses and gradients are masked out.

  pipe = base_layer.instantiate(pax_fiddle.Config(
      pipeline.LayerwiseShardablePipelined, name='pipe', num_stages=4,
      num_microbatches=8,
      single_stage_body=pax_fiddle.Config(
          linears.FeedForward, input_dims=8, output_dims=8)))
  variables = pipe.init(jax.random.PRNGKey(0), x)  # x [B, 8], 8 divides B.
  # variables['params']['body']['linear']['w'].shape == (4, 8, 8)
  y = pipe.apply(variables, x)  # The 4 stages applied one after another.

The circular schedule sends the microbatches `circular_repeat` (R) times round
the stages, so stage s holds layers s, s + L, s + 2L, ... (L stages); the
variables are [R, L, ...], layer r * L + s at [r, s].
"""

from __future__ import annotations

from collections.abc import Callable
import functools
from typing import Any

from flax import core as flax_core
from flax import linen as nn
import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import checkpoint_policy

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
NestedJTensor = pytypes.NestedJTensor
SplitDimsMapping = pytypes.SplitDimsMapping
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType

PARAMS = base_layer.PARAMS
NON_TRAINABLE = base_layer.NON_TRAINABLE
SUMMARIES = base_layer.SUMMARIES
AUX_LOSS = base_layer.AUX_LOSS
RANDOM = base_layer.RANDOM


def num_layers_per_stage(
    num_layers: int, num_stages: int, circular_repeat: int = 1,
    name: str = 'pipeline',
) -> int:
  """Layers in each stage's body when `num_layers` are pipelined.

  Args:
    num_layers: Layers of the whole (unpipelined) stack.
    num_stages: Pipeline stages.
    circular_repeat: Layers of a stage in the circular schedule.
    name: The pipelined layer, for the message.

  Returns:
    num_layers // (num_stages * circular_repeat).

  Raises:
    ValueError: if that does not divide evenly.
  """
  slots = num_stages * circular_repeat
  if num_stages <= 0 or circular_repeat <= 0 or num_layers % slots:
    raise ValueError(
        f'{name}: num_layers {num_layers} must be a multiple of num_stages '
        f'{num_stages} x circular_repeat {circular_repeat}.'
    )
  return num_layers // slots


def _to_microbatches(x: JTensor, num_microbatches: int, streams: int):
  """[B, ...] -> [M, B // M, ...]; microbatches stride through each stream.

  The batch is kept as the minor of the two new dims, so a sharding of the
  batch carries over to the microbatch; `streams` leading blocks of the batch
  (one per stage with `stream_io`) stay whole.

  Args:
    x: The batch.
    num_microbatches: M.
    streams: Number of contiguous blocks of the batch (dividing M).

  Returns:
    The microbatches.
  """
  mb = x.shape[0] // num_microbatches
  x = x.reshape((streams, mb, num_microbatches // streams) + x.shape[1:])
  return jnp.swapaxes(x, 1, 2).reshape((num_microbatches, mb) + x.shape[3:])


def _from_microbatches(x: JTensor, streams: int) -> JTensor:
  """The inverse of `_to_microbatches`."""
  m, mb = x.shape[:2]
  x = x.reshape((streams, m // streams, mb) + x.shape[2:])
  return jnp.swapaxes(x, 1, 2).reshape((m * mb,) + x.shape[3:])


def _is_stage(x: JTensor, stage: int) -> JTensor:
  """Boolean of x's shape, true along dim 0 at index `stage`."""
  return jax.lax.broadcasted_iota(jnp.int32, x.shape, 0) == stage


def _per_stage(mask: JTensor, x: JTensor) -> JTensor:
  """[L] mask broadcast against x [L, ...]."""
  return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def _unpack_summaries(tree: Any, name_fn: Callable[..., str]) -> Any:
  """{key_<type>: [R, L, ...]} -> {name_fn(key, r, s)<type>: [...]}."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out[key] = _unpack_summaries(value, name_fn)
      continue
    suffix = base_layer.get_summary_type_suffix(
        base_layer.get_summary_type_from_key(key)
    )
    base = base_layer.trim_summary_type_from_key(key)
    for r in range(value.shape[0]):
      for s in range(value.shape[1]):
        out[name_fn(base, r, s) + suffix] = value[r, s]
  return out


class LayerwiseShardablePipelined(base_layer.BaseLayer):
  """Runs `num_stages` copies of a stage body as a GPipe pipeline.

  The body maps its first input to an output of the same shapes; further
  positional and keyword inputs (paddings, masks) are per-example too and
  are microbatched alongside. Inputs are [B, ...] when `num_microbatches` or
  `microbatch_size` is set, else already [num_microbatches, ...].

  Attributes:
    num_stages: Number of stages (L); each variable of the body gains a
      leading dim of size L.
    single_stage_body: Template of one stage.
    num_microbatches: Cut the batch into this many microbatches.
    microbatch_size: Or cut it into microbatches of this size.
    unpack_summaries: Report each summary per stage (`<name>.stage<s>`),
      else as one [L, ...] array ([R, L, ...] for circular layers); each
      averages over the microbatches.
    stream_io: Keep the inputs and outputs in a buffer sharded over the
      stages and shifted towards stage 0 each iteration, instead of handing
      all inputs to stage 0 (needs num_microbatches divisible by L).
    polluting_bubbles_with_nan: Feed NaNs to the stages in bubbles (a test
      that bubbles leak into nothing).
    pipeline_broadcast_inputs: Pass the further inputs stage to stage with
      the data, instead of gathering each stage's microbatch of them.
    checkpoint_policy: What the rematerialized iteration keeps, besides the
      iteration input.
    optimizer_dims_mapping: Sharding of the stage dim in optimizer states.
    bf16_accum_in_fp32: Accumulate the gradients of bfloat16 variables over
      the iterations in float32.
    collect_intermediate_outputs: Pax's gathering of the stages' sown
      intermediates; not supported (True is refused).
    enable_bubble_grad_skipping: Kept for configs: the bubbles' gradients
      are always stopped (Pax's default, True; False computes them only to
      discard them).
  """

  num_stages: int = 1
  single_stage_body: LayerTpl | None = base_layer.template_field(None)
  num_microbatches: int | None = None
  microbatch_size: int | None = None
  unpack_summaries: bool = True
  stream_io: bool = False
  polluting_bubbles_with_nan: bool = False
  pipeline_broadcast_inputs: bool = False
  checkpoint_policy: AutodiffCheckpointType = (
      AutodiffCheckpointType.SAVE_ITERATION_INPUT
  )
  optimizer_dims_mapping: SplitDimsMapping = None
  bf16_accum_in_fp32: bool = False
  collect_intermediate_outputs: bool = False
  enable_bubble_grad_skipping: bool = True

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the stacked variables.

    Attributes:
      stages: One entry: the mesh axis of the stage dim, e.g. ['stage'].
    """

    stages: SplitDimsMapping = (None,)

  # -- Configuration ---------------------------------------------------------

  @property
  def _where(self) -> str:
    return f'{type(self).__name__} ({self.name})'

  def _check_config(self) -> None:
    if self.num_stages <= 0:
      raise ValueError(f'{self._where}: num_stages must be positive, got '
                       f'{self.num_stages}.')
    if self.single_stage_body is None:
      raise ValueError(f'{self._where}: single_stage_body must be set.')
    if self.collect_intermediate_outputs:
      raise NotImplementedError(
          f'{self._where}: collect_intermediate_outputs=True (gathering the '
          "stages' intermediates) is not supported.")
    if self.num_microbatches is not None and self.microbatch_size is not None:
      raise ValueError(f'{self._where}: set num_microbatches or '
                       'microbatch_size, not both.')
    for name in ('num_microbatches', 'microbatch_size'):
      if getattr(self, name) is not None and getattr(self, name) <= 0:
        raise ValueError(f'{self._where}: {name} must be positive, got '
                         f'{getattr(self, name)}.')
    stages = self.weight_split_dims_mapping.stages
    if stages is None or len(stages) != 1:
      raise ValueError(f'{self._where}: weight_split_dims_mapping.stages '
                       f'must have one entry, got {stages}.')

  def setup(self) -> None:
    self._check_config()
    self.create_child('body', self.single_stage_body)

  # Schedule knobs, overridden by the circular pipeline.
  def _num_repeats(self) -> int:
    """Passes of each microbatch round the stages."""
    return 1

  def _stacked_repeats(self) -> int:
    """Size of the per-stage layer dim of the variables (0: none)."""
    return 0

  def _num_microbatches(self, inputs: NestedJTensor) -> tuple[int, bool]:
    """(M, whether the inputs still need cutting), checking the batch."""
    leaves = jax.tree.leaves(inputs)
    if not leaves:
      raise ValueError(f'{self._where}: the inputs hold no arrays.')
    batch = leaves[0].shape[0]
    m = batch
    if self.num_microbatches is not None:
      m = self.num_microbatches
      if batch % m:
        raise ValueError(f'{self._where}: num_microbatches {m} does not '
                         f'divide the batch size {batch}.')
    elif self.microbatch_size is not None:
      if batch % self.microbatch_size:
        raise ValueError(f'{self._where}: microbatch_size '
                         f'{self.microbatch_size} does not divide the batch '
                         f'size {batch}.')
      m = batch // self.microbatch_size
    if self.stream_io and m % self.num_stages:
      raise ValueError(f'{self._where}: stream_io needs num_microbatches '
                       f'({m}) divisible by num_stages ({self.num_stages}).')
    needs_cutting = (
        self.num_microbatches is not None or self.microbatch_size is not None
    )
    return m, needs_cutting

  # -- Sharding --------------------------------------------------------------

  def _stage_axis(self) -> str | None:
    axis = self.weight_split_dims_mapping.stages[0]
    if axis is None or self.mesh_axis_names is None:
      return None
    return self.mesh_axis_names[axis] if isinstance(axis, int) else axis

  def _shard_stages(self, x: JTensor, dim: int = 0) -> JTensor:
    """Constrains dim `dim` of x to the stage axis (others left free)."""
    if self._stage_axis() is None:
      return x
    mapping = [None] * x.ndim
    mapping[dim] = self._stage_axis()
    free = [d for d in range(x.ndim) if d != dim]
    return base_layer.maybe_shard(x, mapping, self.mesh_axis_names, free)

  # -- One iteration: all stages at once -------------------------------------

  def _stage_fn(self, flags: Any, repeat_id: JTensor) -> Callable[..., Any]:
    """`fn(body, valid, x, args, kwargs)` vmapped over the stages.

    Args:
      flags: Mutability of the collections and the bfloat16 variables (a
        NestedMap made in `__call__`).
      repeat_id: [L] int, the layer each stage uses (circular schedule).

    Returns:
      The function; its inputs and outputs have a leading [L] dim.
    """
    init = self.is_initializing()

    def run(body, valid, x, args, kwargs):
      call = lambda layer, x, a, k: layer(x, *a, **k)
      if not init:
        call = self._masked(call, valid, flags)
      return call(body, x, args, kwargs)

    stages = nn.vmap(
        run,
        in_axes=0,
        out_axes=0,
        variable_axes={PARAMS: 0, NON_TRAINABLE: 0, SUMMARIES: 0, AUX_LOSS: 0},
        split_rngs={PARAMS: init, RANDOM: True},
        spmd_axis_name=self._stage_axis(),
        metadata_params={
            'x_times': self.num_stages,
            'sub_weight_split_dims_mapping': tuple(
                self.weight_split_dims_mapping.stages
            ),
            'optimizer_dims_mapping': self.optimizer_dims_mapping,
        },
    )
    if not self._stacked_repeats():
      return stages
    if init:
      return self._vmap_repeats(stages)
    return self._select_repeats(stages, repeat_id, flags)

  def _vmap_repeats(self, stages: Callable[..., Any]) -> Callable[..., Any]:
    """Creates the leading layer dim of the variables (circular)."""
    size = self._stacked_repeats()
    opt = self.optimizer_dims_mapping
    layers = nn.vmap(
        stages,
        in_axes=None,
        out_axes=0,
        axis_size=size,
        variable_axes={PARAMS: 0, NON_TRAINABLE: 0},
        split_rngs={PARAMS: True, RANDOM: True},
        metadata_params={
            'x_times': size,
            'sub_weight_split_dims_mapping': (None,),
            'optimizer_dims_mapping': None if opt is None else (None,),
        },
    )
    return lambda *a: jax.tree.map(lambda y: y[0], layers(*a))

  def _select_repeats(self, stages, repeat_id, flags) -> Callable[..., Any]:
    """Gives stage s its layer repeat_id[s] of variables [R, L, ...]."""

    def gather(v):  # Stage by stage, so each reads only its own slice.
      v = self._shard_stages(v, 1)
      return self._shard_stages(
          jax.vmap(lambda x, r: x[r], in_axes=(1, 0))(v, repeat_id)
      )

    def scatter(old, new):
      put = lambda x, u, r: x.at[r].set(u)
      out = jax.vmap(put, in_axes=(1, 0, 0), out_axes=1)(old, new, repeat_id)
      return self._shard_stages(out, 1)

    saved = {}

    def non_trainable_in(tree):
      saved['old'] = tree
      return jax.tree.map(gather, tree)

    stages = nn.map_variables(
        stages, PARAMS, trans_in_fn=lambda t: jax.tree.map(gather, t)
    )
    return nn.map_variables(
        stages, NON_TRAINABLE, trans_in_fn=non_trainable_in,
        trans_out_fn=lambda t: jax.tree.map(scatter, saved['old'], t),
        mutable=flags.non_trainable,
    )

  def _masked(self, call, valid, flags) -> Callable[..., Any]:
    """Wraps one stage's call so that a bubble (not `valid`) leaves no trace.

    In bubbles the gradients of the variables are stopped, variable updates
    undone and summaries and auxiliary losses zeroed.

    Args:
      call: `call(layer, x, args, kwargs)`.
      valid: Scalar bool, whether the stage holds a real microbatch.
      flags: See `_stage_fn`.

    Returns:
      The wrapped call.
    """

    def params_in(tree):
      if flags.bf16 is not None:
        tree = jax.tree.map(
            lambda v, f: v.astype(jnp.bfloat16) if f else v,
            tree, {PARAMS: flags.bf16.get('body', {})},
        )
      return jax.tree.map(
          lambda v: jnp.where(valid, v, jax.lax.stop_gradient(v)), tree
      )

    saved = {}

    def non_trainable_in(tree):
      saved['old'] = tree
      return tree

    def non_trainable_out(tree):
      return jax.tree.map(lambda old, new: jnp.where(valid, new, old),
                          saved['old'], tree)

    def zero_in_bubbles(tree):
      return jax.tree.map(lambda v: jnp.where(valid, v, jnp.zeros_like(v)),
                          tree)

    call = nn.map_variables(call, PARAMS, trans_in_fn=params_in)
    call = nn.map_variables(
        call, NON_TRAINABLE, trans_in_fn=non_trainable_in,
        trans_out_fn=non_trainable_out, mutable=flags.non_trainable,
    )
    for collection in (SUMMARIES, AUX_LOSS):
      call = nn.map_variables(
          call, collection, trans_out_fn=zero_in_bubbles,
          mutable=flags[collection],
      )
    return call

  # -- The schedule ----------------------------------------------------------

  def _valid(self, i: JTensor, m: int) -> JTensor:
    """[L] bool: which stages hold a real microbatch in iteration i."""
    done = i - jnp.arange(self.num_stages)
    return (done >= 0) & (done < m * self._num_repeats())

  def _init_state(self, data: Any, m: int) -> NestedMap:
    L = self.num_stages  # pylint: disable=invalid-name
    zeros = lambda shape, x: self._shard_stages(jnp.zeros(shape, x.dtype))
    state = NestedMap(
        i=jnp.zeros((), jnp.int32),
        shift=jax.tree.map(lambda x: zeros((L,) + x.shape[1:], x), data),
    )
    if self.stream_io:
      state.stream = jax.tree.map(
          lambda x: self._shard_stages(x.reshape((L, m // L) + x.shape[1:])),
          data,
      )
    if self._num_repeats() > 1:  # Last stage -> stage 0, per microbatch.
      state.circ = jax.tree.map(lambda x: zeros((L,) + x.shape, x), data)
    return state

  def _first_stage_inputs(self, i, m, padded, state) -> Any:
    """[L, ...] of which stage 0's entry is its input in iteration i."""
    if self.stream_io:
      k = i % (m // self.num_stages)
      first = jax.tree.map(lambda b: b[:, k], state.stream)
    else:
      first = jax.tree.map(lambda x: x[i % m], padded)
    if self._num_repeats() > 1:
      first = jax.tree.map(
          lambda f, c: jnp.where(i < m, f, c[:, i % m]), first, state.circ
      )
    return first

  def _next_state(self, i, m, out, state) -> NestedMap:
    L = self.num_stages  # pylint: disable=invalid-name
    rotated = jax.tree.map(
        lambda y: self._shard_stages(jnp.roll(y, 1, axis=0)), out
    )
    new = NestedMap(i=i + 1, shift=rotated)
    if self.stream_io:
      k = i % (m // L)

      def stream(buf, y):
        moved = jnp.where(_is_stage(y, L - 1), y, jnp.roll(buf[:, k], -1, 0))
        return jax.lax.dynamic_update_index_in_dim(buf, moved, k, axis=1)

      new.stream = jax.tree.map(stream, state.stream, out)
    if self._num_repeats() > 1:
      slot = (i - (L - 1)) % m
      new.circ = jax.tree.map(
          lambda buf, r: jax.lax.dynamic_update_index_in_dim(buf, r, slot, 1),
          state.circ, rotated,
      )
    return new

  def _iteration(self, m, padded, args, kwargs, flags, pipe, state):
    """One iteration of the schedule (the body of the `nn.scan`)."""
    L = self.num_stages  # pylint: disable=invalid-name
    i = state.i
    first = self._first_stage_inputs(i, m, padded, state)
    stages_in = jax.tree.map(
        lambda f, s: jnp.where(_is_stage(s, 0), f, s), first, state.shift
    )
    valid = self._valid(i, m)
    if self.polluting_bubbles_with_nan:
      stages_in = jax.tree.map(
          lambda x: jnp.where(_per_stage(valid, x), x, jnp.nan)
          if jnp.issubdtype(x.dtype, jnp.floating) else x,
          stages_in,
      )
    if self.stream_io or self._num_repeats() > 1:
      stages_in = jax.tree.map(
          lambda x: checkpoint_name(x, 'iteration_input'), stages_in
      )
    done = jnp.maximum(i - jnp.arange(L), 0)
    repeat_id = jnp.minimum(done // m, self._num_repeats() - 1)
    if self.pipeline_broadcast_inputs:
      x, args, kwargs = stages_in
    else:
      x = stages_in
      args, kwargs = jax.tree.map(
          lambda a: self._shard_stages(a[done % m]), (args, kwargs)
      )
    y = self._stage_fn(flags, repeat_id)(pipe.body, valid, x, args, kwargs)
    self._check_same_shapes(x, y)
    out = (y, args, kwargs) if self.pipeline_broadcast_inputs else y
    return self._next_state(i, m, out, state), (None if self.stream_io else y)

  def _check_same_shapes(self, x: Any, y: Any) -> None:
    shapes = lambda t: jax.tree.map(lambda a: (a.shape, a.dtype), t)
    if shapes(x) != shapes(y):
      raise ValueError(f'{self._where}: the stage body must return outputs '
                       f'shaped like its first input: got {shapes(y)} for '
                       f'{shapes(x)}.')

  def _run_schedule(self, data, args, kwargs, m, flags) -> Any:
    """The outputs [M, ...] of the last stage after all iterations."""
    L = self.num_stages  # pylint: disable=invalid-name
    total = m * self._num_repeats() + L - 1
    padded = None
    if not self.stream_io:  # [M, L, ...], zero but for stage 0.
      padded = jax.tree.map(
          lambda x: jnp.pad(x[:, None], [[0, 0], [0, L - 1]]
                            + [[0, 0]] * (x.ndim - 1)),
          data,
      )
    body = functools.partial(self._iteration, m, padded, args, kwargs, flags)
    body = nn.remat(
        body,
        prevent_cse=False,
        policy=jax.checkpoint_policies.save_from_both_policies(
            checkpoint_policy.custom_policy(self.checkpoint_policy),
            checkpoint_policy.custom_policy(
                AutodiffCheckpointType.SAVE_ITERATION_INPUT
            ),
        ),
    )
    carried = [NON_TRAINABLE] if flags.non_trainable else []
    scan = nn.scan(
        body,
        variable_axes={SUMMARIES: 0, AUX_LOSS: 0},
        variable_broadcast=[PARAMS] + ([] if carried else [NON_TRAINABLE]),
        variable_carry=carried,
        split_rngs={RANDOM: True},
        length=total,
    )
    scan = nn.map_variables(
        scan, SUMMARIES, mutable=flags[SUMMARIES],
        trans_out_fn=functools.partial(self._post_summaries, m=m),
    )
    scan = nn.map_variables(
        scan, AUX_LOSS, mutable=flags[AUX_LOSS],
        trans_out_fn=lambda t: jax.tree.map(
            lambda v: jnp.sum(v, axis=(0, 1)) / m, t
        ),
    )
    if flags.bf16 is not None:
      scan = nn.map_variables(scan, PARAMS, trans_in_fn=lambda t: jax.tree.map(
          lambda v, f: v.astype(jnp.float32) if f else v,
          t, {PARAMS: flags.bf16},
      ))
    state, ys = scan(self, self._init_state(data, m))
    if not self.stream_io:  # The last stage's last M outputs.
      return jax.tree.map(lambda y: y[total - m:, L - 1], ys)
    offset = (L - 1) % (m // L)
    first = state.stream[0] if self.pipeline_broadcast_inputs else state.stream
    return jax.tree.map(
        lambda b: jnp.roll(b, -offset, axis=1).reshape((m,) + b.shape[2:]),
        first,
    )

  def _post_summaries(self, tree: Any, m: int) -> Any:
    """Summaries [T, L, ...] -> each layer's mean over the microbatches."""
    stages, repeats = self.num_stages, self._num_repeats()
    total = m * repeats + stages - 1
    which = np.zeros((total, stages, repeats), np.float32)  # Iteration->layer
    for i in range(total):
      for s in range(stages):
        if 0 <= i - s < m * repeats:
          which[i, s, (i - s) // m] = 1.0 / m

    def per_layer(v):  # [R, L, ...]
      return jnp.einsum('tl...,tlr->rl...', v, which.astype(v.dtype))

    tree = jax.tree.map(per_layer, flax_core.unfreeze(tree))
    if not self._stacked_repeats():  # One layer per stage: average.
      tree = jax.tree.map(lambda v: jnp.mean(v, axis=0, keepdims=True), tree)
    if self.unpack_summaries:
      return _unpack_summaries(tree, self._summary_name)
    if not self._stacked_repeats():
      tree = jax.tree.map(lambda v: v[0], tree)
    return tree

  def _summary_name(self, key: str, repeat: int, stage: int) -> str:
    del repeat
    return f'{key}.stage{stage}'

  def _init_variables(self, data, args, kwargs, m, flags) -> Any:
    """Creates the variables with one pass of all stages."""
    L = self.num_stages  # pylint: disable=invalid-name
    first = lambda x: jnp.broadcast_to(x[0], (L,) + x.shape[1:])
    data, args, kwargs = jax.tree.map(first, (data, args, kwargs))
    if self.pipeline_broadcast_inputs:
      data, args, kwargs = data
    valid = jnp.ones((L,), bool)
    y = self._stage_fn(flags, jnp.zeros((L,), jnp.int32))(
        self.body, valid, data, args, kwargs
    )
    self._check_same_shapes(data, y)
    return jax.tree.map(lambda v: jnp.broadcast_to(v[0], (m,) + v.shape[1:]),
                        y)

  def __call__(
      self, inputs: NestedJTensor, *broadcast_inputs: Any,
      **broadcast_kwargs: Any,
  ) -> NestedJTensor:
    """Runs the microbatches through the stages.

    Args:
      inputs: The body's first input, threaded from stage to stage.
      *broadcast_inputs: Further positional inputs of every stage.
      **broadcast_kwargs: Keyword inputs of every stage.

    Returns:
      The last stage's output, shaped like `inputs`.
    """
    m, needs_cutting = self._num_microbatches(inputs)
    streams = self.num_stages if self.stream_io else 1
    args, kwargs = broadcast_inputs, broadcast_kwargs
    if needs_cutting:
      inputs, args, kwargs = jax.tree.map(
          functools.partial(_to_microbatches, num_microbatches=m,
                            streams=streams),
          (inputs, args, kwargs),
      )
    data = inputs
    if self.pipeline_broadcast_inputs:
      data, args, kwargs = (inputs, args, kwargs), (), {}
    flags = NestedMap(
        non_trainable=self.is_mutable_collection(NON_TRAINABLE),
        bf16=None,
    )
    flags[SUMMARIES] = self.is_mutable_collection(SUMMARIES)
    flags[AUX_LOSS] = self.is_mutable_collection(AUX_LOSS)
    if self.bf16_accum_in_fp32 and not self.is_initializing():
      flags.bf16 = jax.tree.map(
          lambda v: v.dtype == jnp.bfloat16,
          flax_core.unfreeze(self.variables.get(PARAMS, {})),
      )
    if self.is_initializing():
      out = self._init_variables(data, args, kwargs, m, flags)
    else:
      out = self._run_schedule(data, args, kwargs, m, flags)
    if needs_cutting:
      out = jax.tree.map(lambda y: _from_microbatches(y, streams), out)
    return out


class CircularLayerwiseShardablePipelined(LayerwiseShardablePipelined):
  """A pipeline whose microbatches go `circular_repeat` times round it.

  With L stages and R = circular_repeat, stage s holds layers s, s + L, ...,
  s + (R - 1) L (variables [R, L, ...], or [L, ...] with `share_weights`):
  each microbatch passes stages 0..L-1 with each stage's first layer, then
  again with the second, and so on. The bubbles shrink to (L - 1) of
  R * M + L - 1 iterations for M microbatches, at the cost of R times the
  transfers; M must be at least L. The last stage's output for a microbatch
  waits in a buffer (sharded over the stages) until stage 0 takes it.

  Attributes:
    circular_repeat: R, the layers of each stage.
    share_weights: All R layers of a stage share one set of variables.
    enable_async_circular_transfer: Kept for configs: the last-to-first
      transfer always goes through the buffer, at least one iteration ahead.
  """

  circular_repeat: int = 1
  share_weights: bool = False
  enable_async_circular_transfer: bool = True

  def _check_config(self) -> None:
    super()._check_config()
    if self.circular_repeat <= 0:
      raise ValueError(f'{self._where}: circular_repeat must be positive, '
                       f'got {self.circular_repeat}.')

  def _num_repeats(self) -> int:
    return self.circular_repeat

  def _stacked_repeats(self) -> int:
    return 0 if self.share_weights else self.circular_repeat

  def _num_microbatches(self, inputs: NestedJTensor) -> tuple[int, bool]:
    m, needs_cutting = super()._num_microbatches(inputs)
    if self.circular_repeat > 1 and m < self.num_stages:
      raise ValueError(f'{self._where}: the circular schedule needs '
                       f'num_microbatches ({m}) >= num_stages '
                       f'({self.num_stages}).')
    return m, needs_cutting

  def _summary_name(self, key: str, repeat: int, stage: int) -> str:
    if not self._stacked_repeats():
      return super()._summary_name(key, repeat, stage)
    return f'{key}.circular_layer{repeat}.stage{stage}'
