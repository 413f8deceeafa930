"""The step functions of Pax: initialise, train, evaluate and decode.

Public names: StepFnOutput, BaseStepFnStaticArgs, TrainStateMetadata,
create_train_state_metadata, initialize_model_state, replicate_model_state,
initialize_replicate_model_state, initialize_partitioned_model_states,
get_excluded_var_masks, train_step_single_learner, eval_step_single_learner,
ApplyFnProtocol, LossFnProtocol, GradFnProtocol,
decode_step, decode_step_for_partitioner, is_summary_step; and, from the
private sibling `_trainer_setup`, RunningMode,
write_post_init_model_hparams_file, write_train_provenance_file,
adjust_input_params_for_small_batch, shard_on_batch_dim_partition_spec,
reshard_input_based_on_rank_fn, get_inputs_shape_dtype,
get_input_partition_specs, check_unique_names, bind_mesh,
get_train_input_specs_for_model_init.

Everything here is pure: no I/O and no `jax.jit`. The partitioner compiles
each step once over the global mesh; values are global, so nothing is
reduced across devices here. A step has the signature
`(task, state, prng_key, inputs, fprop_dtype, var_weight_hparams,
static_args) -> (new state or None, StepFnOutput)`:

  state, _ = trainer_lib.initialize_model_state(task, key, input_shapes)
  step = jax.jit(functools.partial(trainer_lib.train_step_single_learner,
                                   task))
  state, out = step(state, key, batch)  # out.loss, out.summary_tensors, ...

One training step: fold the step into the key; add variational noise; run
the model (`__call__`) with the train mutable collections; take the loss
from the task's loss aggregator; differentiate it w.r.t. the trainable
variables the learner does not exclude; let the learner update them (and
its optimizer state, EMA included); write back the non-trainable variables
the model updated. Summaries are the model's plus the learner's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
from paxml import _init_trace
from paxml import _summary_trees
from paxml import _trainer_setup
from paxml import checkpoint_types
from paxml import learners as learners_lib
from paxml import sgf
from paxml import tasks_lib
from paxml import train_states
from praxis import base_layer
from praxis import base_model
from praxis import py_utils
from praxis import trees

NestedMap = py_utils.NestedMap
TrainState = train_states.TrainState
TrainStateProvenance = train_states.TrainStateProvenance
PARAMS = base_layer.PARAMS
RANDOM = base_layer.RANDOM
NON_PAX_RNG_KEY = base_layer.NON_PAX_RNG_KEY
NON_TRAINABLE = base_layer.NON_TRAINABLE
SUMMARIES = base_layer.SUMMARIES
DECODE_CACHE = base_layer.DECODE_CACHE
_UPDATED_COLLECTIONS = [NON_TRAINABLE] + base_layer.NON_PAX_VAR_COLLECTION
AUX_LOSS = base_layer.AUX_LOSS
NON_PAX_VAR_COLLECTION = base_layer.NON_PAX_VAR_COLLECTION
PMAP_PARALLEL_AXIS_NAME = base_layer.PMAP_PARALLEL_AXIS_NAME
PartitionSpec = jax.sharding.PartitionSpec
TensorProvenance = train_states.TensorProvenance
CheckpointType = checkpoint_types.CheckpointType
EarlyStoppingFn = tasks_lib.EarlyStoppingFn
instantiate = base_layer.instantiate

RunningMode = _trainer_setup.RunningMode
write_post_init_model_hparams_file = (
    _trainer_setup.write_post_init_model_hparams_file)
write_train_provenance_file = _trainer_setup.write_train_provenance_file
adjust_input_params_for_small_batch = (
    _trainer_setup.adjust_input_params_for_small_batch)
shard_on_batch_dim_partition_spec = (
    _trainer_setup.shard_on_batch_dim_partition_spec)
reshard_input_based_on_rank_fn = _trainer_setup.reshard_input_based_on_rank_fn
get_inputs_shape_dtype = _trainer_setup.get_inputs_shape_dtype
get_input_partition_specs = _trainer_setup.get_input_partition_specs
check_unique_names = _trainer_setup.check_unique_names
bind_mesh = _trainer_setup.bind_mesh
get_train_input_specs_for_model_init = (
    _trainer_setup.get_train_input_specs_for_model_init)


@struct.dataclass
class StepFnOutput:
  """What a step function returns beside the state (a pytree).

  Attributes:
    loss: The mean loss (None in decode).
    weighted_scalars: The model's `(value, weight)` metrics.
    per_example_out: The model's per-example outputs.
    summary_tensors: Summaries, `{name_<type>: value}`.
    clu_metrics: Metric objects returned by `decode`.
  """

  loss: Any
  weighted_scalars: Any
  per_example_out: Any
  summary_tensors: Any
  clu_metrics: Any = None


@dataclasses.dataclass(frozen=True)
class BaseStepFnStaticArgs:
  """Hashable arguments a partitioned step is compiled for.

  Attributes:
    unpadded_global_batch_size: The global batch size before padding.
  """

  unpadded_global_batch_size: int | None = None


@dataclasses.dataclass
class TrainStateMetadata:
  """Shapes, declarations and shardings of a task's TrainState.

  Attributes:
    input_shape_dtype: The (global) input shapes the model was traced with.
    var_weight_hparams: `WeightHParams` of the model's variables.
    padded_global_shapes: TrainState of `ShapeDtypeStruct`s, padded to split
      evenly over the mesh.
    unpadded_global_shapes: The same, unpadded.
    partition_specs: TrainState of `PartitionSpec`s.
  """

  input_shape_dtype: Any
  var_weight_hparams: Any
  padded_global_shapes: TrainState | None = None
  unpadded_global_shapes: TrainState | None = None
  partition_specs: TrainState | None = None

  @property
  def partitioned_specs(self) -> TrainState | None:
    """Pax's name of `partition_specs`."""
    return self.partition_specs


