"""What the runner sets up around the step functions (re-exported by trainer_lib).

Running modes, the files written beside a run (`post_init_model_params.txt`,
`train_state_provenance.txt`), and the shapes and partition specs of inputs.
Nothing here compiles or runs a step.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Sequence

from absl import logging
import fiddle as fdl
import jax
import numpy as np
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils

PartitionSpec = jax.sharding.PartitionSpec
instantiate = base_hyperparams.instantiate


class RunningMode(enum.Flag):
  """What a job runs: training, evaluation, decoding, or a mix of them."""

  UNKNOWN = 0
  TRAIN = enum.auto()
  EVAL = enum.auto()
  DECODE = enum.auto()

  @classmethod
  def detect(cls, has_train_metrics: bool, has_eval_metrics: bool,
             has_decode_metrics: bool) -> RunningMode:
    """The mode of a job from which kinds of metrics it produces."""
    mode = cls.UNKNOWN
    for present, flag in ((has_train_metrics, cls.TRAIN),
                          (has_eval_metrics, cls.EVAL),
                          (has_decode_metrics, cls.DECODE)):
      if present:
        mode |= flag
    return mode

  @property
  def has_train(self) -> bool:
    return bool(self & RunningMode.TRAIN)

  @property
  def has_eval(self) -> bool:
    return bool(self & RunningMode.EVAL)

  @property
  def has_decode(self) -> bool:
    return bool(self & RunningMode.DECODE)


def _path(job_log_dir: Any) -> Any:
  """An `epath.Path` (it also reads and writes cloud paths)."""
  from etils import epath  # pylint: disable=g-import-not-at-top
  return epath.Path(job_log_dir)


def write_post_init_model_hparams_file(
    model: Any, train_state_metadata: Any, job_log_dir: Any,
    do_eval: bool = False) -> None:
  """Writes `<job_log_dir>/post_init_model_params.txt` (process 0 only).

  Two parts separated by a blank line: the configuration of every layer as
  built (`model.abstract_init_with_mdl_config`), then every variable's
  `WeightHParams` (shape, dtype, init, sharding), both as
  `base_hyperparams.nested_struct_to_text` writes them.

  Args:
    model: The model.
    train_state_metadata: Its `TrainStateMetadata` (input shapes, variables).
    job_log_dir: The run's directory.
    do_eval: Trace the model in eval mode.
  """
  if jax.process_index() != 0:
    return
  job_log_dir = _path(job_log_dir)
  job_log_dir.mkdir(parents=True, exist_ok=True)
  layer_configs = model.abstract_init_with_mdl_config(
      train_state_metadata.input_shape_dtype, do_eval=do_eval)
  text = (base_hyperparams.nested_struct_to_text(layer_configs) + '\n\n' +
          base_hyperparams.nested_struct_to_text(
              train_state_metadata.var_weight_hparams))
  (job_log_dir / 'post_init_model_params.txt').write_text(text)


def write_train_provenance_file(train_state_provenance: Any,
                                job_log_dir: Any) -> None:
  """Writes `<job_log_dir>/train_state_provenance.txt` once (process 0).

  One section per TrainState field ('Step', 'Mdl vars', ...), each tensor's
  path and where its value came from (random init or `<checkpoint>:<step>`).

  Args:
    train_state_provenance: A `TrainStateProvenance`.
    job_log_dir: The run's directory.
  """
  if jax.process_index() != 0:
    return
  path = _path(job_log_dir) / 'train_state_provenance.txt'
  if path.exists():
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  sections = []
  for field, value in vars(train_state_provenance).items():
    leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    lines = [f'{jax.tree_util.keystr(k) or "."}: {v!r}' for k, v in leaves]
    sections.append(field.replace('_', ' ').capitalize() + '\n' +
                    '\n'.join(lines))
  path.write_text('\n\n'.join(sections) + '\n')


def adjust_input_params_for_small_batch(input_p: Any, global_mesh: Any) -> Any:
  """A copy of `input_p` padded to split over this host's devices.

  A per-host batch smaller than the local device count (or, on one process,
  not a multiple of it) gets `batch_padding_size` zero rows; the input is
  returned unchanged when it already splits evenly.

  Args:
    input_p: Config of a `BaseInput`.
    global_mesh: The mesh (unused on one process).

  Returns:
    The (possibly) padded config.

  Raises:
    NotImplementedError: On several processes, for a batch larger than the
      local device count and not a multiple of it.
  """
  del global_mesh
  if getattr(input_p, 'experimental_remote_input', False):
    return input_p
  devices = jax.local_device_count()
  batch_size = fdl.get_callable(input_p).get_batch_size(input_p)
  hosts_ok = (input_p.num_infeed_hosts or jax.process_count()) == (
      jax.process_count())
  if batch_size % devices == 0 and hosts_ok:
    return input_p
  if batch_size > devices and jax.process_count() > 1:
    raise NotImplementedError(
        f'Input {input_p.name!r}: the per-host batch_size {batch_size} must be '
        f'a multiple of the {devices} local devices, or smaller than it.')
  padded = -(-batch_size // devices) * devices
  copy = input_p.clone()
  copy.batch_padding_size = padded - batch_size
  return copy


def shard_on_batch_dim_partition_spec(mesh_names: Sequence[str],
                                      x: Any) -> PartitionSpec:
  """Splits the first dim of `x` over all of `mesh_names`, the rest whole."""
  if not np.shape(x):
    raise ValueError('shard_on_batch_dim_partition_spec: an input needs a '
                     f'batch dimension, got shape {np.shape(x)}.')
  return PartitionSpec(tuple(mesh_names), *([None] * (len(x.shape) - 1)))


def get_input_partition_specs(mesh_axis_names: Sequence[str],
                              inputs_shape_dtype: Any) -> Any:
  """`shard_on_batch_dim_partition_spec` of each input."""
  return jax.tree.map(
      lambda x: shard_on_batch_dim_partition_spec(mesh_axis_names, x),
      inputs_shape_dtype)


def reshard_input_based_on_rank_fn(mapping_dict: Any,
                                   mesh_names: Sequence[str], x: Any) -> Any:
  """Constrains `x` to `mapping_dict['map_<rank>d']` (inside a jit).

  Args:
    mapping_dict: `{'map_1d': ..., 'map_2d': ...}` of split dims mappings
      (mesh axis names per dim), or None for no constraint.
    mesh_names: The mesh axis names.
    x: An input.

  Returns:
    `x`, with a sharding constraint when its rank has a mapping.
  """
  if mapping_dict is None:
    return x
  key = f'map_{len(x.shape)}d'
  if key not in mapping_dict:
    raise ValueError(f'inputs_split_mapping {mapping_dict} has no {key!r} for '
                     f'an input of shape {x.shape}.')
  if mapping_dict[key] is None:
    return x
  return base_layer.maybe_shard(x, mapping_dict[key], mesh_names)


def get_inputs_shape_dtype(input_config: Any) -> tuple[Any, Any]:
  """(per-host, global) `ShapeDtypeStruct`s of an input's first batch.

  Builds the input and reads a batch: costly; an input specs provider
  avoids it.

  Args:
    input_config: Config of a `BaseInput`.

  Returns:
    The per-host shapes and the global ones (batch times process count).
  """
  batch = instantiate(input_config).get_next_padded()
  per_host = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), batch)
  return per_host, jax.tree.map(py_utils.get_global_input_shape_dtype, batch)


def check_unique_names(inputs: Sequence[Any]) -> None:
  """Raises ValueError if two inputs share a name."""
  seen = set()
  for inp in inputs:
    if inp.name in seen:
      raise ValueError(f'Two inputs are named {inp.name!r}; input names must '
                       'be unique (they name summary directories).')
    seen.add(inp.name)


def bind_mesh(pjitted_fn: Callable[..., Any],
              global_mesh: jax.sharding.Mesh) -> Callable[..., Any]:
  """`pjitted_fn` called (and lowered) under `global_mesh`."""

  def call(*args, **kwargs):
    with jax.set_mesh(global_mesh):
      return pjitted_fn(*args, **kwargs)

  def lower(*args, **kwargs):
    with jax.set_mesh(global_mesh):
      return pjitted_fn.lower(*args, **kwargs)

  call.lower = lower
  return call


def get_train_input_specs_for_model_init(task: Any,
                                         input_specs_provider: Any) -> Any:
  """The provider's input specs, made global when the model has a mesh."""
  specs = input_specs_provider.get_input_specs()
  logging.info('Input specs for model init: %s', specs)
  if task.model.mesh_shape is not None:
    specs = jax.tree.map(py_utils.get_global_input_shape_dtype, specs)
  return specs
