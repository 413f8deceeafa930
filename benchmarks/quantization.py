"""Post-training int8 quantization of the demo LM: size, quality and speed.

Run: `python benchmarks/quantization.py [--train_steps=300]
[--job_log_dir=/tmp/pax_quant_bench]`.

Trains the demo `tasks.demo.pydoc_lm.PydocTransformerLm` for
`--train_steps` steps (or reuses the checkpoint already in `--job_log_dir`),
then quantizes its transformer layers and shared softmax/embedding with
`paxml.tools.quantize_checkpoint_lib` to

* int8 weight-only (MATERIALIZE -> int8 weights + per-channel scales), and
* int8 weights + int8 activations (dynamic per-token activation scales),
* and (`--qat`, default on) a second run of the same steps trained with int8
  fake quantization (`quantize.for_transformer`, QAT), served as int8,
* and (`--sparse`, default on) a third run with 2:4 sparse feed-forward
  weights (`tasks.demo.pydoc_lm_quant.PydocTransformerLmSparse`), whose masks
  are checked to keep exactly 2 of every 4 weights,

writes each quantized checkpoint and prints, in one table: the bytes of the
model variables and of the written checkpoint directories, the eval
log-perplexity on the test split (and its change against float), and greedy
decode tokens/s on one batch of prompts.
"""

import os
import pathlib
import tempfile

from absl import app
from absl import flags
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
from paxml import checkpoints
from paxml import train
from paxml import train_states
from paxml.tasks.demo import pydoc_lm
from paxml.tasks.demo import pydoc_lm_quant
from paxml.tools import quantize_checkpoint_lib as lib
from praxis import base_layer
from praxis.layers.quantization import quantization_hparams as qh

_TRAIN_STEPS = flags.DEFINE_integer('train_steps', 300, 'Training steps.')
_JOB_LOG_DIR = flags.DEFINE_string(
    'job_log_dir', None, 'Training directory (reused if it has a checkpoint).')
_QAT = flags.DEFINE_bool(
    'qat', True, 'Also train the same steps with int8 fake quantization '
    '(quantize.for_transformer, QAT) and serve it as int8.')
_SPARSE = flags.DEFINE_bool(
    'sparse', True, 'Also train the same steps with 2:4 sparse feed-forward '
    'weights and check the masks.')
_EVAL_BATCHES = flags.DEFINE_integer(
    'eval_batches', None, 'Eval batches (default: the whole test split).')


def _experiment(steps: int, base: type = pydoc_lm.PydocTransformerLm):
  class Short(base):
    NUM_TRAIN_STEPS = steps
    WARMUP_STEPS = max(1, min(100, steps // 10))

    def task(self):
      task_p = super().task()
      task_p.train.eval_interval_steps = steps
      task_p.train.decode_interval_steps = 0
      task_p.train.save_interval_steps = steps
      return task_p

  return Short()


def _dir_bytes(path: pathlib.Path) -> int:
  return sum(f.stat().st_size for f in path.rglob('*') if f.is_file())


def _save_float(float_vars, step, path: pathlib.Path) -> None:
  state = train_states.TrainState(step=jnp.asarray(step, jnp.int32),
                                  mdl_vars=float_vars, opt_states=[])
  checkpoints.save_checkpoint(state, epath.Path(path) / 'checkpoints',
                              overwrite=True,
                              checkpoint_type=checkpoints.CheckpointType.GDA)


def main(argv) -> None:
  del argv
  job_dir = pathlib.Path(_JOB_LOG_DIR.value or tempfile.mkdtemp(
      prefix='pax_quant_bench_'))
  experiment = _experiment(_TRAIN_STEPS.value)
  ckpt_dir = job_dir / 'checkpoints'
  if checkpoints.retrieve_latest_checkpoint_step_if_exists(ckpt_dir) is None:
    train.train_and_evaluate(experiment, job_dir,
                             enable_async_checkpointing=False)
  model_p = experiment.task().model
  eval_p = experiment.datasets()[-1]
  decode_p = experiment.decode_datasets()[0]
  batch = lib.first_batch(eval_p)
  prompts = lib.first_batch(decode_p)
  float_model = base_layer.instantiate(model_p)
  float_vars, step = lib.restore_float_variables(float_model, batch, ckpt_dir)
  _save_float(float_vars, step, job_dir / 'float_model_only')

  rows = [('float32', float_model, float_vars,
           _dir_bytes(job_dir / 'float_model_only'))]
  for label, options in (
      ('int8 weight-only', lib.QuantizeOptions(num_bits=8)),
      ('int8 weights+acts', lib.QuantizeOptions(num_bits=8, num_bits_act=8)),
  ):
    mat = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.MATERIALIZE))
    inf = base_layer.instantiate(lib.quantized_model_config(
        model_p, options, qh.QuantizationMode.INFERENCE))
    int_vars = lib.materialize(mat, float_vars)
    out_dir = job_dir / label.replace(' ', '_').replace('+', '_')
    lib.save_quantized(inf, batch, int_vars, step, out_dir, options)
    int_vars = lib.restore_quantized(inf, batch, out_dir)  # As served.
    rows.append((label, inf, int_vars, _dir_bytes(out_dir / 'checkpoints')))

  if _QAT.value:
    rows.append(_qat_row(job_dir, batch))
  sparse_note = ''
  if _SPARSE.value:
    row, sparse_note = _sparse_row(job_dir, batch)
    rows.append(row)
  results = []
  for label, model, variables, disk in rows:
    pplx = lib.eval_log_pplx(model, variables, eval_p, _EVAL_BATCHES.value)
    _, tps = lib.decode(model, variables, prompts, repeats=10)
    results.append((label, lib.checkpoint_bytes(variables), disk, pplx, tps))
  print(f'\nDemo LM after {step} steps; eval on the test split; decode '
        f'{prompts.ids.shape[0]} prompts x '
        f'{model_p.decoder_tpl.max_decode_steps} tokens; '
        f'{os.cpu_count()} CPUs, {jax_backend()}.')
  header = (f'{"model":<18} {"var bytes":>10} {"x float":>8} '
            f'{"ckpt bytes":>11} {"log_pplx":>9} {"vs float":>9} '
            f'{"decode tok/s":>13}')
  print(header)
  print('-' * len(header))
  _, base_bytes, _, base_pplx, _ = results[0]
  for label, nbytes, disk, pplx, tps in results:
    print(f'{label:<18} {nbytes:>10} {nbytes / base_bytes:>8.3f} {disk:>11} '
          f'{pplx:>9.4f} {100 * (pplx - base_pplx) / base_pplx:>+8.2f}% '
          f'{tps:>13.1f}')
  if sparse_note:
    print(sparse_note)


