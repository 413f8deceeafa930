"""SingleTask: a model, its learner, and how to train, evaluate and decode.

Public names: SingleTask, CheckpointLoadingRules, LOAD_ALL,
TRAIN_DEFAULT_MUTABLE_LIST, EVAL_DEFAULT_MUTABLE_LIST,
DECODE_DEFAULT_MUTABLE_LIST, get_excluded_var_mask_for_grad_or_opt,
get_excluded_var_mask_for_grad, get_excluded_var_mask_for_opt,
filter_vars_for_grad_or_opt, create_state, create_state_unpadded_shapes,
create_state_padded_shapes, create_state_partition_specs, is_vectorized,
has_ema, extract_ema, get_optax_opt_load_rules, get_praxis_opt_state_regex.

A task is configured, then built:

  task_p = tasks_lib.SingleTask.HParams(name='regression')
  task_p.model = pax_fiddle.Config(MyModel, name='model')
  task_p.train.learner.loss_name = 'loss'
  task_p.train.learner.optimizer = optimizers.Adam.HParams(learning_rate=0.1)
  task = base_hyperparams.instantiate(task_p)
  state = task.create_train_state(mdl_vars, var_weight_hparams)

When built, `train`, `evaluate`, `decode`, `infer` and `vn` are frozen
dataclass instances (`train.learner` stays a config); the learner is built
once, as `task.learners[0]`, named `learner_0`.

Variables are addressed by their '/'-joined path in `{'params': ...,
'non_trainable': ...}`, e.g. `params/encoder/w`. Optimizer states cover the
trainable variables not excluded by the learner's regexes (and, when the
optimizer keeps an EMA, the non-trainable ones too); excluded ones appear as
`py_utils.BpropMaskedNode()` in the optimizer's view of the variables.
Restoring variables from other checkpoints (`init_from_checkpoint_rules`)
is configured here but applied by the checkpoint code.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any, Callable, Sequence

import fiddle as fdl
import jax
import jax.numpy as jnp
from paxml import _init_checkpoint_rules
from paxml import base_metrics
from paxml import base_task
from paxml import checkpoint_types
from paxml import learners as learners_lib
from paxml import train_states
from praxis import base_hyperparams
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import trees

NestedMap = py_utils.NestedMap
PartitionSpec = jax.sharding.PartitionSpec
TrainState = train_states.TrainState
TensorProvenance = train_states.TensorProvenance
TrainStateProvenance = train_states.TrainStateProvenance
CheckpointType = checkpoint_types.CheckpointType
RegexStr = str
WeightHParams = base_layer.WeightHParams
instantiate = base_hyperparams.instantiate
NO_PREFIX_KEY = learners_lib.NO_PREFIX_KEY
get_optax_opt_load_rules = _init_checkpoint_rules.get_optax_opt_load_rules
get_praxis_opt_state_regex = _init_checkpoint_rules.get_praxis_opt_state_regex

TRAIN_DEFAULT_MUTABLE_LIST = [
    base_layer.AUX_LOSS, base_layer.SUMMARIES, base_layer.NON_TRAINABLE
] + base_layer.NON_PAX_VAR_COLLECTION
EVAL_DEFAULT_MUTABLE_LIST = [
    base_layer.AUX_LOSS, base_layer.SUMMARIES, base_layer.NON_TRAINABLE
]
DECODE_DEFAULT_MUTABLE_LIST = [base_layer.DECODE_CACHE, base_layer.SUMMARIES]
LOAD_ALL = ('(.*)', '{}')
EarlyStoppingFn = Callable[..., bool]


def _is_hp(x: Any) -> bool:
  return isinstance(x, WeightHParams)


@dataclasses.dataclass(frozen=True)
class CheckpointLoadingRules:
  """How to initialise variables from another run's checkpoint.

  Attributes:
    task_p: Config of the task that wrote the checkpoint.
    load_rules: (regex on our variable names, format string naming the
      checkpoint variable from the regex groups) pairs, e.g. LOAD_ALL.
    safe_load: Fail if a rule matches nothing.
    ignore_rules: Regexes of variables not to load.
    step: The checkpoint step (None: latest).
    load_step: Also load the step.
    load_opt_states: Also load the optimizer states.
    load_ema_states: Allow 'ema/...' references.
    partial_load_opt_states: Load optimizer states matching load_rules.
    input_specs_provider_p: Config giving the other task's input specs.
  """

  task_p: Any
  load_rules: Sequence[tuple[str, str]]
  safe_load: bool = False
  ignore_rules: Sequence[str] | None = None
  step: int | None = None
  load_step: bool = False
  load_opt_states: bool = False
  load_ema_states: bool = True
  partial_load_opt_states: bool = False
  input_specs_provider_p: Any = None


# ----------------------------------------------------------------------------
# Which variables the learner trains.
# ----------------------------------------------------------------------------


def get_excluded_var_mask_for_grad_or_opt(
    var_weight_hparams: Any,
    learner: learners_lib.Learner,
    mask_all_non_trainable: bool,
    mask_all_overwrite_with_gradient: bool = False,
) -> Any:
  """True for each variable the learner leaves alone.

  Args:
    var_weight_hparams: `WeightHParams` of all variables.
    learner: Its `bprop_variable_exclusion` / `_inclusion` regexes (full
      match on the variable path) select variables.
    mask_all_non_trainable: Also exclude all non-trainable variables.
    mask_all_overwrite_with_gradient: Also exclude the variables that take
      their gradient as new value (`OVERWRITE_WITH_GRADIENT` collection).

  Returns:
    A tree of bools shaped like `var_weight_hparams`.
  """
  if learner.bprop_variable_inclusion:
    included = py_utils.match_variable_names(
        var_weight_hparams, learner.bprop_variable_inclusion)
    excluded = jax.tree.map(lambda x: not x, included)
  else:
    excluded = py_utils.match_variable_names(
        var_weight_hparams, learner.bprop_variable_exclusion)

  def mask(hp, e):
    return bool(
        e or (mask_all_non_trainable and base_layer.var_not_trainable(hp))
        or (mask_all_overwrite_with_gradient
            and base_layer.var_overwrite_with_gradient(hp)))

  return jax.tree.map(mask, var_weight_hparams, excluded, is_leaf=_is_hp)


def get_excluded_var_mask_for_grad(
    var_weight_hparams: Any, learner: learners_lib.Learner
) -> Any:
  """Variables not differentiated: excluded ones and non-trainable ones."""
  return get_excluded_var_mask_for_grad_or_opt(
      var_weight_hparams, learner, True)


def get_excluded_var_mask_for_opt(
    var_weight_hparams: Any, learner: learners_lib.Learner
) -> Any:
  """Variables without optimizer state.

  The excluded ones, those overwritten with their gradient, and the
  non-trainable ones unless the optimizer keeps an EMA; none with
  `keep_optimizer_state_for_excluded_vars`.

  Args:
    var_weight_hparams: `WeightHParams` of all variables.
    learner: The learner.

  Returns:
    A tree of bools shaped like `var_weight_hparams`.
  """
  if learner.keep_optimizer_state_for_excluded_vars:
    return jax.tree.map(lambda _: False, var_weight_hparams, is_leaf=_is_hp)
  return get_excluded_var_mask_for_grad_or_opt(
      var_weight_hparams, learner, learner.optimizer.ema_decay == 0.0, True)


def filter_vars_for_grad_or_opt(mdl_vars: Any, excluded_for_grad: Any) -> Any:
  """`mdl_vars` with each variable `excluded_for_grad` marks replaced by
  BpropMaskedNode."""
  return jax.tree.map(
      lambda v, e: py_utils.BpropMaskedNode() if e else v, mdl_vars,
      excluded_for_grad,
      is_leaf=py_utils.is_bprop_masked_node)


# ----------------------------------------------------------------------------
# Train states.
# ----------------------------------------------------------------------------


def _create_opt_states(
    mdl_vars: Any,
    var_weight_hparams: Any,
    learners: Sequence[learners_lib.Learner],
) -> list[Any]:
  opt_states = []
  for learner in learners:
    excluded = get_excluded_var_mask_for_opt(var_weight_hparams, learner)
    hps = filter_vars_for_grad_or_opt(var_weight_hparams, excluded)
    tx = learner.get_grad_tx(hps)
    opt_states.append(tx.init(filter_vars_for_grad_or_opt(mdl_vars, excluded)))
  return opt_states


def create_state(
    mdl_vars: Any,
    var_weight_hparams: Any,
    discard_opt_states: bool,
    learners: Sequence[learners_lib.Learner] | None,
) -> TrainState:
  """A step-0 TrainState holding `mdl_vars` and fresh optimizer states."""
  opt_states = []
  if not discard_opt_states:
    opt_states = _create_opt_states(mdl_vars, var_weight_hparams, learners)
  return TrainState(step=jnp.array(0, jnp.uint32),
                    mdl_vars=trees.copy(mdl_vars), opt_states=opt_states,
                    extra_state=())


def create_state_unpadded_shapes(
    var_weight_hparams: Any,
    discard_opt_states: bool,
    learners: Sequence[learners_lib.Learner] | None,
) -> TrainState:
  """The TrainState's `jax.ShapeDtypeStruct`s, computing nothing."""
  shapes = jax.tree.map(
      lambda hp: jax.ShapeDtypeStruct(tuple(hp.full_shape),
                                      hp.dtype or jnp.float32),
      var_weight_hparams, is_leaf=_is_hp)
  return jax.eval_shape(
      lambda v: create_state(v, var_weight_hparams, discard_opt_states,
                             learners), shapes)


