"""Codegen pass: traced settings become `self.<setting>` in the fixtures.

Public names: HighlevelParameterization.

After `codegen_tracer` ran an experiment, its config holds tracers where
settings were used. This pass gives every fixture function a `self`
parameter, writes each tracer (values, and dict keys too) as
`self.<name>`, records the settings in `task.highlevel_accesses`, and turns
calls of sub-fixtures into `self.<fixture>()`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fiddle import daglish
from fiddle._src.codegen.auto_config import code_ir
from fiddle.codegen.auto_config import experimental_top_level_api
from paxml.tools.fiddle import codegen_pax_code_ir


@dataclasses.dataclass(frozen=True)
class HighlevelParameterization(experimental_top_level_api.CodegenPass):
  """Parameterizes the fixtures by the settings object `self`.

  Attributes:
    lowercasing: Lower-case the settings' names (`NUM_LAYERS` ->
      `self.num_layers`).
  """

  lowercasing: bool = False

  def __call__(self, task: Any, **pass_kwargs: Any) -> Any:
    if not isinstance(task, codegen_pax_code_ir.PaxCodegenTask):
      raise TypeError('HighlevelParameterization needs a PaxCodegenTask '
                      f'(made by codegen.InitTask), got {type(task)}.')
    for fn in task.top_level_call.all_fixture_functions():
      self._parameterize(task, fn)
    return task

  def _setting(self, task: Any, traced: Any, self_name: code_ir.Name) -> Any:
    """`self.<name>` for a traced value, recording the access."""
    name = traced.__highlevel_name__
    if self.lowercasing:
      name = name.lower()
    task.highlevel_accesses[name] = traced
    return code_ir.AttributeExpression(
        base=code_ir.VariableReference(self_name), attribute=name)

  def _parameterize(self, task: Any, fn: code_ir.FixtureFunction) -> None:
    self_name = code_ir.Name('self', is_generated=False)
    fn.parameters.insert(0, code_ir.Parameter(self_name))

    def transform(value: Any, state: daglish.State) -> Any:
      value = state.map_children(value)
      if isinstance(value, code_ir.SymbolOrFixtureCall):
        if isinstance(value.symbol_expression, code_ir.FixtureReference):
          value.symbol_expression = code_ir.AttributeExpression(
              base=code_ir.VariableReference(self_name),
              attribute=value.symbol_expression.name.value)
        return value
      if hasattr(value, '__highlevel_name__'):
        return self._setting(task, value, self_name)
      if isinstance(value, dict):  # daglish does not visit keys.
        return {(self._setting(task, k, self_name)
                 if hasattr(k, '__highlevel_name__') else k): v
                for k, v in value.items()}
      return value

    fn.replace_with(daglish.MemoizedTraversal.run(transform, fn))
