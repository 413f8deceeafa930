"""Pax's entry points into Fiddle's code generator.

Public names: InitTask.

`InitTask` starts a codegen run with a `PaxCodegenTask`, which the Pax passes
(`codegen_highlevel_parameterization`, `codegen_external_init_checkpoint_fns`)
need. Pax's whole-experiment generators (`codegen_baseline_from_legacy`,
`codegen_experiment_diff`, `code_generator_config`) are not provided here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fiddle.codegen.auto_config import experimental_top_level_api
from paxml.tools.fiddle import codegen_pax_code_ir


@dataclasses.dataclass(frozen=True)
class InitTask(experimental_top_level_api.InitTask):
  """Fiddle's first codegen pass, making a PaxCodegenTask."""

  def __call__(self, value: Any) -> Any:
    base = super().__call__(value)
    task = codegen_pax_code_ir.PaxCodegenTask(
        original_config=base.original_config,
        top_level_call=base.top_level_call)
    task.import_manager.add_by_name('dataclasses')
    return task
