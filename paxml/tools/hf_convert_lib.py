"""Hugging Face model directory <-> Pax experiment + checkpoint.

Public: `import_model`, `export_model`, `EXPERIMENT_MODULE`.

`import_model(hf_dir, out)` writes

  out/hf/                 config.json, tokenizer and generation files
  out/checkpoints/checkpoint_00000000/   a Pax (GDA) checkpoint, step 0
  out/hf_experiment.py    `Imported`, an `HfCausalLm` naming out/hf

The checkpoint is the step-0 train state of that experiment (its Adam
states zero), so `--mode=train --restore_checkpoint_dir=out/checkpoints`
fine-tunes from it, and eval/decode read its variables; with
`model_only=True` it holds the variables alone (eval/decode only).
`export_model(checkpoints, out)` writes config.json, the tokenizer files
and model.safetensors in the dtype of the original config.json. Both
write into a temporary sibling directory renamed at the end, so a failure
leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from paxml import checkpoints
from paxml import train_states
from paxml.hf import _weights
from paxml.hf import experiment as hf_experiment
from paxml.hf import tokenizer as hf_tokenizer
from praxis import base_hyperparams
from praxis import base_layer

import paxml.hf as hf

EXPERIMENT_MODULE = 'hf_experiment'
_WEIGHT_SUFFIXES = ('.safetensors', '.bin', '.pt', '.pth', '.ckpt', '.h5',
                    '.msgpack', '.gguf')
_DTYPES = {'float32': np.float32, 'bfloat16': ml_dtypes.bfloat16,
           'float16': np.float16}
_EXPERIMENT_TEMPLATE = '''"""The experiment of the imported Hugging Face model."""

from paxml import experiment_registry
from paxml.hf import experiment


@experiment_registry.register
class Imported(experiment.HfCausalLm):
  HF_MODEL_DIR = {model_dir!r}
'''


def _fresh_output(output_dir: str) -> str:
  """A temporary sibling of `output_dir` (which must not exist yet)."""
  output_dir = os.path.abspath(output_dir)
  if os.path.exists(output_dir) and os.listdir(output_dir):
    raise FileExistsError(f'{output_dir}: exists and is not empty; choose a '
                          'new output directory.')
  parent = os.path.dirname(output_dir)
  os.makedirs(parent, exist_ok=True)
  return tempfile.mkdtemp(prefix=f'.{os.path.basename(output_dir)}.tmp-',
                          dir=parent)


def _publish(tmp: str, output_dir: str) -> None:
  output_dir = os.path.abspath(output_dir)
  if os.path.isdir(output_dir):
    os.rmdir(output_dir)  # Empty (checked by _fresh_output).
  os.rename(tmp, output_dir)


def _copy_side_files(src: str, dst: str) -> None:
  """Copies config, tokenizer and generation files (not the weights)."""
  os.makedirs(dst, exist_ok=True)
  for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if (os.path.isfile(path) and not name.endswith(_WEIGHT_SUFFIXES)
        and name != _weights.INDEX_FILE):
      shutil.copy2(path, os.path.join(dst, name))


def _has_tokenizer(model_dir: str) -> bool:
  return any(os.path.exists(os.path.join(model_dir, f))
             for f in ('tokenizer.json', 'tokenizer.model'))


def _task_and_specs(exp: hf_experiment.HfCausalLm) -> tuple[Any, Any]:
  task = base_hyperparams.instantiate(exp.task())
  specs = base_hyperparams.instantiate(
      exp.get_input_specs_provider_params().set(batch_size=1, seq_len=8)
  ).get_input_specs()
  return task, specs


def _check_shapes(want: Any, got: Any, where: str) -> None:
  shapes = lambda t: {k: tuple(np.shape(v)) for k, v in hf.flatten(t).items()}
  want_s, got_s = shapes(want), shapes(got)
  if want_s != got_s:
    diff = sorted(set(want_s.items()) ^ set(got_s.items()))[:4]
    raise ValueError(f'{where}: the variables do not fit the model config; '
                     f'first differences: {diff}')


def import_model(hf_dir: str, output_dir: str, *, model_only: bool = False,
                 dtype: str = 'float32') -> str:
  """Writes the experiment and step-0 checkpoint of a HF model directory.

  Args:
    hf_dir: The HF model directory (config.json, *.safetensors, tokenizer).
    output_dir: Where to write (must not exist, or be empty).
    model_only: Leave the optimizer states out of the checkpoint.
    dtype: The variables' dtype ('float32', 'bfloat16' or 'float16').

  Returns:
    The output directory.
  """
  if dtype not in _DTYPES:
    raise ValueError(f'dtype={dtype!r}: expected one of {sorted(_DTYPES)}.')
  config_path = os.path.join(hf_dir, hf.CONFIG_FILE)
  spec = hf.model_spec(hf.read_config(hf_dir), config_path)
  if _has_tokenizer(hf_dir):
    tok = hf_tokenizer.HfTokenizer(model_dir=hf_dir)
    hf_tokenizer.check_vocab(tok, spec.vocab_size, hf_dir)
  variables = hf.import_variables(hf_dir, spec, dtype=_DTYPES[dtype])
  final = os.path.abspath(output_dir)
  tmp = _fresh_output(final)
  try:
    _copy_side_files(hf_dir, os.path.join(tmp, 'hf'))
    exp = hf_experiment.HfCausalLm()
    exp.HF_MODEL_DIR = os.path.join(tmp, 'hf')
    task, specs = _task_and_specs(exp)
    hps = task.model.abstract_init_with_metadata(specs)
    mdl_vars = {'params': {'lm': variables['params']}}
    _check_shapes({'params': _shapes_of(task, specs)}, mdl_vars, hf_dir)
    mdl_vars = jax.tree.map(jnp.asarray, mdl_vars)
    state = task.create_train_state(mdl_vars, hps,
                                    discard_opt_states=model_only)
    state = state.replace(step=jnp.asarray(0, jnp.int32))
    checkpoints.save_checkpoint(
        state, os.path.join(tmp, 'checkpoints'), overwrite=True,
        checkpoint_type=checkpoints.CheckpointType.GDA)
    with open(os.path.join(tmp, f'{EXPERIMENT_MODULE}.py'), 'w') as f:
      f.write(_EXPERIMENT_TEMPLATE.format(
          model_dir=os.path.join(final, 'hf')))
    _publish(tmp, final)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  logging.info('Imported %s (%s) into %s.', hf_dir, spec.family, final)
  return final


def _shapes_of(task: Any, specs: Any) -> Any:
  """The model's params as ShapeDtypeStructs."""
  with base_layer.JaxContext.new_context():
    shapes = jax.eval_shape(
        lambda b: task.model.init(jax.random.PRNGKey(0), b), specs)
  return dict(shapes['params'])


