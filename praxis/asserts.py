"""Argument checks that raise real exceptions (ValueError by default).

Public API: `none`, `not_none`, `eq`, `ne`, `instance`, `subclass`, `le`,
`lt`, `ge`, `gt`, `in_set`, `between`, `assert_same_structure`, and the
`AssertsContext` context manager that can switch all of them off (e.g. while
shapes are symbolic).

A failing check names the offending argument by the source text of the call,
e.g. `asserts.eq(p.dim, 4 * n)` raises
``ValueError: `p.dim=6` must be equal to `4 * n=8`.``. Pass `value_str=...`
(or `value_str1`/`value_str2`) to choose that text, or `msg=...` to replace
the whole message.

Example:

  asserts.between(p.dropout_rate, 0.0, 1.0, right_strict=True)
"""

import ast
import dataclasses
import inspect
import linecache
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Self

import jax

_context_stack = threading.local()


def _stack() -> list['AssertsContext']:
  if not hasattr(_context_stack, 'stack'):
    _context_stack.stack = []
  return _context_stack.stack


@dataclasses.dataclass
class AssertsContext:
  """`with AssertsContext(enabled=False):` turns the checks into no-ops.

  Contexts nest; the innermost one decides. The setting is per thread.

  Attributes:
    enabled: whether checks run inside this context.
  """

  enabled: bool = True

  def __enter__(self) -> Self:
    _stack().append(self)
    return self

  def __exit__(self, *unused_exc_info) -> None:
    stack = _stack()
    if not stack or stack[-1] is not self:
      raise RuntimeError('AssertsContext exited out of order.')
    stack.pop()

  @staticmethod
  def assertions_enabled() -> bool:
    """Whether checks run here (True when no context is active)."""
    stack = _stack()
    return stack[-1].enabled if stack else True


def _call_argument_texts(frame: types.FrameType | None) -> list[str] | None:
  """Source text of the positional arguments of the call running in `frame`.

  Uses the instruction positions of Python 3.11+, so calls spanning several
  lines work. Returns None where the source is unavailable.
  """
  if frame is None:
    return None
  try:
    positions = inspect.getframeinfo(frame, context=0).positions
    first, last = positions.lineno, positions.end_lineno
    lines = linecache.getlines(frame.f_code.co_filename)[first - 1 : last]
    # Column offsets count UTF-8 bytes.
    encoded = [line.encode('utf-8') for line in lines]
    encoded[-1] = encoded[-1][: positions.end_col_offset]
    encoded[0] = encoded[0][positions.col_offset :]
    source = b''.join(encoded).decode('utf-8')
    call = ast.parse(source, mode='eval').body
    if not isinstance(call, ast.Call):
      return None
    return [ast.get_source_segment(source, arg) for arg in call.args]
  except (OSError, SyntaxError, ValueError, TypeError, IndexError):
    return None


def _describe(
    values: Sequence[tuple[Any, str | None]], frame: types.FrameType | None
) -> list[str]:
  """Returns `text=value` (or the given value_str) for each argument."""
  texts = None
  if any(value_str is None for _, value_str in values):
    texts = _call_argument_texts(frame)
  result = []
  for index, (value, value_str) in enumerate(values):
    text = texts[index] if texts and index < len(texts) else None
    if value_str is not None:
      result.append(value_str)
    elif text and text != str(value):
      result.append(f'{text}={value}')
    else:
      result.append(f'{value}')
  return result


def _fail(
    msg: str | None,
    exception_type: type[Exception],
    message: Callable[..., str],
    *values: tuple[Any, str | None],
) -> NoReturn:
  """Raises `exception_type(msg or message(*described_values))`."""
  if msg:
    raise exception_type(msg)
  caller = inspect.currentframe().f_back.f_back  # User code -> check -> here.
  raise exception_type(message(*_describe(values, caller)))


