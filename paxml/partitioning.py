"""The device mesh and the one `jax.jit` call site of the runner.

Public names: Partitioner, PjitPartitioner, PmapPartitioner, StepFn,
PartitionedStepFn, create_partitioner,
create_experiment_or_default_partitioner, get_step_fn, filter_nestedmap,
data_mesh_axes.

Both of Pax's paradigms run through the same code, one `jax.jit` over a
mesh (there is no `jax.pmap` here):

* `PmapPartitioner` (the models without `ici_mesh_shape`): a one-axis mesh
  `('data',)` over every device: weights replicated, the global batch split;
* `PjitPartitioner` (SPMD models): the mesh `ici_mesh_shape` x
  `dcn_mesh_shape` named `mesh_axis_names`, weights placed by their
  `weight_split_dims_mapping`.

Example (Pax's protocol):

  partitioner = partitioning.create_partitioner(task)
  partitioner.setup(task, init_key, train_input_specs)
  key, state, _ = partitioner.initialize_prng_key_and_train_state(
      root_key, None, checkpoint_type=None)
  train_step, input_pspecs = partitioner.partition(
      trainer_lib.train_step_single_learner, input_specs, is_eval=False)
  state, outputs = train_step(
      state, partitioner.preprocess_prng_key(key),
      partitioner.preprocess_inputs(train_input, batch, input_pspecs))
"""

from __future__ import annotations

import abc
import contextlib
import functools
from typing import Any, Callable, Protocol, Sequence

from absl import logging
import jax
import numpy as np
from paxml import _partitioned_step
from paxml import checkpoint_types
from paxml import train_states
from paxml import trainer_lib
from praxis import py_utils
from praxis import trees

NamedSharding = jax.sharding.NamedSharding
PartitionSpec = jax.sharding.PartitionSpec
RunningMode = trainer_lib.RunningMode
CheckpointType = checkpoint_types.CheckpointType
TrainState = train_states.TrainState
TrainStateProvenance = train_states.TrainStateProvenance
StepFnOutput = trainer_lib.StepFnOutput
BaseStepFnStaticArgs = trainer_lib.BaseStepFnStaticArgs
TrainStateMetadata = trainer_lib.TrainStateMetadata

# Axes that split the batch, in the order Pax experiments name them.
_DATA_AXES = ('replica', 'data', 'batch')


def data_mesh_axes(mesh_axis_names: Sequence[str]) -> tuple[str, ...]:
  """The mesh axes that the batch dimension is split over."""
  axes = tuple(a for a in mesh_axis_names if a in _DATA_AXES)
  return axes or tuple(mesh_axis_names[:1])


def filter_nestedmap(full_specs: Any, partial_specs: Any) -> Any:
  """The part of `full_specs` whose keys (and list items) `partial_specs` has.

  Dicts keep their own type (dict or NestedMap); lists are matched item by
  item; anything else (PartitionSpecs included) is a leaf taken whole.

  Args:
    full_specs: A nest of dicts and lists.
    partial_specs: A nest with a subset of its keys.

  Returns:
    `full_specs` restricted to the structure of `partial_specs`.
  """
  if isinstance(full_specs, dict):
    return type(full_specs)(
        (k, filter_nestedmap(full_specs[k], partial_specs[k]))
        for k in partial_specs)
  if isinstance(full_specs, list):
    if len(full_specs) != len(partial_specs):
      raise ValueError(
          f'filter_nestedmap: a list of {len(full_specs)} items cannot be '
          f'filtered by one of {len(partial_specs)}.')
    return [filter_nestedmap(f, p) for f, p in zip(full_specs, partial_specs)]
  return full_specs


class StepFn(Protocol):
  """What `Partitioner.partition` compiles (a trainer_lib step function)."""

  def __call__(self, jax_task: Any, train_state: Any, prng_key: jax.Array,
               inputs: Any, fprop_dtype: Any, var_weight_hparams: Any,
               static_args: BaseStepFnStaticArgs | None = None
               ) -> tuple[Any, StepFnOutput]:
    ...


class PartitionedStepFn(Protocol):
  """What `Partitioner.partition` returns."""

  def __call__(self, train_state: Any, prng_key: jax.Array, inputs: Any,
               static_args: BaseStepFnStaticArgs | None = None
               ) -> tuple[Any, StepFnOutput]:
    ...


