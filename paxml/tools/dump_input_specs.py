r"""Writes an experiment's input specs: `python -m paxml.tools.dump_input_specs`.

Example:

  python -m paxml.tools.dump_input_specs \
      --exp=tasks.test.regression.RegressionExperiment \
      --output_filename=/tmp/specs.txt
"""

from absl import app
from absl import flags
from etils import epath
from paxml.tools import _tool_flags
from paxml.tools import dump_input_specs_lib

_OUTPUT_FILENAME = flags.DEFINE_string(
    'output_filename', None, 'Where the input specs are written.')


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}.')
  specs = dump_input_specs_lib.extract_input_specs(_tool_flags.experiment())
  text = dump_input_specs_lib.specs_to_string(str(_tool_flags.EXP.value),
                                              specs)
  epath.Path(_OUTPUT_FILENAME.value).write_text(text)
  print(text)


if __name__ == '__main__':
  flags.mark_flags_as_required(['exp', 'output_filename'])
  app.run(main)
