r"""Quantizes a trained float checkpoint to int8 (or int4) weights; serves it.

  # Write the int8 weight-only checkpoint of a trained demo LM:
  python -m paxml.tools.quantize_checkpoint \
      --exp=tasks.demo.pydoc_lm.PydocTransformerLm \
      --checkpoint_dir=/tmp/pax_demo/checkpoints --output_dir=/tmp/pax_int8
  # Eval log-perplexity and greedy decoding from it:
  python -m paxml.tools.quantize_checkpoint --mode=eval \
      --exp=tasks.demo.pydoc_lm.PydocTransformerLm --output_dir=/tmp/pax_int8
  python -m paxml.tools.quantize_checkpoint --mode=decode \
      --exp=tasks.demo.pydoc_lm.PydocTransformerLm --output_dir=/tmp/pax_int8

`--num_bits_act=8` also quantizes activations (int8 x int8 matmuls);
`--num_bits=4` writes packed int4 weights. See quantize_checkpoint_lib.
"""

from absl import app
from absl import flags
from absl import logging
from paxml.tools import _tool_flags
from paxml.tools import quantize_checkpoint_lib as lib
from praxis import base_layer
from praxis.layers.quantization import quantization_hparams as qh

_MODE = flags.DEFINE_enum(
    'mode', 'quantize', ['quantize', 'eval', 'decode'],
    'quantize: write the quantized checkpoint; eval / decode: run the '
    "experiment's first eval / decode input on it.")
_CHECKPOINT_DIR = flags.DEFINE_string(
    'checkpoint_dir', None,
    'The float checkpoints (<job_log_dir>/checkpoints); --mode=quantize.')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step (default latest).')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', None, 'Where the quantized checkpoint is (to be) written.',
    required=True)
_NUM_BITS = flags.DEFINE_integer('num_bits', 8, 'Weight bits: 2, 4 or 8.')
_NUM_BITS_ACT = flags.DEFINE_integer(
    'num_bits_act', None, 'Activation bits (unset: weight-only).')
_EMBEDDING = flags.DEFINE_bool(
    'quantize_embedding_softmax', True,
    'Also quantize the shared embedding/softmax table.')
_EVAL_BATCHES = flags.DEFINE_integer(
    'eval_batches', None, 'Eval batches (default: the whole eval input).')


def _quantize(experiment) -> None:
  if not _CHECKPOINT_DIR.value:
    raise app.UsageError('--mode=quantize needs --checkpoint_dir.')
  options = lib.QuantizeOptions(
      num_bits=_NUM_BITS.value, num_bits_act=_NUM_BITS_ACT.value,
      quantize_embedding_softmax=_EMBEDDING.value)
  model_p = experiment.task().model
  batch = lib.first_batch(experiment.datasets()[-1])
  float_model = base_layer.instantiate(model_p)
  float_vars, step = lib.restore_float_variables(
      float_model, batch, _CHECKPOINT_DIR.value, _STEP.value)
  mat = base_layer.instantiate(lib.quantized_model_config(
      model_p, options, qh.QuantizationMode.MATERIALIZE))
  int_vars = lib.materialize(mat, float_vars)
  inf = base_layer.instantiate(lib.quantized_model_config(
      model_p, options, qh.QuantizationMode.INFERENCE))
  out = lib.save_quantized(inf, batch, int_vars, step, _OUTPUT_DIR.value,
                           options)
  print(f'step {step}: float {lib.checkpoint_bytes(float_vars)} bytes -> '
        f'quantized {lib.checkpoint_bytes(int_vars)} bytes, written to {out}')


def _serving_model(experiment):
  options = lib.read_options(_OUTPUT_DIR.value)
  model = base_layer.instantiate(lib.quantized_model_config(
      experiment.task().model, options, qh.QuantizationMode.INFERENCE))
  return model


def main(argv) -> None:
  del argv
  experiment = _tool_flags.experiment()
  if _MODE.value == 'quantize':
    _quantize(experiment)
    return
  model = _serving_model(experiment)
  if _MODE.value == 'eval':
    input_p = experiment.datasets()[-1]
    variables = lib.restore_quantized(model, lib.first_batch(input_p),
                                      _OUTPUT_DIR.value)
    pplx = lib.eval_log_pplx(model, variables, input_p, _EVAL_BATCHES.value)
    print(f'eval {input_p.name}: log_pplx {pplx:.4f}')
    return
  input_p = experiment.decode_datasets()[0]
  batch = lib.first_batch(input_p)
  variables = lib.restore_quantized(model, batch, _OUTPUT_DIR.value)
  out, tokens_per_sec = lib.decode(model, variables, batch)
  results = out[1]
  tokenizer_p = getattr(input_p, 'tokenizer', None)
  tokenizer = base_layer.instantiate(tokenizer_p) if tokenizer_p else None
  for ids in list(results.output_ids[:, 0] if results.output_ids.ndim == 3
                  else results.output_ids)[:4]:
    text = tokenizer.decode(ids.tolist()) if tokenizer else ids.tolist()
    print(repr(text))
  print(f'decode: {tokens_per_sec:.1f} tokens/s')
  logging.info('decoded %d prompts', batch.ids.shape[0])


if __name__ == '__main__':
  app.run(main)
