"""Hugging Face checkpoints <-> Pax models (Llama, Mistral, Gemma, GPT-2).

Public: ARCHITECTURES, ModelSpec, read_config, family, model_spec,
lm_config, import_variables, export_tensors, config_from_spec, nest,
flatten.

  spec = hf.model_spec(hf.read_config(model_dir), model_dir)
  lm_p = hf.lm_config(spec)                  # a TransformerLm config
  variables = hf.import_variables(model_dir)  # {'params': {...}} for it

The architecture families live in llama.py (Llama, Mistral), gemma.py and
gpt2.py; `_weights.py` holds the renaming rules and the safetensors I/O.
The command-line tools are `paxml.tools.hf_import` and
`paxml.tools.hf_export`.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

import numpy as np

from paxml.hf import _model
from paxml.hf import _weights
from paxml.hf import gemma
from paxml.hf import gpt2
from paxml.hf import llama

ModelSpec = _model.ModelSpec
lm_config = _model.lm_config
CONFIG_FILE = 'config.json'
_FAMILIES = (llama, gemma, gpt2)
ARCHITECTURES = tuple(a for f in _FAMILIES for a in f.ARCHITECTURES)
_BY_FAMILY = {'llama': llama, 'mistral': llama, 'gemma': gemma,
              'gpt2': gpt2}


def read_config(model_dir: str) -> dict[str, Any]:
  """The model's config.json, with a clear error when absent or bad."""
  path = os.path.join(model_dir, CONFIG_FILE)
  try:
    with open(path) as f:
      config = json.load(f)
  except FileNotFoundError as e:
    raise FileNotFoundError(f'{path}: no such file (a Hugging Face model '
                            'directory holds config.json).') from e
  except ValueError as e:
    raise ValueError(f'{path}: not valid JSON: {e}') from e
  if not isinstance(config, dict):
    raise ValueError(f'{path}: expected a JSON object.')
  return config


def family(config: dict[str, Any], source: str) -> ModuleType:
  """The module that maps this config's architecture."""
  archs = config.get('architectures')
  if not isinstance(archs, list) or len(archs) != 1:
    raise ValueError(f'{source}: field "architectures" must list one '
                     f'architecture, got {archs!r}.')
  for fam in _FAMILIES:
    if archs[0] in fam.ARCHITECTURES:
      return fam
  raise ValueError(f'{source}: architectures {archs[0]!r} is not supported '
                   f'(supported: {", ".join(ARCHITECTURES)}).')


def model_spec(config: dict[str, Any], source: str) -> ModelSpec:
  """The ModelSpec of a config.json (`source` names it in errors)."""
  return family(config, source).spec_from_config(config, source)


def _rules(spec: ModelSpec, tensors: dict[str, Any] | None = None) -> list:
  fam = _BY_FAMILY[spec.family]
  if fam is gpt2 and tensors is not None and 'wte.weight' in tensors:
    return gpt2.rules(spec, prefix='')
  return fam.rules(spec)


def nest(flat: dict[str, Any]) -> dict[str, Any]:
  """{'a/b': x} -> {'a': {'b': x}}."""
  out = {}
  for path, value in flat.items():
    node = out
    *parents, leaf = path.split('/')
    for key in parents:
      node = node.setdefault(key, {})
    node[leaf] = value
  return out


def flatten(tree: dict[str, Any], prefix: str = '') -> dict[str, Any]:
  """{'a': {'b': x}} -> {'a/b': x}."""
  out = {}
  for key, value in tree.items():
    path = f'{prefix}{key}'
    if isinstance(value, dict):
      out.update(flatten(value, path + '/'))
    else:
      out[path] = value
  return out


def import_variables(model_dir: str, spec: ModelSpec | None = None,
                     dtype: Any = None) -> dict[str, Any]:
  """{'params': nested Pax variables} of a HF safetensors checkpoint.

  Args:
    model_dir: The HF model directory.
    spec: Its ModelSpec (default: read from config.json).
    dtype: Cast every tensor to this dtype (None: keep the stored dtypes).
  """
  if spec is None:
    spec = model_spec(read_config(model_dir), os.path.join(model_dir,
                                                           CONFIG_FILE))
  tensors = _weights.read_safetensors(model_dir)
  flat = _weights.to_pax(_rules(spec, tensors), tensors, model_dir,
                         _BY_FAMILY[spec.family].ignore)
  if dtype is not None:
    flat = {k: np.asarray(v).astype(dtype) for k, v in flat.items()}
  return {'params': nest(flat)}


def export_tensors(spec: ModelSpec, params: dict[str, Any],
                   source: str) -> dict[str, np.ndarray]:
  """HF tensors {name: array} of the Pax `params` of a `spec` model."""
  flat = flatten(params)
  tensors = _weights.to_hf(_rules(spec), flat, source)
  return tensors


def config_from_spec(spec: ModelSpec) -> dict[str, Any]:
  """A config.json for `spec` (used when the original is not at hand)."""
  return _BY_FAMILY[spec.family].config_from_spec(spec)