def _restore_params(exp: hf_experiment.HfCausalLm, checkpoint_dir: str,
                    step: int | None) -> tuple[dict[str, Any], int]:
  task, specs = _task_and_specs(exp)
  abstract = {'params': _shapes_of(task, specs)}
  state = checkpoints.restore_checkpoint(
      train_states.TrainState(step=jax.ShapeDtypeStruct((), jnp.int32),
                              mdl_vars=abstract, opt_states=[]),
      checkpoint_dir, checkpoint_type=checkpoints.CheckpointType.GDA,
      step=step)
  return state.mdl_vars['params'], int(np.asarray(state.step))


def export_model(checkpoint_dir: str, output_dir: str, *,
                 hf_model_dir: str | None = None, step: int | None = None,
                 dtype: str | None = None) -> str:
  """Writes a HF model directory from a checkpoint of an imported model.

  Args:
    checkpoint_dir: The checkpoints/ directory (of the import, or of a
      fine-tuning run).
    output_dir: Where to write (must not exist, or be empty).
    hf_model_dir: The directory with the model's config.json and tokenizer
      (default: `hf/` beside `checkpoint_dir`, as `import_model` writes).
    step: The checkpoint step (None: the latest).
    dtype: The tensors' dtype (default: config.json's `torch_dtype`, else
      float32).

  Returns:
    The output directory.
  """
  checkpoint_dir = os.path.abspath(checkpoint_dir)
  hf_model_dir = hf_model_dir or os.path.join(
      os.path.dirname(checkpoint_dir), 'hf')
  config = hf.read_config(hf_model_dir)
  dtype = dtype or config.get('torch_dtype') or config.get('dtype') or (
      'float32')
  if dtype not in _DTYPES:
    raise ValueError(f'dtype={dtype!r}: expected one of {sorted(_DTYPES)}.')
  exp = hf_experiment.HfCausalLm()
  exp.HF_MODEL_DIR = hf_model_dir
  spec = exp.spec()
  params, restored_step = _restore_params(exp, checkpoint_dir, step)
  params = jax.tree.map(np.asarray, params)
  tensors = hf.export_tensors(spec, params['lm'], checkpoint_dir)
  tensors = {k: v.astype(_DTYPES[dtype]) for k, v in tensors.items()}
  tmp = _fresh_output(output_dir)
  try:
    _copy_side_files(hf_model_dir, tmp)
    _weights.write_safetensors(tmp, tensors)
    _publish(tmp, output_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  logging.info('Exported step %d of %s to %s.', restored_step,
               checkpoint_dir, output_dir)
  return os.path.abspath(output_dir)


def write_config(spec: hf.ModelSpec, model_dir: str) -> None:
  """Writes a config.json made from `spec` (for models made here)."""
  with open(os.path.join(model_dir, hf.CONFIG_FILE), 'w') as f:
    json.dump(hf.config_from_spec(spec), f, indent=2)
