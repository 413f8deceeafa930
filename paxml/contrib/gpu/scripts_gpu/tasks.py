"""Pax's dataset mixins of NVIDIA's GPU scripts, on local files.

Public names (as in Pax): PileUnsupervisedDataset, LambadaDataset,
BoolQDataset. Each gives `datasets()`: The Pile (train + validation),
LAMBADA (eval only) or BoolQ (train + validation), read by Grain from the
folders that `PILE_DATA_DIR`, `LAMBADA_DATA_DIR`, `BOOLQ_DATA_DIR` name
(environment variables, or experiment attributes of the same names),
tokenized with `VOCAB_PATH`; see `local_data` for the files expected.
Batches are PERCORE_BATCH_SIZE per local device on each process, as Pax's.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax
import numpy as np
from paxml import base_experiment
from paxml.contrib.gpu.scripts_gpu import local_data
from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle

InputConfig = pax_fiddle.Config[Any]


def _batch(exp: Any) -> dict[str, int]:
  """Per-process batch and infeed hosts (fractional PERCORE_BATCH_SIZE: a
  smaller batch on fewer hosts), as Pax's `_dataset_common`."""
  local = jax.local_device_count()
  per_process = exp.PERCORE_BATCH_SIZE * local
  if exp.PERCORE_BATCH_SIZE >= 1:
    return dict(batch_size=int(per_process),
                num_infeed_hosts=jax.process_count())
  batch = math.ceil(per_process)
  return dict(batch_size=batch, num_infeed_hosts=int(
      per_process * jax.process_count()) // batch)


def batch_specs_provider(exp: Any) -> InputConfig:
  """Input specs read off a first batch (of the training input, else of the
  first eval input: LAMBADA has no training data), so that they include the
  `eval_sample_weights` the models apply (the LM classes' default provider
  gives ids/labels/paddings/weights/segments only)."""
  inputs = exp.datasets()
  training = [p for p in inputs if p.is_training]
  return pax_fiddle.Config(base_input.DatasetInputSpecsProvider,
                           input_p=(training or inputs)[0])


class _LocalData(base_experiment.BaseExperiment):
  VOCAB_PATH = None

  def _input(self, cls: type[Any], env_var: str, stems: tuple[str, ...],
             what: str, **fields: Any) -> InputConfig:
    files = local_data.data_files(getattr(self, env_var), env_var, stems,
                                  what)
    return pax_fiddle.Config(
        cls, file_pattern=files,
        tokenizer=local_data.tokenizer_config(self.VOCAB_PATH),
        **_batch(self), **fields)


class PileUnsupervisedDataset(_LocalData):
  """The Pile: packed training rows, unpacked validation rows."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 2048
  TRAIN_INPUT_RANDOM_SEED = None
  PILE_DATA_DIR = None

  def _dataset_common(self, is_training: bool) -> InputConfig:
    return self._input(
        local_data.PileInput, 'PILE_DATA_DIR',
        ('train',) if is_training else ('val',),
        f'The Pile {"training" if is_training else "validation"} files',
        name='PileTrain' if is_training else 'PileValidation',
        seq_len=self.MAX_SEQ_LEN, is_training=is_training,
        pack=getattr(self, 'PACKED_INPUT', True) if is_training else False,
        input_random_seed=(self.TRAIN_INPUT_RANDOM_SEED if is_training
                           else 4321),
        reset_for_eval=not is_training, shuffle=True)

  def datasets(self) -> list[InputConfig]:
    return [self._dataset_common(True), self._dataset_common(False)]


class LambadaDataset(_LocalData):
  """LAMBADA's test passages, for zero-shot eval (one epoch each eval)."""

  PERCORE_BATCH_SIZE = 1
  MAX_SEQ_LEN = 2048
  LAMBADA_DATA_DIR = None

  def _dataset_common(self, is_training: bool) -> InputConfig:
    return self._input(
        local_data.LambadaInput, 'LAMBADA_DATA_DIR', ('lambada',),
        'LAMBADA files', name='LambadaValidation', seq_len=self.MAX_SEQ_LEN,
        is_training=is_training, input_random_seed=4321,
        reset_for_eval=not is_training, eval_loop_num_batches=-1)

  def datasets(self) -> list[InputConfig]:
    return [self._dataset_common(False)]


class BoolQDataset(_LocalData):
  """SuperGLUE BoolQ: fine-tune on train, evaluate on validation; only the
  answer token carries loss weight.

  TRUE_TOKEN / FALSE_TOKEN: the ids of 'yes' and 'no' (Pax encodes them with
  its vocabulary when the module loads); None: the first token of each, as
  the VOCAB_PATH tokenizer encodes it (`yes_no_tokens`).
  """

  PERCORE_BATCH_SIZE = 8
  MAX_SEQ_LEN = 4096
  BOS_ID = 1
  EOS_ID = 2
  TRAIN_INPUT_RANDOM_SEED = None
  BOOLQ_DATA_DIR = None
  TRUE_TOKEN = None
  FALSE_TOKEN = None

  def yes_no_tokens(self) -> tuple[int, int] | None:
    """(TRUE_TOKEN, FALSE_TOKEN), from the tokenizer where unset; None
    when neither they nor VOCAB_PATH are set."""
    if self.TRUE_TOKEN is not None and self.FALSE_TOKEN is not None:
      return int(self.TRUE_TOKEN), int(self.FALSE_TOKEN)
    if not (self.VOCAB_PATH or os.environ.get('VOCAB_PATH')):
      return None
    vocab = base_hyperparams.instantiate(
        local_data.tokenizer_config(self.VOCAB_PATH))
    yes, no = (int(np.asarray(vocab.encode(w)).reshape(-1)[0])
               for w in ('yes', 'no'))
    if yes == no:
      raise ValueError(f"BoolQ: 'yes' and 'no' start with the same token "
                       f'({yes}); set TRUE_TOKEN and FALSE_TOKEN.')
    return yes, no

  def _dataset_common(self, is_training: bool) -> InputConfig:
    return self._input(
        local_data.BoolQInput, 'BOOLQ_DATA_DIR',
        ('train',) if is_training else ('val',),
        f'BoolQ {"training" if is_training else "validation"} files',
        name='BoolQ', seq_len=self.MAX_SEQ_LEN, is_training=is_training,
        input_random_seed=(self.TRAIN_INPUT_RANDOM_SEED if is_training
                           else 4321),
        reset_for_eval=not is_training, shuffle=True,
        eval_loop_num_batches=-1)

  def datasets(self) -> list[InputConfig]:
    return [self._dataset_common(True), self._dataset_common(False)]