def create_state_partition_specs(
    var_weight_hparams: Any,
    mesh_shape: Sequence[int],
    mesh_axis_names: Sequence[str],
    discard_opt_states: bool,
    learners: Sequence[learners_lib.Learner] | None,
    opt_states: Any = None,
) -> TrainState:
  """The TrainState's `PartitionSpec`s from the variables' declarations.

  Optimizer states take their specs from the transformation's
  `init_partition_spec`, in the state's structure
  (`optimizers.partition_spec_like_state`).

  Args:
    var_weight_hparams: `WeightHParams` of all variables.
    mesh_shape: The device mesh shape.
    mesh_axis_names: Its axis names.
    discard_opt_states: Leave optimizer states out.
    learners: The task's learners.
    opt_states: Pax's optimizer states for plain optax transformations;
      not needed here (the specs follow each transformation's state).

  Returns:
    A TrainState of PartitionSpecs.
  """
  del opt_states

  def specs(hps):
    return base_layer.var_partition_specs(hps, mesh_shape, mesh_axis_names)

  opt_specs = []
  for learner in [] if discard_opt_states else learners:
    excluded = get_excluded_var_mask_for_opt(var_weight_hparams, learner)
    hps = filter_vars_for_grad_or_opt(var_weight_hparams, excluded)
    tx = learner.get_grad_tx(hps)
    opt_hps = optimizers.partition_spec_like_state(tx, hps)
    opt_specs.append(specs(opt_hps))
  return TrainState(step=PartitionSpec(), mdl_vars=specs(var_weight_hparams),
                    opt_states=opt_specs, extra_state=())


