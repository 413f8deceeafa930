"""`NestedMap`: the attribute-access dict that Pax passes everywhere.

Public: `NestedMap`. Import it as `praxis.py_utils.NestedMap` (or
`praxis.pytypes.NestedMap`): `praxis.py_utils` is what registers the class as
a JAX pytree, a flax serialization state and a fiddle daglish node. This
module itself needs only the standard library and absl, so it is cheap to
import.

Behaviour follows lingvo's `NestedMap` (which praxis uses):

* keys are strings that begin like a Python identifier (the regular
  expression `[A-Za-z_][A-Za-z0-9_]*` must match at the start of the key, as
  `re.match` does; lingvo accepts e.g. `'_seqio_provenance/shard_index'`), and
  may not be a `dict` attribute name such as `items` or `keys`; a bad key
  raises `ValueError` naming it;
* traversal (`Flatten`, `Transform`, `Filter`, ...) descends into dicts
  (keys in sorted order) and lists, never tuples;
* flattened keys read like `foo.bar[10].baz`.

Example:

  >>> m = NestedMap(x=1, sub=NestedMap(y=[2, 3]))
  >>> m.sub.y[1]
  3
  >>> m.FlattenItems()
  [('sub.y[0]', 2), ('sub.y[1]', 3), ('x', 1)]
"""

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Self

from absl import logging

_KEY_PATTERN = re.compile(r'[A-Za-z_][A-Za-z0-9_]*')
_INDEXED_KEY_PATTERN = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]')

# Returned by a filter callback to drop a leaf; never escapes this module.
_DELETE = object()


def _recursive_map(
    value: Any, fn: Callable[[str, Any], Any], flatten: bool
) -> Any:
  """Applies `fn(key, leaf)` to each leaf under dicts and lists of `value`.

  Args:
    value: the root (usually a `NestedMap`).
    fn: called as `fn(flat_key, leaf)`; returning `_DELETE` drops the leaf.
    flatten: if True return a flat list of results in traversal order,
      otherwise a copy of the structure holding the results.

  Returns:
    The flat list or the rebuilt structure. A container that becomes empty
    because all of its children were dropped is dropped as well; containers
    that were empty to begin with are kept.
  """

  def recurse(node, key):
    if isinstance(node, dict):
      children = [
          (k, node[k], f'{key}.{k}' if key else str(k)) for k in sorted(node)
      ]
      out = [] if flatten else type(node)()
    elif isinstance(node, list):
      children = [(i, x, f'{key}[{i}]') for i, x in enumerate(node)]
      out = []
    else:
      result = fn(key, node)
      return [result] if flatten else result
    deleted = False
    for child_key, child, child_path in children:
      result = recurse(child, child_path)
      if result is _DELETE:
        deleted = True
      elif flatten:
        out.extend(result)
      elif isinstance(out, list):
        out.append(result)
      else:
        out[child_key] = result
    return _DELETE if deleted and not out else out

  result = recurse(value, '')
  if result is _DELETE:
    return [] if flatten else NestedMap()
  return result