def _shape_dtype(tree: Any) -> Any:
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _abstract_init(task: tasks_lib.SingleTask, inputs: Any,
                   do_eval: bool = False) -> Any:
  return task.model.abstract_init_with_metadata(
      _shape_dtype(inputs), do_eval=do_eval)


def _declarations(task: tasks_lib.SingleTask, inputs: Any,
                  do_eval: bool) -> Any:
  """`_abstract_init`, traced so that the initialisation can replay it
  (`_init_trace.init_variables`)."""
  rngs = jax.eval_shape(lambda: _rngs(jax.random.PRNGKey(0)))  # No compile.
  return _init_trace.declarations(task.model, rngs, _shape_dtype(inputs),
                                  do_eval)


def create_train_state_metadata(
    jax_task: tasks_lib.SingleTask,
    train_shape_dtype: Any,
    discard_opt_states: bool = False,
    do_eval: bool = False,
) -> TrainStateMetadata:
  """Traces the model on `train_shape_dtype` (no memory) for the metadata.

  Args:
    jax_task: The task.
    train_shape_dtype: Global input shapes (`jax.ShapeDtypeStruct`s).
    discard_opt_states: Leave optimizer states out.
    do_eval: Trace the model in eval mode.

  Returns:
    The metadata.
  """
  hps = _declarations(jax_task, train_shape_dtype, do_eval)
  return TrainStateMetadata(
      input_shape_dtype=train_shape_dtype,
      var_weight_hparams=hps,
      padded_global_shapes=jax_task.create_train_state_padded_shapes(
          hps, discard_opt_states),
      unpadded_global_shapes=jax_task.create_train_state_unpadded_shapes(
          hps, discard_opt_states),
      partition_specs=jax_task.create_train_state_partition_specs(
          hps, discard_opt_states))


def _rngs(prng_key: jax.Array) -> dict[str, jax.Array]:
  k1, k2, k3 = jax.random.split(prng_key, 3)
  return {PARAMS: k1, RANDOM: k2, NON_PAX_RNG_KEY: k3}