def _build_mesh(model: Any, device_mesh: np.ndarray | None = None
                ) -> jax.sharding.Mesh:
  """The task's mesh, on `device_mesh` (an array of devices) if given."""
  if model.ici_mesh_shape is None:
    devices = jax.devices() if device_mesh is None else device_mesh
    return jax.sharding.Mesh(np.asarray(devices).reshape(-1), ('data',))
  names = model.mesh_axis_names
  if names is None or len(names) != len(model.ici_mesh_shape):
    raise ValueError(
        f'mesh_axis_names {names} must name each of the '
        f'{len(model.ici_mesh_shape)} dims of ici_mesh_shape '
        f'{model.ici_mesh_shape}.'
    )
  if device_mesh is not None:
    return jax.sharding.Mesh(np.asarray(device_mesh), tuple(names))
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


class Partitioner(metaclass=abc.ABCMeta):
  """Places the train state and inputs on devices and compiles step functions.

  Pax's protocol: `setup` (the task and its input shapes), then
  `get_train_state_metadata`, `initialize_prng_key_and_train_state` (when no
  checkpoint was restored), `partition` for each step function, and for each
  call `preprocess_prng_key` and `preprocess_inputs`.
  """

  def __init__(self, init_is_eval: bool = False):
    """Constructor.

    Args:
      init_is_eval: Trace the model in eval mode for its metadata (unless the
        task's `train.always_use_train_for_model_init`).
    """
    self._init_is_eval = init_is_eval
    self._jax_task = None
    self._init_key = None
    self._job_log_dir = None
    self._train_inputs_shape_dtype = None
    self._train_state_metadata = None

  def setup(self, jax_task: Any, init_key: jax.Array | None,
            train_inputs_shape_dtype: Any, train_input_pipeline: Any = None,
            job_log_dir: Any = None) -> None:
    """Takes the task and the shapes of the inputs the model is traced with.

    Args:
      jax_task: The instantiated task.
      init_key: Randomness of the initialisation (kept for Pax's callers).
      train_inputs_shape_dtype: Shapes of a training batch; or None, to read
        them from `train_input_pipeline`'s next batch.
      train_input_pipeline: The training input (if no shapes are given).
      job_log_dir: The run's directory.
    """
    if bool(train_inputs_shape_dtype) == bool(train_input_pipeline):
      raise ValueError('Partitioner.setup: give exactly one of '
                       'train_inputs_shape_dtype and train_input_pipeline.')
    self._jax_task = jax_task
    self._init_key = init_key
    self._job_log_dir = job_log_dir
    self._train_state_metadata = None
    if train_input_pipeline is not None:
      batch = train_input_pipeline.peek_padded()
      if batch is None:
        raise ValueError(f'Partitioner.setup: the training input '
                         f'{train_input_pipeline.name!r} produced no batch.')
      train_inputs_shape_dtype = trees.get_shape_dtype(batch)
    self._train_inputs_shape_dtype = train_inputs_shape_dtype

  @property
  def train_inputs_shape_dtype(self) -> Any:
    """The input shapes given to `setup`."""
    if self._train_inputs_shape_dtype is None:
      raise ValueError('Partitioner: call setup() first.')
    return self._train_inputs_shape_dtype

  @property
  def global_mesh(self) -> jax.sharding.Mesh | None:
    return None

  def check_input_spec(self, batch: Any) -> None:
    """Raises ValueError if `batch` lacks inputs of the setup shapes.

    Batch sizes are not compared; the other dims and dtypes are.

    Args:
      batch: A host batch.
    """
    drop_batch = lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], x.dtype)
    spec = jax.tree.map(drop_batch, self.train_inputs_shape_dtype)
    got = jax.tree.map(drop_batch, batch)
    if not trees.is_subset(spec, got):
      raise ValueError(
          'The input batch does not match the input specs the model was '
          f'initialised with (batch dims left out): expected {spec}, got '
          f'{got}.')

  def preprocess_input_config(self, input_p: Any) -> Any:
    """Sets the input config's host index and count for this process."""
    if not input_p.num_infeed_hosts:
      input_p.num_infeed_hosts = jax.process_count()
    input_p.infeed_host_index = jax.process_index()
    return input_p

  @property
  def _init_do_eval(self) -> bool:
    if self._jax_task.train.always_use_train_for_model_init:
      return False
    return self._init_is_eval

  def get_train_state_metadata(
      self, discard_opt_states: bool = False,
      unpadded_global_batch_size: int | None = None) -> TrainStateMetadata:
    """The train state's shapes and partition specs (computed once).

    Args:
      discard_opt_states: Leave the optimizer states out (eval/decode).
      unpadded_global_batch_size: Unused.

    Returns:
      The metadata.
    """
    del unpadded_global_batch_size
    if self._train_state_metadata is None:
      mesh = self.global_mesh
      with (contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)):
        self._train_state_metadata = trainer_lib.create_train_state_metadata(
            self._jax_task, self.train_inputs_shape_dtype,
            discard_opt_states=False, do_eval=self._init_do_eval)
    metadata = self._train_state_metadata
    if not discard_opt_states:
      return metadata
    eval_state = lambda s: None if s is None else s.to_eval_state()
    return TrainStateMetadata(
        input_shape_dtype=metadata.input_shape_dtype,
        var_weight_hparams=metadata.var_weight_hparams,
        padded_global_shapes=eval_state(metadata.padded_global_shapes),
        unpadded_global_shapes=eval_state(metadata.unpadded_global_shapes),
        partition_specs=eval_state(metadata.partition_specs))

  @abc.abstractmethod
  def initialize_prng_key_and_train_state(
      self, root_prng_key: jax.Array, train_state: Any, checkpoint_type: Any,
      discard_opt_states: bool | None = False) -> tuple[jax.Array, Any, Any]:
    """(root key, train state, its provenance or None if restored)."""

  @abc.abstractmethod
  def preprocess_prng_key(self, prng_key: jax.Array) -> jax.Array:
    """The key as a partitioned step takes it."""

  @abc.abstractmethod
  def preprocess_inputs(self, input_pipeline: Any, padded_inputs: Any,
                        partition_specs: Any) -> Any:
    """A host batch as a partitioned step takes it."""

  @abc.abstractmethod
  def partition(self, step_fn: StepFn, inputs_shape_dtype: Any,
                is_eval: bool) -> tuple[PartitionedStepFn, Any]:
    """(the compiled step function, the partition specs of its inputs)."""


