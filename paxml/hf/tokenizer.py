"""The tokenizer of a Hugging Face model directory, as a Pax tokenizer.

Public: `HfTokenizer`, `check_vocab`.

Reads `tokenizer.json` (the `tokenizers` package) or, when absent,
`tokenizer.model` (SentencePiece). Special ids come from config.json /
generation_config.json / tokenizer_config.json (`bos_token_id`,
`eos_token_id`, `pad_token_id`), falling back to the tokenizer's own.

  tok = pax_fiddle.Config(HfTokenizer, model_dir='/models/llama/hf')
"""

from __future__ import annotations

from collections.abc import Sequence
import json
import os
from typing import Any

import numpy as np

from praxis import tokenizers

_ID_FILES = ('config.json', 'generation_config.json', 'tokenizer_config.json')


def _special_ids(model_dir: str) -> dict[str, int]:
  """bos/eos/pad ids from the model's JSON files (first one wins)."""
  ids = {}
  for name in _ID_FILES:
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
      continue
    with open(path) as f:
      config = json.load(f)
    for key in ('bos', 'eos', 'pad'):
      value = config.get(f'{key}_token_id')
      if isinstance(value, list):
        value = value[0] if value else None
      if isinstance(value, int) and key not in ids:
        ids[key] = value
  return ids


class HfTokenizer(tokenizers.BaseTokenizer):
  """`tokenizer.json` or `tokenizer.model` of a HF model directory.

  Attributes:
    model_dir: The directory.
  """

  model_dir: str = ''

  def __post_init__(self):
    if not self.model_dir or not os.path.isdir(self.model_dir):
      raise ValueError(f'HfTokenizer: model_dir={self.model_dir!r} is not a '
                       'directory.')
    json_path = os.path.join(self.model_dir, 'tokenizer.json')
    spm_path = os.path.join(self.model_dir, 'tokenizer.model')
    self._spm = None
    if os.path.exists(json_path):
      import tokenizers as hf_tokenizers  # pylint: disable=g-import-not-at-top
      try:
        self._tok = hf_tokenizers.Tokenizer.from_file(json_path)
      except Exception as e:  # tokenizers raises its own exception type.
        raise ValueError(f'{json_path}: cannot read it ({e}).') from e
      size = self._tok.get_vocab_size(with_added_tokens=True)
    elif os.path.exists(spm_path):
      import sentencepiece as spm  # pylint: disable=g-import-not-at-top
      self._spm = spm.SentencePieceProcessor(model_file=spm_path)
      size = self._spm.get_piece_size()
    else:
      raise FileNotFoundError(f'{self.model_dir}: no tokenizer.json or '
                              'tokenizer.model.')
    self._size = size
    ids = _special_ids(self.model_dir)
    self._bos, self._eos = ids.get('bos', -1), ids.get('eos', -1)
    if self._spm is not None:
      self._bos = ids.get('bos', self._spm.bos_id())
      self._eos = ids.get('eos', self._spm.eos_id())
    self._pad = ids.get('pad', self._eos if self._eos >= 0 else 0)

  @property
  def vocab_size(self) -> int:
    return self._size

  @property
  def pad_id(self) -> int:
    return self._pad

  @property
  def eos_id(self) -> int:
    return self._eos

  @property
  def bos_id(self) -> int:
    return self._bos

  def encode(self, text: str) -> np.ndarray:
    if self._spm is not None:
      return np.asarray(self._spm.encode(text), np.int32)
    ids = self._tok.encode(text, add_special_tokens=False).ids
    return np.asarray(ids, np.int32)

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    ids = [int(i) for i in np.asarray(ids).reshape(-1)
           if int(i) not in (self._pad, self._eos, self._bos)]
    if self._spm is not None:
      return self._spm.decode(ids)
    return self._tok.decode(ids, skip_special_tokens=True)


def check_vocab(tok: Any, model_vocab_size: int, where: str) -> None:
  """Rejects a tokenizer with ids beyond the model's embedding rows."""
  if tok.vocab_size > model_vocab_size:
    raise ValueError(
        f'{where}: the tokenizer has {tok.vocab_size} ids but the model '
        f'(config.json field vocab_size) has {model_vocab_size} embedding '
        'rows: the tokenizer does not belong to this model.')
