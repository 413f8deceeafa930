"""Layer configs as JSON, for the reference fixtures of the core layers.

`make_ref_core_layers.py` (under the real Pax 1.4) stores each case's layer
config as JSON built with `cfg`; `core_layers_ref_test.py` (here) and the
script itself rebuild it with `build`, each with its own praxis modules.
"""

import jax.numpy as jnp
from praxis import pax_fiddle


def cfg(cls_path, **fields):
  """A JSON-able template: {'__cfg__': 'module.Class', field: value}."""
  return dict(__cfg__=cls_path, **fields)


def build(spec, modules):
  """Decodes a JSON config: lists become tuples, `cfg()` dicts Configs of
  `modules[module].Class` (`modules`: module name -> module)."""
  if isinstance(spec, dict) and '__cfg__' in spec:
    module, cls = spec['__cfg__'].split('.')
    fields = {k: build(v, modules) for k, v in spec.items() if k != '__cfg__'}
    for k, v in fields.items():
      if k.endswith('dtype') and isinstance(v, str):  # 'bfloat16' etc.
        fields[k] = jnp.dtype(v)
    return pax_fiddle.Config(getattr(modules[module], cls), **fields)
  if isinstance(spec, list):
    return tuple(build(v, modules) for v in spec)
  return spec