class PjitPartitioner(Partitioner):
  """The runner's partitioner: one `jax.jit` over the task's mesh.

  The state is donated to train steps, kept in its sharding, inputs are split
  by `input_partition_spec`, outputs are replicated.
  """

  def __init__(self, init_is_eval: bool, reshard_inputs: bool, task: Any,
               device_mesh: np.ndarray | None = None):
    """Constructor.

    Args:
      init_is_eval: Trace the model in eval mode for its metadata.
      reshard_inputs: Assemble host batches into global arrays on several
        processes (on one, the compiled step places them itself).
      task: The task (or its config): its model names the mesh.
      device_mesh: The devices, shaped like the mesh (default: all of them,
        laid out by `py_utils.create_device_mesh`).
    """
    super().__init__(init_is_eval)
    self._reshard_inputs = reshard_inputs
    self._mesh = _build_mesh(task.model, device_mesh)
    self._input_shardings: dict[int, NamedSharding] = {}

  @property
  def global_mesh(self) -> jax.sharding.Mesh:
    return self._mesh

  def preprocess_input_config(self, input_p: Any) -> Any:
    input_p = super().preprocess_input_config(input_p)
    return trainer_lib.adjust_input_params_for_small_batch(input_p, self._mesh)

  # -- Shardings -------------------------------------------------------------

  def state_shardings(self, discard_opt_states: bool = False) -> Any:
    """`NamedSharding`s of the train state (or of the eval state)."""
    specs = self.get_train_state_metadata(discard_opt_states).partition_specs
    return jax.tree.map(lambda s: NamedSharding(self._mesh, s), specs,
                        is_leaf=lambda x: isinstance(x, PartitionSpec))

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
    mapping = getattr(self._jax_task.train, 'inputs_split_mapping', None)
    if isinstance(mapping, PartitionSpec):
      return mapping
    if mapping is not None and mapping.get(f'map_{ndim}d') is not None:
      return PartitionSpec(*mapping[f'map_{ndim}d'])
    axes = data_mesh_axes(self._mesh.axis_names)
    return PartitionSpec(axes, *([None] * (ndim - 1)))

  def input_sharding(self, ndim: int) -> NamedSharding:
    """The sharding of an input of rank `ndim` (cached: a hot path)."""
    if ndim not in self._input_shardings:
      self._input_shardings[ndim] = NamedSharding(
          self._mesh, self.input_partition_spec(ndim))
    return self._input_shardings[ndim]

  def input_partition_specs(self, inputs: Any) -> Any:
    """`input_partition_spec` of each input (arrays or shapes)."""
    return jax.tree.map(lambda x: self.input_partition_spec(len(x.shape)),
                        inputs)

  def check_divisible(self, inputs: Any) -> None:
    """Raises a clear error if an input cannot be split over the mesh."""
    for x in jax.tree.leaves(inputs):
      spec = self.input_sharding(np.ndim(x)).spec
      for dim, axes in zip(np.shape(x), spec):
        if axes is None:
          continue
        axes = axes if isinstance(axes, tuple) else (axes,)
        if any(a not in self._mesh.shape for a in axes):
          continue  # jax names the unknown axis itself.
        parts = int(np.prod([self._mesh.shape[a] for a in axes]))
        if dim % parts:
          raise ValueError(
              f'Cannot split the batch over the mesh {dict(self._mesh.shape)}:'
              f' an input of shape {np.shape(x)} has a dim of {dim}, not '
              f'divisible by the {parts} devices of mesh axes {axes}. The '
              'global batch size must be divisible by the number of devices '
              'on the data axes.'
          )

  # -- Pax's protocol --------------------------------------------------------

  def initialize_prng_key_and_train_state(
      self, root_prng_key: jax.Array, train_state: Any, checkpoint_type: Any,
      discard_opt_states: bool | None = False) -> tuple[jax.Array, Any, Any]:
    """Initialises the state sharded unless one was restored.

    Args:
      root_prng_key: The root key; the initialisation takes a split of it.
      train_state: A restored state, or None.
      checkpoint_type: The kind of the checkpoints init rules read.
      discard_opt_states: Leave the optimizer states out.

    Returns:
      (the root key after the split, the state, its provenance: None for a
      restored state).
    """
    root_prng_key, init_key = jax.random.split(root_prng_key)
    if train_state is not None:
      return root_prng_key, train_state, None
    metadata = self.get_train_state_metadata()
    state, provenance = trainer_lib.initialize_partitioned_model_states(
        self._jax_task, init_key, metadata.input_shape_dtype,
        metadata.partition_specs, discard_opt_states=bool(discard_opt_states),
        global_mesh=self._mesh, checkpoint_type=checkpoint_type,
        var_weight_hparams=metadata.var_weight_hparams,
        is_eval=self._init_do_eval)
    return root_prng_key, state, provenance

  def preprocess_prng_key(self, prng_key: jax.Array) -> jax.Array:
    """One global key: every step folds its own step number in."""
    return prng_key

  def preprocess_inputs(self, input_pipeline: Any, padded_inputs: Any,
                        partition_specs: Any) -> Any:
    """A host batch, ready for a step function of `partition`.

    On one process this is the batch itself: the compiled step copies it to
    the devices in its own call, split by `input_sharding` (a separate
    `device_put` costs more host time than the copy). On several processes
    (with `reshard_inputs`) the hosts' batches become global arrays.

    Args:
      input_pipeline: The input the batch came from (or None).
      padded_inputs: This host's batch (numpy arrays).
      partition_specs: Their specs, from `partition` (or None).

    Returns:
      What to pass as the `inputs` of a partitioned step.
    """
    if jax.process_count() == 1 or not self._reshard_inputs:
      return padded_inputs
    if partition_specs is None:
      partition_specs = self.input_partition_specs(padded_inputs)
    if input_pipeline is not None:
      return input_pipeline.reshard_for_spmd(padded_inputs, self._mesh,
                                             partition_specs)
    return jax.tree.map(
        lambda x, s: jax.make_array_from_process_local_data(
            NamedSharding(self._mesh, s), x),
        padded_inputs, partition_specs)

  def partition(self, step_fn: StepFn, inputs_shape_dtype: Any,
                is_eval: bool) -> tuple[PartitionedStepFn, Any]:
    """Compiles `step_fn` over the mesh (the runner's one `jax.jit`).

    The step gets the task, the model's `fprop_dtype` and the variables'
    `WeightHParams`. Train steps take and return the full state (donated);
    eval steps take the eval state (`to_eval_state`) and return None.

    Args:
      step_fn: A trainer_lib step function.
      inputs_shape_dtype: Shapes of its inputs (for the returned specs).
      is_eval: Whether it is an eval or decode step.

    Returns:
      (fn(state, prng_key, inputs, static_args=None) -> (state or None,
      StepFnOutput), with a `flops` attribute after its first call; the
      inputs' partition specs).
    """
    metadata = self.get_train_state_metadata(discard_opt_states=is_eval)
    step = functools.partial(
        step_fn, self._jax_task,
        fprop_dtype=self._jax_task.model.fprop_dtype,
        var_weight_hparams=metadata.var_weight_hparams)
    state_shardings = self.state_shardings(discard_opt_states=is_eval)
    replicated = NamedSharding(self._mesh, PartitionSpec())

    def jit_for(inputs, static_args, fn=None):
      return jax.jit(
          fn or functools.partial(step, static_args=static_args),
          in_shardings=(state_shardings, replicated,
                        jax.tree.map(lambda x: self.input_sharding(
                            np.ndim(x)), inputs)),
          out_shardings=(None if is_eval else state_shardings, replicated),
          donate_argnums=() if is_eval else (0,),
      )

    compiled = _partitioned_step.CompiledStep(jit_for, self._mesh,
                                              self.check_divisible)
    input_specs = None
    if inputs_shape_dtype is not None:
      input_specs = self.input_partition_specs(inputs_shape_dtype)
    return compiled, input_specs


