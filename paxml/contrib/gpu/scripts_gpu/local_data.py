"""The Pile, LAMBADA and BoolQ from local files, without TensorFlow.

Public names: `data_files`, `tokenizer_config`, `PileInput`,
`LambadaInput`, `BoolQInput`, `FILE_EXTENSIONS`.

Pax's NVIDIA scripts read these sets through TFDS builders and SeqIO tasks
(`tfds_pile.py`, `tfds_lambada.py`, `tasks.py`). Here each set is a folder
of JSONL (optionally compressed) or Parquet files, named by an environment
variable or by the experiment's `*_DATA_DIR` attribute:

  PILE_DATA_DIR    train/*.jsonl (or train*.jsonl), val*.jsonl;
                   records {"text": ...}, as The Pile's own files (which
                   are .jsonl.zst, read as they ship; needs zstandard);
  LAMBADA_DATA_DIR lambada*.jsonl: records {"text": ...}, the passage whose
                   last word is the target (`lambada_test.jsonl`);
  BOOLQ_DATA_DIR   train*.jsonl, val*.jsonl: SuperGLUE BoolQ records
                   {"passage", "question", "label"} (Hugging Face's Parquet
                   files, `validation-*.parquet`, work too).

`.jsonl` may be `.jsonl.gz`, `.json.gz`, `.jsonl.zst` or `.parquet`
throughout. The tokenizer is the SentencePiece model that `VOCAB_PATH`
names, as in Pax; `VOCAB_PATH=bytes` picks `praxis.tokenizers.ByteTokenizer`
(259 ids), for tiny runs without a model.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import grain
from paxml import grain_input
from praxis import pax_fiddle
from praxis import tokenizers

FILE_EXTENSIONS = ('.jsonl', '.jsonl.gz', '.json.gz', '.jsonl.zst',
                   '.parquet')


def data_files(folder: str | None, env_var: str, stems: tuple[str, ...],
               what: str) -> list[str]:
  """The files of one split: `<folder>/<stem>*<ext>` and `<stem>/*<ext>`.

  Args:
    folder: The data folder (None: the environment variable `env_var`).
    env_var: The variable naming the folder (named in errors).
    stems: File-name beginnings (or sub-folders) of the split.
    what: The split, for errors (e.g. 'The Pile training files').

  Returns:
    The matching files, sorted.

  Raises:
    ValueError: No folder was given, or it holds no such file.
  """
  folder = folder or os.environ.get(env_var)
  expected = ', '.join(f'{stem}*{FILE_EXTENSIONS[0]}' for stem in stems)
  if not folder:
    raise ValueError(
        f'{what}: set the environment variable {env_var} (or the '
        f'experiment attribute {env_var}) to the folder holding {expected} '
        f'(or {"/".join(FILE_EXTENSIONS[1:])} files).')
  files = sorted({
      f for stem in stems for ext in FILE_EXTENSIONS
      for pattern in (f'{stem}*{ext}', f'{stem}/*{ext}')
      for f in glob.glob(os.path.join(folder, pattern))})
  if not files:
    raise ValueError(
        f'{what}: {env_var}={folder} holds no {expected} (nor '
        f'{"/".join(FILE_EXTENSIONS[1:])}) files.')
  return files


def tokenizer_config(vocab_path: str | None) -> pax_fiddle.Config[Any]:
  """The tokenizer of `vocab_path` (None: `$VOCAB_PATH`; 'bytes': bytes)."""
  vocab_path = vocab_path or os.environ.get('VOCAB_PATH')
  if not vocab_path:
    raise ValueError(
        'Set the environment variable VOCAB_PATH (or the experiment '
        'attribute VOCAB_PATH) to a SentencePiece .model file, or to '
        "'bytes' for the byte tokenizer.")
  if vocab_path == 'bytes':
    return pax_fiddle.Config(tokenizers.ByteTokenizer)
  if not os.path.isfile(vocab_path):
    raise ValueError(f'VOCAB_PATH={vocab_path}: no such file (expected a '
                     "SentencePiece .model file, or 'bytes').")
  return pax_fiddle.Config(tokenizers.SentencePieceTokenizer,
                           model_path=vocab_path)


def _records(path: str) -> list[dict[str, Any]]:
  """The JSON objects of a JSONL(.gz/.zst) file or a Parquet file's rows."""
  if path.endswith('.parquet'):
    from pyarrow import parquet  # pylint: disable=g-import-not-at-top
    return parquet.read_table(path).to_pylist()
  data = grain_input.read_text_file(path)
  lines = bytes(data or b'').decode('utf-8').split('\n')
  return [json.loads(line) for line in lines if line.strip()]


def _field(record: dict[str, Any], name: str, where: str) -> Any:
  if name not in record:
    raise ValueError(f'{where}: no field {name!r} (found {sorted(record)}).')
  return record[name]


class PileInput(grain_input.LmTextInput):
  """The Pile's LmTextInput. Its batches carry `eval_sample_weights` (1.0
  for real rows, 0.0 for eval padding), as Pax's SeqIOInput's, which the
  GPT and LLaMA experiments' models apply."""


class _PromptTargetInput(PileInput):
  """LmTextInput over (prompt, target) pairs made from each file record:
  only the target's tokens (and EOS) carry loss weight."""

  def _pair(self, record: dict[str, Any], where: str) -> tuple[str, str]:
    raise NotImplementedError

  def __post_init__(self):
    super().__post_init__()
    pairs = [self._pair(record, f'{path} record {i}')
             for path in self.files
             for i, record in enumerate(_records(path))]
    self._documents = grain.MapDataset.source(pairs)
    self.dataset = self._batches(self.infeed_host_index, self._seed)


class LambadaInput(_PromptTargetInput):
  """LAMBADA: the passage without its last word, then that word.

  As Pax's `tfds_lambada`: typographic quotes become ASCII ones and the
  target is the last whitespace-separated word with a leading space.
  """

  pack: bool = False
  shuffle: bool = False

  def _pair(self, record: dict[str, Any], where: str) -> tuple[str, str]:
    text = str(_field(record, self.text_field, where))
    for fancy, plain in (('\u201c', '"'), ('\u201d', '"'), ('\u2019', "'"),
                         ('\u2018', "'")):
      text = text.replace(fancy, plain)
    words = text.split()
    if not words:
      raise ValueError(f'{where}: empty passage.')
    last = words[-1]
    return text[:text.rfind(last)].strip(), ' ' + last


class BoolQInput(_PromptTargetInput):
  """BoolQ: '<passage>\\nquestion: <question>?\\nanswer:', then yes or no."""

  pack: bool = False
  add_eos: bool = False
  text_field: str = 'passage'

  def _pair(self, record: dict[str, Any], where: str) -> tuple[str, str]:
    passage = _field(record, 'passage', where)
    question = _field(record, 'question', where)
    label = _field(record, 'label', where)
    prompt = f'{passage}\nquestion: {question}?\nanswer:'
    return prompt, 'yes' if int(label) > 0 else 'no'
