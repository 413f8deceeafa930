"""Pax's additions to Fiddle's codegen intermediate representation.

Public names: PaxCodegenTask.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fiddle._src.codegen.auto_config import code_ir


@dataclasses.dataclass
class PaxCodegenTask(code_ir.CodegenTask):
  """A codegen task that also records Pax-specific state.

  Attributes:
    highlevel_accesses: High-level settings read by the generated fixtures,
      by attribute name (they become fields of the generated class).
    sharding_diff_module: A libcst Module holding a fiddler that re-adds the
      sharding annotations, when the fixtures are generated without them.
  """

  highlevel_accesses: dict[str, Any] = dataclasses.field(default_factory=dict)
  sharding_diff_module: Any | None = None