def initialize_model_state(
    jax_task: tasks_lib.SingleTask,
    prng_key: jax.Array,
    inputs_shape_dtype: Any,
    discard_opt_states: bool = False,
    do_init_checkpoint_rules: bool = True,
    is_eval: bool = False,
    checkpoint_type: Any = None,
    var_weight_hparams: Any = None,
) -> tuple[TrainState, TrainStateProvenance]:
  """Randomly initialised variables and fresh optimizer states.

  The model is initialised on zeros of the input shapes (arrays or
  `jax.ShapeDtypeStruct`s), in eval mode only if `is_eval` and the task does
  not `always_use_train_for_model_init`; then the task's
  `train.init_from_checkpoint_rules` are applied. Call it inside `jax.jit`
  (with `do_init_checkpoint_rules=False`) to create the state sharded.

  Args:
    jax_task: The task.
    prng_key: Randomness of the initialisation.
    inputs_shape_dtype: Shapes of one batch.
    discard_opt_states: Leave optimizer states out.
    do_init_checkpoint_rules: Apply `train.init_from_checkpoint_rules`.
    is_eval: Initialise for evaluation.
    checkpoint_type: The kind of the checkpoints the rules read.
    var_weight_hparams: The variables' `WeightHParams` (traced if None).

  Returns:
    (the step-0 TrainState, where each of its tensors came from).
  """
  model = jax_task.model
  do_eval = is_eval and not jax_task.train.always_use_train_for_model_init
  if var_weight_hparams is None:
    var_weight_hparams = _declarations(jax_task, inputs_shape_dtype, do_eval)
  inputs = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype),
                        inputs_shape_dtype)
  if model.fprop_dtype == jnp.bfloat16:
    inputs = jax.tree.map(_to_bfloat16, inputs)
  _, init_key = jax.random.split(prng_key)
  # The declarations' trace, replayed (the model is traced once for both).
  variables = _init_trace.init_variables(model, _rngs(init_key), inputs,
                                         do_eval)
  variables.pop('params_axes', None)
  state = jax_task.create_train_state(variables, var_weight_hparams,
                                      discard_opt_states)
  provenance = train_states.build_train_state_provenance(state)
  if do_init_checkpoint_rules and jax_task.train.init_from_checkpoint_rules:
    state, provenance, recompute = jax_task.apply_init_checkpoint_rules(
        state, provenance, checkpoint_type=checkpoint_type)
    if recompute and state.opt_states:  # E.g. an EMA of the loaded values.
      state = state.replace(opt_states=jax_task.create_opt_states(
          state.mdl_vars, var_weight_hparams))
  return state, provenance


def replicate_model_state(model_states: TrainState) -> TrainState:
  """Each array stacked once per local device, split over them (for pmap)."""
  devices = jax.local_devices()
  mesh = jax.sharding.Mesh(np.array(devices), ('_replica',))
  sharding = jax.sharding.NamedSharding(mesh, PartitionSpec('_replica'))

  def replicate(x):
    x = jnp.asarray(x)
    return jax.device_put(jnp.broadcast_to(x, (len(devices),) + x.shape),
                          sharding)

  return jax.tree.map(replicate, model_states)


def initialize_replicate_model_state(
    jax_task: tasks_lib.SingleTask,
    prng_key: jax.Array,
    inputs_shape_dtype: Any,
    discard_opt_states: bool = False,
) -> TrainState:
  """`initialize_model_state`, replicated over the local devices."""
  state, _ = initialize_model_state(jax_task, prng_key, inputs_shape_dtype,
                                    discard_opt_states)
  return replicate_model_state(state)


def initialize_partitioned_model_states(
    jax_task: tasks_lib.SingleTask,
    prng_key: jax.Array,
    global_input_shapes: Any,
    state_specs: TrainState,
    discard_opt_states: bool = False,
    global_mesh: jax.sharding.Mesh | None = None,
    checkpoint_type: Any = None,
    do_init_checkpoint_rules: bool = True,
    var_weight_hparams: Any = None,
    is_eval: bool = False,
) -> tuple[TrainState, TrainStateProvenance]:
  """`initialize_model_state` compiled to create the state sharded.

  Args:
    jax_task: The task.
    prng_key: Randomness of the initialisation.
    global_input_shapes: Global shapes of one batch.
    state_specs: The TrainState's `PartitionSpec`s on `global_mesh`.
    discard_opt_states: Leave optimizer states out (of the specs too).
    global_mesh: The mesh.
    checkpoint_type: The kind of the checkpoints the init rules read.
    do_init_checkpoint_rules: Apply `train.init_from_checkpoint_rules`.
    var_weight_hparams: The variables' `WeightHParams` (traced if None).
    is_eval: Initialise for evaluation.

  Returns:
    (the sharded step-0 TrainState, its provenance).
  """
  if global_mesh is None:
    raise ValueError('initialize_partitioned_model_states: global_mesh is '
                     'required.')
  if discard_opt_states:
    state_specs = state_specs.to_eval_state()
  shardings = jax.tree.map(
      lambda s: jax.sharding.NamedSharding(global_mesh, s), state_specs,
      is_leaf=lambda x: isinstance(x, PartitionSpec))

  def init(key):
    state, _ = initialize_model_state(
        jax_task, key, global_input_shapes, discard_opt_states,
        do_init_checkpoint_rules=False, is_eval=is_eval,
        var_weight_hparams=var_weight_hparams)
    return state

  with jax.set_mesh(global_mesh):
    state = jax.jit(init, out_shardings=shardings)(prng_key)
  provenance = train_states.build_train_state_provenance(state)
  if do_init_checkpoint_rules and jax_task.train.init_from_checkpoint_rules:
    state, provenance, _ = jax_task.apply_init_checkpoint_rules(
        state, provenance, train_state_partition_specs=state_specs,
        global_mesh=global_mesh, checkpoint_type=checkpoint_type)
  return state, provenance


