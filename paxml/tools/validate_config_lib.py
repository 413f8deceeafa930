"""Checks an experiment config without training, to a chosen depth.

Public names: validate, main.

Check levels (Pax's scale, 0 to 10): 0 builds the experiment; 1+ also runs
its `validate()` and instantiates the task; 3+ also initializes the model
abstractly from the input specs (shapes only); 5+ also builds the dataset
configs; 8+ also instantiates every input. `validate_config.py` is the
command line.
"""

from __future__ import annotations

from typing import Any

from absl import app
from absl import flags
from absl import logging
from fiddle import absl_flags
import jax
from paxml import base_experiment
from paxml.tools import _tool_flags
from praxis import base_layer
from praxis import py_utils

_CHECK_LEVEL = flags.DEFINE_integer(
    'check_level', 0,
    'How complete the checks are, from 0 (fewest) to 10 (instantiate the '
    'inputs).')

instantiate = base_layer.instantiate


def _init_model(model_p: Any, input_specs: Any) -> None:
  model = instantiate(model_p)
  if getattr(model, 'ici_mesh_shape', None) is not None:
    input_specs = jax.tree.map(py_utils.get_global_input_shape_dtype,
                               input_specs)
  model.abstract_init_with_mdl_config(input_specs)
  model.abstract_init_with_metadata(input_specs)


def validate(experiment: base_experiment.BaseExperiment,
             check_level: int) -> None:
  """Runs the checks of `check_level` (see the module docstring).

  Args:
    experiment: The experiment.
    check_level: 0 to 10.

  Raises:
    Whatever the failing check raises.
  """
  if check_level <= 0:
    return
  experiment.validate()
  task_p = experiment.task()
  instantiate(task_p)
  if check_level <= 2:
    return
  specs = instantiate(
      experiment.get_input_specs_provider_params()).get_input_specs()
  _init_model(task_p.model, specs)
  if check_level <= 4:
    return
  inputs = list(experiment.datasets()) + list(experiment.decode_datasets())
  if check_level >= 8:
    for input_p in inputs:
      instantiate(input_p)


def _run(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}.')
  validate(_tool_flags.experiment(), _CHECK_LEVEL.value)
  logging.info('The experiment passed the checks of level %d.',
               _CHECK_LEVEL.value)


def main() -> None:
  app.run(_run, flags_parser=absl_flags.flags_parser)


# Names Pax 1.4's module also has (aliases of other modules' names).
BaseExperimentT = base_experiment.BaseExperimentT
