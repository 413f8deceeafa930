"""How long a `pax_fiddle.Config` takes to make, with and without the
type-hint cache that `praxis.pax_fiddle` installs in fiddle
(`praxis/_fiddle_type_hints.py`).

Run: `python benchmarks/config_creation.py [--repeats=5]`.

Each config is made with fiddle's own cache (a `WeakKeyDictionary` keyed by
tuples, whose every lookup fails) and with the installed one, alternating in
`--repeats` rounds in one process; it prints the median time of each and
their ratio, for a `Linear` (8 configs with its sub-configs), a
`StackedTransformer` and the task of `lm_cloud.LmCloudSpmd2B` (the whole
experiment's model, optimizer and input configs).
"""

import statistics
import time
import weakref

from absl import app
from absl import flags
from fiddle._src import signatures
from paxml.tasks.lm.params import lm_cloud
from praxis import pax_fiddle
from praxis.layers import linears
from praxis.layers import transformers

_REPEATS = flags.DEFINE_integer('repeats', 5, 'Alternating rounds.')

_CASES = {
    'Config(Linear)': (
        lambda: pax_fiddle.Config(linears.Linear, input_dims=8), 200),
    'Config(StackedTransformer)': (
        lambda: pax_fiddle.Config(transformers.StackedTransformer,
                                  num_layers=2), 20),
    'LmCloudSpmd2B().task()': (lambda: lm_cloud.LmCloudSpmd2B().task(), 5),
}


def _seconds(make, calls):
  start = time.perf_counter()
  for _ in range(calls):
    make()
  return (time.perf_counter() - start) / calls


def main(argv):
  del argv
  # pylint: disable=protected-access
  installed = signatures._type_hints_cache
  caches = {'fiddle 0.3.1 cache': weakref.WeakKeyDictionary,
            'installed cache': lambda: installed}
  for name, (make, calls) in _CASES.items():
    make()  # Imports, first evaluations.
    times = {label: [] for label in caches}
    for _ in range(_REPEATS.value):
      for label, cache in caches.items():
        signatures._type_hints_cache = cache()
        times[label].append(_seconds(make, calls))
    signatures._type_hints_cache = installed
    before, after = (statistics.median(t) for t in times.values())
    print(f'{name}: {1e3 * before:.3f} ms with fiddle\'s cache, '
          f'{1e3 * after:.3f} ms with the installed one: '
          f'{before / after:.2f}x faster (medians of {_REPEATS.value})')


if __name__ == '__main__':
  app.run(main)
