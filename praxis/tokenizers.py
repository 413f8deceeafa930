"""Tokenizers for text inputs: text <-> int32 ids, configurable with Fiddle.

Public names: BaseTokenizer, ByteTokenizer, SentencePieceTokenizer,
training_lines.

Inputs (e.g. `paxml.grain_input.LmTextInput`) take a tokenizer as a
`pax_fiddle.Config` and build it once per input; every tokenizer offers
`encode(text)`, `decode(ids)` and the properties `vocab_size`, `pad_id`,
`eos_id` and `bos_id`.

`SentencePieceTokenizer` loads a `.model` file, or trains one on the fly from
text or JSONL files with `sentencepiece.SentencePieceTrainer` and caches it:
training is deterministic (fixed seed, one thread by default), and the cached
file's name carries a hash of the training text and settings, so every host
that trains from the same data gets the same model.

Example:

  cfg = pax_fiddle.Config(SentencePieceTokenizer, train_on=['/data/a.jsonl'],
                          vocab_size=1024)
  tok = base_hyperparams.instantiate(cfg)
  tok.decode(tok.encode('hello'))  # 'hello'
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import glob
import hashlib
import io
import json
import os
from typing import Any

from absl import logging
from etils import epath
import numpy as np
import sentencepiece as spm

from praxis import base_hyperparams

# Ids of the models that SentencePieceTokenizer trains.
_SPM_PAD_ID, _SPM_EOS_ID, _SPM_BOS_ID, _SPM_UNK_ID = 0, 1, 2, 3
_SPM_SEED = 0


class BaseTokenizer(base_hyperparams.FiddleBaseParameterizable,
                    metaclass=abc.ABCMeta):
  """Maps text to int32 ids and back.

  `bos_id` is -1 when the vocabulary has no begin-of-sequence id.
  """

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int:
    """Number of ids: every id is in [0, vocab_size)."""

  @property
  @abc.abstractmethod
  def pad_id(self) -> int:
    """The id of padding."""

  @property
  @abc.abstractmethod
  def eos_id(self) -> int:
    """The end-of-sequence id (-1 if none)."""

  @property
  def bos_id(self) -> int:
    """The begin-of-sequence id (-1 if none)."""
    return -1

  @abc.abstractmethod
  def encode(self, text: str) -> np.ndarray:
    """The ids of `text` (no BOS/EOS added), as an int32 vector."""

  @abc.abstractmethod
  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    """The text of `ids`; special ids (pad, EOS, BOS) decode to nothing."""


class ByteTokenizer(BaseTokenizer):
  """UTF-8 bytes, shifted past three special ids: pad 0, EOS 1, BOS 2.

  Byte b has id b + 3, so `vocab_size` is 259. Decoding skips the special
  ids and ids out of range, and replaces invalid UTF-8 with U+FFFD.
  """

  NUM_SPECIAL_IDS = 3

  @property
  def vocab_size(self) -> int:
    return 256 + self.NUM_SPECIAL_IDS

  @property
  def pad_id(self) -> int:
    return 0

  @property
  def eos_id(self) -> int:
    return 1

  @property
  def bos_id(self) -> int:
    return 2

  def encode(self, text: str) -> np.ndarray:
    data = np.frombuffer(text.encode('utf-8'), dtype=np.uint8)
    return data.astype(np.int32) + self.NUM_SPECIAL_IDS

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    ids = ids[(ids >= self.NUM_SPECIAL_IDS) & (ids < self.vocab_size)]
    data = (ids - self.NUM_SPECIAL_IDS).astype(np.uint8).tobytes()
    return data.decode('utf-8', errors='replace')


# ----------------------------------------------------------------------------
# SentencePiece.
# ----------------------------------------------------------------------------


def _expand_files(patterns: Sequence[str] | str) -> list[str]:
  """Sorted files matching glob patterns (a pattern may name one file)."""
  if isinstance(patterns, str):
    patterns = [p for p in patterns.split(',') if p]
  files = []
  for pattern in patterns:
    matches = sorted(glob.glob(os.path.expanduser(pattern)))
    if not matches and epath.Path(pattern).exists():
      matches = [pattern]
    if not matches:
      raise FileNotFoundError(f'No file matches {pattern!r}.')
    files.extend(matches)
  return files


def _is_jsonl(path: str) -> bool:
  return path.endswith(('.jsonl', '.json'))


def training_lines(files: Sequence[str], text_field: str) -> Iterator[str]:
  """The non-blank lines of text files, or of one field of JSONL records.

  SentencePiece trains on lines, so JSONL texts are split at newlines too.

  Args:
    files: Text files, or JSONL files (`.jsonl`/`.json`, one object a line).
    text_field: The field of JSONL objects holding the text.

  Yields:
    Lines without their newline.
  """
  for path in files:
    with epath.Path(path).open('r', encoding='utf-8') as f:
      for line_number, line in enumerate(f, 1):
        if not _is_jsonl(path):
          text = line.rstrip('\n')
        elif not line.strip():
          continue
        else:
          try:
            record = json.loads(line)
          except ValueError as e:
            raise ValueError(
                f'{path}:{line_number}: not a JSON object ({e}); expected '
                f'one JSON object a line with a string field {text_field!r}.'
            ) from None
          if not isinstance(record, dict) or not isinstance(
              record.get(text_field), str):
            found = sorted(record) if isinstance(record, dict) else (
                type(record).__name__)
            raise ValueError(
                f'{path}:{line_number}: no string field {text_field!r} '
                f'(fields: {found}).'
            )
          text = record[text_field]
        yield from (part for part in text.split('\n') if part.strip())


def _hash_training_data(files: Sequence[str], settings: Mapping[str, Any]):
  digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
  for path in files:
    with epath.Path(path).open('rb') as f:
      while block := f.read(1 << 20):
        digest.update(block)
    digest.update(b'\0')
  return digest.hexdigest()


def default_cache_dir() -> str:
  """Where trained SentencePiece models are cached by default:
  `$XDG_CACHE_HOME/praxis/sentencepiece` (`~/.cache/...` without it)."""
  root = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
  return os.path.join(root, 'praxis', 'sentencepiece')


def _load_model(path: Any) -> spm.SentencePieceProcessor:
  """The SentencePiece model in file `path`; RuntimeError if it is not one."""
  data = epath.Path(path).read_bytes()
  try:
    return spm.SentencePieceProcessor(model_proto=data)
  except (RuntimeError, TypeError) as e:
    raise RuntimeError(str(e).strip().splitlines()[-1] if str(e).strip()
                       else type(e).__name__) from None


def _cached_model_problem(path: Any, vocab_size: int) -> str | None:
  """Why a cached model file cannot be used, or None if it can."""
  try:
    size = _load_model(path).get_piece_size()
  except (RuntimeError, OSError) as e:
    return f'does not load ({e})'
  if size != vocab_size:
    return f'has {size} pieces, not vocab_size={vocab_size}'
  return None


class SentencePieceTokenizer(BaseTokenizer):
  """A SentencePiece model, loaded from a file or trained on the fly.

  With `model_path` naming an existing file, that model is loaded. Otherwise
  a model is trained on the lines of `train_on` (see `training_lines`) and
  written to `model_path`, or, when `model_path` is None, to
  `<model_dir>/spm_<vocab_size>_<hash>.model`, where the hash covers the
  training text and settings (so a cached model is reused only for the same
  data and settings) and `model_dir` defaults to the user's cache
  (`default_cache_dir()`). A cached model is used only if it loads and has
  `vocab_size` pieces; otherwise it is trained again, with a warning.
  Trained models use pad 0, EOS 1, BOS 2 and UNK 3, an identity
  normalisation that keeps every space, and '\\n' as a piece, so text made
  of characters seen in training survives `decode(encode(text))`.

  Attributes:
    model_path: A `.model` file to load, or where to write a trained model.
    train_on: Text or JSONL files (glob patterns allowed) to train on when
      `model_path` is None or does not exist.
    text_field: Field of the JSONL records holding the text.
    model_dir: Folder of the trained-model cache (default: the user's cache
      dir, see above).
    vocab_size: Pieces of a trained model (required to train). When loading,
      0 or the model's size; it is set to the model's size.
    model_type: 'unigram', 'bpe', 'char' or 'word'.
    character_coverage: Fraction of the training characters the model covers.
    byte_fallback: Encode unknown characters as UTF-8 byte pieces (adds 256
      pieces: needs a larger vocab_size).
    user_defined_symbols: Strings that are always single pieces.
    num_threads: Trainer threads (1 is deterministic and enough for small
      corpora).
    trainer_options: More `SentencePieceTrainer.train` keyword arguments.
  """

  model_path: str | None = None
  train_on: Sequence[str] | str | None = None
  text_field: str = 'text'
  model_dir: str | None = None
  vocab_size: int = 0
  model_type: str = 'unigram'
  character_coverage: float = 1.0
  byte_fallback: bool = False
  user_defined_symbols: Sequence[str] = ('\n',)
  num_threads: int = 1
  trainer_options: Mapping[str, Any] | None = None

  def __post_init__(self):
    if self.vocab_size < 0:
      raise self._error('vocab_size', 'must be >= 0')
    path = self.model_path
    if not path or not epath.Path(path).is_file():
      if not self.train_on:
        raise self._error(
            'model_path',
            'does not name an existing model file, and train_on is not set '
            'to train one',
        )
      path = self._train()
    self.model_file = str(path)
    try:
      self._sp = _load_model(path)
    except RuntimeError as e:
      raise base_hyperparams.ConfigError(
          f'SentencePieceTokenizer {self.name!r}: {path} is not a '
          f'SentencePiece model file ({e}).') from None
    size = self._sp.get_piece_size()
    if self.vocab_size not in (0, size):
      raise self._error('vocab_size', f'differs from the model {path} '
                        f'({size} pieces)')
    self.vocab_size = size

  def _error(self, field: str, problem: str) -> ValueError:
    return base_hyperparams.ConfigError(
        f'SentencePieceTokenizer {self.name!r}: {field}='
        f'{getattr(self, field)!r} {problem}.'
    )

  def _trainer_settings(self) -> dict[str, Any]:
    settings = {
        'vocab_size': self.vocab_size,
        'model_type': self.model_type,
        'character_coverage': self.character_coverage,
        'byte_fallback': self.byte_fallback,
        'user_defined_symbols': list(self.user_defined_symbols),
        'pad_id': _SPM_PAD_ID,
        'eos_id': _SPM_EOS_ID,
        'bos_id': _SPM_BOS_ID,
        'unk_id': _SPM_UNK_ID,
        'normalization_rule_name': 'identity',
        'remove_extra_whitespaces': False,
        'allow_whitespace_only_pieces': True,
        'num_threads': self.num_threads,
    }
    settings.update(self.trainer_options or {})
    return settings

  def _train(self) -> epath.Path:
    """Trains a model (unless cached) and returns its path."""
    if self.vocab_size <= 0:
      raise self._error('vocab_size', 'must be positive to train a model')
    files = _expand_files(self.train_on)
    settings = self._trainer_settings()
    path = self.model_path
    if not path:
      key = _hash_training_data(files, dict(settings, field=self.text_field))
      folder = self.model_dir or default_cache_dir()
      path = os.path.join(folder, f'spm_{self.vocab_size}_{key[:16]}.model')
      path = epath.Path(path)
      if path.exists():
        problem = _cached_model_problem(path, self.vocab_size)
        if problem is None:
          return path
        logging.warning('The cached SentencePiece model %s %s: training it '
                        'again.', path, problem)
    path = epath.Path(path)
    logging.info('Training a SentencePiece model on %s into %s.', files, path)
    model = io.BytesIO()
    spm.set_random_generator_seed(_SPM_SEED)
    try:
      spm.SentencePieceTrainer.train(
          sentence_iterator=training_lines(files, self.text_field),
          model_writer=model,
          minloglevel=2,
          **settings,
      )
    except RuntimeError as e:
      raise ValueError(
          f'SentencePieceTokenizer {self.name!r}: training on {files} failed '
          f'(vocab_size={self.vocab_size}, model_type={self.model_type!r}): '
          f'{e}'
      ) from e
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f'.{path.name}.tmp{os.getpid()}'
    tmp.write_bytes(model.getvalue())
    tmp.replace(path)  # Atomic: hosts training at once write equal files.
    return path

  @property
  def processor(self) -> spm.SentencePieceProcessor:
    """The loaded `sentencepiece.SentencePieceProcessor`."""
    return self._sp

  @property
  def pad_id(self) -> int:
    return max(self._sp.pad_id(), 0)

  @property
  def eos_id(self) -> int:
    return self._sp.eos_id()

  @property
  def bos_id(self) -> int:
    return self._sp.bos_id()

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self._sp.encode(text), dtype=np.int32)

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    ids = ids[(ids >= 0) & (ids < self.vocab_size)]
    return self._sp.decode(ids.tolist())
