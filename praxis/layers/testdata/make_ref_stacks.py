"""Writes stacks_ref.npz: the real Pax 1.4's convolutions and transformers.

Run under the reference environment (the real Pax 1.4 venv), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_stacks.py [OUT_DIR]

OUT_DIR defaults to this script's folder. The cases (configs and calls) are
in stacks_cases.py beside this script. For each case: the real Pax's
initialised variables plus a little noise (so that zero biases and unit
scales are not special), and the outputs of the case's calls with them; plus
the shared inputs.
"""

import os
import sys

from flax import traverse_util
import jax
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import praxis  # pylint: disable=g-import-not-at-top
import stacks_cases  # pylint: disable=g-import-not-at-top

assert 'site-packages' in praxis.__file__, praxis.__file__


def _perturb(flat, rng):
  out = {}
  for k, v in flat.items():
    v = np.asarray(v)
    if not np.issubdtype(v.dtype, np.floating):
      out[k] = v
    elif 'moving_variance' in k:
      out[k] = (v + np.abs(rng.normal(size=v.shape)) * 0.5).astype(v.dtype)
    else:
      out[k] = (v + rng.normal(size=v.shape) * 0.2).astype(v.dtype)
  return out


def main(out_dir):
  rng = np.random.default_rng(0)
  inputs = stacks_cases.make_inputs()
  arrays = {f'inputs/{k}': v for k, v in inputs.items()}
  only = os.environ.get('ONLY', '').split(',')  # to debug a few cases
  for name in stacks_cases.CASES:
    if only != [''] and name not in only:
      continue
    init = jax.device_get(stacks_cases.init(name, inputs))
    flat = _perturb(traverse_util.flatten_dict(init, sep='/'), rng)
    variables = traverse_util.unflatten_dict(flat, sep='/')
    outputs = stacks_cases.run(name, variables, inputs)
    for k, v in flat.items():
      arrays[f'{name}/vars/{k}'] = v
    for k, v in outputs.items():
      arrays[f'{name}/out/{k}'] = v
    print(name, {k: v.shape for k, v in outputs.items()})
  path = os.path.join(out_dir, 'stacks_ref.npz')
  np.savez_compressed(path, **stacks_cases.pack(arrays))
  print(path, os.path.getsize(path), 'bytes')


if __name__ == '__main__':
  main(sys.argv[1] if len(sys.argv) > 1 else HERE)
