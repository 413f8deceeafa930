r"""Parameters, FLOPs or a forward pass of an experiment's model (Pax's tool).

  python -m paxml.tools.model_analysis --exp=tasks.demo.pydoc_lm.PydocTransformerLm \
      --usage=params
  python -m paxml.tools.model_analysis --exp=... --usage=flops \
      --fprop_func=compute_predictions

`--usage=params` lists every variable (path, shape, size, trainable), the
parameters of each layer and the totals; `flops` prints XLA's count of the
compiled forward pass on one training batch (GFLOPS = ...); `fprop` runs it
and prints the outputs' shapes.
"""

import pprint
from typing import Sequence

from absl import app
from absl import flags
import jax
from paxml.tools import _tool_flags
from paxml.tools import model_analysis_lib

_USAGE = flags.DEFINE_enum('usage', 'flops', ['flops', 'fprop', 'params'],
                           'What to report.')
_FPROP_FUNC = flags.DEFINE_string(
    'fprop_func', 'compute_predictions',
    'The model method run for flops and fprop.')
_BS = flags.DEFINE_integer(
    'bs', -1, "The per-core batch size (-1: the experiment's).")


def main(unused_argv: Sequence[str]) -> None:
  if len(unused_argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {unused_argv[1:]}.')
  try:
    parser = model_analysis_lib.ExperimentParser(_tool_flags.experiment(),
                                                 _BS.value)
    if _USAGE.value == 'params':
      print(model_analysis_lib.params_report(parser.params()))
    elif _USAGE.value == 'flops':
      print(f'GFLOPS = {parser.flops(_FPROP_FUNC.value) / 1e9:.2f}')
    else:
      outputs = parser.fprop(_FPROP_FUNC.value)
      pprint.pprint(jax.tree.map(lambda x: (x.shape, str(x.dtype)), outputs))
  except ValueError as e:
    raise app.UsageError(str(e)) from e


if __name__ == '__main__':
  app.run(main)
