"""An experiment whose parts are given as arguments instead of methods.

Public names: ParameterizedExperiment.

Instead of subclassing `BaseExperiment`, describe the whole experiment as one
Fiddle config, which `--fdl_config` can name and `--fdl_set`/`--fiddler` edit
without the experiment registry:

  def my_experiment():
    return pax_fiddle.Config(
        parameterized_experiment.ParameterizedExperiment,
        task=pax_fiddle.Config(tasks_lib.SingleTask, model=model_cfg),
        train_datasets=[train_input_cfg],
        eval_datasets=[eval_input_cfg])

  python -m paxml.main --fdl_config=my_module.my_experiment --job_log_dir=...

The configs stay configs when the experiment is built: the runner builds them.
"""

from __future__ import annotations

from typing import Sequence
import warnings

from paxml import base_experiment
from paxml import base_task
from praxis import base_input
from praxis import pax_fiddle

_InputConfig = pax_fiddle.Config[base_input.BaseInput]


def _check_inputs(inputs: Sequence[_InputConfig], kind: str,
                  is_training: bool) -> None:
  """Raises if an input's `is_training` does not fit its role."""
  for input_p in inputs:
    if bool(input_p.is_training) != is_training:
      raise ValueError(
          f'The {kind} dataset with name {input_p.name!r} must have '
          f'`is_training` set to `{is_training}`.')


class ParameterizedExperiment(base_experiment.BaseExperiment):
  """An experiment made from a task config and input configs (see module)."""

  def __init__(
      self,
      *,
      task: pax_fiddle.Config[base_task.BaseTask],
      train_datasets: Sequence[_InputConfig] = (),
      eval_datasets: Sequence[_InputConfig] = (),
      decode_datasets: Sequence[_InputConfig] = (),
      input_specs_provider: (
          pax_fiddle.Config[base_input.BaseInputSpecsProvider] | None) = None,
      training_dataset: _InputConfig | None = None,
      decoder_datasets: Sequence[_InputConfig] = (),
  ):
    """Checks the inputs' `is_training` against their roles and keeps them.

    Args:
      task: The task config.
      train_datasets: Training input configs (`is_training=True`).
      eval_datasets: Eval input configs (`is_training=False`).
      decode_datasets: Decode input configs (`is_training=False`).
      input_specs_provider: How the runner learns input shapes; None reads a
        batch of the training input (`DatasetInputSpecsProvider`).
      training_dataset: Deprecated: one more training input.
      decoder_datasets: Deprecated: more decode inputs.
    """
    _check_inputs(train_datasets, 'training', True)
    _check_inputs(eval_datasets, 'evaluation', False)
    _check_inputs(decode_datasets, 'decode', False)
    self._task = task
    self._train_datasets = list(train_datasets)
    self._eval_datasets = list(eval_datasets)
    self._decode_datasets = list(decode_datasets)
    self._input_specs_provider = input_specs_provider
    if training_dataset is not None:
      warnings.warn('`training_dataset` is deprecated in favor of '
                    '`train_datasets`.', DeprecationWarning)
      _check_inputs([training_dataset], 'training', True)
      self._train_datasets.append(training_dataset)
    if decoder_datasets:
      warnings.warn('`decoder_datasets` is deprecated in favor of '
                    '`decode_datasets`.', DeprecationWarning)
      _check_inputs(decoder_datasets, 'decode', False)
      self._decode_datasets.extend(decoder_datasets)
    super().__init__()

  def task(self) -> pax_fiddle.Config[base_task.BaseTask]:
    return self._task

  def datasets(self) -> list[_InputConfig]:
    """The training inputs, then the eval inputs."""
    return self.train_datasets() + self.eval_datasets()

  def train_datasets(self) -> list[_InputConfig]:
    return self._train_datasets

  def eval_datasets(self) -> list[_InputConfig]:
    return self._eval_datasets

  def decode_datasets(self) -> list[_InputConfig]:
    return self._decode_datasets

  def get_input_specs_provider_params(
      self) -> pax_fiddle.Config[base_input.BaseInputSpecsProvider]:
    if self._input_specs_provider is None:
      return super().get_input_specs_provider_params()
    return self._input_specs_provider
