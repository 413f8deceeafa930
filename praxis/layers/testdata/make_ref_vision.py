"""Writes vision_ref.npz: the real Pax's quantizers and MobileNet on fixed data.

Run under the reference environment (the real Pax 1.4 venv), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_vision.py OUT_DIR [PRAXIS_GIT]

Pax 1.4 has `praxis.layers.quantizer`; `mobilenet.py` came after 1.4, so it
is read from the praxis git mirror (PRAXIS_GIT, default
/work/.mirror/google+praxis/repo, at HEAD) and run on Pax 1.4's layers.

For each case: the layer's fields (JSON), Pax's initial variables (from
PRNGKey(1234)), the inputs and the outputs.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

from flax import traverse_util
import jax
import numpy as np
import praxis
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import quantizer

assert 'site-packages' in praxis.__file__, praxis.__file__


def _load_mobilenet(git_dir):
  source = subprocess.run(
      ['git', '-C', git_dir, 'show', 'HEAD:praxis/layers/mobilenet.py'],
      check=True, capture_output=True, text=True).stdout
  # auto_config reads the source, so the module must live in a file.
  path = os.path.join(tempfile.mkdtemp(), 'upstream_mobilenet.py')
  with open(path, 'w') as f:
    f.write(source)
  spec = importlib.util.spec_from_file_location('upstream_mobilenet', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _flat(prefix, tree, out):
  for k, v in traverse_util.flatten_dict(tree, sep='/').items():
    out[f'{prefix}/{k}'] = np.asarray(v)


def main(out_dir, git_dir):
  mobilenet = _load_mobilenet(git_dir)
  rng = np.random.default_rng(0)
  arrays, meta = {}, {}
  z = rng.normal(size=(2, 6, 8)).astype(np.float32)
  paddings = np.zeros((2, 6), np.float32)
  paddings[0, 4:] = 1.0
  images = rng.normal(size=(2, 16, 16, 3)).astype(np.float32)
  cases = {
      'vq': (quantizer.VectorQuantizer, dict(
          num_latent_classes=5, latent_dim=8, beta=0.25, num_groups=2)),
      'rq': (quantizer.RandomVectorQuantizer, dict(
          latent_dim=8, projection_dim=6, num_latent_classes=7, num_groups=2,
          stack_ratio=2, normalize_latent_vector=True,
          normalize_codebook=True)),
      'mobilenet': (mobilenet.MobileNet, dict(
          expansions=(1, 6, 6), strides=(1, 2, 1), channels=(16, 24, 24),
          output_channels=32, num_classes=5, multiplier=0.75)),
  }
  for name, (cls, fields) in cases.items():
    layer = base_layer.instantiate(
        pax_fiddle.Config(cls, name=name, **fields))
    args = (images,) if name == 'mobilenet' else (z, paddings)
    variables = layer.init(jax.random.PRNGKey(1234), *args)
    out, _ = layer.apply(variables, *args, mutable=True)
    _flat(f'{name}/vars', jax.device_get(variables), arrays)
    if name == 'mobilenet':
      arrays[f'{name}/out'] = np.asarray(out)
    else:
      for k, v in out.items():
        arrays[f'{name}/out/{k}'] = np.asarray(v)
    meta[name] = {k: list(v) if isinstance(v, tuple) else v
                  for k, v in fields.items()}
  arrays['z'], arrays['paddings'], arrays['images'] = z, paddings, images
  arrays['meta'] = np.asarray(json.dumps(meta))
  np.savez(os.path.join(out_dir, 'vision_ref.npz'), **arrays)


if __name__ == '__main__':
  main(sys.argv[1],
       sys.argv[2] if len(sys.argv) > 2 else '/work/.mirror/google+praxis/repo')