def _to_nested_dict(value: Any) -> Any:
  """Turns every dict in `value` into a plain `dict`, recursively."""
  if isinstance(value, dict):
    return {k: _to_nested_dict(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_to_nested_dict(v) for v in value]
  if isinstance(value, tuple):
    items = [_to_nested_dict(v) for v in value]
    return type(value)(*items) if hasattr(value, '_fields') else tuple(items)
  return value


class NestedMap(dict):
  """A `dict` whose string keys can also be read and written as attributes.

  Keys must begin like an identifier and must not shadow a `dict` method.
  `copy()` and `copy.deepcopy()` return `NestedMap`s; a deep copy duplicates
  the dict/list structure but shares the leaves.

  Example:

    >>> m = NestedMap()
    >>> m.x = 10
    >>> m['y'] = 20
    >>> m.x * 2 == m.y
    True
  """

  __slots__ = ()
  _HAS_DYNAMIC_ATTRIBUTES = True  # Tells pytype that attributes are dynamic.
  _RESERVED_KEYS = frozenset(dir(dict))

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    for key in self:
      self._check_settable(key)

  @classmethod
  def _check_settable(cls, key: Any) -> None:
    """Raises ValueError unless `key` may be stored in a NestedMap."""
    cls.CheckKey(key)
    if key in cls._RESERVED_KEYS:
      raise ValueError(
          f'NestedMap key {key!r} is reserved: it is the name of a dict '
          'attribute; pick another key.'
      )

  def __setitem__(self, key: str, value: Any) -> None:
    self._check_settable(key)
    super().__setitem__(key, value)

  def update(self, *args, **kwargs) -> None:
    """Like `dict.update`, but every new key is validated."""
    for key, value in dict(*args, **kwargs).items():
      self[key] = value

  def __ior__(self, other: Any) -> Self:
    self.update(other)
    return self

  def setdefault(self, key: str, default: Any = None) -> Any:
    """Like `dict.setdefault`, but a new key is validated."""
    if key not in self:
      self[key] = default
    return self[key]

  def __setattr__(self, name: str, value: Any) -> None:
    self[name] = value

  def __getattr__(self, name: str) -> Any:
    try:
      return self[name]
    except KeyError:
      raise AttributeError(
          f'NestedMap has no key {name!r}; available keys: {sorted(self)}'
      ) from None

  def __delattr__(self, name: str) -> None:
    try:
      del self[name]
    except KeyError:
      raise AttributeError(
          f'NestedMap has no key {name!r}; available keys: {sorted(self)}'
      ) from None

  def __dir__(self) -> list[str]:
    """Lists the flattened keys as well as the usual attributes."""
    return self._flat_keys() + list(super().__dir__())

  def copy(self) -> 'NestedMap':
    """Returns a shallow copy (a NestedMap, where `dict.copy` gives a dict)."""
    return from_valid_pairs(self.keys(), self.values())

  __copy__ = copy

  def __deepcopy__(self, memo: Any) -> 'NestedMap':
    del memo  # Leaves are shared, so there is nothing to memoize.
    return self.DeepCopy()

  def DeepCopy(self) -> 'NestedMap':
    """Copies the dict/list structure; the leaves themselves are shared."""
    return self.Pack(self.Flatten())

  @staticmethod
  def FromNestedDict(x: Any) -> Any:
    """Returns `x` with every dict in it turned into a NestedMap.

    Lists and tuples (including namedtuples) are rebuilt with their own type;
    other values are returned as they are.

    Args:
      x: a nested structure of dicts, lists, tuples and leaves.

    Returns:
      The same structure with NestedMaps in place of dicts.
    """
    if isinstance(x, dict):
      return NestedMap({k: NestedMap.FromNestedDict(v) for k, v in x.items()})
    if isinstance(x, list):
      return [NestedMap.FromNestedDict(v) for v in x]
    if isinstance(x, tuple):
      items = [NestedMap.FromNestedDict(v) for v in x]
      return type(x)(*items) if hasattr(x, '_fields') else type(x)(items)
    return x

  @staticmethod
  def FromNestedDataclass(x: Any) -> 'NestedMap':
    """A dataclass instance as a NestedMap of its fields (nested ones too).

    Dataclass fields become NestedMaps; dicts, lists and tuples are handled
    as in FromNestedDict; the leaves are shared, not copied.

    Args:
      x: a dataclass instance.

    Returns:
      A NestedMap with one entry per field of `x`.
    """
    if not dataclasses.is_dataclass(x) or isinstance(x, type):
      raise ValueError(f'FromNestedDataclass: expected a dataclass instance, '
                       f'got {type(x)}.')

    def convert(v: Any) -> Any:
      if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return NestedMap({f.name: convert(getattr(v, f.name))
                          for f in dataclasses.fields(v)})
      if isinstance(v, dict):
        return NestedMap({k: convert(u) for k, u in v.items()})
      if isinstance(v, list):
        return [convert(u) for u in v]
      if isinstance(v, tuple):
        items = [convert(u) for u in v]
        return type(v)(*items) if hasattr(v, '_fields') else type(v)(items)
      return v

    return convert(x)

  def ToNestedDict(self) -> dict[str, Any]:
    """Returns a copy in which every NestedMap (and dict) is a plain dict."""
    return _to_nested_dict(self)

  @staticmethod
  def CheckKey(key: Any) -> None:
    """Raises ValueError unless `key` is a str starting like an identifier."""
    if not (isinstance(key, str) and _KEY_PATTERN.match(key)):
      raise ValueError(
          f'Invalid NestedMap key {key!r}: keys are strings that start with '
          'a letter or underscore ([A-Za-z_][A-Za-z0-9_]*).'
      )

  @staticmethod
  def SquareBracketIndex(key: str) -> tuple[str, int | None]:
    """Splits `'name[3]'` into `('name', 3)`; other keys give `(key, None)`."""
    match = _INDEXED_KEY_PATTERN.fullmatch(key)
    if match is None:
      return key, None
    return match.group(1), int(match.group(2))

  def GetItem(self, key: str) -> Any:
    """Returns the value at a dotted path such as `'a.b[0].c'`.

    Args:
      key: dot-separated keys, each optionally followed by a list index.

    Returns:
      The value stored at that path.

    Raises:
      KeyError: a key on the path is missing.
      IndexError: a list index on the path is out of range.
      TypeError: the path indexes into something that is not a container of
        the expected kind.
    """
    current = self
    for part in key.split('.'):
      name, index = self.SquareBracketIndex(part)
      current = current[name]
      if index is not None:
        current = current[index]
    return current

  def Get(self, key: str, default: Any = None) -> Any:
    """Like `GetItem`, but returns `default` where the path does not exist."""
    try:
      return self.GetItem(key)
    except (KeyError, IndexError, TypeError):
      return default

  def Set(self, key: str, value: Any) -> None:
    """Stores `value` at a dotted path such as `'a.b[0].c'`.

    Missing intermediate keys are created as NestedMaps, missing lists as
    lists. An index may point at most one past the end of its list (which
    appends to it).

    Args:
      key: dot-separated keys, each optionally followed by a list index.
      value: the value to store.

    Raises:
      ValueError: a key is invalid, an index skips past the end of a list, or
        an intermediate value on the path is not a dict.
    """
    parts = key.split('.')
    current = self
    for position, part in enumerate(parts):
      name, index = self.SquareBracketIndex(part)
      self.CheckKey(name)
      is_last = position == len(parts) - 1
      if index is None:
        if is_last:
          current[name] = value
          return
        if name not in current:
          current[name] = NestedMap()
        current = current[name]
      else:
        items = current.setdefault(name, [])
        if not isinstance(items, list):
          raise ValueError(
              f'Cannot set {key!r}: the value under {name!r} is a '
              f'{type(items).__name__}, not a list.'
          )
        if index > len(items):
          raise ValueError(
              f'Cannot set {key!r}: index {index} is past the end of the '
              f'list under {name!r}, which has length {len(items)}.'
          )
        if index == len(items):
          items.append(None)
        if is_last:
          items[index] = value
          return
        if items[index] is None:
          items[index] = NestedMap()
        current = items[index]
      if not isinstance(current, dict):
        raise ValueError(  # noqa: TRY004  (lingvo raises ValueError here)
            f'Cannot set {key!r}: the value under {part!r} is a '
            f'{type(current).__name__}, not a dict or NestedMap.'
        )

  def _flat_keys(self) -> list[str]:
    return _recursive_map(self, lambda k, _: k, flatten=True)

  def ListKeys(self) -> list[str]:
    """Returns the flattened keys (`'foo.bar[0]'`, ...) in sorted order."""
    return self._flat_keys()

  def Flatten(self) -> list[Any]:
    """Returns the leaves in sorted-key order (tuples count as leaves)."""
    return _recursive_map(self, lambda _, v: v, flatten=True)

  def FlattenItems(self) -> list[tuple[str, Any]]:
    """Returns `(flat_key, leaf)` pairs, keys like `'foo.bar[10].baz'`."""
    return _recursive_map(self, lambda k, v: (k, v), flatten=True)

  def Pack(self, lst: list[Any]) -> 'NestedMap':
    """Returns a copy of this structure with leaves taken in order from `lst`.

    Args:
      lst: as many values as `Flatten()` returns.

    Returns:
      A NestedMap shaped like this one.

    Raises:
      ValueError: `lst` has the wrong length.
    """
    num_leaves = len(self.Flatten())
    if len(lst) != num_leaves:
      raise ValueError(
          f'Pack needs {num_leaves} values for this NestedMap, got {len(lst)}.'
      )
    values = iter(lst)
    return _recursive_map(self, lambda _k, _v: next(values), flatten=False)

  def Transform(self, fn: Callable[[Any], Any]) -> 'NestedMap':
    """Returns a copy with `fn(leaf)` in place of each leaf."""
    return _recursive_map(self, lambda _, v: fn(v), flatten=False)

  def TransformWithKey(self, fn: Callable[[str, Any], Any]) -> 'NestedMap':
    """Returns a copy with `fn(flat_key, leaf)` in place of each leaf."""
    return _recursive_map(self, fn, flatten=False)

  def IsCompatible(self, other: Any) -> bool:
    """True if `other` has the same flattened keys (so Pack round-trips)."""
    if not isinstance(other, dict):
      return False
    other_keys = _recursive_map(other, lambda k, _: k, flatten=True)
    return self._flat_keys() == other_keys

  def Filter(self, fn: Callable[[Any], bool]) -> 'NestedMap':
    """Returns a copy keeping only the leaves for which `fn(leaf)` is true."""
    return self.FilterKeyVal(lambda _, v: fn(v))

  def FilterKeyVal(self, fn: Callable[[str, Any], bool]) -> 'NestedMap':
    """Returns a copy keeping only leaves where `fn(flat_key, leaf)` is true.

    Containers left empty by the filter disappear; containers that were
    already empty stay.

    Args:
      fn: predicate on the flattened key and the leaf.

    Returns:
      The filtered NestedMap.
    """
    return _recursive_map(
        self, lambda k, v: v if fn(k, v) else _DELETE, flatten=False
    )

  def _debug_lines(self) -> list[str]:
    items = self.FlattenItems()
    width = max((len(k) for k, _ in items), default=0) + 4
    return sorted(k.ljust(width) + str(v) for k, v in items)

  def DebugString(self) -> str:
    """Returns one `flat_key    value` line per leaf."""
    return '\n'.join(self._debug_lines())

  def VLog(self, level: int | None = None, prefix: str | None = None) -> None:
    """Logs `DebugString()` line by line with `absl.logging.vlog`."""
    level = 0 if level is None else level
    prefix = 'nmap: ' if prefix is None else prefix
    for line in self._debug_lines():
      logging.vlog(level, '%s %s', prefix, line)


def from_valid_pairs(keys: Any, values: Any) -> NestedMap:
  """A NestedMap of `zip(keys, values)`, its keys not validated again.

  For keys known good (another NestedMap's, a pytree node's): the copies,
  unflattenings and batches built at every step skip `CheckKey`.
  """
  result = NestedMap()
  dict.update(result, zip(keys, values))
  return result
