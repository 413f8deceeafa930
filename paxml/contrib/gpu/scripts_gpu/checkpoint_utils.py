"""Pax's `CheckpointRestoreMixin`: start a run from another checkpoint.

With `CHECKPOINT_RESTORE_PATH` set, `configure_checkpoint_restore(task_p)`
loads every variable of that checkpoint (written by this same task) except
those matching `CHECKPOINT_IGNORE_RULES` (e.g. LoRA adapters, which the
base checkpoint lacks: `LoRAMixin` sets the rule).
"""

from __future__ import annotations

from typing import Any

from paxml import tasks_lib


class CheckpointRestoreMixin:
  """Adds `init_from_checkpoint_rules` for `CHECKPOINT_RESTORE_PATH`.

  Attributes:
    CHECKPOINT_RESTORE_PATH: The checkpoint folder (None: start afresh).
    CHECKPOINT_IGNORE_RULES: Regexes of variables not to restore.
  """

  CHECKPOINT_RESTORE_PATH = None
  CHECKPOINT_IGNORE_RULES = None

  def configure_checkpoint_restore(self, task_p: Any) -> Any:
    if self.CHECKPOINT_RESTORE_PATH:
      task_p.train.init_from_checkpoint_rules = {
          self.CHECKPOINT_RESTORE_PATH: tasks_lib.CheckpointLoadingRules(
              task_p=task_p.clone(),
              load_rules=[('(.*)', '{}')],
              ignore_rules=self.CHECKPOINT_IGNORE_RULES,
              input_specs_provider_p=(
                  self.get_input_specs_provider_params()),
          )
      }
    return task_p
