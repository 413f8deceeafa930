"""What a model costs: its parameters (per variable and per layer) and FLOPs.

Public names: ExperimentParser, ParamRow, param_rows, params_report,
per_layer_totals.

Parameters come from the model's abstract initialisation (shapes only: no
memory is spent on weights); FLOPs from XLA's cost analysis of the compiled
forward pass (`--fprop_func`, `compute_predictions` by default) on one batch
of the experiment's training input (or zeros of its input specs).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from paxml import base_experiment
from paxml.tools import dump_input_specs_lib
from praxis import base_hyperparams
from praxis import base_layer


@dataclasses.dataclass(frozen=True)
class ParamRow:
  """One variable: `params/lm/.../w`, its shape, size and trainability."""
  path: str
  shape: tuple[int, ...]
  size: int
  trainable: bool


def _is_weight(x: Any) -> bool:
  return isinstance(x, base_layer.WeightHParams)


def param_rows(variables_meta: Any) -> list[ParamRow]:
  """The variables of `abstract_init_with_metadata`'s tree, sorted by path."""
  flat = jax.tree_util.tree_flatten_with_path(variables_meta,
                                              is_leaf=_is_weight)[0]
  rows = []
  for key_path, meta in flat:
    names = [getattr(k, 'key', getattr(k, 'name', str(k))) for k in key_path]
    shape = tuple(int(d) for d in meta.shape)
    rows.append(ParamRow('/'.join(str(n) for n in names), shape,
                         math.prod(shape),
                         not base_layer.var_not_trainable(meta)))
  return sorted(rows, key=lambda r: r.path)


def per_layer_totals(rows: list[ParamRow]) -> dict[str, int]:
  """Parameter count of each layer (a variable's path without its name)."""
  totals: dict[str, int] = {}
  for row in rows:
    layer = row.path.rsplit('/', 1)[0]
    totals[layer] = totals.get(layer, 0) + row.size
  return totals


def params_report(rows: list[ParamRow]) -> str:
  """Pax's parameter listing, then per-layer subtotals and the totals."""
  width = max([len(r.path) for r in rows] + [40]) + 2
  lines = [f'{r.path:<{width}}{str(r.shape):<24}{r.size:<16}'
           f'{"trainable" if r.trainable else "non-trainable"}' for r in rows]
  lines.append('=' * 75)
  lines.append('Per layer:')
  for layer, total in per_layer_totals(rows).items():
    lines.append(f'  {layer:<{width}}{total}')
  lines.append('=' * 75)
  lines.append(f'Total #params (all): {sum(r.size for r in rows)}')
  lines.append('Total #params (trainable): '
               f'{sum(r.size for r in rows if r.trainable)}')
  return '\n'.join(lines)


class ExperimentParser:
  """Builds an experiment's model and one batch, to count and to run it.

  Attributes:
    exp: The experiment.
    batch: One batch of its training input (arrays).
  """

  def __init__(self, experiment: base_experiment.BaseExperiment,
               batch_size: int = -1, seed: int = 1202):
    if batch_size != -1:
      if not hasattr(experiment, 'PERCORE_BATCH_SIZE'):
        raise ValueError(
            f'--bs={batch_size}: {type(experiment).__name__} has no '
            'PERCORE_BATCH_SIZE to override; leave --bs at -1.')
      experiment.PERCORE_BATCH_SIZE = batch_size
    self.exp = experiment
    self._key = jax.random.PRNGKey(seed)
    self._task = base_hyperparams.instantiate(experiment.task())
    from_provider, from_input = dump_input_specs_lib.extract_input_specs(
        experiment)
    specs = from_input if from_input is not None else from_provider
    if specs is None:
      raise ValueError(f'{type(experiment).__name__} has neither a training '
                       'input nor an input specs provider to build a batch.')
    self.batch = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), specs)

  @property
  def model(self) -> base_layer.BaseLayer:
    return self._task.model

  def params(self) -> list[ParamRow]:
    """The model's variables (shapes only)."""
    return param_rows(self.model.abstract_init_with_metadata(self.batch))

  def _fprop(self, fprop_func: str):
    method = getattr(type(self.model), fprop_func, None)
    if method is None:
      raise ValueError(f'--fprop_func={fprop_func}: '
                       f'{type(self.model).__name__} has no such method.')
    variables = self.model.init({base_layer.PARAMS: self._key,
                                 base_layer.RANDOM: self._key}, self.batch)

    def fprop(variables, batch):
      return self.model.apply(variables, batch, method=method,
                              rngs={base_layer.RANDOM: self._key},
                              mutable=True)
    return fprop, variables

  def fprop(self, fprop_func: str = 'compute_predictions') -> Any:
    """The outputs of one forward pass on the batch."""
    fn, variables = self._fprop(fprop_func)
    return jax.jit(fn)(variables, self.batch)[0]

  def flops(self, fprop_func: str = 'compute_predictions') -> float:
    """XLA's FLOP count of the compiled forward pass on the batch."""
    fn, variables = self._fprop(fprop_func)
    compiled = jax.jit(fn).lower(variables, self.batch).compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # Older jax: one dict per program.
      cost = cost[0]
    return float(cost.get('flops', 0.0))
