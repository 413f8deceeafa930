"""Checks of `--fdl_set` values and of config values that cannot work.

Private to `paxml.main` (and the executor, which checks the external
checkpoint's settings of tasks that did not come through it). Every check
raises `ValueError` with one line that names the path or field, the value
and what was expected; the runner prints it and exits with status 2 before
anything is written or compiled.
"""

import ast
import dataclasses
import re
import types
import typing
from typing import Any, Sequence, Union

import fiddle as fdl
import jax.numpy as jnp
import numpy as np
from paxml import _zarr_metadata_key
from praxis import base_hyperparams

_TOKEN = re.compile(r"\.?([A-Za-z_]\w*)|\[(-?\d+)\]|\[('[^']*'|\"[^\"]*\")\]")


def parse_value(assignment: str) -> Any:
  """The value of `PATH=VALUE` (Fiddle's rules), or one clear ValueError."""
  path, value = assignment.split('=', 1)
  if value.lower() in ('true', 'false'):
    return value.lower() == 'true'
  try:
    return ast.literal_eval(value)
  except (ValueError, SyntaxError, TypeError, MemoryError,
          RecursionError) as e:
    del e
    raise ValueError(
        f'--fdl_set={assignment}: {value!r} is not a Python literal; '
        f"expected a number, True/False, None, a quoted string ({path}="
        f"'{value}') or a list/tuple/dict of those.") from None


def _parts(path: str) -> list[Any]:
  parts, pos = [], 0
  while pos < len(path):
    match = _TOKEN.match(path, pos)
    if not match:
      return []
    name, index, key = match.groups()
    parts.append(name if name else int(index) if index else
                 ast.literal_eval(key))
    pos = match.end()
  return parts


def _parent_and_field(root: Any, path: str) -> tuple[Any, Any]:
  """The object holding the last part of `path`, and that part."""
  parts = _parts(path)
  if not parts:
    return None, None
  node = root
  for part in parts[:-1]:
    try:
      if isinstance(part, int) or isinstance(node, dict):
        node = node[part]
      else:
        node = getattr(node, part)
    except (AttributeError, IndexError, KeyError, TypeError):
      return None, None
  return node, parts[-1]


def _hints(config: Any) -> dict[str, Any]:
  target = fdl.get_callable(config) if isinstance(config, fdl.Buildable) \
      else type(config)
  try:
    return typing.get_type_hints(target)
  except Exception:  # pylint: disable=broad-except  # Unresolvable hints.
    if dataclasses.is_dataclass(target):
      return {f.name: f.type for f in dataclasses.fields(target)
              if not isinstance(f.type, str)}
    return {}


_NUMBER = (int, float, np.integer, np.floating)


def _expected(value: Any, hint: Any) -> str | None:
  """What `hint` expects if `value` clearly is not one, else None."""
  if value is None or hint is Any:
    return None
  if hint is type(None):
    return 'None'
  origin = typing.get_origin(hint)
  if origin is Union or origin is types.UnionType:
    names = [_expected(value, h) for h in typing.get_args(hint)]
    return None if None in names else ' or '.join(n for n in names if n)
  if hint is bool:
    return None if isinstance(value, (bool, np.bool_)) else 'a bool'
  if hint is int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    return None if ok else 'an integer'
  if hint is float:
    ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
    return None if ok else 'a number'
  if hint is str:
    return None if isinstance(value, str) else 'a string'
  return None  # Other types are not checked here.


def check_override_types(root: Any, assignments: list[str]) -> None:
  """Rejects an `--fdl_set` value whose type the field's annotation rules
  out (a string in an int or float field, ...)."""
  for assignment in assignments:
    path = assignment.split('=', 1)[0]
    parent, field = _parent_and_field(root, path)
    if not isinstance(field, str) or parent is None:
      continue
    hint = _hints(parent).get(field)
    if hint is None:
      continue
    value = getattr(parent, field, None)
    expected = _expected(value, hint)
    if expected:
      raise ValueError(f'--fdl_set={assignment}: {path}={value!r}; expected '
                       f'{expected}.')


_DTYPE_FIELDS = ('fprop_dtype', 'dtype')


