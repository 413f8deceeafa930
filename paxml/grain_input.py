"""Language-model inputs from local text files, on Grain (no TensorFlow).

Module `paxml.grain_input`. Public names: LmTextInput, TextFileSource,
document_source, lm_example, FILE_FORMATS.

`LmTextInput` reads documents from local files, keeps this host's share
(documents h, h + H, ... for host h of H), tokenizes them with a
`praxis.tokenizers` tokenizer and emits fixed-length rows in the keys the
Pax `LanguageModel` reads:

  ids          int32 [batch, seq_len]  input tokens
  labels       int32 [batch, seq_len]  targets: the token after each input
  paddings     float32                 1.0 where a row holds no token
  weights      float32                 1.0 - paddings
  segment_ids  int32                   1, 2, ... per document in a row; 0 pad
  segment_pos  int32                   position within the document; 0 pad
  eval_sample_weights float32 [batch]  1.0 for real rows, 0.0 for padding

A document with tokens t_1..t_n becomes the sequence s = [BOS] t_1..t_n [EOS]
(`add_bos`, `add_eos`; BOS falls back to the pad id when the tokenizer has
none, as SeqIO does), so ids = s[:-1] and labels = s[1:]. With `pack=True`
the documents of the stream are concatenated and cut into rows of `seq_len`
(`grain.experimental.ConcatThenSplitIterDataset`): a document that does not
fit continues in the next row, its positions restarting at 0. With
`pack=False` each row holds one document, truncated or padded.

Training (`is_training=True`) repeats the data `num_epochs` times (None:
forever), reshuffling this host's documents every epoch with a seed from
`input_random_seed`. Eval follows the `praxis.base_input` contract: with
`reset_for_eval=True` one epoch, in file order, padded so that every host
emits the same number of batches (each host counts the rows of every host's
share once, at the first eval), then `StopIteration` until `reset()`; with
`reset_for_eval=False` the data repeats unshuffled. `get_state()` saves the
Grain iterator state, so a restored input continues the exact stream.

File formats (`FILE_FORMATS`, chosen from the extension unless
`file_format` is set): 'jsonl' (.jsonl/.json: one JSON object a line, the
text in `text_field`), 'lines' (any other extension: one document a
non-blank line), 'paragraphs' (documents separated by blank lines); each
of these three also gzipped (`.gz`, e.g. C4's
`c4-train.00000-of-01024.json.gz`) or zstd-compressed (`.zst`, as the
Pile's `00.jsonl.zst`; needs zstandard), 'array_record' (.array_record:
records are JSON objects, as JSONL lines) and 'parquet' (.parquet: the
`text_field` column; needs pyarrow).

Example:

  p = pax_fiddle.Config(
      LmTextInput, file_pattern='/data/train-*.jsonl', seq_len=512,
      batch_size=8, is_training=True,
      tokenizer=pax_fiddle.Config(tokenizers.SentencePieceTokenizer,
                                  train_on='/data/train-*.jsonl',
                                  vocab_size=8000))
  inp = base_hyperparams.instantiate(p)
  batch = inp.get_next()  # NestedMap(ids=[8, 512], labels=..., ...)
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
import glob
import gzip
import json
import mmap
import os
import tempfile
from typing import Any

import grain
import numpy as np

from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle
from praxis import py_utils
from praxis import tokenizers

NestedMap = py_utils.NestedMap

FILE_FORMATS = ('jsonl', 'lines', 'paragraphs', 'array_record', 'parquet')
_EXTENSIONS = {
    '.jsonl': 'jsonl',
    '.json': 'jsonl',
    '.array_record': 'array_record',
    '.arrayrecord': 'array_record',
    '.parquet': 'parquet',
}
_STATE_KEYS = ('seed', 'host', 'emitted', 'iterator')


# ----------------------------------------------------------------------------
# Document sources: random access to the texts of local files.
# ----------------------------------------------------------------------------


def _json_text(raw: bytes | str, text_field: str, where: str,
               prompt_field: str = '') -> str | tuple[str, str]:
  """The text of a JSON record, or (prompt, text) with `prompt_field`."""
  try:
    record = json.loads(raw)
  except ValueError as e:
    raise ValueError(f'{where}: not a JSON object ({e}).') from e
  values = []
  for field in ((prompt_field, text_field) if prompt_field else
                (text_field,)):
    text = record.get(field) if isinstance(record, dict) else None
    if not isinstance(text, str):
      fields = sorted(record) if isinstance(record, dict) else type(record)
      raise ValueError(
          f'{where}: no string field {field!r} (found {fields}).')
    values.append(text)
  return tuple(values) if prompt_field else values[0]


def _document_spans(data: bytes | mmap.mmap, paragraphs: bool) -> list[Any]:
  """(start, end, line number) of each non-blank line or paragraph."""
  spans, start, line_number, open_span = [], 0, 0, None
  size = len(data)
  while start < size:
    end = data.find(b'\n', start)
    end = size if end < 0 else end
    line_number += 1
    blank = not data[start:end].strip()
    if paragraphs and open_span is not None and not blank:
      open_span[1] = end
    elif paragraphs and blank:
      open_span = None
    elif not blank:
      open_span = [start, end, line_number]
      spans.append(open_span)
    if not paragraphs:
      open_span = None
    start = end + 1
  return spans


_COMPRESSED = ('.gz', '.zst')
_CHUNK = 1 << 20


def _unzstd(path: str) -> mmap.mmap | None:
  """A .zst file decompressed into an unlinked temporary file, mapped.

  The Pile's shards hold tens of GB of text, so the text goes to disk (the
  temporary directory), not memory. Every zstd frame must be complete.
  """
  try:
    import zstandard  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        f'{path}: reading .zst files needs zstandard: pip install zstandard '
        "(or the project's 'data' extra).") from e
  decompressor = zstandard.ZstdDecompressor()
  with open(path, 'rb') as src, tempfile.TemporaryFile() as out:
    frame, in_frame = decompressor.decompressobj(), False
    try:
      while chunk := src.read(_CHUNK):
        while chunk:
          out.write(frame.decompress(chunk))
          in_frame, chunk = True, b''
          if frame.eof:
            chunk = frame.unused_data
            frame, in_frame = decompressor.decompressobj(), False
    except zstandard.ZstdError as e:
      raise ValueError(f'{path}: not a readable zstd file ({e}).') from e
    if in_frame:
      raise ValueError(f'{path}: not a readable zstd file (truncated: the '
                       'last frame is incomplete).')
    if out.tell() == 0:
      return None
    out.flush()
    return mmap.mmap(out.fileno(), 0, access=mmap.ACCESS_READ)


def read_text_file(path: str) -> bytes | mmap.mmap | None:
  """The bytes of a file (gunzipped for .gz, decompressed for .zst),
  memory-mapped; None if empty."""
  if path.endswith('.zst'):
    return _unzstd(path)
  if path.endswith('.gz'):
    try:
      with gzip.open(path, 'rb') as f:
        data = f.read()
    except (OSError, EOFError) as e:
      raise ValueError(f'{path}: not a readable gzip file ({e}).') from e
    return data or None
  with open(path, 'rb') as f:
    if os.fstat(f.fileno()).st_size == 0:
      return None
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class TextFileSource:
  """Random access to the documents of local text or JSONL files.

  The files are scanned once for document boundaries (kept as byte offsets)
  and memory-mapped; `source[i]` decodes document i. Gzipped files (`.gz`,
  as C4's `c4-train.*.json.gz`) are decompressed into memory, zstd files
  (`.zst`, as the Pile's `*.jsonl.zst`) into a temporary file.
  """

  def __init__(self, paths: Sequence[str], file_format: str,
               text_field: str = 'text', prompt_field: str = ''):
    if file_format not in ('jsonl', 'lines', 'paragraphs'):
      raise ValueError(f'TextFileSource: unknown file_format {file_format!r}.')
    if prompt_field and file_format != 'jsonl':
      raise ValueError(f'TextFileSource: prompt_field needs records (JSONL), '
                       f'not {file_format!r} files.')
    self._prompt_field = prompt_field
    self._paths = list(paths)
    self._format = file_format
    self._text_field = text_field
    self._maps, spans = [], []
    for index, path in enumerate(self._paths):
      data = read_text_file(path)
      if data is None:
        self._maps.append(None)
        continue
      self._maps.append(data)
      paragraphs = file_format == 'paragraphs'
      spans.extend(
          (index, start, end, line)
          for start, end, line in _document_spans(data, paragraphs)
      )
    self._spans = np.asarray(spans, dtype=np.int64).reshape(-1, 4)

  def __len__(self) -> int:
    return len(self._spans)

  def __getitem__(self, index: int) -> str:
    file_index, start, end, line = (int(x) for x in self._spans[index])
    text = self._maps[file_index][start:end].decode('utf-8')
    if self._format != 'jsonl':
      return text.rstrip('\r')
    return _json_text(
        text, self._text_field, f'{self._paths[file_index]}:{line}',
        self._prompt_field,
    )

  def __repr__(self) -> str:
    return (f'TextFileSource({len(self._paths)} files, {len(self)} '
            f'documents, {self._format})')


class _JsonRecordSource:
  """The `text_field` of JSON records in an ArrayRecord data source."""

  def __init__(self, paths: Sequence[str], text_field: str,
               prompt_field: str = ''):
    self._records = grain.sources.ArrayRecordDataSource(list(paths))
    self._text_field = text_field
    self._prompt_field = prompt_field

  def __len__(self) -> int:
    return len(self._records)

  def __getitem__(self, index: int) -> str:
    return _json_text(
        self._records[index], self._text_field, f'ArrayRecord {index}',
        self._prompt_field,
    )

  def __repr__(self) -> str:
    return f'_JsonRecordSource({self._records!r})'


def _parquet_column(parquet: Any, pyarrow: Any, path: str, schema: Any,
                    field: str, flag: str) -> list[str]:
  """The strings of column `field` (None -> '')."""
  if field not in schema.names:
    raise ValueError(f'{path}: no column {field!r} ({flag}); '
                     f'columns: {schema.names}.')
  kind = schema.field(field).type
  if not (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind)):
    raise ValueError(f'{path}: column {field!r} ({flag}) holds {kind}, '
                     'expected strings.')
  try:
    column = parquet.read_table(path, columns=[field])[field]
  except (pyarrow.ArrowException, OSError) as e:
    raise ValueError(f'{path}: cannot read column {field!r} ({e}).') from e
  return [t if t is not None else '' for t in column.to_pylist()]


def _parquet_texts(paths: Sequence[str], text_field: str,
                   prompt_field: str = '') -> list[Any]:
  """The texts (or (prompt, text) pairs) of the rows of Parquet files."""
  try:
    import pyarrow  # pylint: disable=g-import-not-at-top
    from pyarrow import parquet  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Reading Parquet files needs pyarrow: pip install pyarrow.'
    ) from e
  texts = []
  for path in paths:
    try:
      schema = parquet.read_schema(path)
    except (pyarrow.ArrowException, OSError) as e:
      raise ValueError(f'{path}: not a readable Parquet file ({e}).') from e
    text = _parquet_column(parquet, pyarrow, path, schema, text_field,
                           'text_field')
    if prompt_field:
      prompt = _parquet_column(parquet, pyarrow, path, schema, prompt_field,
                               'prompt_field')
      text = list(zip(prompt, text))
    texts.extend(text)
  return texts


def document_source(
    paths: Sequence[str], file_format: str, text_field: str = 'text',
    prompt_field: str = '',
) -> Any:
  """A random-access source (`len`, `[i]`) of the document texts in files.

  With `prompt_field`, each item is (prompt, text) instead of the text.
  """
  if file_format == 'array_record':
    return _JsonRecordSource(paths, text_field, prompt_field)
  if file_format == 'parquet':
    return _parquet_texts(paths, text_field, prompt_field)
  return TextFileSource(paths, file_format, text_field, prompt_field)


def _format_of(path: str) -> str:
  """The file format that a file's extension implies (.gz/.zst aside)."""
  for suffix in _COMPRESSED:
    if path.endswith(suffix):
      path = path[:-len(suffix)]
  return _EXTENSIONS.get(os.path.splitext(path)[1], 'lines')


def _formats_of(paths: Sequence[str]) -> set[str]:
  """The file formats that the extensions of `paths` imply."""
  return {_format_of(p) for p in paths}


# ----------------------------------------------------------------------------
# Examples, rows and batches.
# ----------------------------------------------------------------------------


def lm_example(
    tokens: np.ndarray, bos_id: int | None, eos_id: int | None,
    num_prompt_tokens: int = 0,
) -> dict[str, np.ndarray] | None:
  """Next-token pairs of one document, or None when it has none.

  Args:
    tokens: The document's token ids.
    bos_id: Prepended when not None.
    eos_id: Appended when not None.
    num_prompt_tokens: The first this many of `tokens` are a prompt: their
      labels get loss weight 0 (the first completion token is a label).

  Returns:
    {'pairs': int32 [n, 2], 'loss_weights': float32 [n]}: column 0 the
    inputs s[:-1], column 1 the labels s[1:], where s is the document with
    its BOS and EOS; the weight is 0 for labels inside the prompt.
  """
  seq = [np.asarray(tokens, np.int32).reshape(-1)]
  if bos_id is not None:
    seq.insert(0, np.array([bos_id], np.int32))
  if eos_id is not None:
    seq.append(np.array([eos_id], np.int32))
  seq = np.concatenate(seq)
  if seq.size < 2:
    return None
  # Label j is s[j + 1]; the prompt spans s[:first_completion].
  first_completion = int(bos_id is not None) + num_prompt_tokens
  weights = (np.arange(1, seq.size) >= first_completion).astype(np.float32)
  return {'pairs': np.stack([seq[:-1], seq[1:]], axis=1),
          'loss_weights': weights}


def _padded_row(example: dict[str, np.ndarray], seq_len: int):
  """One document per row: truncated to, or padded up to, `seq_len`."""
  pairs = example['pairs'][:seq_len]
  n = len(pairs)
  valid = np.arange(seq_len) < n
  return {
      'pairs': np.pad(pairs, [(0, seq_len - n), (0, 0)]),
      'loss_weights': np.pad(example['loss_weights'][:seq_len],
                             [(0, seq_len - n)]),
      'segment_ids': valid.astype(np.int32),
      'segment_pos': np.where(valid, np.arange(seq_len), 0).astype(np.int32),
  }


def _packed_row(packed: dict[str, np.ndarray]):
  return {
      'pairs': packed['pairs'],
      'loss_weights': packed['loss_weights'],
      'segment_ids': packed['pairs_segment_ids'],
      'segment_pos': packed['pairs_positions'],
  }


def _empty_rows(seq_len: int) -> dict[str, np.ndarray]:
  return {
      'pairs': np.zeros([0, seq_len, 2], np.int32),
      'loss_weights': np.zeros([0, seq_len], np.float32),
      'segment_ids': np.zeros([0, seq_len], np.int32),
      'segment_pos': np.zeros([0, seq_len], np.int32),
  }


def _lm_batch(rows: dict[str, np.ndarray], batch_size: int):
  """Stacked rows -> the LanguageModel keys, padded to `batch_size` rows."""
  segment_ids = rows['segment_ids'].astype(np.int32)
  valid = (segment_ids > 0).astype(np.float32)
  batch = NestedMap(
      ids=rows['pairs'][..., 0].astype(np.int32),
      labels=rows['pairs'][..., 1].astype(np.int32),
      paddings=1.0 - valid,
      weights=valid * rows['loss_weights'].astype(np.float32),
      segment_ids=segment_ids,
      segment_pos=rows['segment_pos'].astype(np.int32),
  )
  num_rows = len(segment_ids)
  batch = base_input.pad_batch(batch, batch_size)
  batch.paddings[num_rows:] = 1.0  # Padded rows hold no tokens.
  return dict(batch)


def _encode_state(x: Any) -> Any:
  """JSON-ready state; tuples (which Grain compares with) are tagged."""
  if isinstance(x, tuple):
    return {'__tuple__': [_encode_state(v) for v in x]}
  if isinstance(x, dict):
    return {k: _encode_state(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_encode_state(v) for v in x]
  if isinstance(x, np.integer):
    return int(x)
  return x


def _decode_state(x: Any) -> Any:
  if isinstance(x, dict):
    if set(x) == {'__tuple__'}:
      return tuple(_decode_state(v) for v in x['__tuple__'])
    return {k: _decode_state(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_decode_state(v) for v in x]
  return x


# ----------------------------------------------------------------------------
# LmTextInput.
# ----------------------------------------------------------------------------


class LmTextInput(base_input.BaseInput):
  """Language-model batches from local text files (see the module doc).

  Attributes:
    file_pattern: Glob pattern(s) of the files (a list, or a comma-separated
      string); the matches are sorted.
    file_format: One of FILE_FORMATS; '' picks it from the file extension.
    text_field: The field holding the text (JSONL, ArrayRecord, Parquet).
    prompt_field: If set, the field holding a prompt that precedes the text
      (instruction tuning): a row is [BOS] prompt text [EOS] and only the
      labels of the text and EOS carry loss weight (`weights` 0 on the
      prompt's labels; `paddings` still 0 there).
    seq_len: Tokens per row.
    tokenizer: Config of a `praxis.tokenizers.BaseTokenizer` (an instance is
      accepted too).
    pack: Concatenate documents and cut rows of `seq_len` (True), or put one
      document per row, truncated or padded (False).
    shuffle: Reshuffle the documents each epoch (training only).
    num_epochs: Epochs of training data; None repeats forever. Eval inputs
      leave it None (`reset_for_eval` reads one epoch, otherwise the data
      repeats).
    add_bos: Start each document with the tokenizer's BOS (its pad id when it
      has none), so that its first token is a label too.
    add_eos: End each document with the tokenizer's EOS.
    num_read_threads: Grain threads reading and tokenizing documents (0: read
      in the calling thread).
    prefetch_buffer_size: Documents Grain reads ahead.
  """

  file_pattern: str | Sequence[str] | None = None
  file_format: str = ''
  text_field: str = 'text'
  prompt_field: str = ''
  seq_len: int = 0
  tokenizer: pax_fiddle.Config[tokenizers.BaseTokenizer] = (
      pax_fiddle.template_field(tokenizers.ByteTokenizer)
  )
  pack: bool = True
  shuffle: bool = True
  num_epochs: int | None = None
  add_bos: bool = True
  add_eos: bool = True
  num_read_threads: int = 2
  prefetch_buffer_size: int = 64

  def __post_init__(self):
    super().__post_init__()
    if self.seq_len <= 0:
      raise self._error('seq_len', 'must be positive')
    if self.num_read_threads < 0:
      raise self._error('num_read_threads', 'must be >= 0')
    self._check_epochs()
    self._files = self._match_files()
    file_format = self.file_format
    if not file_format:
      formats = _formats_of(self._files)
      if len(formats) > 1:
        raise self._error('file_pattern', f'mixes formats {sorted(formats)}')
      file_format = formats.pop()
    if file_format not in FILE_FORMATS:
      raise self._error('file_format', f'must be one of {FILE_FORMATS}')
    self._vocab = self._build_tokenizer()
    self._documents = grain.MapDataset.source(
        document_source(self._files, file_format, self.text_field,
                        self.prompt_field)
    )
    if not self.reset_for_eval and not len(self._host_documents()):
      raise self._error(
          'file_pattern',
          f'matches {len(self._documents)} documents, too few to give each '
          f'of {self.num_infeed_hosts} hosts one',
      )
    self._seed = self.input_random_seed
    if self._seed is None:
      self._seed = int(np.random.SeedSequence().generate_state(1)[0])
    self._seed %= 2**32
    self.dataset = self._batches(self.infeed_host_index, self._seed)
    self._iterator = None
    self._emitted = 0
    self._num_eval_batches = None

  def _check_epochs(self) -> None:
    if self.num_epochs is not None and self.num_epochs < 1:
      raise self._error('num_epochs', 'must be None (forever) or >= 1')
    if self.num_epochs is not None and not self.is_training:
      raise self._error(
          'num_epochs',
          'is for training data; eval data reads one epoch with '
          'reset_for_eval=True and repeats otherwise: leave it None',
      )

  def _match_files(self) -> list[str]:
    patterns = self.file_pattern
    if isinstance(patterns, str):
      patterns = [p for p in patterns.split(',') if p]
    if not patterns:
      raise self._error('file_pattern', 'must name the input files')
    files = sorted({f for p in patterns for f in glob.glob(p)})
    if not files:
      raise self._error('file_pattern', 'matches no file')
    return files

  def _build_tokenizer(self) -> tokenizers.BaseTokenizer:
    tok = self.tokenizer
    if isinstance(tok, pax_fiddle.Buildable):
      tok = base_hyperparams.instantiate(tok)
    if not isinstance(tok, tokenizers.BaseTokenizer):
      raise self._error('tokenizer', 'must configure a BaseTokenizer')
    if self.add_eos and tok.eos_id < 0:
      raise self._error('add_eos', 'needs a tokenizer with an EOS id')
    return tok

  @property
  def vocabulary(self) -> tokenizers.BaseTokenizer:
    """The built tokenizer."""
    return self._vocab

  @property
  def files(self) -> list[str]:
    """The matched input files, sorted."""
    return list(self._files)

  # The Grain pipeline.

  def _host_documents(self, host: int | None = None) -> grain.MapDataset:
    host = self.infeed_host_index if host is None else host
    return self._documents[host::self.num_infeed_hosts]

  def _example(self, doc: str | tuple[str, str]
               ) -> dict[str, np.ndarray] | None:
    """The example of a document, or of a (prompt, completion) record."""
    prompt, text = doc if isinstance(doc, tuple) else ('', doc)
    if not text.strip():
      return None
    vocab = self._vocab
    bos = (vocab.bos_id if vocab.bos_id >= 0 else vocab.pad_id)
    prompt_ids = vocab.encode(prompt) if prompt else np.zeros([0], np.int32)
    return lm_example(
        np.concatenate([np.asarray(prompt_ids, np.int32).reshape(-1),
                        np.asarray(vocab.encode(text), np.int32).reshape(-1)]),
        bos if self.add_bos else None,
        vocab.eos_id if self.add_eos else None,
        num_prompt_tokens=len(prompt_ids),
    )

  def _rows(self, host: int, seed: int) -> grain.IterDataset:
    """The rows of one host's documents, before batching."""
    docs = self._host_documents(host)
    if self.is_training and self.shuffle:
      docs = docs.shuffle(seed=seed)
    if self.is_training and self.num_epochs != 1:
      docs = docs.repeat(self.num_epochs)
    elif not self.is_training and not self.reset_for_eval:
      docs = docs.repeat(None)
    examples = docs.map(self._example).filter(lambda x: x is not None)
    options = grain.ReadOptions(
        num_threads=self.num_read_threads,
        prefetch_buffer_size=self.prefetch_buffer_size,
    )
    if not self.pack:
      row = functools.partial(_padded_row, seq_len=self.seq_len)
      return examples.map(row).to_iter_dataset(options)
    packed = grain.experimental.ConcatThenSplitIterDataset(
        examples.to_iter_dataset(options),
        length_struct={'pairs': self.seq_len, 'loss_weights': self.seq_len},
    )
    return packed.map(_packed_row)

  def _batches(self, host: int, seed: int) -> grain.IterDataset:
    batch = functools.partial(_lm_batch, batch_size=self.batch_size)
    return self._rows(host, seed).batch(self.batch_size).map(batch)

  def _count_eval_batches(self) -> int:
    """Batches per host of one eval epoch: the most any host needs."""
    most = 0
    for host in range(self.num_infeed_hosts):
      iterator = iter(self._rows(host, self._seed))
      num_rows = sum(1 for _ in iterator)
      iterator.close()
      most = max(most, -(-num_rows // self.batch_size))
    return most

  def _iter(self) -> grain.DatasetIterator:
    if self._iterator is None:
      self._iterator = iter(self.dataset)
    return self._iterator

  def _drop_iterator(self) -> None:
    if self._iterator is not None:
      self._iterator.close()  # Stops its reading threads.
    self._iterator = None

  # The BaseInput interface.

  def get_next(self) -> NestedMap:
    if not self.reset_for_eval:
      batch = next(self._iter())  # Ends only after num_epochs of training.
    else:
      if self._num_eval_batches is None:
        self._num_eval_batches = self._count_eval_batches()
      if self._emitted >= self._num_eval_batches:
        raise StopIteration(
            f'{self.name}: end of the eval epoch ({self._num_eval_batches} '
            'batches); call reset().'
        )
      try:
        batch = next(self._iter())
      except StopIteration:  # Other hosts have more: pad.
        batch = _lm_batch(_empty_rows(self.seq_len), self.batch_size)
    self._emitted += 1
    return NestedMap(batch)

  def reset(self) -> None:
    super().reset()
    self._drop_iterator()
    self._emitted = 0

  def ids_to_strings(
      self,
      ids: np.ndarray,
      lengths: np.ndarray,
      key: str | None = None,
  ) -> list[str]:
    """Decodes `ids[i, :lengths[i]]` with the tokenizer (`key` is unused)."""
    del key
    return [
        self._vocab.decode(np.asarray(row)[:int(n)])
        for row, n in zip(ids, np.asarray(lengths).reshape(-1))
    ]

  def _get_state_internal(self) -> bytes:
    iterator = None if self._iterator is None else self._iterator.get_state()
    state = {
        'seed': self._seed,
        'host': [self.infeed_host_index, self.num_infeed_hosts],
        'emitted': self._emitted,
        'iterator': _encode_state(iterator),
    }
    return json.dumps(state).encode()

  def _set_state_internal(self, state: bytes) -> None:
    try:
      values = json.loads(state)
      seed, host, emitted, iterator = (values[k] for k in _STATE_KEYS)
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(
          f'LmTextInput {self.name!r}: cannot read state {state[:80]!r}; '
          f'expected JSON with {_STATE_KEYS}.'
      ) from e
    if host != [self.infeed_host_index, self.num_infeed_hosts]:
      raise ValueError(
          f'LmTextInput {self.name!r}: the state is of host {host[0]} of '
          f'{host[1]}, this input is host {self.infeed_host_index} of '
          f'{self.num_infeed_hosts}.'
      )
    if isinstance(emitted, bool) or not isinstance(emitted, int) or (
        emitted < 0):
      raise ValueError(
          f'LmTextInput {self.name!r}: the restored state has '
          f'emitted={emitted!r}; expected an integer >= 0.'
      )
    if seed != self._seed:
      self._seed = seed
      self.dataset = self._batches(self.infeed_host_index, seed)
    self._drop_iterator()
    self._emitted = emitted
    if iterator is not None:
      try:
        self._iter().set_state(_decode_state(iterator))
      except (ValueError, KeyError, TypeError, IndexError) as e:
        self._drop_iterator()
        raise ValueError(
            f'LmTextInput {self.name!r}: the restored iterator state does '
            f'not fit the data: {e}'
        ) from e
