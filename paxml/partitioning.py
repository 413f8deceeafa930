"""The device mesh and the one `jax.jit` call site of the runner.

Public names: Partitioner, create_partitioner, data_mesh_axes.

Both of Pax's paradigms run through the same code:

* "pmap" experiments (no `ici_mesh_shape` on the model) get a one-axis mesh
  `('data',)` over every device: weights replicated, batch split;
* "pjit"/SPMD experiments get the mesh `ici_mesh_shape` x `dcn_mesh_shape`
  named `mesh_axis_names`, with weights placed by their
  `weight_split_dims_mapping`.

Example:

  partitioner = partitioning.create_partitioner(task)
  metadata = partitioner.setup(train_input_specs)
  state = partitioner.initialize_state(prng_key)
  train_step = partitioner.partition(trainer_lib.train_step_single_learner)
  state, outputs = train_step(state, prng_key,
                              partitioner.preprocess_inputs(batch))
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import numpy as np
from paxml import mfu
from paxml import trainer_lib
from praxis import py_utils

NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec

# Axes that split the batch, in the order Pax experiments name them.
_DATA_AXES = ('replica', 'data', 'batch')


def data_mesh_axes(mesh_axis_names: Sequence[str]) -> tuple[str, ...]:
  """The mesh axes that the batch dimension is split over."""
  axes = tuple(a for a in mesh_axis_names if a in _DATA_AXES)
  return axes or tuple(mesh_axis_names[:1])


def _build_mesh(model: Any) -> jax.sharding.Mesh:
  if model.ici_mesh_shape is None:
    return jax.sharding.Mesh(np.array(jax.devices()), ('data',))
  names = model.mesh_axis_names
  if names is None or len(names) != len(model.ici_mesh_shape):
    raise ValueError(
        f'mesh_axis_names {names} must name each of the '
        f'{len(model.ici_mesh_shape)} dims of ici_mesh_shape '
        f'{model.ici_mesh_shape}.'
    )
  need = int(np.prod(model.ici_mesh_shape)) * int(
      np.prod(model.dcn_mesh_shape or [1])
  )
  if need != jax.device_count():
    raise ValueError(
        f'The mesh ici_mesh_shape={model.ici_mesh_shape} x dcn_mesh_shape='
        f'{model.dcn_mesh_shape} needs {need} devices; this job has '
        f'{jax.device_count()}.'
    )
  devices = py_utils.create_device_mesh(
      model.ici_mesh_shape,
      model.dcn_mesh_shape,
      contiguous_submeshes=bool(model.contiguous_submeshes),
  )
  return jax.sharding.Mesh(devices, tuple(names))


class Partitioner:
  """Places state and inputs on the mesh and compiles the step functions.

  Attributes:
    task: The instantiated task.
    mesh: The device mesh.
    metadata: The `TrainStateMetadata`, after `setup`.
  """

  def __init__(self, task: Any, mesh: jax.sharding.Mesh | None = None):
    self.task = task
    self.mesh = mesh or _build_mesh(task.model)
    self.metadata: trainer_lib.TrainStateMetadata | None = None
    self._input_specs = None
    self._input_shardings: dict[int, NamedSharding] = {}

  def setup(
      self, train_inputs_shape_dtype: Any, discard_opt_states: bool = False
  ) -> trainer_lib.TrainStateMetadata:
    """Computes the train state's shapes and shardings from input specs.

    Args:
      train_inputs_shape_dtype: Per-host input `ShapeDtypeStruct`s.
      discard_opt_states: Leave the optimizer state out (eval/decode jobs).

    Returns:
      The metadata (also kept as `self.metadata`).
    """
    self._input_specs = self.global_input_shapes(train_inputs_shape_dtype)
    with jax.set_mesh(self.mesh):
      self.metadata = trainer_lib.create_train_state_metadata(
          self.task, self._input_specs, discard_opt_states=discard_opt_states
      )
    return self.metadata

  # -- Shardings -------------------------------------------------------------

  def _named(self, specs: Any) -> Any:
    return jax.tree.map(
        lambda s: NamedSharding(self.mesh, s),
        specs,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )

  @property
  def state_shardings(self) -> Any:
    return self._named(self.metadata.partition_specs)

  @property
  def replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, PartitionSpec())

  def input_partition_spec(self, ndim: int) -> PartitionSpec:
    """How an input of rank `ndim` is split over the mesh.

    `train.inputs_split_mapping` is Pax's `NestedMap(map_1d=..., map_2d=...)`
    (one mesh-axis entry per dim, per rank) or one `PartitionSpec`; ranks it
    does not name get the batch dim split over the data axes.

    Args:
      ndim: The input's rank.

    Returns:
      The partition spec.
    """
    mapping = getattr(self.task.train, 'inputs_split_mapping', None)
    if isinstance(mapping, PartitionSpec):
      return mapping
    if mapping is not None and mapping.get(f'map_{ndim}d') is not None:
      return PartitionSpec(*mapping[f'map_{ndim}d'])
    axes = data_mesh_axes(self.mesh.axis_names)
    return PartitionSpec(axes, *([None] * (ndim - 1)))

  def input_sharding(self, ndim: int) -> NamedSharding:
    """The sharding of an input of rank `ndim` (cached: a hot path)."""
    if ndim not in self._input_shardings:
      self._input_shardings[ndim] = NamedSharding(
          self.mesh, self.input_partition_spec(ndim))
    return self._input_shardings[ndim]

  def input_shardings(self, inputs: Any) -> Any:
    return jax.tree.map(lambda x: self.input_sharding(np.ndim(x)), inputs)

  def global_input_shapes(self, per_host: Any) -> Any:
    """Per-host input shapes -> global ones (batch times the process count)."""

    def scale(x):
      shape = (x.shape[0] * jax.process_count(),) + tuple(x.shape[1:])
      return jax.ShapeDtypeStruct(shape, x.dtype)

    return jax.tree.map(scale, per_host)

  def to_global(self, host_batch: Any) -> Any:
    """Host-local numpy batch -> global `jax.Array`s sharded over the mesh."""
    shardings = self.input_shardings(host_batch)
    try:
      return jax.tree.map(
          jax.make_array_from_process_local_data, shardings, host_batch
      )
    except ValueError as e:
      raise ValueError(
          f'Cannot split the batch over the mesh {dict(self.mesh.shape)}: '
          f'{e}. The global batch size must be divisible by the number of '
          'devices on the data axes.'
      ) from e

  def preprocess_inputs(self, host_batch: Any) -> Any:
    """A host batch, ready for a step function of `partition`.

    On one process this is the batch itself: the compiled step copies it to
    the devices in its own call, split by `input_sharding` (a separate
    `device_put` costs more host time than the copy). On several processes
    the hosts' batches are assembled into global arrays (`to_global`).

    Args:
      host_batch: This host's batch (numpy arrays).

    Returns:
      What to pass as the `inputs` of a partitioned step.
    """
    if jax.process_count() == 1:
      return host_batch
    return self.to_global(host_batch)

  def check_divisible(self, inputs: Any) -> None:
    """Raises a clear error if an input cannot be split over the mesh."""
    for x in jax.tree.leaves(inputs):
      spec = self.input_sharding(np.ndim(x)).spec
      for dim, axes in zip(np.shape(x), spec):
        if axes is None:
          continue
        axes = axes if isinstance(axes, tuple) else (axes,)
        parts = int(np.prod([self.mesh.shape.get(a, 1) for a in axes]))
        if dim % parts:
          raise ValueError(
              f'Cannot split the batch over the mesh {dict(self.mesh.shape)}: '
              f'an input of shape {np.shape(x)} has a dim of {dim}, not '
              f'divisible by the {parts} devices of mesh axes {axes}. The '
              'global batch size must be divisible by the number of devices '
              'on the data axes.'
          )

  # -- Compilation -----------------------------------------------------------

  def initialize_state(self, prng_key: jax.Array) -> Any:
    """Creates the train state directly in its sharded layout."""

    def init(key):
      state, _ = trainer_lib.initialize_model_state(
          self.task,
          key,
          self._input_specs,
          var_weight_hparams=self.metadata.var_weight_hparams,
      )
      return state

    with jax.set_mesh(self.mesh):
      return jax.jit(init, out_shardings=self.state_shardings)(prng_key)

  def partition(
      self, step_fn: Callable[..., Any], is_eval: bool = False
  ) -> Callable[[Any, jax.Array, Any], Any]:
    """Compiles `step_fn(task, state, key, inputs)` over the mesh.

    This is the runner's one `jax.jit` call site: the state is donated (for
    training), kept in its sharding, the inputs are split by
    `input_sharding`, and the outputs are replicated. A train step folds the
    state's step into the key it is given, so the caller passes one base key
    throughout.

    Args:
      step_fn: A trainer_lib step function.
      is_eval: Whether it is an eval step (its state is not updated).

    Returns:
      `fn(state, prng_key, inputs) -> (state or None, outputs)`, taking
      inputs from `preprocess_inputs`, with a `flops` attribute (XLA's count
      for one call) after its first call.
    """
    step = functools.partial(
        step_fn,
        self.task,
        var_weight_hparams=self.metadata.var_weight_hparams,
    )

    def jit_for(inputs):
      return jax.jit(
          step,
          in_shardings=(self.state_shardings, self.replicated,
                        self.input_shardings(inputs)),
          out_shardings=(None if is_eval else self.state_shardings,
                         self.replicated),
          donate_argnums=() if is_eval else (0,),
      )

    return _CompiledStep(jit_for, self)


class _CompiledStep:
  """A step compiled ahead of time, once per input signature.

  Each new structure or shape of the inputs (e.g. a smaller last eval batch)
  is lowered and compiled once; later calls go straight to the executable.

  Attributes:
    flops: XLA's FLOP count of one call of the first executable (None if
      unknown or not compiled yet).
  """

  def __init__(self, jit_for: Callable[[Any], Any], partitioner: Partitioner):
    self._jit_for = jit_for
    self._partitioner = partitioner
    self._executables: dict[Any, Any] = {}
    self.flops = None

  def __call__(self, state: Any, prng_key: jax.Array, inputs: Any) -> Any:
    leaves, treedef = jax.tree.flatten(inputs)
    signature = (treedef, tuple((x.shape, x.dtype) for x in leaves))
    executable = self._executables.get(signature)
    if executable is None:
      executable = self._compile(signature, state, prng_key, inputs)
    return executable(state, prng_key, inputs)

  def _compile(self, signature: Any, state: Any, prng_key: jax.Array,
               inputs: Any) -> Any:
    self._partitioner.check_divisible(inputs)
    with jax.set_mesh(self._partitioner.mesh):
      executable = self._jit_for(inputs).lower(
          state, prng_key, inputs).compile()
    if not self._executables:
      self.flops = mfu.compiled_flops(executable)
    self._executables[signature] = executable
    return executable


def create_partitioner(task: Any) -> Partitioner:
  """The default partitioner of a task."""
  return Partitioner(task)