class PmapPartitioner(PjitPartitioner):
  """Pax's data-parallel partitioner, as a one-axis `('data',)` mesh.

  Weights are replicated on every device and the global batch is split over
  them, under the same `jax.jit` as `PjitPartitioner` (no `jax.pmap`: states
  carry no leading device dimension and batches are global).
  """

  def __init__(self, init_is_eval: bool,
               device_mesh: np.ndarray | None = None):
    """Constructor.

    Args:
      init_is_eval: Trace the model in eval mode for its metadata.
      device_mesh: The devices (default: all of them).
    """
    Partitioner.__init__(self, init_is_eval)
    self._reshard_inputs = True
    devices = jax.devices() if device_mesh is None else device_mesh
    self._mesh = jax.sharding.Mesh(np.asarray(devices).reshape(-1),
                                   ('data',))
    self._input_shardings = {}
    logging.info('Data parallelism over %d devices.', self._mesh.size)


def get_step_fn(mode: RunningMode) -> tuple[StepFn, bool]:
  """(the trainer_lib step function of `mode`, whether it is an eval step)."""
  if int(mode.has_train) + int(mode.has_eval) + int(mode.has_decode) != 1:
    raise ValueError(f'get_step_fn: {mode} must be exactly one of TRAIN, '
                     'EVAL and DECODE.')
  if mode.has_train:
    return trainer_lib.train_step_single_learner, False
  if mode.has_eval:
    return trainer_lib.eval_step_single_learner, True
  return trainer_lib.decode_step_for_partitioner, True