def _to_bfloat16(x: Any) -> Any:
  return x.astype(jnp.bfloat16) if x.dtype == jnp.float32 else x


def _to_float32(x: Any) -> Any:
  return x.astype(jnp.float32) if x.dtype == jnp.bfloat16 else x


def _cast_for_fprop(fprop_dtype, mdl_vars, inputs, var_weight_hparams):
  """Casts float32 variables (unless they disallow it) and inputs to bf16."""
  if fprop_dtype == jnp.float32:
    return mdl_vars, inputs
  if fprop_dtype != jnp.bfloat16:
    raise ValueError(f'fprop_dtype {fprop_dtype} is not supported; use '
                     'jnp.float32 or jnp.bfloat16.')

  def cast(v, hp):
    if base_layer.var_disallow_bfloat16_conversion(hp):
      return v
    return _to_bfloat16(v)

  mdl_vars = jax.tree.map(cast, mdl_vars, var_weight_hparams)
  return mdl_vars, jax.tree.map(_to_bfloat16, inputs)


def _flatten_summaries(tree: Any) -> dict[str, Any]:
  """`{'a': {'b_scalar': x}}` -> `{'a/b_scalar': x}`; a repeated layer's list
  of per-layer values becomes `a/b_0_scalar`, `a/b_1_scalar`, ... (Pax's
  flatten_flax_summaries)."""
  return _summary_trees.flatten_flax_summaries(tree)


def _split_provenance(inputs: Any) -> tuple[Any, Any]:
  """Moves the input keys Pax keeps for eval matching out of the batch."""
  if not isinstance(inputs, dict):
    return {}, inputs
  return py_utils.filter_by_matching_keys(inputs, [py_utils.PROVENANCE_PREFIX])


def _with_keys(outputs: Any, extra: Any) -> Any:
  if not extra:
    return outputs
  merged = type(outputs)(outputs)
  merged.update(extra)
  return merged


def get_excluded_var_masks(
    var_weight_hparams: Any, learner: learners_lib.Learner
) -> tuple[Any, Any]:
  """(excluded from the gradient, excluded from the optimizer state).

  Args:
    var_weight_hparams: `WeightHParams` of all variables.
    learner: The learner (its exclusion regexes and optimizer).

  Returns:
    Two trees of bools shaped like the variables.
  """
  return (tasks_lib.get_excluded_var_mask_for_grad(var_weight_hparams, learner),
          tasks_lib.get_excluded_var_mask_for_opt(var_weight_hparams, learner))


def _single_learner(jax_task: tasks_lib.SingleTask) -> learners_lib.Learner:
  if len(jax_task.learners) != 1:
    raise ValueError('train_step_single_learner needs exactly one learner, '
                     f'the task has {len(jax_task.learners)}.')
  return jax_task.learners[0]


class ApplyFnProtocol(Protocol):
  """Runs the model's forward pass: `model.apply` by default."""

  def __call__(self, model: base_model.BaseModel, variables: Any,
               inputs: Any, mutable: Any, rngs: dict[str, jax.Array]
               ) -> tuple[tuple[Any, Any], Any]:
    """((weighted_scalars, per_example_out), updated collections)."""


class LossFnProtocol(Protocol):
  """The training loss of all the variables, with what else the step needs."""

  def __call__(self, mdl_vars: Any, inputs: Any, prng_key: jax.Array
               ) -> tuple[jax.Array, sgf.GradAuxInfo]:
    """(weighted loss, GradAuxInfo with the forward pass's outputs)."""


class GradFnProtocol(Protocol):
  """Differentiates a `LossFnProtocol` for the learner."""

  def __call__(self, loss_fn: LossFnProtocol, learner: learners_lib.Learner,
               mdl_vars: Any, inputs: Any, prng_key: jax.Array
               ) -> tuple[Any, Any]:
    """((loss, aux), gradients shaped like `mdl_vars`)."""


