r"""Imports a Hugging Face model directory as a Pax experiment + checkpoint.

  python -m paxml.tools.hf_import --hf_dir=/models/Llama-3.2-1B \
      --output_dir=/tmp/llama_pax
  # Then fine-tune it on your data (see tasks/lm/params/hf_finetune.py):
  PAX_HF_MODEL_DIR=/tmp/llama_pax/hf PAX_TRAIN_FILES='/data/*.jsonl.gz' \
  python -m paxml.main --exp=tasks.lm.params.hf_finetune.HfFinetune \
      --job_log_dir=/tmp/llama_ft \
      --restore_checkpoint_dir=/tmp/llama_pax/checkpoints

Supported: LlamaForCausalLM (GQA, rope_scaling linear/llama3),
MistralForCausalLM, GemmaForCausalLM, GPT2LMHeadModel, from safetensors.
See paxml/tools/hf_convert_lib.py for the layout written.
"""

from absl import app
from absl import flags

from paxml.tools import hf_convert_lib

_HF_DIR = flags.DEFINE_string('hf_dir', None, 'The HF model directory.',
                              required=True)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None,
                                  'Where to write (new or empty).',
                                  required=True)
_MODEL_ONLY = flags.DEFINE_bool(
    'model_only', False,
    'Leave the optimizer states out (a smaller checkpoint for eval/decode).')
_DTYPE = flags.DEFINE_enum('dtype', 'float32',
                           ['float32', 'bfloat16', 'float16'],
                           'dtype of the Pax variables.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  out = hf_convert_lib.import_model(_HF_DIR.value, _OUTPUT_DIR.value,
                                    model_only=_MODEL_ONLY.value,
                                    dtype=_DTYPE.value)
  print(f'Wrote {out}: experiment hf_experiment.Imported (PYTHONPATH={out}),'
        f' checkpoint {out}/checkpoints')


if __name__ == '__main__':
  app.run(main)