def create_state_padded_shapes(
    var_weight_hparams: Any,
    mesh_shape: Sequence[int] | None,
    mesh_axis_names: Sequence[str] | None,
    discard_opt_states: bool,
    learners: Sequence[learners_lib.Learner] | None,
) -> TrainState:
  """Like the unpadded shapes, padded to split evenly over the mesh."""
  unpadded = create_state_unpadded_shapes(
      var_weight_hparams, discard_opt_states, learners)
  if mesh_shape is None:
    return unpadded
  pspecs = create_state_partition_specs(
      var_weight_hparams, mesh_shape, mesh_axis_names, discard_opt_states,
      learners)

  def pad(shape_dtype, spec):
    pads = py_utils.get_uneven_sharding_paddings(
        spec, shape_dtype.shape, mesh_shape, mesh_axis_names)
    shape = tuple(s + p for s, p in zip(shape_dtype.shape, pads))
    return jax.ShapeDtypeStruct(shape, shape_dtype.dtype)

  return jax.tree.map(pad, unpadded, pspecs)


# ----------------------------------------------------------------------------
# EMA.
# ----------------------------------------------------------------------------


def _flatten_dict(node: Any, prefix: str = '') -> list[tuple[str, Any]]:
  """`{'a': {'b': x}}` -> `[('a.b', x)]`, in the dicts' order."""
  if not isinstance(node, dict):
    return [(prefix, node)]
  pairs = []
  for key, value in node.items():
    pairs.extend(_flatten_dict(value, f'{prefix}.{key}' if prefix else key))
  return pairs