def _default_apply_fn(model, variables, inputs, mutable, rngs):
  return model.apply(variables, inputs, method=model.__call__,
                     mutable=mutable, rngs=rngs)


def _loss_fn(jax_task, context_p, fprop_dtype, var_weight_hparams,
             apply_fn: ApplyFnProtocol | None = None) -> LossFnProtocol:
  """The model's loss (from the task's loss aggregator) and its outputs."""
  apply_fn = apply_fn or _default_apply_fn

  def loss_fn(mdl_vars, inputs, prng_key):
    mdl_vars, inputs = _cast_for_fprop(fprop_dtype, mdl_vars, inputs,
                                       var_weight_hparams)
    with base_layer.JaxContext.new_context(hparams=context_p):
      (weighted_scalars, per_example_out), updated = apply_fn(
          jax_task.model, mdl_vars, inputs, jax_task.train.apply_mutable_list,
          _rngs(prng_key))
      weighted_loss, mean_loss, loss_weight = (
          jax_task.loss_aggregator_inst.aggregate(weighted_scalars))
    summaries = _flatten_summaries(updated.get(SUMMARIES, {}))
    fwd_updated = {c: updated[c] for c in _UPDATED_COLLECTIONS
                   if c in updated}
    aux = (mean_loss, weighted_scalars, fwd_updated, summaries,
           per_example_out)
    return (weighted_loss.astype(jnp.float32),
            sgf.GradAuxInfo(aux_info=aux, loss_weight=loss_weight))

  return loss_fn


def _default_grad_fn(excluded_for_grad, excluded_for_opt) -> GradFnProtocol:
  """Gradients of the variables not excluded (the learner's own rule)."""

  def grad_fn(loss_fn, learner, mdl_vars, inputs, prng_key):
    with_grad = tasks_lib.filter_vars_for_grad_or_opt(mdl_vars,
                                                      excluded_for_grad)
    no_grad = jax.tree.map(
        lambda v, e: v if e else py_utils.BpropMaskedNode(), mdl_vars,
        excluded_for_grad)

    def partial_loss(vars_grad, vars_nograd_and_inputs, key):
      vars_nograd, batch = vars_nograd_and_inputs
      merged = jax.tree.map(lambda e, g, n: n if e else g, excluded_for_grad,
                            vars_grad, vars_nograd)
      return loss_fn(merged, batch, key)

    stochastic = learner.stochastic_gradient or sgf.StandardGradient()
    values, grads = stochastic.grad_fn(partial_loss, with_grad,
                                       (no_grad, inputs), prng_key)
    # Variables with optimizer state but no gradient (non-trainable ones
    # under EMA) get zero gradients.
    grads = jax.tree.map(
        lambda eo, eg, v, g: jnp.zeros_like(v) if eg and not eo else g,
        excluded_for_opt, excluded_for_grad, mdl_vars, grads)
    return values, grads

  return grad_fn


def _is_weight_hparams(x: Any) -> bool:
  return isinstance(x, base_layer.WeightHParams)


def _learner_update(learner, states, grads, fwd_updated, var_weight_hparams,
                    excluded_for_grad, excluded_for_opt, expose=True):
  """(new variables, new optimizer state) after the learner's update."""
  mdl_vars = dict(states.mdl_vars)
  seen = dict(states.mdl_vars)
  # The optimizer (EMA) sees the statistics the model updated (in their
  # stored dtype, also after a bfloat16 forward pass), unless `expose` is
  # False for the non-trainable ones; the new state has them either way.
  for c in set(fwd_updated) & set(mdl_vars):
    mdl_vars[c] = jax.tree.map(lambda new, old: new.astype(old.dtype),
                               fwd_updated[c], mdl_vars[c])
    if expose or c != NON_TRAINABLE:
      seen[c] = mdl_vars[c]
  vars_opt = tasks_lib.filter_vars_for_grad_or_opt(seen, excluded_for_opt)
  hps_opt = tasks_lib.filter_vars_for_grad_or_opt(var_weight_hparams,
                                                  excluded_for_opt)
  # Variables overwritten with their gradient have no optimizer state: the
  # optimizer sees the others' gradients only.
  updates, new_opt_state = learner.update_states(
      tasks_lib.filter_vars_for_grad_or_opt(grads, excluded_for_opt),
      states.opt_states[0], vars_opt, hps_opt)
  vars_opt = learner.apply_gradient(vars_opt, updates, hps_opt)
  vars_opt = jax.tree.map(
      lambda hp, g, v: g.astype(hp.dtype or g.dtype)
      if base_layer.var_overwrite_with_gradient(hp) else v,
      var_weight_hparams, grads, vars_opt, is_leaf=_is_weight_hparams)
  mdl_vars = jax.tree.map(lambda e, old, new: old if e else new,
                          excluded_for_grad, mdl_vars, vars_opt)
  # Variables excluded by the learner's regexes stay as they were, even
  # non-trainable ones the model updated.
  fixed = tasks_lib.get_excluded_var_mask_for_grad_or_opt(
      var_weight_hparams, learner, mask_all_non_trainable=False)
  mdl_vars = jax.tree.map(lambda e, old, new: old if e else new, fixed,
                          states.mdl_vars, mdl_vars)
  return mdl_vars, new_opt_state