def none(
    value: Any,
    *,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `value is None`."""
  if AssertsContext.assertions_enabled() and value is not None:
    _fail(
        msg,
        exception_type,
        lambda v: f'`{v}` must be `None`.',
        (value, value_str),
    )


def not_none(
    value: Any,
    *,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `value is not None`."""
  if AssertsContext.assertions_enabled() and value is None:
    _fail(
        msg,
        exception_type,
        lambda v: f'`{v}` must not be `None`.',
        (value, value_str),
    )


def eq(
    value1: Any,
    value2: Any,
    *,
    value_str1: str | None = None,
    value_str2: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `value1 == value2`."""
  if not AssertsContext.assertions_enabled() or value1 == value2:
    return
  _fail(
      msg,
      exception_type,
      lambda a, b: f'`{a}` must be equal to `{b}`.',
      (value1, value_str1),
      (value2, value_str2),
  )


def ne(
    value1: Any,
    value2: Any,
    *,
    value_str1: str | None = None,
    value_str2: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `value1 != value2`."""
  if not AssertsContext.assertions_enabled() or value1 != value2:
    return
  _fail(
      msg,
      exception_type,
      lambda a, b: f'`{a}` must not be equal to `{b}`.',
      (value1, value_str1),
      (value2, value_str2),
  )


def instance(
    value: Any,
    instances: Any,
    *,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `isinstance(value, instances)` (a type or tuple of types)."""
  if AssertsContext.assertions_enabled() and not isinstance(value, instances):
    _fail(
        msg,
        exception_type,
        lambda v: f'`{v}` must be of type `{instances}`.',
        (value, value_str),
    )


def subclass(
    value: Any,
    subclasses: Any,
    *,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `issubclass(value, subclasses)` (a class or tuple of classes)."""
  if not AssertsContext.assertions_enabled():
    return
  if not (isinstance(value, type) and issubclass(value, subclasses)):
    _fail(
        msg,
        exception_type,
        lambda v: f'`{v}` must be a subclass of `{subclasses}`.',
        (value, value_str),
    )


def _compare(name: str, op: str, text: str) -> Callable[..., None]:
  """Builds the comparison check `name` (`le`, `lt`, `ge` or `gt`)."""
  checks = {
      '<=': lambda a, b: a <= b,
      '<': lambda a, b: a < b,
      '>=': lambda a, b: a >= b,
      '>': lambda a, b: a > b,
  }
  check = checks[op]

  def compare(
      value1: Any,
      value2: Any,
      *,
      value_str1: str | None = None,
      value_str2: str | None = None,
      msg: str | None = None,
      exception_type: type[Exception] = ValueError,
  ) -> None:
    if AssertsContext.assertions_enabled() and not check(value1, value2):
      _fail(
          msg,
          exception_type,
          lambda a, b: f'`{a}` must be {text} `{b}`.',
          (value1, value_str1),
          (value2, value_str2),
      )

  compare.__name__ = compare.__qualname__ = name
  compare.__doc__ = f'Checks `value1 {op} value2`.'
  return compare


le = _compare('le', '<=', 'less than or equal to')
lt = _compare('lt', '<', 'strictly less than')
ge = _compare('ge', '>=', 'greater than or equal to')
gt = _compare('gt', '>', 'strictly greater than')


def _contains(elements: Sequence[Any], value: Any) -> bool:
  try:
    return value in elements
  except jax.errors.InconclusiveDimensionOperation:
    # Symbolic dims: an undecidable comparison counts as "not equal".
    for element in elements:
      try:
        if value == element:
          return True
      except jax.errors.InconclusiveDimensionOperation:
        pass
    return False


def in_set(
    value: Any,
    elements: Sequence[Any],
    *,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `value in elements`."""
  if AssertsContext.assertions_enabled() and not _contains(elements, value):
    _fail(
        msg,
        exception_type,
        lambda v: f'`{v}` must be within `{elements}`.',
        (value, value_str),
    )


def between(
    value: Any,
    min_value: Any,
    max_value: Any,
    *,
    left_strict: bool = False,
    right_strict: bool = False,
    value_str: str | None = None,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks `min_value <(=) value <(=) max_value`.

  Args:
    value: the value to check.
    min_value: lower bound.
    max_value: upper bound.
    left_strict: use `<` (not `<=`) against `min_value`.
    right_strict: use `<` (not `<=`) against `max_value`.
    value_str: text naming `value` in the error message.
    msg: replaces the whole error message.
    exception_type: the exception raised.
  """
  if not AssertsContext.assertions_enabled():
    return
  above = min_value < value if left_strict else min_value <= value
  below = value < max_value if right_strict else value <= max_value
  if not (above and below):
    left = '(' if left_strict else '['
    right = ')' if right_strict else ']'
    _fail(
        msg,
        exception_type,
        lambda v: (
            f'`{v}` must be in the range '
            f'`{left}{min_value}, {max_value}{right}`.'
        ),
        (value, value_str),
    )


def _as_plain_containers(x: Any) -> Any:
  """Turns dict subclasses (e.g. NestedMap) into dicts, recursively."""
  if isinstance(x, dict):
    return {k: _as_plain_containers(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_as_plain_containers(v) for v in x]
  if isinstance(x, tuple):
    items = [_as_plain_containers(v) for v in x]
    return type(x)(*items) if hasattr(x, '_fields') else tuple(items)
  return x


def assert_same_structure(
    x: Any,
    y: Any,
    msg: str | None = None,
    exception_type: type[Exception] = ValueError,
) -> None:
  """Checks that `x` and `y` nest dicts, lists and tuples the same way.

  Only dicts (NestedMap counts as dict), lists and tuples are containers;
  everything else, None included, is a leaf and leaf values are ignored.

  Args:
    x: first structure.
    y: second structure.
    msg: replaces the error message.
    exception_type: the exception raised.
  """
  if not AssertsContext.assertions_enabled():
    return

  def is_leaf(node):
    return not isinstance(node, (dict, list, tuple))

  structure_x = jax.tree.structure(_as_plain_containers(x), is_leaf=is_leaf)
  structure_y = jax.tree.structure(_as_plain_containers(y), is_leaf=is_leaf)
  if structure_x != structure_y:
    raise exception_type(
        msg
        or 'Not the same structure:\n'
        f'  first:  {structure_x}\n'
        f'  second: {structure_y}'
    )