def _walk(node: Any, path: str, seen: set[int]):
  """(path, config) of every Fiddle config under `node`."""
  if id(node) in seen:
    return
  seen.add(id(node))
  if isinstance(node, fdl.Buildable):
    yield path, node
    for name, value in node.__arguments__.items():
      yield from _walk(value, f'{path}.{name}', seen)
  elif isinstance(node, (list, tuple)):
    for i, value in enumerate(node):
      yield from _walk(value, f'{path}[{i}]', seen)
  elif isinstance(node, dict):
    for key, value in node.items():
      yield from _walk(value, f'{path}[{key!r}]', seen)


def check_model_dtypes(model: Any, prefix: str = 'task.model') -> None:
  """Rejects a model's `fprop_dtype`/`dtype` that is not a float dtype."""
  for path, config in _walk(model, prefix, set()):
    for field in _DTYPE_FIELDS:
      value = config.__arguments__.get(field)
      if value is None:
        continue
      try:
        dtype = jnp.dtype(value)
      except (TypeError, ValueError):
        raise ValueError(
            f'{path}.{field}={value!r} is not a dtype; expected a float '
            'dtype such as jnp.float32 or jnp.bfloat16.') from None
      if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f'{path}.{field}={value!r} is not a float dtype; a model computes '
            'in float32, bfloat16, float16 or float64.')


def check_train(task: Any) -> None:
  """Rejects task.train values that cannot work."""
  train = getattr(task, 'train', None)
  _zarr_metadata_key.check(getattr(train, 'tensorstore_metadata_key', None))
  check_external_checkpoint(train)
  steps = getattr(train, 'num_train_steps', None)
  if steps is None or isinstance(steps, bool):
    return
  if not isinstance(steps, _NUMBER):
    raise ValueError(f'task.train.num_train_steps={steps!r}; expected an '
                     'integer >= 0.')
  if steps < 0:
    raise ValueError(f'task.train.num_train_steps={steps!r}; expected an '
                     'integer >= 0.')
  capture = getattr(train, 'profiler_capture_step', None)
  if capture is not None and (isinstance(capture, bool)
                              or not isinstance(capture, int) or capture < 0):
    raise ValueError(f'task.train.profiler_capture_step={capture!r}; expected '
                     'None (no profile) or an integer >= 0 (steps from the '
                     "run's first step).")
  num_steps = getattr(train, 'profiler_num_steps', None)
  if capture is not None and isinstance(num_steps, _NUMBER) and num_steps <= 0:
    raise ValueError(f'task.train.profiler_num_steps={num_steps!r}; expected '
                     'a number of steps > 0 to profile at '
                     f'profiler_capture_step={capture}.')


def check_external_checkpoint(train: Any) -> None:
  """`external_checkpoint_path` needs its handler, as in Pax (checked early);
  `restore_transformations` apply only through that handler here."""
  path = getattr(train, 'external_checkpoint_path', None)
  if path is not None and getattr(
      train, 'external_checkpoint_handler', None) is None:
    raise ValueError(
        f'task.train.external_checkpoint_path={str(path)!r}; expected '
        'task.train.external_checkpoint_handler too: the CheckpointHandler '
        'whose restore(path, item=..., partitioner=..., transformations=...) '
        'returns the TrainState, as in Pax. To start from another run\'s '
        'Pax checkpoint, use --restore_checkpoint_dir or '
        'task.train.init_from_checkpoint_rules.')
  transformations = getattr(train, 'restore_transformations', None)
  if transformations and path is None:
    raise ValueError(
        f'task.train.restore_transformations={transformations!r}; expected '
        "None: this project's checkpoints restore as saved (Orbax's restore "
        'transformations apply only through '
        'task.train.external_checkpoint_handler). To load some variables '
        'from another checkpoint, use task.train.init_from_checkpoint_rules.')


def check_input_names(datasets: Sequence[Any], field: str) -> None:
  """Refuses two inputs of one kind (eval or decode) with one name, as Pax's
  `check_unique_names`: the name keys each input's summaries, metrics and
  output files, which the second would overwrite."""
  seen = {}
  for index, dataset in enumerate(datasets):
    name = getattr(dataset, 'name', None)
    if name in seen:
      raise base_hyperparams.ConfigError(
          f'{field}[{seen[name]}] and {field}[{index}] are both named '
          f'{name!r}; expected a distinct name for each input (it names its '
          'summaries directory, metrics and output files).')
    seen[name] = index