def is_vectorized(states: TrainState) -> bool:
  """Whether the optimizer state is grouped by repeat prefix."""
  if not states.opt_states:
    raise ValueError('is_vectorized: the train state has no optimizer state.')
  first = states.opt_states[0]
  return isinstance(first, dict) and NO_PREFIX_KEY in first


def has_ema(task: SingleTask) -> bool:
  """Whether the task's optimizer keeps an EMA of the variables."""
  return task.learners[0].optimizer.ema_decay > 0.0


def _is_masked(x: Any) -> bool:
  """A variable of another repeat-prefix group, or one excluded from bprop."""
  return py_utils.is_optax_masked_node(x) or py_utils.is_bprop_masked_node(x)


def _first_unmasked(*values: Any) -> Any:
  for v in values:
    if not _is_masked(v):
      return v
  return py_utils.BpropMaskedNode()


def extract_ema(
    model_states: TrainState, merge_for_bprop_exclusion: bool = True
) -> TrainState:
  """A step-preserving TrainState whose variables are the EMA ones.

  Args:
    model_states: A state whose (single) optimizer keeps an EMA.
    merge_for_bprop_exclusion: Variables without an EMA (excluded from
      training) take their current value.

  Returns:
    TrainState(step, mdl_vars=EMA variables, opt_states=[]).
  """
  if len(model_states.opt_states) != 1:
    raise ValueError('extract_ema: EMA needs exactly one learner, got '
                     f'{len(model_states.opt_states)} optimizer states.')
  state = model_states.opt_states[0]
  if is_vectorized(model_states):
    emas = [optimizers.extract_ema(group) for group in state.values()]
    ema = jax.tree.map(_first_unmasked, *emas, is_leaf=_is_masked)
  else:
    ema = optimizers.extract_ema(state)
  if merge_for_bprop_exclusion:
    ema = jax.tree.map(
        lambda e, v: v if py_utils.is_bprop_masked_node(e) else e,
        ema, model_states.mdl_vars, is_leaf=py_utils.is_bprop_masked_node)
  return TrainState(step=model_states.step, mdl_vars=ema, opt_states=[],
                    extra_state=())


# ----------------------------------------------------------------------------
# SingleTask.
# ----------------------------------------------------------------------------


def _built(value: Any) -> Any:
  return pax_fiddle.build(value) if isinstance(value, fdl.Buildable) else value