def train_step_single_learner(
    jax_task: tasks_lib.SingleTask,
    states: TrainState,
    prng_key: jax.Array,
    inputs: Any,
    fprop_dtype: Any = jnp.float32,
    var_weight_hparams: Any = None,
    static_args: BaseStepFnStaticArgs | None = None,
    grad_fn: GradFnProtocol | None = None,
    apply_fn: ApplyFnProtocol | None = None,
    expose_updated_nontrainables_to_learner: bool = True,
) -> tuple[TrainState, StepFnOutput]:
  """One training step (see the module doc).

  Args:
    jax_task: The task (one learner).
    states: The TrainState.
    prng_key: Randomness of the step (the step number is folded in).
    inputs: The global batch.
    fprop_dtype: jnp.float32, or jnp.bfloat16 to compute in bfloat16.
    var_weight_hparams: The variables' `WeightHParams` (traced if None).
    static_args: Unused.
    grad_fn: Computes `((loss, aux), grads)` (default: the gradient of the
      learner's trainable variables, by its `stochastic_gradient`).
    apply_fn: Runs the forward pass for the default `grad_fn` (default:
      `model.apply`).
    expose_updated_nontrainables_to_learner: Let the learner (its EMA) see
      the non-trainable variables the forward pass updated.

  Returns:
    (the state one step later, StepFnOutput with the mean loss, the model's
    weighted scalars and per-example outputs, and the summaries).
  """
  del static_args
  learner = _single_learner(jax_task)
  context_p = base_layer.JaxContext.HParams(
      do_eval=False, summary_verbosity=jax_task.summary_verbosity)
  prng_key = jax.random.fold_in(prng_key, states.step)
  if var_weight_hparams is None:
    var_weight_hparams = _abstract_init(jax_task, inputs)
  fwd_vars = jax_task.maybe_adjust_train_state(
      states.step, states.mdl_vars, var_weight_hparams, prng_key)
  _, subkey = jax.random.split(prng_key)
  excluded_for_grad, excluded_for_opt = get_excluded_var_masks(
      var_weight_hparams, learner)
  grad_fn = grad_fn or _default_grad_fn(excluded_for_grad, excluded_for_opt)
  (_, aux), grads = grad_fn(
      _loss_fn(jax_task, context_p, fprop_dtype, var_weight_hparams,
               apply_fn), learner, fwd_vars, inputs, subkey)
  mean_loss, weighted_scalars, fwd_updated, fwd_summaries, per_example = (
      aux.aux_info)

  with base_layer.JaxContext.new_context(hparams=context_p):
    learner.plot_learning_rate(states.step)
    mdl_vars, new_opt_state = _learner_update(
        learner, states, grads, fwd_updated, var_weight_hparams,
        excluded_for_grad, excluded_for_opt,
        expose_updated_nontrainables_to_learner)
    new_states = states.new_state(mdl_vars=mdl_vars,
                                  opt_states=[new_opt_state])
    if jax_task.train.variable_norm_summary:
      _add_variable_norm_summaries(new_states.mdl_vars)
    _add_dp_summaries(getattr(aux, 'dp_aux_info', None))
    bwd_summaries = base_layer.all_global_summaries()

  summaries = NestedMap(fwd_summaries)
  summaries.update(bwd_summaries)
  return new_states, StepFnOutput(
      loss=mean_loss, weighted_scalars=weighted_scalars,
      per_example_out=per_example, summary_tensors=summaries)