def _qat_row(job_dir: pathlib.Path, batch):
  """Trains with int8 fake quant, then serves the materialized int8 model."""
  qat_dir = job_dir / 'qat'
  experiment = _experiment(_TRAIN_STEPS.value,
                           pydoc_lm_quant.PydocTransformerLmQat)
  if checkpoints.retrieve_latest_checkpoint_step_if_exists(
      qat_dir / 'checkpoints') is None:
    train.train_and_evaluate(experiment, qat_dir,
                             enable_async_checkpointing=False)
  float_p = _experiment(_TRAIN_STEPS.value).task().model
  qat_model = base_layer.instantiate(experiment.task().model)
  qat_vars, step = lib.restore_float_variables(qat_model, batch,
                                               qat_dir / 'checkpoints')
  options = lib.QuantizeOptions(num_bits=8)
  mat = base_layer.instantiate(lib.quantized_model_config(
      float_p, options, qh.QuantizationMode.MATERIALIZE))
  inf = base_layer.instantiate(lib.quantized_model_config(
      float_p, options, qh.QuantizationMode.INFERENCE))
  out_dir = qat_dir / 'int8'
  lib.save_quantized(inf, batch, lib.materialize(mat, qat_vars), step,
                     out_dir, options)
  int_vars = lib.restore_quantized(inf, batch, out_dir)
  return ('QAT int8 (FQ)', inf, int_vars, _dir_bytes(out_dir / 'checkpoints'))


def _sparse_row(job_dir: pathlib.Path, batch):
  """Trains with 2:4 sparse FFN weights; checks every mask is 2:4."""
  sparse_dir = job_dir / 'sparse_2_4'
  experiment = _experiment(_TRAIN_STEPS.value,
                           pydoc_lm_quant.PydocTransformerLmSparse)
  if checkpoints.retrieve_latest_checkpoint_step_if_exists(
      sparse_dir / 'checkpoints') is None:
    train.train_and_evaluate(experiment, sparse_dir,
                             enable_async_checkpointing=False)
  model = base_layer.instantiate(experiment.task().model)
  variables, step = lib.restore_float_variables(model, batch,
                                                sparse_dir / 'checkpoints')
  _save_float(variables, step, sparse_dir / 'model_only')
  n, m = experiment.SPARSITY_N_M
  masks = [(path, leaf) for path, leaf in
           jax.tree_util.tree_flatten_with_path(variables)[0]
           if 'sparsity_mask' in jax.tree_util.keystr(path)]
  # Order C: groups of M run down each column (the contraction dim).
  ok = all(np.all(np.asarray(mask).T.reshape(-1, m).sum(axis=1) == n)
           for _, mask in masks)
  kept = np.mean([np.asarray(mask).mean() for _, mask in masks])
  note = (f'{n}:{m} sparse FFN: {len(masks)} masks, every group of {m} keeps '
          f'exactly {n}: {ok}; kept fraction {kept:.3f}.')
  return (f'{n}:{m} sparse FFN', model, variables,
          _dir_bytes(sparse_dir / 'model_only')), note


def jax_backend() -> str:
  return f'jax {jax.__version__} on {jax.default_backend()}'


if __name__ == '__main__':
  app.run(main)
