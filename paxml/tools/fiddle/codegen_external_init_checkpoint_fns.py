"""Codegen pass: checkpoint-loading rules name their source experiment.

Public names: InitCheckpointRulesFromOtherTask.

`task.train.init_from_checkpoint_rules` maps checkpoint paths to
`CheckpointLoadingRules` configs that embed another experiment's whole task
and input specs. Given `{path: ExperimentClass}`, this pass writes those two
fields as `ExperimentClass().task()` and
`ExperimentClass().get_input_specs_provider_params()` instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import fiddle as fdl
from fiddle import daglish
from fiddle._src.codegen.auto_config import code_ir
from fiddle._src.codegen.auto_config import import_manager_wrapper
from fiddle.codegen.auto_config import experimental_top_level_api
from paxml import tasks_lib
from paxml.tools.fiddle import codegen_pax_code_ir


def _method_call(instance: Any, method: str) -> code_ir.SymbolOrFixtureCall:
  return code_ir.SymbolOrFixtureCall(
      symbol_expression=code_ir.AttributeExpression(instance, method),
      positional_arg_expressions=[], arg_expressions={})


def _is_rules_config(value: Any) -> bool:
  if not isinstance(value, fdl.Buildable):
    return False
  fn = fdl.get_callable(value)
  return isinstance(fn, type) and issubclass(
      fn, tasks_lib.CheckpointLoadingRules)


@dataclasses.dataclass(frozen=True)
class InitCheckpointRulesFromOtherTask(experimental_top_level_api.CodegenPass):
  """Refers checkpoint-loading rules to their experiments (see module).

  Attributes:
    strict: Require an experiment for every rule, and a rule for every
      experiment given.
  """

  PASS_INPUT_KWARGS = ['init_checkpoint_experiments']
  strict: bool = True

  def __call__(self, task: Any,
               init_checkpoint_experiments: dict[str, Any] | None) -> Any:
    if not isinstance(task, codegen_pax_code_ir.PaxCodegenTask):
      raise TypeError('InitCheckpointRulesFromOtherTask needs a '
                      f'PaxCodegenTask, got {type(task)}.')
    if init_checkpoint_experiments is None:
      return task
    unseen = set(init_checkpoint_experiments)

    def transform(value: Any, state: daglish.State) -> Any:
      if not _is_rules_config(value):
        return state.map_children(value)
      path = state.current_path
      if not path or not isinstance(path[-1], daglish.Key):
        raise ValueError('CheckpointLoadingRules must sit under a checkpoint '
                         f'path key; found at {daglish.path_str(path)!r}.')
      key = path[-1].key
      if key not in init_checkpoint_experiments:
        if not self.strict:
          return value
        raise ValueError(
            f'No task for checkpoint {key}: add it to '
            'init_checkpoint_experiments, or set '
            'init_checkpoint_experiments_strict=False.')
      unseen.discard(key)
      symbol = import_manager_wrapper.add(init_checkpoint_experiments[key],
                                          task.import_manager)
      experiment = code_ir.SymbolOrFixtureCall(
          symbol_expression=symbol, positional_arg_expressions=[],
          arg_expressions={})
      return fdl.copy_with(
          value, task_p=_method_call(experiment, 'task'),
          input_specs_provider_p=_method_call(
              experiment, 'get_input_specs_provider_params'))

    for fn in task.top_level_call.all_fixture_functions():
      fn.replace_with(daglish.MemoizedTraversal.run(transform, fn))
    if unseen and self.strict:
      raise ValueError(
          "Didn't encounter these init_from_checkpoint_rules in the config: "
          f'{sorted(unseen)}. The config must hold them as '
          'pax_fiddle.Config(CheckpointLoadingRules, ...) under those keys.')
    return task