def is_summary_step(train_p: Any, steps_done: Any) -> Any:
  """Whether the train program writes summaries once `steps_done` are done.

  Every `summary_interval_steps`, and after the last step. Works on Python
  ints (the program's loop) and on traced step counts (inside the step).

  Args:
    train_p: The task's `train` settings.
    steps_done: Steps completed, the current one included.

  Returns:
    A bool, or a traced bool.
  """
  interval = max(int(train_p.summary_interval_steps or 1), 1)
  return (steps_done % interval == 0) | (steps_done == train_p.num_train_steps)


def _add_variable_norm_summaries(mdl_vars: Any) -> None:
  """`vars/<path>`: the root mean square of each float variable, every step.

  As in Pax, every call computes them. The train program runs this full
  step only on the steps that write or accumulate summaries (the others run
  the loss-only variant, from which XLA drops this pass over the variables),
  so the step needs no condition here: a condition on the summary interval
  made accumulated means count zeros for the steps it skipped, and tied the
  compiled step to `num_train_steps` (a restart with another step count
  missed the persistent compilation cache).

  Args:
    mdl_vars: The variables after the update.
  """
  paths = jax.tree.leaves(trees.to_path_tree(mdl_vars))
  for path, v in zip(paths, jax.tree.leaves(mdl_vars)):
    if jnp.issubdtype(v.dtype, jnp.inexact):
      base_layer.add_global_summary(
          f'vars/{path}', jnp.sqrt(jnp.mean(jnp.square(v.astype(jnp.float32)))))


def _add_dp_summaries(dp_aux_info: Any) -> None:
  """`dp_metrics/...` summaries of a DP-SGD gradient's statistics, as Pax."""
  if not dp_aux_info:
    return
  for key, value in dp_aux_info.items():
    leaves = jax.tree_util.tree_leaves_with_path(value)
    if len(leaves) == 1 and not leaves[0][0]:
      name = 'mean_' + key if key == 'per_core_grad_norm' else key
      base_layer.add_global_summary(f'dp_metrics/{name}', value)
      continue
    for path, leaf in leaves:
      suffix = '/'.join(str(getattr(k, 'key', getattr(k, 'idx', k)))
                        for k in path)
      base_layer.add_global_summary(f'dp_metrics/{key}/{suffix}', leaf)


def _maybe_ema_vars(states: TrainState, use_ema: bool) -> Any:
  """EMA variables when asked and the state still has optimizer states."""
  if use_ema and states.opt_states:
    return tasks_lib.extract_ema(states).mdl_vars
  return states.mdl_vars


def eval_step_single_learner(
    jax_task: tasks_lib.SingleTask,
    states: TrainState,
    prng_key: jax.Array,
    inputs: Any,
    fprop_dtype: Any = jnp.float32,
    var_weight_hparams: Any = None,
    static_args: BaseStepFnStaticArgs | None = None,
) -> tuple[None, StepFnOutput]:
  """One evaluation step: the model in eval mode, no state change.

  The variables are `states.mdl_vars`, or their EMA when
  `train.eval_use_ema_states` is set and `states` still holds optimizer
  states (a state from `extract_ema` or `to_eval_state` is used as is).

  Args:
    jax_task: The task.
    states: The TrainState.
    prng_key: Randomness (the step number is folded in).
    inputs: The global batch.
    fprop_dtype: jnp.float32 or jnp.bfloat16.
    var_weight_hparams: The variables' `WeightHParams` (needed for bf16).
    static_args: Unused.

  Returns:
    (None, StepFnOutput with the mean loss, metrics, per-example outputs
    and summaries).
  """
  del static_args
  model = jax_task.model
  context_p = base_layer.JaxContext.HParams(
      do_eval=True, summary_verbosity=jax_task.summary_verbosity)
  prng_key = jax.random.fold_in(prng_key, states.step)
  mdl_vars = _maybe_ema_vars(states, jax_task.train.eval_use_ema_states)
  if fprop_dtype != jnp.float32 and var_weight_hparams is None:
    var_weight_hparams = _abstract_init(jax_task, inputs)
  enum_keys, inputs = _split_provenance(inputs)
  mdl_vars, inputs = _cast_for_fprop(fprop_dtype, mdl_vars, inputs,
                                     var_weight_hparams)
  with base_layer.JaxContext.new_context(hparams=context_p):
    (weighted_scalars, per_example_out), updated = model.apply(
        mdl_vars, inputs, mutable=jax_task.evaluate.apply_mutable_list,
        method=model.__call__, rngs=_rngs(prng_key))
    _, mean_loss, _ = jax_task.loss_aggregator_inst.aggregate(
        weighted_scalars)
  per_example_out = _with_keys(per_example_out, enum_keys)
  out = StepFnOutput(
      loss=mean_loss, weighted_scalars=weighted_scalars,
      per_example_out=per_example_out,
      summary_tensors=_flatten_summaries(updated.get(SUMMARIES, {})))
  if fprop_dtype == jnp.bfloat16:
    out = jax.tree.map(_to_float32, out)
  return None, out


