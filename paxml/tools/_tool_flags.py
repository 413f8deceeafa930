"""The experiment flag the tools share (`--exp`, or Fiddle's --fdl_config).

Private to paxml/tools: each tool's `_lib` reads `experiment()`.
"""

from typing import Any

from absl import app
from absl import flags
from fiddle import absl_flags
from paxml import experiment_registry
from praxis import pax_fiddle

# paxml.main defines the same flag; whichever module is imported first does.
if 'exp' in flags.FLAGS:
  EXP = flags.FlagHolder(flags.FLAGS, flags.FLAGS['exp'])
else:
  EXP = flags.DEFINE_string('exp', None, 'A registered experiment name.')


def experiment() -> Any:
  """The experiment that --exp, or Fiddle's --fdl_config flags, name."""
  if EXP.value is not None:
    return experiment_registry.load(EXP.value)()
  if not absl_flags.fdl_flags_supplied():
    raise app.UsageError('Give --exp, or --fdl_config/--fdl_config_file.')
  return pax_fiddle.build(
      absl_flags.create_buildable_from_flags(module=None, allow_imports=True))
