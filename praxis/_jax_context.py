"""The context layers run under (eval mode, summary verbosity) and summaries.

Re-exported by `praxis.base_layer`; import it from there. Public names:
  JaxContext, cur_jax_context, SummaryType, SummaryVerbosity,
  get_summary_base_type, get_summary_type_suffix, get_summary_type_from_key,
  trim_summary_type_from_key, add_global_summary, clear_global_summary,
  all_global_summaries, transpose_one_axis, maybe_transpose_mesh_axes.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from praxis import base_hyperparams


class SummaryType(enum.Enum):
  """Kinds of summaries; a summary's key ends with `_<kind name, lower>`."""

  SCALAR = 1
  IMAGE = 2
  AGGREGATE_SCALAR = 3
  AGGREGATE_IMAGE = 4
  TEXT = 5
  AUDIO = 6
  VIDEO = 7
  HISTOGRAM = 8


class SummaryVerbosity(enum.IntEnum):
  """Summaries above the context's verbosity are not recorded."""

  ERROR = 0
  WARNING = 1
  INFO = 2
  DEBUG = 3


def get_summary_base_type(summary_type: SummaryType) -> SummaryType:
  """SCALAR for AGGREGATE_SCALAR, IMAGE for AGGREGATE_IMAGE, else itself."""
  return {
      SummaryType.AGGREGATE_SCALAR: SummaryType.SCALAR,
      SummaryType.AGGREGATE_IMAGE: SummaryType.IMAGE,
  }.get(summary_type, summary_type)


def get_summary_type_suffix(summary_type: SummaryType) -> str:
  return '_' + summary_type.name.lower()


def _suffixes_longest_first() -> list[SummaryType]:
  return sorted(SummaryType, key=lambda t: -len(t.name))


def get_summary_type_from_key(key: str) -> SummaryType:
  """The summary type named by the suffix of `key`."""
  for t in _suffixes_longest_first():
    if key.endswith(get_summary_type_suffix(t)):
      return t
  raise ValueError(f'Summary key {key!r} has no summary type suffix.')


def trim_summary_type_from_key(key: str) -> str:
  """`key` without its summary type suffix."""
  suffix = get_summary_type_suffix(get_summary_type_from_key(key))
  return key[: -len(suffix)]


def _with_batch_dim(tensor: Any, summary_type: SummaryType) -> Any:
  """Images get a batch dim when 3-D, audio when 2-D."""
  base = get_summary_base_type(summary_type)
  if base == SummaryType.IMAGE and tensor.ndim == 3:
    return tensor[None]
  if base == SummaryType.AUDIO and tensor.ndim == 2:
    return tensor[None]
  return tensor


class _SummaryDict:
  """The summaries of a context: `dict` maps `<name>[<n>]_<type>` to values."""

  def __init__(self):
    self.dict: dict[str, Any] = {}

  def add_summary(
      self, name: str, tensor: Any, summary_type: SummaryType
  ) -> None:
    """Records `tensor`; a taken name gets a number (`name1_scalar`, ...)."""
    suffix = get_summary_type_suffix(summary_type)
    key, i = name + suffix, 0
    while key in self.dict:
      i += 1
      key = f'{name}{i}{suffix}'
    self.dict[key] = _with_batch_dim(tensor, summary_type)

  def clear(self) -> None:
    self.dict = {}


class _ContextStack(threading.local):

  def __init__(self):
    self.stack: list[JaxContext] = []


_STACK = _ContextStack()