def create_partitioner(
    jax_task: Any,
    init_is_eval: bool = False,
    reshard_inputs: bool = False,
    auto_sharding_mode: RunningMode | None = None,
    auto_sharding_input_params: Any = None,
) -> Partitioner:
  """The default partitioner of a task.

  Args:
    jax_task: The instantiated task.
    init_is_eval: Trace the model in eval mode for its metadata.
    reshard_inputs: Assemble host batches into global arrays on several
      processes (models with a mesh; the data-parallel ones always do).
    auto_sharding_mode: Not supported (XLA auto-sharding); logged and
      ignored.
    auto_sharding_input_params: Ignored with it.

  Returns:
    A `PmapPartitioner` for models without `ici_mesh_shape`, else a
    `PjitPartitioner`.
  """
  del auto_sharding_input_params
  if auto_sharding_mode:
    logging.warning('Auto-sharding is not supported; the weights are placed '
                    'by their annotations.')
  if jax_task.model.ici_mesh_shape is None:
    return PmapPartitioner(init_is_eval)
  return PjitPartitioner(init_is_eval, reshard_inputs, jax_task)


def create_experiment_or_default_partitioner(
    *, experiment_config: Any, jax_task: Any, running_mode: RunningMode,
    checkpoint_type: Any, input_p: Any, enable_auto_sharding: bool,
    init_is_eval: bool = False) -> Partitioner:
  """The experiment's own `partitioner()`, else `create_partitioner`'s."""
  del checkpoint_type
  partitioner = experiment_config.partitioner()
  if partitioner is not None:
    return partitioner
  return create_partitioner(
      jax_task, init_is_eval=init_is_eval, reshard_inputs=True,
      auto_sharding_mode=running_mode if enable_auto_sharding else None,
      auto_sharding_input_params=input_p if enable_auto_sharding else None)
