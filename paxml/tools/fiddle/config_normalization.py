"""Normalizes Pax experiment configs for printing, drawing and codegen.

Public names: ComponentNormalizer, TaskNormalizer, DatasetNormalizer,
ExperimentNormalizer, ConfigNormalizer, noop_normalizer, default_normalizer,
aggressive_normalizer.

A normalized config holds only Fiddle buildables and plain values: fields
equal to their defaults are trimmed, dataclass instances become configs,
NestedMaps become configs of `make_nested_map`, SeqIO tasks become configs of
their names, and sharding annotations are unshared (or removed).

`ConfigNormalizer` holds the switches; `lowlevel_config()` is the Fiddle
config of the normalizer objects themselves, for finer edits.

Example:

  normalized = config_normalization.default_normalizer()(experiment_config)
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any, TypeVar

import fiddle as fdl
from fiddle.experimental import dataclasses as fdl_dataclasses
from fiddle.experimental import visualize
from paxml.tools.fiddle import convert_seqio_task_objects
from paxml.tools.fiddle import remove_sharding
from paxml.tools.fiddle import unshare_sharding
from paxml.tools.fiddle import wrap_nested_maps as wrap_nested_maps_lib

_T = TypeVar('_T')


@dataclasses.dataclass(frozen=True)
class ComponentNormalizer:
  """Normalizes one part of an experiment (a task, or inputs).

  Attributes:
    remove_defaults: Trim fields equal to their defaults (deeply).
    convert_dataclasses: Turn dataclass instances into configs.
    wrap_nested_maps: Turn NestedMaps into configs of `make_nested_map`.
  """

  remove_defaults: bool
  convert_dataclasses: bool
  wrap_nested_maps: bool

  def __call__(self, config: _T) -> _T:
    if self.remove_defaults:
      config = visualize.with_defaults_trimmed(config,
                                               remove_deep_defaults=True)
    if self.convert_dataclasses:
      config = fdl_dataclasses.convert_dataclasses_to_configs(config)
    if self.wrap_nested_maps:
      config = wrap_nested_maps_lib.wrap_nested_maps(config)
    return config


@dataclasses.dataclass(frozen=True)
class TaskNormalizer(ComponentNormalizer):
  """Normalizes a task config, sharding annotations included.

  Attributes:
    remove_sharding_annotations: Remove the annotations.
    unshare_sharding_config: Otherwise, give each annotation its own copy.
  """

  remove_sharding_annotations: bool
  unshare_sharding_config: bool

  def __call__(self, task_config: _T) -> _T:
    task_config = super().__call__(task_config)
    if self.remove_sharding_annotations:
      return remove_sharding.remove_sharding(task_config)
    if self.unshare_sharding_config:
      return unshare_sharding.unshare_sharding(task_config)
    return task_config


@dataclasses.dataclass(frozen=True)
class DatasetNormalizer(ComponentNormalizer):
  """Normalizes an input config or a list of them.

  Attributes:
    convert_seqio_task_objects: Replace seqio.Task objects by configs of
      their names (a no-op when seqio is not installed: there are none).
  """

  convert_seqio_task_objects: bool

  def __call__(self, dataset_config: _T) -> _T:
    dataset_config = super().__call__(dataset_config)
    if self.convert_seqio_task_objects and importlib.util.find_spec('seqio'):
      dataset_config = convert_seqio_task_objects.convert_seqio_tasks(
          dataset_config)
    return dataset_config


@dataclasses.dataclass(frozen=True)
class ExperimentNormalizer:
  """Normalizes a ParameterizedExperiment config, part by part.

  Attributes:
    task_normalizer: For `task`.
    dataset_normalizer: For `train_datasets`, `eval_datasets` and
      `decode_datasets`.
    remove_eval_datasets: Drop `eval_datasets`.
    remove_decode_datasets: Drop `decode_datasets`.
  """

  task_normalizer: TaskNormalizer
  dataset_normalizer: DatasetNormalizer
  remove_eval_datasets: bool
  remove_decode_datasets: bool

  def __call__(self, experiment_config: fdl.Config) -> fdl.Config:
    """A normalized copy of the experiment config (unset fields stay
    unset)."""
    arguments = fdl.ordered_arguments(experiment_config)
    dropped = {'eval_datasets': self.remove_eval_datasets,
               'decode_datasets': self.remove_decode_datasets}
    changes = {}
    for name in ('task', 'train_datasets', 'eval_datasets', 'decode_datasets'):
      if name not in arguments or dropped.get(name):
        continue
      normalize = (self.task_normalizer if name == 'task'
                   else self.dataset_normalizer)
      changes[name] = normalize(arguments[name])
    result = fdl.copy_with(experiment_config, **changes)
    for name, drop in dropped.items():
      if drop and name in arguments:
        delattr(result, name)
    return result


@dataclasses.dataclass(frozen=True)
class ConfigNormalizer:
  """The normalization switches, and the normalizer they make.

  Attributes:
    remove_defaults: Trim fields equal to their defaults.
    convert_dataclasses: Turn dataclass instances into configs (those without
      `__post_init__`).
    wrap_nested_maps: Turn NestedMaps into configs of `make_nested_map`.
    remove_sharding_annotations: Remove the task's sharding annotations.
    unshare_sharding_config: Otherwise, copy each annotation apart (shared
      annotations mean nothing, and unshared ones print better).
    convert_seqio_task_objects: Replace seqio.Task objects by configs of
      their registered names.
    remove_eval_datasets: Drop `eval_datasets`.
    remove_decode_datasets: Drop `decode_datasets`.
  """

  remove_defaults: bool = True
  convert_dataclasses: bool = True
  wrap_nested_maps: bool = True
  remove_sharding_annotations: bool = False
  unshare_sharding_config: bool = True
  convert_seqio_task_objects: bool = True
  remove_eval_datasets: bool = False
  remove_decode_datasets: bool = False

  def _component_settings(self) -> dict[str, bool]:
    return dict(remove_defaults=self.remove_defaults,
                convert_dataclasses=self.convert_dataclasses,
                wrap_nested_maps=self.wrap_nested_maps)

  def lowlevel_config(self) -> fdl.Config[ExperimentNormalizer]:
    """The config of the normalizer objects, e.g. to edit one part alone."""
    task = fdl.Config(
        TaskNormalizer, **self._component_settings(),
        remove_sharding_annotations=self.remove_sharding_annotations,
        unshare_sharding_config=self.unshare_sharding_config)
    dataset = fdl.Config(
        DatasetNormalizer, **self._component_settings(),
        convert_seqio_task_objects=self.convert_seqio_task_objects)
    return fdl.Config(ExperimentNormalizer, task_normalizer=task,
                      dataset_normalizer=dataset,
                      remove_eval_datasets=self.remove_eval_datasets,
                      remove_decode_datasets=self.remove_decode_datasets)

  def experiment_normalizer(self) -> ExperimentNormalizer:
    return fdl.build(self.lowlevel_config())

  def task_normalizer(self) -> TaskNormalizer:
    return self.experiment_normalizer().task_normalizer

  def dataset_normalizer(self) -> DatasetNormalizer:
    return self.experiment_normalizer().dataset_normalizer

  def __call__(self, config: Any) -> Any:
    return self.experiment_normalizer()(config)


def noop_normalizer() -> ConfigNormalizer:
  """Changes nothing but converting dataclasses."""
  return ConfigNormalizer(
      remove_sharding_annotations=False, unshare_sharding_config=False,
      remove_defaults=False, wrap_nested_maps=False,
      convert_seqio_task_objects=False)


def default_normalizer() -> ConfigNormalizer:
  return ConfigNormalizer()


def aggressive_normalizer() -> ConfigNormalizer:
  """The defaults, and sharding annotations removed."""
  return ConfigNormalizer(remove_sharding_annotations=True)
