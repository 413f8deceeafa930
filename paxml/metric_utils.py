"""Helpers for metric values: weighted scalars, clu-style metrics, floats.

Public names: compute_metric_values, is_scalar, is_weighted_scalar,
is_float_convertible, as_float, as_float_dict, update_float_dict,
merge_clu_metrics, extract_weighted_scalars_and_clu_metrics.

A model reports its metrics either as weighted scalars (`key -> (value,
weight)`) or as clu-style metric objects (`create`/`merge`/`compute`, e.g.
`base_metrics.WeightedScalarCluMetric`). clu is not required: a metric with
clu's `compute_value()` is read through it, any other through `compute()`.

Example:

  metric_utils.as_float_dict({'acc': (np.array(0.5), np.array(4.0))})
  # {'acc': 0.5}
"""

from __future__ import annotations

from collections.abc import Mapping
import numbers
from typing import Any

import jax
import numpy as np
from praxis import py_utils


def _is_metric(value: Any) -> bool:
  """Whether `value` is a clu-style metric object."""
  return all(hasattr(value, name) for name in ('merge', 'compute'))


def _flatten_value(name: str, value: Any) -> dict[str, Any]:
  """A metric's computed value under summary names (dicts/lists expanded)."""
  if isinstance(value, Mapping):
    out = {}
    for key, sub in value.items():
      if isinstance(sub, (list, tuple)):
        out.update({f'{name}/{key}_{i}': v for i, v in enumerate(sub)})
      else:
        out[f'{name}/{key}'] = sub
    return out
  if isinstance(value, (list, tuple)):
    return {f'{name}/{name}_{i}': v for i, v in enumerate(value)}
  return {name: value}


def compute_metric_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
  """The values of clu-style metrics, flattened to summary names.

  Args:
    metrics: name -> metric object.

  Returns:
    name -> value: clu `Value`s where the metric has `compute_value()`,
    else `compute()`'s result as a numpy value. A dict value yields
    `name/key` entries, a list `name/name_<i>` ones.
  """
  values = {}
  for name, metric in metrics.items():
    if hasattr(metric, 'compute_value'):
      value = metric.compute_value()
    else:
      value = jax.tree.map(np.asarray, metric.compute())
    values.update(_flatten_value(name, value))
  return values


def is_scalar(v: Any) -> bool:
  """Whether `v` is a number or an array (of any shape)."""
  return isinstance(v, (numbers.Number, np.ndarray, jax.Array))


def is_weighted_scalar(v: Any) -> bool:
  """Whether `v` is a `(value, weight)` tuple of scalars."""
  return (isinstance(v, tuple) and len(v) == 2 and is_scalar(v[0])
          and is_scalar(v[1]))


def _scalar_value(v: Any) -> Any:
  """The `.value` of a clu or seqio Scalar, or None."""
  if type(v).__name__ == 'Scalar' and hasattr(v, 'value'):
    return v.value
  return None


def is_float_convertible(metric_value: Any) -> bool:
  """Whether `as_float` can read `metric_value`."""
  return (isinstance(metric_value, numbers.Number)
          or _scalar_value(metric_value) is not None
          or is_weighted_scalar(metric_value)
          or (isinstance(metric_value, list)
              and all(is_weighted_scalar(v) for v in metric_value)))


def as_float(metric_value: Any) -> float:
  """One float from a number, a Scalar, or weighted scalar(s).

  Args:
    metric_value: A number, a clu/seqio `Scalar`, a `(value, weight)` pair,
      or a list of pairs (their weighted mean).

  Returns:
    The float.

  Raises:
    TypeError: for any other value.
  """
  if is_weighted_scalar(metric_value):
    metric_value = [metric_value]
  if isinstance(metric_value, list):
    if not all(is_weighted_scalar(v) for v in metric_value):
      raise TypeError(f'Expected a list of (value, weight) pairs, got '
                      f'{metric_value!r}.')
    values = np.stack([np.asarray(v) for v, _ in metric_value])
    weights = np.stack([np.asarray(w) for _, w in metric_value])
    return float(np.sum(values * weights) / np.sum(weights))
  scalar = _scalar_value(metric_value)
  if scalar is not None:
    return float(scalar)
  if not isinstance(metric_value, numbers.Number):
    raise TypeError(f'Cannot read {metric_value!r} as a float.')
  return float(metric_value)


def as_float_dict(metric_output: Mapping[str, Any],
                  raise_on_non_float_convertible: bool = False
                  ) -> dict[str, float]:
  """The float-convertible entries of `metric_output`, as floats.

  Args:
    metric_output: name -> metric value.
    raise_on_non_float_convertible: Raise on other entries instead of
      leaving them out.

  Returns:
    name -> float.
  """
  results = {}
  for key, value in metric_output.items():
    if is_float_convertible(value):
      results[key] = as_float(value)
    elif raise_on_non_float_convertible:
      raise ValueError(f'Summary value cannot be converted to float: {value}.')
  return results


def update_float_dict(target: dict[str, float], source: Mapping[str, float],
                      prefix: str | None = None) -> dict[str, float]:
  """Adds `source` into `target` (keys as `prefix/key` if given)."""
  for key, value in source.items():
    target[key if prefix is None else f'{prefix}/{key}'] = value
  return target


def merge_clu_metrics(metrics: dict[str, Any] | None,
                      updated_metrics: Mapping[str, Any]) -> Any:
  """`metrics` with `updated_metrics` merged in, key by key (in place).

  Args:
    metrics: name -> metric so far (empty or None: take the update).
    updated_metrics: name -> metric to merge; the same names.

  Returns:
    The merged dict.

  Raises:
    ValueError: if the names differ.
  """
  if not metrics:
    return updated_metrics
  if set(metrics) != set(updated_metrics):
    raise ValueError(
        "metrics and updated_metrics keys don't match: "
        f'{sorted(metrics)} vs {sorted(updated_metrics)}.')
  for key in metrics:
    metrics[key] = metrics[key].merge(updated_metrics[key])
  return metrics


def extract_weighted_scalars_and_clu_metrics(
    metrics: Mapping[str, Any]) -> tuple[Any, Any]:
  """(weighted scalars, {}) or ({}, clu metrics), by what `metrics` holds.

  Args:
    metrics: A model's metrics: all weighted scalars or all metric objects.

  Returns:
    The pair, one side empty.

  Raises:
    TypeError: if `metrics` is empty or its first value is neither.
  """
  values = (metrics.Flatten() if isinstance(metrics, py_utils.NestedMap)
            else list(metrics.values()))
  if values and is_weighted_scalar(values[0]):
    return metrics, {}
  if values and _is_metric(values[0]):
    return {}, metrics
  raise TypeError('`metrics` must be WeightedScalars or clu-style metrics; '
                  f'got {type(metrics).__name__} of '
                  f'{type(values[0]).__name__ if values else "nothing"}.')
