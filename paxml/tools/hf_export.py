r"""Exports a checkpoint of an imported model as a Hugging Face directory.

  python -m paxml.tools.hf_export \
      --checkpoint_dir=/tmp/llama_ft/checkpoints \
      --hf_model_dir=/tmp/llama_pax/hf --output_dir=/tmp/llama_ft_hf

`--hf_model_dir` holds the model's config.json and tokenizer (default:
`hf/` beside --checkpoint_dir, as hf_import writes it). The output loads
with `transformers.AutoModelForCausalLM.from_pretrained`.
"""

from absl import app
from absl import flags

from paxml.tools import hf_convert_lib

_CHECKPOINT_DIR = flags.DEFINE_string(
    'checkpoint_dir', None, 'The checkpoints/ directory.', required=True)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None,
                                  'Where to write (new or empty).',
                                  required=True)
_HF_MODEL_DIR = flags.DEFINE_string(
    'hf_model_dir', None, 'config.json + tokenizer directory (default: '
    'hf/ beside --checkpoint_dir).')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint step (default: latest).')
_DTYPE = flags.DEFINE_enum(
    'dtype', None, ['float32', 'bfloat16', 'float16'],
    "Tensor dtype (default: config.json's torch_dtype).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  out = hf_convert_lib.export_model(
      _CHECKPOINT_DIR.value, _OUTPUT_DIR.value,
      hf_model_dir=_HF_MODEL_DIR.value, step=_STEP.value, dtype=_DTYPE.value)
  print(f'Wrote {out}')


if __name__ == '__main__':
  app.run(main)
