"""A small English text corpus that ships with every Python: pydoc's topics.

Public names: pydoc_topics_documents, split_documents, write_jsonl,
pydoc_topics_jsonl, default_cache_dir.

`pydoc_data.topics.topics` maps about 80 help topics ('if', 'lambda',
'typesseq', ...) to their documentation text (about 0.5 MB in all). The demo
language-model experiments train on it offline: `pydoc_topics_jsonl()` writes
a train and a test JSONL file (split by topic), which inputs then read like
any user's local data.

Example:

  files = text_corpus.pydoc_topics_jsonl()
  files['train']  # '~/.cache/paxml/text_corpus/pydoc_topics_<hash>_train.jsonl'
"""

from __future__ import annotations

from collections.abc import Sequence
import hashlib
import json
import os

from absl import logging


def pydoc_topics_documents() -> list[dict[str, str]]:
  """The pydoc topics as `{'topic': name, 'text': text}`, sorted by topic."""
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top

  return [
      {'topic': name, 'text': topics.topics[name]}
      for name in sorted(topics.topics)
  ]


def split_documents(
    documents: Sequence[dict[str, str]], test_fraction: float
) -> dict[str, list[dict[str, str]]]:
  """Splits documents into 'train' and 'test', spreading 'test' evenly.

  Document i (in the given order) goes to 'test' when
  floor((i + 1) * f) > floor(i * f), f = test_fraction: that is
  round-down(n * f) documents, evenly spaced.

  Args:
    documents: The documents, in a deterministic order.
    test_fraction: Fraction of documents for 'test', in [0, 1).

  Returns:
    {'train': [...], 'test': [...]}, each in the given order.
  """
  if not 0 <= test_fraction < 1:
    raise ValueError(f'test_fraction={test_fraction} must be in [0, 1).')
  splits = {'train': [], 'test': []}
  for i, doc in enumerate(documents):
    is_test = int((i + 1) * test_fraction) > int(i * test_fraction)
    splits['test' if is_test else 'train'].append(doc)
  return splits


def _jsonl_bytes(documents: Sequence[dict[str, str]]) -> bytes:
  return ''.join(json.dumps(d, ensure_ascii=False) + '\n'
                 for d in documents).encode('utf-8')


def write_jsonl(path: str, documents: Sequence[dict[str, str]]) -> None:
  """Writes one JSON object a line, atomically (a temporary file, renamed)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'wb') as f:
    f.write(_jsonl_bytes(documents))
  os.replace(tmp, path)


def _holds(path: str, documents: Sequence[dict[str, str]]) -> bool:
  """Whether the file at `path` holds exactly `documents` as JSON lines."""
  try:
    with open(path, 'rb') as f:
      return f.read() == _jsonl_bytes(documents)
  except OSError:
    return False


def default_cache_dir() -> str:
  """`$XDG_CACHE_HOME/paxml/text_corpus` (default `~/.cache/...`)."""
  root = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
  return os.path.join(root, 'paxml', 'text_corpus')


def pydoc_topics_jsonl(
    cache_dir: str | None = None, test_fraction: float = 0.1
) -> dict[str, str]:
  """Writes (once) the pydoc topics as train/test JSONL files.

  File names carry a hash of the texts and the split, so each Python version
  gets its own files; an existing file is reused only if it holds exactly
  the expected lines (else it is written again, with a warning).

  Args:
    cache_dir: Folder of the files (default: `default_cache_dir()`).
    test_fraction: Fraction of topics in the test file (see
      `split_documents`).

  Returns:
    {'train': path, 'test': path}.
  """
  documents = pydoc_topics_documents()
  digest = hashlib.sha256(json.dumps([documents, test_fraction]).encode())
  prefix = os.path.join(
      cache_dir or default_cache_dir(),
      f'pydoc_topics_{digest.hexdigest()[:12]}',
  )
  paths = {}
  for split, docs in split_documents(documents, test_fraction).items():
    paths[split] = f'{prefix}_{split}.jsonl'
    if os.path.exists(paths[split]) and not _holds(paths[split], docs):
      logging.warning('%s does not hold the expected %s split: writing it '
                      'again.', paths[split], split)
    elif os.path.exists(paths[split]):
      continue
    write_jsonl(paths[split], docs)
  return paths
