r"""Fine-tuning an imported Hugging Face model on your text files.

Public: HF_MODEL_DIR_ENV, TRAIN_FILES_ENV, EVAL_FILES_ENV, HfFinetune,
HfInstructionFinetune.

First import the model (`python -m paxml.tools.hf_import --hf_dir=...
--output_dir=/tmp/llama_pax`), then:

  PAX_HF_MODEL_DIR=/tmp/llama_pax/hf \
  PAX_TRAIN_FILES='/data/train-*.jsonl.gz' \
  python -m paxml.main --exp=tasks.lm.params.hf_finetune.HfFinetune \
      --job_log_dir=/tmp/llama_ft \
      --restore_checkpoint_dir=/tmp/llama_pax/checkpoints

`HfFinetune` trains every weight (full fine-tuning) with Adam from the
imported step-0 checkpoint; the data is JSON Lines (also .gz), Parquet or
ArrayRecord with a `text` field, tokenized with the model's own
tokenizer.json / tokenizer.model and packed into rows of SEQ_LEN tokens.
`HfInstructionFinetune` reads records with `prompt` and `completion`
fields and puts loss only on the completions. Export the result with
`python -m paxml.tools.hf_export --checkpoint_dir=/tmp/llama_ft/checkpoints
--hf_model_dir=/tmp/llama_pax/hf --output_dir=/tmp/llama_ft_hf`.
"""

from __future__ import annotations

import os

from paxml import experiment_registry
from paxml.hf import experiment

HF_MODEL_DIR_ENV = 'PAX_HF_MODEL_DIR'
TRAIN_FILES_ENV = 'PAX_TRAIN_FILES'
EVAL_FILES_ENV = 'PAX_EVAL_FILES'


@experiment_registry.register
class HfFinetune(experiment.HfCausalLm):
  """Full fine-tuning; the model and data paths come from the environment."""

  SEQ_LEN = 1024
  BATCH_SIZE = 8
  LEARNING_RATE = 2e-5
  WARMUP_STEPS = 50
  NUM_TRAIN_STEPS = 1000

  def __init__(self):
    super().__init__()
    self.HF_MODEL_DIR = self.HF_MODEL_DIR or os.environ.get(HF_MODEL_DIR_ENV)
    self.TRAIN_FILES = self.TRAIN_FILES or os.environ.get(TRAIN_FILES_ENV)
    self.EVAL_FILES = self.EVAL_FILES or os.environ.get(EVAL_FILES_ENV)
    if not self.HF_MODEL_DIR:
      raise ValueError(f'{type(self).__name__}: set ${HF_MODEL_DIR_ENV} to '
                       "the imported model's hf/ directory (or subclass and "
                       'set HF_MODEL_DIR).')


@experiment_registry.register
class HfInstructionFinetune(HfFinetune):
  """Records {'prompt': ..., 'completion': ...}; loss on the completions."""

  TEXT_FIELD = 'completion'
  PROMPT_FIELD = 'prompt'
