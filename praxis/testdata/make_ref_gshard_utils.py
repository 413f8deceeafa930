"""Records the real Pax 1.4's gshard_utils outputs, for gshard_utils_test.

Run it with the reference environment's Python, from a directory where this
project's `praxis` is not importable (the script checks):

  cd /tmp && JAX_PLATFORMS=cpu /work/refpax/bin/python \
      /work/main/praxis/testdata/make_ref_gshard_utils.py \
      /work/main/praxis/testdata/ref_gshard_utils.npz

The same CASES, run by the test with jax_threefry_partitionable off (the
default of Pax 1.4's JAX), must give the recorded arrays: key '<case>_<i>'
holds the i-th leaf of the case's result.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np


def inputs():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 16, 4)).astype(np.float32)
  paddings = np.zeros((2, 16), np.float32)
  paddings[1, -4:] = 1.0
  return logits, paddings


def cases(g):
  """name -> a function of (logits, paddings, key) calling module `g`."""
  f32 = jnp.float32
  return {
      'top2_legacy': lambda x, p, k: g.top2_gating_on_logits(
          p, x, 4, 5, f32),
      'top2_new_capped': lambda x, p, k: g.top2_gating_on_logits(
          p, x, 4, 5, f32, legacy_mtf_behavior=False, gating_logit_cap=2.0),
      'top2_sampling': lambda x, p, k: g.top2_gating_on_logits(
          p, x, 4, 5, f32, prng_key=k, second_expert_policy='sampling'),
      'top2_random': lambda x, p, k: g.top2_gating_on_logits(
          p, x, 4, 5, f32, prng_key=k, second_expert_policy='random',
          second_expert_threshold=0.3),
      'top2_capacity_factor': lambda x, p, k: g.top2_gating_on_logits(
          None, x, 4, None, f32, capacity_factor=2.0),
      'topk3': lambda x, p, k: g.topk_gating_on_logits(p, x, 4, 5, f32, k=3),
      'expert_choice': lambda x, p, k: g.expert_choice_gating_on_logits(
          x, 4, 4, f32, capacity_factor=1.0),
      'expert_choice_v2': lambda x, p, k: g.expert_choice_gating_on_logits_v2(
          p, x, 4, 3, f32),
      'expert_choice_v2_cf': lambda x, p, k: (
          g.expert_choice_gating_on_logits_v2(p, x, 4, 3, f32,
                                              capacity_factor=2.0)),
  }


def run_cases(g):
  logits, paddings = inputs()
  key = jax.random.PRNGKey(5)
  out = {}
  for name, fn in cases(g).items():
    for i, leaf in enumerate(jax.tree_util.tree_leaves(
        fn(logits, paddings, key))):
      out[f'{name}_{i}'] = np.asarray(leaf)
  return out


def main(path):
  from praxis import gshard_utils  # pylint: disable=g-import-not-at-top
  if '/work/main' in gshard_utils.__file__:
    raise SystemExit('run this with the real Pax, not this project.')
  np.savez_compressed(path, **run_cases(gshard_utils))


if __name__ == '__main__':
  main(sys.argv[1])
