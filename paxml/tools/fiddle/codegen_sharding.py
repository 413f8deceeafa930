"""Generating a model's sharding annotations as a separate function.

Public names: ModelShardingDiff, sharding_diff, MakeShardingFiddler,
AddShardingCall.

A baseline generated with `factor_out_sharding_annotations` has a
`model_fixture` without annotations, and a module-level function
`shard_model_config(model_config)` that sets them again; `model_fixture` calls
it on the config it returns. `sharding_diff` computes the changes that
function makes, `MakeShardingFiddler` (a codegen pass) turns them into code,
and `AddShardingCall` edits the generated `model_fixture` to call it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fiddle import diffing
from fiddle.codegen import codegen_diff
from fiddle.codegen.auto_config import experimental_top_level_api
import libcst as cst
from libcst import matchers
from paxml import base_experiment
from paxml.tools.fiddle import codegen_pax_code_ir
from paxml.tools.fiddle import remove_sharding
from paxml.tools.fiddle import unshare_sharding
from praxis import pax_fiddle


@dataclasses.dataclass(frozen=True)
class ModelShardingDiff:
  """The changes that add the sharding annotations to a model config.

  Attributes:
    diff: From `old` to the annotated model config.
    old: The model config without sharding annotations.
  """

  diff: diffing.Diff
  old: pax_fiddle.Config[Any]


def sharding_diff(
    experiment_cls: type[base_experiment.BaseExperiment],
    unshare_sharding_config: bool = True,
) -> ModelShardingDiff | None:
  """The diff re-adding the sharding of `experiment_cls`'s model, if any.

  Args:
    experiment_cls: The legacy experiment; its `task().model` is used.
    unshare_sharding_config: Copy shared annotations apart first (see
      `codegen.codegen_baseline_from_legacy`).

  Returns:
    A ModelShardingDiff, or None when the model has no sharding annotations.
  """
  annotated = experiment_cls().task().model
  if unshare_sharding_config:
    annotated = unshare_sharding.unshare_sharding(annotated)
  bare = remove_sharding.remove_sharding(annotated, replace_with_default=True)
  diff = diffing.build_diff(bare, annotated)
  if not diff.changes:
    return None
  return ModelShardingDiff(diff=diff, old=bare)


@dataclasses.dataclass(frozen=True)
class MakeShardingFiddler(experimental_top_level_api.CodegenPass):
  """Codegen pass: stores `shard_model_config`'s code on the task.

  It reads the Codegen call's `model_sharding_diff` argument (a
  ModelShardingDiff or None) and sets `task.sharding_diff_module` to a libcst
  module defining `shard_model_config(model_config)`.
  """

  PASS_INPUT_KWARGS = ['model_sharding_diff']

  def __call__(self, task: Any,
               model_sharding_diff: ModelShardingDiff | None = None) -> Any:
    if not isinstance(task, codegen_pax_code_ir.PaxCodegenTask):
      raise TypeError(
          'MakeShardingFiddler needs a PaxCodegenTask (made by '
          f'codegen.InitTask), got {type(task).__name__}.')
    if model_sharding_diff is None:
      return task
    if not isinstance(model_sharding_diff, ModelShardingDiff):
      raise TypeError(
          'model_sharding_diff should be a ModelShardingDiff or None, got '
          f'{type(model_sharding_diff).__name__}.')
    task.sharding_diff_module = codegen_diff.fiddler_from_diff(
        model_sharding_diff.diff,
        old=model_sharding_diff.old,
        func_name='shard_model_config',
        param_name='model_config',
        import_manager=task.import_manager,
        variable_naming='short')
    return task


_RETURN_LINE = matchers.SimpleStatementLine([matchers.Return()])


@dataclasses.dataclass(frozen=True)
class AddShardingCall:
  """Makes a generated fixture call the sharding function on its result.

  `return <expr>` at the end of the fixture becomes
  `model_config = <expr>; <add_sharding_function>(model_config);
  return model_config`, one statement a line.

  Attributes:
    model_fixture_name: The fixture to edit, usually 'model_fixture'.
    add_sharding_function: The function to call, usually
      'shard_model_config'.
  """

  model_fixture_name: str
  add_sharding_function: str

  def __call__(self, fn_code: cst.FunctionDef) -> cst.FunctionDef:
    if not isinstance(fn_code.body, cst.IndentedBlock):
      raise ValueError(
          f'{self.model_fixture_name}: expected an indented function body, '
          f'got {type(fn_code.body).__name__}.')
    lines = list(fn_code.body.body)
    if not lines or not matchers.matches(lines[-1], _RETURN_LINE):
      raise ValueError(
          f'{self.model_fixture_name}: expected the last statement to be '
          'a single return.')
    returned = lines[-1].body[0].value
    name = cst.Name('model_config')
    new_lines = [
        cst.Assign(targets=[cst.AssignTarget(name)], value=returned),
        cst.Expr(cst.Call(func=cst.Name(self.add_sharding_function),
                          args=[cst.Arg(name)])),
        cst.Return(name),
    ]
    lines[-1:] = [cst.SimpleStatementLine([line]) for line in new_lines]
    return fn_code.with_changes(body=fn_code.body.with_changes(body=lines))
