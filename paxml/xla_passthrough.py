"""Batch values XLA cannot take (strings, Python objects), kept on the host.

Public names: split_out_xla_unsupported_batch, merge_back_xla_unsupported_batch.

A decode or eval batch may carry strings (ids, source text) that the jitted
step cannot receive. `split_out_xla_unsupported_batch` takes them out (with
their partition specs), and `merge_back_xla_unsupported_batch` puts them into
the step's host-side outputs afterwards.

A top-level key whose nested value holds any unsupported leaf leaves the
batch whole, as in Pax; the unsupported side keeps only the unsupported
leaves under it, and the new partition specs keep the supported ones.

Example:

  batch, strings, specs = xla_passthrough.split_out_xla_unsupported_batch(
      batch, partitioning_spec=specs)
  out = step(batch)
  xla_passthrough.merge_back_xla_unsupported_batch(out, strings)
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np


def _unsupported(value: Any) -> bool:
  """Whether XLA cannot take `value`: a str or object array."""
  dtype = value.dtype if hasattr(value, 'dtype') else np.asarray(value).dtype
  return np.issubdtype(dtype, np.str_) or np.issubdtype(dtype, np.object_)


def split_out_xla_unsupported_batch(
    batch: Any, partitioning_spec: Mapping[str, Any] | None = None
) -> tuple[Any, dict[str, Any], Any]:
  """Splits the values XLA cannot take out of a (nested) batch dict.

  Args:
    batch: A dict (or NestedMap) of arrays, possibly nested.
    partitioning_spec: The batch's partition specs, the same structure, or
      None.

  Returns:
    (batch without the unsupported top-level keys, the unsupported leaves in
    the batch's nesting, the specs without them). With nothing unsupported,
    the very `batch` and `partitioning_spec` objects come back, with `{}`.

  Raises:
    NotImplementedError: if unsupported values appear in a multi-process run.
  """
  unsupported, nested_specs = {}, {}
  for key, value in batch.items():
    if hasattr(value, 'items'):
      sub_spec = partitioning_spec.get(key) if partitioning_spec else None
      _, sub_unsupported, sub_new_spec = split_out_xla_unsupported_batch(
          value, sub_spec)
      if sub_unsupported:
        unsupported[key] = sub_unsupported
        if sub_spec is not None and sub_new_spec:
          nested_specs[key] = sub_new_spec
    elif _unsupported(value):
      unsupported[key] = value
  if not unsupported:
    return batch, {}, partitioning_spec
  if jax.process_count() > 1:
    raise NotImplementedError(
        f'Inputs XLA cannot take (keys {sorted(unsupported)}) are not '
        'forwarded in a multi-process run.')
  kept = {k: v for k, v in batch.items() if k not in unsupported}
  if partitioning_spec is None:
    return kept, unsupported, None
  new_specs = {k: v for k, v in partitioning_spec.items()
               if k not in unsupported}
  new_specs.update(nested_specs)
  return kept, unsupported, new_specs


def merge_back_xla_unsupported_batch(
    out: dict[str, Any], xla_unsupported_batch: Mapping[str, Any] | None
) -> None:
  """Adds the split-out values into `out` (in place)."""
  if xla_unsupported_batch:
    out.update(xla_unsupported_batch)
