"""Tensor renaming between a HF state dict and Pax variables, and file I/O.

Public: `Rule`, `to_pax`, `to_hf`, `read_safetensors`, `write_safetensors`,
`linear_in_out`, `heads_in`, `heads_out`.

A `Rule` maps some HF tensors onto some Pax variables with two functions
that only transpose, reshape, split or concatenate, so the round trip keeps
every bit. Each architecture family lists its rules; `to_pax` checks that
every tensor of the checkpoint is used and every variable is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import json
import os
from typing import Any

import numpy as np

Arrays = list[np.ndarray]
INDEX_FILE = 'model.safetensors.index.json'
SINGLE_FILE = 'model.safetensors'


@dataclasses.dataclass(frozen=True)
class Rule:
  """HF tensors `hf` <-> Pax variables `pax` (paths joined with '/')."""

  hf: tuple[str, ...]
  pax: tuple[str, ...]
  to_pax: Callable[[Arrays], Arrays]
  to_hf: Callable[[Arrays], Arrays]


def same(hf: str, pax: str) -> Rule:
  return Rule((hf,), (pax,), list, list)


def transposed(hf: str, pax: str) -> Rule:
  """A [out, in] torch Linear weight <-> a Pax [in, out] weight."""
  t = lambda xs: [xs[0].T]
  return Rule((hf,), (pax,), t, t)


def linear_in_out(hf: str, pax: str, shape: Sequence[int]) -> Rule:
  """A torch [N*H, D] weight <-> Pax [D, N, H] (or [D, H])."""
  return Rule((hf,), (pax,),
              lambda xs: [xs[0].T.reshape(shape)],
              lambda xs: [xs[0].reshape(shape[0], -1).T])


def heads_in(hf: str, pax: str, shape: Sequence[int]) -> Rule:
  """A [D, N*H] weight <-> Pax [D, N, H] (output projection, Conv1D)."""
  return Rule((hf,), (pax,),
              lambda xs: [xs[0].reshape(shape)],
              lambda xs: [xs[0].reshape(shape[0], -1)])


def heads_out(hf: str, pax: str, shape: Sequence[int]) -> Rule:
  """A flat [N*H] bias <-> Pax [N, H]."""
  return Rule((hf,), (pax,),
              lambda xs: [xs[0].reshape(shape)],
              lambda xs: [xs[0].reshape(-1)])


def to_pax(rules: Sequence[Rule], tensors: dict[str, np.ndarray],
           source: str, ignore: Callable[[str], bool] = lambda _: False
           ) -> dict[str, np.ndarray]:
  """Pax variables {path: array} from HF tensors {name: array}."""
  missing = sorted({n for r in rules for n in r.hf if n not in tensors})
  if missing:
    raise ValueError(f'{source}: tensors {missing[:5]} are missing '
                     f'({len(missing)} in all); the checkpoint does not '
                     'match its config.json.')
  used = {n for r in rules for n in r.hf}
  unused = sorted(n for n in tensors if n not in used and not ignore(n))
  if unused:
    raise ValueError(f'{source}: tensors {unused[:5]} are not used by the '
                     'mapping of this architecture (is config.json that '
                     'of this checkpoint?).')
  out = {}
  for rule in rules:
    for path, value in zip(rule.pax, rule.to_pax([tensors[n]
                                                  for n in rule.hf])):
      out[path] = value
  return out


def to_hf(rules: Sequence[Rule], variables: dict[str, np.ndarray],
          source: str) -> dict[str, np.ndarray]:
  """HF tensors {name: array} from Pax variables {path: array}."""
  missing = sorted({p for r in rules for p in r.pax if p not in variables})
  if missing:
    raise ValueError(f'{source}: variables {missing[:5]} are missing; the '
                     'checkpoint is not of this model.')
  out = {}
  for rule in rules:
    values = rule.to_hf([np.asarray(variables[p]) for p in rule.pax])
    for name, value in zip(rule.hf, values):
      out[name] = np.ascontiguousarray(value)
  return out


def _safetensor_files(model_dir: str) -> list[str]:
  index = os.path.join(model_dir, INDEX_FILE)
  if os.path.exists(index):
    try:
      with open(index) as f:
        weight_map = json.load(f)['weight_map']
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f'{index}: not a safetensors index (expected JSON '
                       f'with "weight_map"): {e}') from e
    names = sorted(set(weight_map.values()))
    return [os.path.join(model_dir, f) for f in names]
  single = os.path.join(model_dir, SINGLE_FILE)
  if os.path.exists(single):
    return [single]
  raise FileNotFoundError(
      f'{model_dir}: no {SINGLE_FILE} or {INDEX_FILE} (only safetensors '
      'checkpoints are read; convert a .bin checkpoint with transformers '
      'first).')


def read_safetensors(model_dir: str) -> dict[str, np.ndarray]:
  """All tensors of the model's safetensors file(s), as numpy arrays."""
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  tensors = {}
  for path in _safetensor_files(model_dir):
    try:
      tensors.update(st_numpy.load_file(path))
    except Exception as e:  # safetensors raises its own error types.
      raise ValueError(f'{path}: cannot read it as safetensors '
                       f'({type(e).__name__}: {e}).') from e
  return tensors


def write_safetensors(model_dir: str, tensors: dict[str, np.ndarray]) -> None:
  """Writes `model.safetensors` (torch's metadata, so transformers loads it)."""
  from safetensors import numpy as st_numpy  # pylint: disable=g-import-not-at-top
  st_numpy.save_file(
      {k: np.ascontiguousarray(v) for k, v in tensors.items()},
      os.path.join(model_dir, SINGLE_FILE), metadata={'format': 'pt'})


def config_field(config: dict[str, Any], name: str, source: str,
                 default: Any = KeyError) -> Any:
  """`config[name]`, or a clear error naming the file and the field."""
  value = config.get(name, default)
  if value is KeyError or (value is None and default is KeyError):
    raise ValueError(f'{source}: field {name!r} is missing.')
  return value