class JaxContext:
  """What layers read while they run: eval mode, summary verbosity, ...

  Example:

    ctx = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=ctx):
      outputs = layer.apply(variables, inputs)
  """

  class HParams(base_hyperparams.BaseHyperParams):
    """Fields of a context.

    Attributes:
      do_eval: Whether layers run in eval mode (no dropout, frozen stats).
      summary_verbosity: Summaries above this verbosity are skipped.
      mesh_axes_transpose: Renames of mesh axes applied by `maybe_shard`.
      self_reflect_configs: Whether layers record their configs when
        initialised.
    """

    do_eval: bool | None = None
    summary_verbosity: int = SummaryVerbosity.DEBUG
    mesh_axes_transpose: dict[str, str] | None = None
    self_reflect_configs: bool = False

  def __init__(self, hparams: JaxContext.HParams):
    self._hparams = hparams.clone()
    self._summaries = _SummaryDict()
    self._shared_layers: dict[tuple[int, str], Any] = {}

  @property
  def hparams(self) -> JaxContext.HParams:
    return self._hparams

  @property
  def do_eval(self) -> bool | None:
    return self._hparams.do_eval

  @property
  def summary_verbosity(self) -> int:
    return self._hparams.summary_verbosity

  @property
  def mesh_axes_transpose(self) -> dict[str, str] | None:
    return self._hparams.mesh_axes_transpose

  @property
  def summary_dict(self) -> _SummaryDict:
    return self._summaries

  def __enter__(self) -> JaxContext:
    _STACK.stack.append(self)
    return self

  def __exit__(self, *unused_exc_info) -> None:
    assert _STACK.stack and _STACK.stack[-1] is self
    _STACK.stack.pop()

  @staticmethod
  def top() -> JaxContext | None:
    return _STACK.stack[-1] if _STACK.stack else None

  @staticmethod
  def has_context() -> bool:
    return bool(_STACK.stack)

  @staticmethod
  def new_context(*, hparams: JaxContext.HParams | None = None) -> JaxContext:
    """A context with `hparams`, else those of the current context."""
    if hparams is None:
      current = JaxContext.top()
      hparams = current.hparams if current else JaxContext.HParams()
    return JaxContext(hparams)


def cur_jax_context() -> JaxContext:
  """The innermost context; raises if there is none."""
  context = JaxContext.top()
  if context is None:
    raise RuntimeError('No JaxContext: use `with JaxContext.new_context():`.')
  return context


def add_global_summary(
    name: str,
    tensor: Any,
    summary_type: SummaryType = SummaryType.SCALAR,
    verbosity: int = SummaryVerbosity.INFO,
) -> None:
  """Records a summary outside any layer, in the current context.

  Floating-point values are recorded in float32.

  Args:
    name: The summary's name (a number is appended if it is taken).
    tensor: Its value.
    summary_type: SCALAR, IMAGE, ...
    verbosity: Recorded only if at most the context's summary verbosity.
  """
  context = cur_jax_context()
  if verbosity > context.summary_verbosity:
    return
  if jnp.issubdtype(jnp.result_type(tensor), jnp.floating):
    tensor = jnp.asarray(tensor, jnp.float32)
  context.summary_dict.add_summary(name, tensor, summary_type)


def clear_global_summary() -> None:
  if JaxContext.has_context():
    cur_jax_context().summary_dict.clear()


def all_global_summaries() -> dict[str, Any]:
  if not JaxContext.has_context():
    return {}
  return dict(cur_jax_context().summary_dict.dict)


def transpose_mesh_axes(names: Sequence[Any] | None) -> Any:
  """Applies the context's `mesh_axes_transpose` to mesh axis names."""
  context = JaxContext.top()
  mapping = context.mesh_axes_transpose if context else None
  if not mapping or names is None:
    return names
  return type(names)(mapping.get(n, n) if isinstance(n, str) else n
                     for n in names)


def transpose_one_axis(
    axis: str | None, mesh_axes_transpose: dict[str, str] | None
) -> str | None:
  """`axis` renamed by `mesh_axes_transpose` (unchanged if not listed)."""
  if mesh_axes_transpose is None or axis is None:
    return axis
  if not isinstance(axis, str):
    raise TypeError(f'transpose_one_axis: expected an axis name, got {axis!r}.')
  return mesh_axes_transpose.get(axis, axis)


def maybe_transpose_mesh_axes(partition_spec: Any) -> Any:
  """`partition_spec` with its axes renamed by the context's transpose."""
  context = JaxContext.top()
  mapping = context.mesh_axes_transpose if context else None
  if not mapping:
    return partition_spec

  def one(axes: Any) -> Any:
    if axes is jax.sharding.PartitionSpec.UNCONSTRAINED:
      return axes
    if axes is None or isinstance(axes, str):
      return transpose_one_axis(axes, mapping)
    return tuple(a for a in (one(x) for x in axes) if a)

  return jax.sharding.PartitionSpec(*(one(x) for x in partition_spec))
