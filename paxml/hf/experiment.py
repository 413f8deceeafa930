"""`HfCausalLm`: the experiment of an imported Hugging Face model.

Public: `HfCausalLm`, `LmInputSpecs`.

`paxml.tools.hf_import` writes a subclass naming the model directory
(`HF_MODEL_DIR`, holding config.json and the tokenizer) next to the
checkpoint. Fine-tuning sets the data (`TRAIN_FILES`, `EVAL_FILES`: JSON
Lines, .json.gz, Parquet or ArrayRecord, read by `paxml.grain_input`) and
starts from the imported checkpoint with `--restore_checkpoint_dir` (the
same train state), or with `INIT_FROM_CHECKPOINT` (Pax's
`init_from_checkpoint_rules`: a model with more variables, e.g. LoRA
adapters, or another optimizer):

  class MyFinetune(HfCausalLm):
    HF_MODEL_DIR = '/models/llama_pax/hf'
    TRAIN_FILES = '/data/train-*.jsonl.gz'
    NUM_TRAIN_STEPS = 1000

The loss is the causal-LM loss on every real token of the packed rows
(padding has weight 0; documents in one row do not attend to each other).
With `PROMPT_FIELD` (instruction data: records with a prompt and a
completion) the prompt's tokens are context only: their labels have weight
0, so the model learns the completions.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from paxml import base_experiment
from paxml import grain_input
from paxml import tasks_lib
from paxml.contrib.gpu.scripts_gpu import lora_utils
from paxml.hf import tokenizer as hf_tokenizer
from praxis import base_input
from praxis import decoder_hparams
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import models

import paxml.hf as hf

NestedMap = py_utils.NestedMap


class LmInputSpecs(base_input.BaseInputSpecsProvider):
  """The specs of a `grain_input.LmTextInput` batch, without reading data.

  Attributes:
    batch_size: Rows per batch.
    seq_len: Tokens per row.
  """

  batch_size: int = 1
  seq_len: int = 0

  def get_input_specs(self) -> NestedMap:
    shape = (self.batch_size, self.seq_len)
    ints = ('ids', 'labels', 'segment_ids', 'segment_pos')
    specs = {k: jax.ShapeDtypeStruct(shape, jnp.int32) for k in ints}
    specs.update({k: jax.ShapeDtypeStruct(shape, jnp.float32)
                  for k in ('paddings', 'weights')})
    specs['eval_sample_weights'] = jax.ShapeDtypeStruct(
        shape[:1], jnp.float32)
    return NestedMap(specs)


class HfCausalLm(base_experiment.BaseExperiment):
  """A causal LM whose architecture is read from `HF_MODEL_DIR/config.json`.

  Attributes are upper-case class attributes, as in Pax's experiments.
  """

  HF_MODEL_DIR: str | None = None
  TRAIN_FILES: str | None = None
  EVAL_FILES: str | None = None
  DECODE_FILES: str | None = None
  MAX_DECODE_STEPS = 32
  INIT_FROM_CHECKPOINT: str | None = None
  INIT_IGNORE_RULES: tuple[str, ...] = ()
  USE_LORA = False
  LORA_RANK = 8
  LORA_TARGET_LAYERS = 'mlp'
  TEXT_FIELD = 'text'
  PROMPT_FIELD = ''
  SEQ_LEN = 512
  BATCH_SIZE = 4
  LEARNING_RATE = 1e-5
  WEIGHT_DECAY = 0.0
  WARMUP_STEPS = 0
  NUM_TRAIN_STEPS = 1000
  CHECKPOINT_EVERY_N_STEPS = 100
  SUMMARY_INTERVAL_STEPS = 10
  EVAL_INTERVAL_STEPS = 100

  def model_dir(self) -> str:
    if not self.HF_MODEL_DIR:
      raise ValueError(f'{type(self).__name__}: set HF_MODEL_DIR to the '
                       'directory holding config.json and the tokenizer.')
    return self.HF_MODEL_DIR

  def spec(self) -> hf.ModelSpec:
    """The model's ModelSpec, from its config.json."""
    return hf.model_spec(hf.read_config(self.model_dir()),
                         f'{self.model_dir()}/config.json')

  def tokenizer(self) -> pax_fiddle.Config[hf_tokenizer.HfTokenizer]:
    return pax_fiddle.Config(hf_tokenizer.HfTokenizer,
                             model_dir=self.model_dir())

  def task(self) -> pax_fiddle.Config[tasks_lib.SingleTask]:
    task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='hf_task')
    task_p.model = pax_fiddle.Config(models.LanguageModel, name='hf_lm',
                                     lm_tpl=hf.lm_config(self.spec()))
    task_p.model.decoder_tpl = self.decoder()
    if self.USE_LORA:  # Adapters only train (paxml.contrib...lora_utils).
      lora_utils.configure_lora(task_p, self.LORA_RANK,
                                self.LORA_TARGET_LAYERS)
    if self.INIT_FROM_CHECKPOINT:
      task_p.train.init_from_checkpoint_rules = {
          self.INIT_FROM_CHECKPOINT: self._init_rules()}
    train = task_p.train
    train.num_train_steps = self.NUM_TRAIN_STEPS
    train.save_interval_steps = self.CHECKPOINT_EVERY_N_STEPS
    train.summary_interval_steps = self.SUMMARY_INTERVAL_STEPS
    train.eval_interval_steps = self.EVAL_INTERVAL_STEPS
    learner = train.learner
    learner.loss_name = 'total_loss'
    learner.optimizer = pax_fiddle.Config(
        optimizers.Adam, beta1=0.9, beta2=0.95, epsilon=1e-8,
        weight_decay=self.WEIGHT_DECAY, learning_rate=self.LEARNING_RATE,
        clip_gradient_norm_to_value=1.0,
        lr_schedule=self._schedule())
    return task_p

  def _init_rules(self) -> tasks_lib.CheckpointLoadingRules:
    """Start from the imported checkpoint; new variables keep their init.

    Unlike `--restore_checkpoint_dir` (which needs the very same train
    state), this loads the imported model's variables into a model that
    has more (LoRA adapters: name them in INIT_IGNORE_RULES) or another
    optimizer, and starts at step 0 with fresh optimizer states.
    """
    imported = HfCausalLm()
    imported.HF_MODEL_DIR = self.model_dir()
    return tasks_lib.CheckpointLoadingRules(
        task_p=HfCausalLm.task(imported), load_rules=[(r'(.*)', '{}')],
        ignore_rules=list(self.INIT_IGNORE_RULES) + (
            [lora_utils.LORA_VARIABLES] if self.USE_LORA else []),
        input_specs_provider_p=imported.get_input_specs_provider_params())

  def decoder(self) -> decoder_hparams.GreedyDecoderHParams:
    """Greedy decoding of up to MAX_DECODE_STEPS tokens after each prompt."""
    eos = hf.read_config(self.model_dir()).get('eos_token_id')
    eos = eos if eos is not None else -1
    return decoder_hparams.GreedyDecoderHParams(
        seqlen=self.SEQ_LEN + self.MAX_DECODE_STEPS,
        max_decode_steps=self.MAX_DECODE_STEPS, fprop_for_prefix=True,
        eos_id=eos)

  def _schedule(self) -> Any:
    """Linear warm-up over WARMUP_STEPS, then the constant LEARNING_RATE."""
    if self.WARMUP_STEPS <= 0:
      return pax_fiddle.Config(schedules.Constant)
    return pax_fiddle.Config(
        schedules.LinearRampupPiecewiseConstant,
        boundaries=[self.WARMUP_STEPS, self.NUM_TRAIN_STEPS],
        values=[1.0, 1.0])

  def _input(self, files: str, is_training: bool) -> Any:
    return pax_fiddle.Config(
        grain_input.LmTextInput, name='train' if is_training else 'eval',
        file_pattern=files, text_field=self.TEXT_FIELD,
        prompt_field=self.PROMPT_FIELD, seq_len=self.SEQ_LEN,
        batch_size=self.BATCH_SIZE, is_training=is_training,
        reset_for_eval=not is_training, tokenizer=self.tokenizer())

  def datasets(self) -> list[Any]:
    if self.TRAIN_FILES or self.EVAL_FILES:
      tok = hf_tokenizer.HfTokenizer(model_dir=self.model_dir())
      hf_tokenizer.check_vocab(tok, self.spec().vocab_size, self.model_dir())
    out = []
    if self.TRAIN_FILES:
      out.append(self._input(self.TRAIN_FILES, True))
    if self.EVAL_FILES:
      out.append(self._input(self.EVAL_FILES, False))
    return out

  def decode_datasets(self) -> list[Any]:
    """The prompts of DECODE_FILES, one a row (--mode=decode)."""
    if not self.DECODE_FILES:
      return []
    p = self._input(self.DECODE_FILES, False).set(
        name='decode', pack=False, add_eos=True)  # ids: [BOS] prompt.
    return [p]

  def get_input_specs_provider_params(self) -> Any:
    return pax_fiddle.Config(LmInputSpecs, batch_size=self.BATCH_SIZE,
                             seq_len=self.SEQ_LEN)