def decode_step(
    model: base_model.BaseModel,
    states: TrainState,
    prng_key: jax.Array,
    var_weight_hparams: Any,
    inputs: Any,
    fprop_dtype: Any = jnp.float32,
    apply_mutable_list: Any = tuple(tasks_lib.DECODE_DEFAULT_MUTABLE_LIST),
    decode_method: str = 'decode',
) -> tuple[tuple[Any, Any, Any], dict[str, Any]]:
  """Runs `model.<decode_method>` on a batch, in eval mode.

  Args:
    model: The model.
    states: The (eval) TrainState; its `mdl_vars` are used.
    prng_key: Randomness (the step number is folded in).
    var_weight_hparams: The variables' `WeightHParams` (for bf16).
    inputs: The global batch.
    fprop_dtype: jnp.float32 or jnp.bfloat16.
    apply_mutable_list: Collections the model may change.
    decode_method: The model method to run.

  Returns:
    ((weighted_scalars, results, metrics), updated_vars): what the decode
    method returned (a 2-tuple gets empty metrics; provenance keys of the
    inputs are added to `results`), and the collections it changed, without
    the decode cache; `updated_vars[SUMMARIES]` holds its summaries (nested,
    in float32).
  """
  context_p = base_layer.JaxContext.HParams(do_eval=True, summary_verbosity=2)
  prng_key = jax.random.fold_in(prng_key, states.step)
  enum_keys, inputs = _split_provenance(inputs)
  mdl_vars, inputs = _cast_for_fprop(fprop_dtype, states.mdl_vars, inputs,
                                     var_weight_hparams)
  with base_layer.JaxContext.new_context(hparams=context_p):
    outputs, updated = model.apply(
        mdl_vars, inputs, method=getattr(model, decode_method),
        rngs=_rngs(prng_key), mutable=list(apply_mutable_list))
  updated.pop(DECODE_CACHE, None)
  if len(outputs) == 2:
    outputs = (outputs[0], outputs[1], {})
  weighted_scalars, results, metrics = outputs
  results = _with_keys(results, enum_keys)
  if SUMMARIES in updated:
    updated[SUMMARIES] = jax.tree.map(_to_float32, updated[SUMMARIES])
  return (weighted_scalars, results, metrics), updated


def decode_step_for_partitioner(
    jax_task: tasks_lib.SingleTask,
    states: TrainState,
    prng_key: jax.Array,
    inputs: Any,
    fprop_dtype: Any = jnp.float32,
    var_weight_hparams: Any = None,
    static_args: BaseStepFnStaticArgs | None = None,
) -> tuple[None, StepFnOutput]:
  """`decode_step` with the step-function signature of the other steps.

  Uses the EMA variables when `train.decode_use_ema_states` is set and the
  state holds optimizer states.

  Returns:
    (None, StepFnOutput(loss=None, weighted_scalars, per_example_out=the
    decode results, summary_tensors (flat), clu_metrics=the metrics)).
  """
  del static_args
  states = TrainState(
      step=states.step, opt_states=[],
      mdl_vars=_maybe_ema_vars(states, jax_task.train.decode_use_ema_states))
  if fprop_dtype != jnp.float32 and var_weight_hparams is None:
    var_weight_hparams = _abstract_init(jax_task, inputs, do_eval=True)
  (weighted_scalars, results, metrics), updated = decode_step(
      jax_task.model, states, prng_key, var_weight_hparams, inputs,
      fprop_dtype, jax_task.decode.apply_mutable_list)
  return None, StepFnOutput(
      loss=None, weighted_scalars=weighted_scalars, per_example_out=results,
      summary_tensors=_flatten_summaries(updated.get(SUMMARIES, {})),
      clu_metrics=metrics)


# Pax's private name, used by Pax's own partitioner code.
_decode_step_for_partitioner = decode_step_for_partitioner