class SingleTask(base_task.BaseTask):
  """A model with one learner and the settings of its programs.

  Attributes:
    model: The model (a config of a `BaseModel`, built with the task).
    train: Training settings (`SingleTask.Train`), including the learner.
    decode: Decoding settings.
    evaluate: Evaluation settings.
    infer: Inference settings.
    metrics: Config of the metrics aggregator (default `MeanMetrics`).
    loss_aggregator: Config of the loss aggregator (default
      `LossAggregator(loss_key=<the learner's loss_name>)`).
    vn: Variational noise settings.
    infer_writer: Settings for writing inference outputs (None: none).
    early_stopping_fn: Called by the runner to stop training early.
    summary_verbosity: Summaries above this verbosity are not recorded.
  """

  @dataclasses.dataclass(frozen=True)
  class InferWriter:
    """How to write inference outputs.

    Attributes:
      restore_checkpoint_dir: The checkpoint directory to restore.
      restore_checkpoint_step: Its step (None: latest).
      inference_runner: Config of the inference runner (built with model=).
      output_format: Container format of the outputs.
      output_num_shards: Number of output shards.
    """

    restore_checkpoint_dir: str = ''
    restore_checkpoint_step: int | None = None
    inference_runner: pax_fiddle.Config[Any] | None = None
    output_format: str = 'TFRECORD'
    output_num_shards: int = 32

  @dataclasses.dataclass(frozen=True)
  class VariationalNoise:
    """Gaussian noise added to weights during training steps.

    Attributes:
      vn_scale: Standard deviation of the noise (0 disables it).
      vn_regex: Regex (`re.match` on the variable path, e.g. 'params/.*')
        of the trainable variables that get noise.
      vn_start_step: First step with noise.
    """

    vn_scale: float = 0.0
    vn_regex: str = ''
    vn_start_step: int = 0

  @dataclasses.dataclass(frozen=True)
  class Train:
    """Training settings (the runner reads most of them).

    Attributes:
      learner: Config of the learner.
      num_train_steps: Steps to train.
      save_interval_steps: Steps between checkpoints.
      save_keep_interval_duration: Also keep one checkpoint per this
        duration (e.g. '12h').
      save_max_to_keep: Most recent checkpoints kept.
      max_inflight_steps: Steps in flight at most, counting the one just
        dispatched (<= 0: no limit). At it the host, once the next batch is
        ready, waits for the oldest step (with 2: step k waits for step
        k - 2, as Pax), or on CPU devices, with a limit above 2, until half
        of them are left, before dispatching the next.
      summary_interval_steps: Steps between summaries.
      log_train_output_interval_steps: Steps between logs of the train
        output (None: summary_interval_steps).
      summary_accumulate_interval_steps: Steps whose summaries are averaged
        (None: no accumulation).
      async_summary_writing: Write summaries in a separate thread.
      variable_norm_summary: Summarize each variable's RMS (`vars/...`), computed
        on the summary steps only (0 on the others).
      eval_interval_steps: Steps between evaluations (0: none).
      eval_skip_train: Do not evaluate on the training data.
      eval_use_ema_states: Evaluate the EMA variables.
      inputs_split_mapping: Sharding of the inputs by rank
        ({'map_1d': ..., 'map_2d': ...}; None: along the batch).
      init_from_checkpoint_rules: {checkpoint dir: CheckpointLoadingRules}.
      decode_interval_steps: Steps between decodes (None or 0: none).
      decode_start_after_n_steps: First step to decode at.
      decode_use_ema_states: Decode with the EMA variables.
      compute_steps_per_sec_interval_steps: Steps between steps/sec logs.
      profiler_num_steps: Steps captured by the profiler.
      profiler_min_duration_sec: Minimum profile duration.
      profiler_capture_step: Step to profile at (None: never).
      profiler_max_num_hosts: Hosts that profile (None: all).
      profiler_capture_host_profile: Also profile the host.
      always_use_train_for_model_init: Initialise models with the training
        input's shapes, in training mode.
      enforce_input_specs: Check the first batch against the input specs.
      random_seed: Seed of the training randomness.
      apply_mutable_list: Collections the model may change in training.
      tensorstore_metadata_key: Name of TensorStore metadata files.
      enable_input_checkpointing: Checkpoint the training input.
      restore_transformations: Orbax restore transformations.
      external_checkpoint_path: Checkpoint to start from if the run has none.
      external_checkpoint_handler: Handler reading it.
      report_progress_hook: Report progress to an external hook.
      gc_interval_steps: Steps between full Python garbage collections,
        and one after each eval (0: off).
      max_consecutive_nonfinite_steps: Stop training after this many
        consecutive steps with a non-finite loss (0: never stop). Not in Pax.
    """

    learner: pax_fiddle.Config[learners_lib.Learner] = (
        pax_fiddle.template_field(learners_lib.Learner))
    num_train_steps: float = 1e7
    save_interval_steps: int = 5000
    save_keep_interval_duration: str = '12h'
    save_max_to_keep: int = 10
    max_inflight_steps: int = 2
    summary_interval_steps: int = 100
    log_train_output_interval_steps: int | None = None
    summary_accumulate_interval_steps: int | None = None
    async_summary_writing: bool = True
    variable_norm_summary: bool = True
    eval_interval_steps: int = 100
    eval_skip_train: bool = False
    eval_use_ema_states: bool = False
    inputs_split_mapping: Any = None
    init_from_checkpoint_rules: dict[str, CheckpointLoadingRules] = (
        pax_fiddle.instance_field(dict))
    decode_interval_steps: int | None = None
    decode_start_after_n_steps: int = 0
    decode_use_ema_states: bool = False
    compute_steps_per_sec_interval_steps: int = 10
    profiler_num_steps: int = 2
    profiler_min_duration_sec: float = 1.0
    profiler_capture_step: int | None = None
    profiler_max_num_hosts: int | None = None
    profiler_capture_host_profile: bool = False
    always_use_train_for_model_init: bool = True
    enforce_input_specs: bool = True
    random_seed: int = 1234
    apply_mutable_list: list[str] = pax_fiddle.instance_field(
        lambda: list(TRAIN_DEFAULT_MUTABLE_LIST))
    tensorstore_metadata_key: str | None = None
    enable_input_checkpointing: bool | None = False
    restore_transformations: dict[str, Any] | None = None
    external_checkpoint_path: Any = None
    external_checkpoint_handler: Any = None
    report_progress_hook: bool = False
    gc_interval_steps: int = 0
    max_consecutive_nonfinite_steps: int = 3

  @dataclasses.dataclass(frozen=True)
  class Decode:
    """Decoding settings.

    Attributes:
      prng_key_fold_with_batch_index: Fold the batch index into the key.
      random_seed: Seed of the decoding randomness.
      profiler_num_steps: Steps captured by the profiler.
      profiler_min_duration_sec: Minimum profile duration.
      profiler_capture_step: Step to profile at.
      profiler_max_num_hosts: Hosts that profile (None: all).
      apply_mutable_list: Collections the model may change in decode.
      metrics_prefix: Prefix of decode metric names.
    """

    prng_key_fold_with_batch_index: bool = False
    random_seed: int = 1234
    profiler_num_steps: int = 0
    profiler_min_duration_sec: float = 1.0
    profiler_capture_step: int = 1
    profiler_max_num_hosts: int | None = None
    apply_mutable_list: list[str] = pax_fiddle.instance_field(
        lambda: list(DECODE_DEFAULT_MUTABLE_LIST))
    metrics_prefix: str = 'Metrics/'

  @dataclasses.dataclass(frozen=True)
  class Evaluate:
    """Evaluation settings.

    Attributes:
      random_seed: Seed of the evaluation randomness.
      apply_mutable_list: Collections the model may change in eval.
    """

    random_seed: int = 1234
    apply_mutable_list: list[str] = pax_fiddle.instance_field(
        lambda: list(EVAL_DEFAULT_MUTABLE_LIST))

  @dataclasses.dataclass(frozen=True)
  class Infer:
    """Inference settings.

    Attributes:
      random_seed: Seed of the inference randomness.
    """

    random_seed: int = 1234

  @enum.unique
  class TrackDecoderMetricMode(str, enum.Enum):
    """Whether a tracked decode metric is better when larger or smaller."""

    MAX = 'max'
    MIN = 'min'

  model: base_model.BaseModel | None = None
  train: pax_fiddle.Config[SingleTask.Train] = pax_fiddle.template_field(
      Train)
  decode: pax_fiddle.Config[SingleTask.Decode] = pax_fiddle.template_field(
      Decode)
  evaluate: pax_fiddle.Config[SingleTask.Evaluate] = (
      pax_fiddle.template_field(Evaluate))
  infer: pax_fiddle.Config[SingleTask.Infer] = pax_fiddle.template_field(Infer)
  metrics: pax_fiddle.Config[base_metrics.BaseMetrics] | None = None
  loss_aggregator: pax_fiddle.Config[base_metrics.LossAggregator] | None = None
  vn: pax_fiddle.Config[SingleTask.VariationalNoise] = (
      pax_fiddle.template_field(VariationalNoise))
  infer_writer: pax_fiddle.Config[SingleTask.InferWriter] | None = None
  early_stopping_fn: Any = None
  summary_verbosity: int = 3

  def __post_init__(self):
    super().__post_init__()
    who = f'SingleTask {self.name!r}'
    for name in ('train', 'decode', 'evaluate', 'infer', 'vn', 'infer_writer'):
      setattr(self, name, _built(getattr(self, name)))
    self._learners = [self._build_learner(who)]
    if isinstance(self.model, fdl.Buildable):
      self.model = instantiate(self.model)
    if not isinstance(self.model, base_layer.BaseLayer):
      raise ValueError(f'{who}: the field `model` must be a BaseModel (or its '
                       f'config), got {type(self.model).__name__}.')
    self._metrics_aggregator = instantiate(
        self.metrics or pax_fiddle.Config(base_metrics.MeanMetrics))
    self._loss_aggregator_inst = self._build_loss_aggregator(who)
    self._inference_runner = None
    if self.infer_writer and self.infer_writer.inference_runner is not None:
      self._inference_runner = instantiate(
          self.infer_writer.inference_runner, model=self.model)

  def _build_learner(self, who: str) -> learners_lib.Learner:
    learner_p = self.train.learner
    if isinstance(learner_p, (list, tuple)):
      raise NotImplementedError(f'{who}: only one learner is supported.')
    if not isinstance(learner_p, fdl.Buildable):
      raise ValueError(f'{who}: train.learner must be a Learner config.')
    learner_p = learner_p.clone()
    learner_p.name = 'learner_0'
    return pax_fiddle.build(learner_p)

  def _build_loss_aggregator(self, who: str) -> Any:
    if self.loss_aggregator is not None:
      if any(l.loss_name is not None for l in self._learners):
        raise ValueError(f'{who}: with a loss_aggregator, the learner\'s '
                         'loss_name must be None.')
      return instantiate(self.loss_aggregator)
    loss_name = self._learners[0].loss_name
    if loss_name is None:
      raise ValueError(f'{who}: set train.learner.loss_name (the metric of '
                       'compute_loss to minimize) or a loss_aggregator.')
    return base_metrics.LossAggregator(loss_key=loss_name)

  @property
  def learners(self) -> list[learners_lib.Learner]:
    return self._learners

  @property
  def metrics_aggregator(self) -> base_metrics.BaseMetrics:
    return self._metrics_aggregator

  @property
  def loss_aggregator_inst(self) -> base_metrics.LossAggregator:
    return self._loss_aggregator_inst

  @property
  def has_ema_decay(self) -> bool:
    return has_ema(self)

  @property
  def inference_runner(self) -> Any:
    return self._inference_runner

  def create_opt_states(self, mdl_vars: Any,
                        var_weight_hparams: Any) -> list[Any]:
    """Fresh optimizer states (one per learner) for `mdl_vars`."""
    return _create_opt_states(mdl_vars, var_weight_hparams, self.learners)

  def create_train_state(self, mdl_vars: Any, var_weight_hparams: Any,
                         discard_opt_states: bool = False) -> TrainState:
    """A step-0 TrainState for `mdl_vars` (see `create_state`)."""
    return create_state(mdl_vars, var_weight_hparams, discard_opt_states,
                        self.learners)

  def create_train_state_unpadded_shapes(
      self, var_weight_hparams: Any, discard_opt_states: bool = False
  ) -> TrainState:
    return create_state_unpadded_shapes(var_weight_hparams,
                                        discard_opt_states, self.learners)

  def create_train_state_padded_shapes(
      self, var_weight_hparams: Any, discard_opt_states: bool = False
  ) -> TrainState:
    return create_state_padded_shapes(
        var_weight_hparams, self.model.mesh_shape, self.model.mesh_axis_names,
        discard_opt_states, self.learners)

  def create_train_state_partition_specs(
      self, var_weight_hparams: Any, discard_opt_states: bool = False
  ) -> TrainState:
    """PartitionSpecs of the TrainState; all replicated without a mesh."""
    mesh_shape = self.model.mesh_shape
    if mesh_shape is None or self.model.mesh_axis_names is None:
      shapes = self.create_train_state_unpadded_shapes(
          var_weight_hparams, discard_opt_states)
      return jax.tree.map(lambda _: PartitionSpec(), shapes)
    return create_state_partition_specs(
        var_weight_hparams, mesh_shape, self.model.mesh_axis_names,
        discard_opt_states, self.learners)

  def apply_init_checkpoint_rules(
      self, train_state: TrainState, train_state_provenance: Any,
      train_state_partition_specs: TrainState | None = None,
      global_mesh: jax.sharding.Mesh | None = None,
      checkpoint_type: Any = None,
  ) -> tuple[TrainState, Any, bool]:
    """Loads variables from other runs' checkpoints (`init_from_checkpoint_rules`).

    See `CheckpointLoadingRules`: variables (and optimizer states, the step)
    whose names the load rules map are read from each checkpoint in turn.

    Args:
      train_state: The initialised state.
      train_state_provenance: Its provenance.
      train_state_partition_specs: Unused (the restored arrays follow the
        other task's partition specs on `global_mesh`).
      global_mesh: The mesh to restore onto (None: default placement).
      checkpoint_type: The kind of the checkpoints.

    Returns:
      (state, provenance, whether the optimizer states need recomputing
      because none were loaded).
    """
    del train_state_partition_specs
    if not self.train.init_from_checkpoint_rules:
      return train_state, train_state_provenance, False
    return _init_checkpoint_rules.apply_rules(
        self.train.init_from_checkpoint_rules, train_state,
        train_state_provenance, global_mesh, checkpoint_type)

  def maybe_adjust_train_state(
      self, step: Any, mdl_vars: Any, var_weight_hparams: Any,
      prng_key: jax.Array
  ) -> Any:
    """The variables a training step computes with: variational noise.

    With `vn.vn_scale > 0`, adds `vn_scale * N(0, 1)` to each trainable
    variable whose path matches `vn.vn_regex`, from step `vn.vn_start_step`
    on (`step` may be traced).

    Args:
      step: The current step.
      mdl_vars: The variables.
      var_weight_hparams: Their `WeightHParams`.
      prng_key: Randomness for the noise.

    Returns:
      The variables to use in this step.
    """
    vn = self.vn
    if vn.vn_scale <= 0.0:
      return mdl_vars
    regex = re.compile(vn.vn_regex)
    mask = jax.tree.map(
        lambda name, hp: bool(regex.match(name))
        and not base_layer.var_not_trainable(hp),
        trees.to_path_tree(var_weight_hparams), var_weight_hparams,
        is_leaf=_is_hp)
    if not any(jax.tree.leaves(mask)):
      raise ValueError(
          f'SingleTask {self.name!r}: vn.vn_regex {vn.vn_regex!r} matches no '
          'trainable variable (paths look like params/layer/w).')
    leaves, treedef = jax.tree.flatten(mdl_vars)
    keys = jax.random.split(prng_key, len(leaves))
    on = jnp.asarray(step) >= vn.vn_start_step

    def add_noise(x, key, masked):
      if not masked:
        return x
      noise = vn.vn_scale * jax.random.normal(key, x.shape, x.dtype)
      return jnp.where(on, x + noise, x)

    noisy = [add_noise(x, k, m) for x, k, m in
             zip(leaves, keys, jax.tree.leaves(mask))]
    return jax.tree.unflatten(treedef, noisy)


for _cls in (SingleTask.InferWriter, SingleTask.VariationalNoise,
             SingleTask.Train, SingleTask.Decode, SingleTask.Evaluate,
             SingleTask.Infer):
  base_hyperparams.install_hparams_stub(_cls)
SingleTask.InferWriterHParams = SingleTask.InferWriter.HParams
SingleTask.VariationalNoiseHParams = SingleTask.VariationalNoise.HParams
SingleTask.TrainHParams = SingleTask.Train.HParams
SingleTask.DecodeHParams = SingleTask.Decode.HParams
SingleTask.EvaluateHParams = SingleTask.Evaluate.HParams
SingleTask.InferHParams = SingleTask.Infer.HParams
