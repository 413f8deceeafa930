"""Writes an experiment's configs as text, without running it.

Public names: write_hparams, write_post_init_hparams, write_cls_vars, main.

`write_hparams` writes the datasets, the decode datasets and the task (the
same text as a run's `model_params.txt`, with Pax's section headers);
`write_post_init_hparams` instantiates the model and writes its resolved
layer configs and its variables' metadata, from shapes only (no memory for
the weights); `write_cls_vars` writes `experiment_utils`' class-variables
summary. `dump_hparams.py` is the command line.
"""

from __future__ import annotations

from typing import Any, TextIO

from absl import app
from absl import flags
from absl import logging
from etils import epath
from fiddle import absl_flags
import jax
from paxml import base_experiment
from paxml import experiment_utils
from paxml.tools import _tool_flags
from praxis import base_hyperparams
from praxis import base_layer
from praxis import py_utils

_OUTFILE = epath.DEFINE_path('params_ofile', '/dev/stdout',
                             'Where the configs go.')
_POST_INIT_OUTFILE = epath.DEFINE_path(
    'post_init_params_ofile', None,
    'If set, also write the instantiated model and its variables here.')
_CLS_VARS_OUTFILE = epath.DEFINE_path(
    'cls_vars_ofile', None,
    "If set, also write the experiment's class variables here.")

_text = base_hyperparams.nested_struct_to_text


def write_hparams(experiment: base_experiment.BaseExperiment,
                  out: TextIO) -> None:
  """Writes the datasets, decode datasets and task configs to `out`."""
  out.write('============= Trainer / Evaler datasets.\n\n')
  for dataset in experiment.datasets():
    out.write(_text(dataset) + '\n\n')
  out.write('============= Decode datasets.\n\n')
  for dataset in experiment.decode_datasets():
    out.write(_text(dataset) + '\n\n')
  out.write(_text(experiment.task()))


def write_post_init_hparams(experiment: base_experiment.BaseExperiment,
                            out: TextIO) -> None:
  """Writes the instantiated model's configs and its variables' metadata.

  Mesh experiments are traced with their global input shapes.
  """
  model_p = experiment.task().model
  model = base_layer.instantiate(model_p)
  specs = base_layer.instantiate(
      experiment.get_input_specs_provider_params()).get_input_specs()
  if getattr(model, 'ici_mesh_shape', None) is not None:
    specs = jax.tree.map(py_utils.get_global_input_shape_dtype, specs)
  out.write(_text(model.abstract_init_with_mdl_config(specs)) + '\n\n')
  out.write(_text(model.abstract_init_with_metadata(specs)))


def write_cls_vars(experiment: base_experiment.BaseExperiment,
                   out: TextIO) -> None:
  out.write(experiment_utils.get_cls_vars_summary(type(experiment)))


def _run(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}.')
  experiment = _tool_flags.experiment()
  writers = [(_OUTFILE.value, write_hparams),
             (_POST_INIT_OUTFILE.value, write_post_init_hparams),
             (_CLS_VARS_OUTFILE.value, write_cls_vars)]
  for path, write in writers:
    if path is None:
      continue
    logging.info('Writing %s to %s', write.__name__, path)
    if str(path) != '/dev/stdout':
      path.parent.mkdir(parents=True, exist_ok=True)
    with path.open('w') as out:
      write(experiment, out)


def main() -> None:
  app.run(_run, flags_parser=absl_flags.flags_parser)
