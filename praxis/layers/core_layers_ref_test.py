"""Core layers against the real Pax 1.4 (in place of Pax's Lingvo checks).

testdata/core_layers_ref.npz is written by testdata/make_ref_core_layers.py
under the real Pax 1.4. For each case it holds a layer config, the variables
used, and a list of steps (method, inputs, outputs, non-trainable variables
after the step). Here the same layer is built from this project, its own
initial variables must have the same names and shapes as Pax's, the recorded
variables are loaded, and every step must give Pax's outputs.
"""

import json
import math
import os
import sys

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis.layers import activations
from praxis.layers import attentions
from praxis.layers import convolutions
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import poolings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'testdata'))
import ref_configs  # pylint: disable=g-import-not-at-top

_MODULES = dict(activations=activations, attentions=attentions,
                convolutions=convolutions,
                embedding_softmax=embedding_softmax, linears=linears,
                normalizations=normalizations, poolings=poolings)
_KEPT = (base_layer.PARAMS, base_layer.NON_TRAINABLE)


def _load():
  path = os.path.join(os.path.dirname(__file__), 'testdata',
                      'core_layers_ref.npz')
  with np.load(path) as npz:
    meta = json.loads(npz['meta'].tobytes().decode())
    buffers = {k[len('data_'):]: npz[k] for k in npz.files
               if k.startswith('data_')}
  if 'bfloat16' in buffers:  # Stored as its uint16 bits.
    buffers['bfloat16'] = buffers['bfloat16'].view(jnp.bfloat16)
  arrays = {}
  for key, (dtype, offset, shape) in meta['index'].items():
    size = math.prod(shape)
    arrays[key] = buffers[dtype][offset:offset + size].reshape(shape)
  return meta['cases'], arrays


_CASES, _REF = _load()


def _flatten(tree, prefix, out):
  if tree is None:
    return
  if isinstance(tree, dict):
    for k in tree:
      _flatten(tree[k], f'{prefix}/{k}', out)
  elif isinstance(tree, (tuple, list)):
    for i, v in enumerate(tree):
      _flatten(v, f'{prefix}/{i}', out)
  else:
    out[prefix] = np.asarray(tree)


def _with_prefix(prefix):
  return {k[len(prefix):]: v for k, v in _REF.items()
          if k.startswith(prefix)}


# Decoding positions are traced, so all steps of a decode share one compile
# (Pax's decoders also pass them as traced values).
_TRACED = ('time_step', 'step')


def _literals(step):
  return {k: v for k, v in step['literals'].items()
          if not (k in _TRACED and isinstance(v, int))}


def _jitted(layer, step, cache, method='apply', **apply_kwargs):
  """jit(layer.apply or .init) of a step; its arrays are the arguments.

  Literals are static, and an aliased input is passed as the same tracer
  (Pax checks `query_vec is key_vec`). Jitted, a step compiles once instead
  of every primitive compiling eagerly, which is several times faster.
  """
  key = json.dumps([method, step['method'], _literals(step), step['aliases'],
                    sorted(apply_kwargs.get('mutable', []))])
  if key not in cache:
    fn = getattr(layer, method)

    def run(first, arrays):
      kwargs = dict(_literals(step), **arrays)
      for k, other in step['aliases'].items():
        kwargs[k] = kwargs[other]
      return fn(first, **kwargs, method=getattr(layer, step['method']),
                **apply_kwargs)

    cache[key] = jax.jit(run)
  return cache[key]


def _arrays(name, i, step):
  arrays = {k: _REF[f'{name}/s{i}/in/{k}'] for k in step['arrays']}
  for k, v in step['literals'].items():
    if k not in _literals(step):
      arrays[k] = np.int32(v)
  return arrays


class RealPaxTest(parameterized.TestCase):

  def _assert_same(self, got, want, what):
    # Our softmaxes also return per_example_weight (used by the LM's entropy
    # loss); every other output must be exactly Pax's.
    extra = {k for k in got if k.endswith('/per_example_weight')}
    self.assertEqual(sorted(set(got) - extra), sorted(want), what)
    for k in want:
      msg = f'{what}: {k}'
      self.assertEqual(got[k].shape, want[k].shape, msg)
      self.assertEqual(got[k].dtype, want[k].dtype, msg)
      if want[k].dtype == jnp.bfloat16:  # Within about one bfloat16 step.
        np.testing.assert_allclose(
            got[k].astype(np.float32), want[k].astype(np.float32),
            rtol=1e-2, atol=1e-3, err_msg=msg)
      elif np.issubdtype(want[k].dtype, np.floating):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5,
                                   err_msg=msg)
      else:
        np.testing.assert_array_equal(got[k], want[k], err_msg=msg)

  @parameterized.named_parameters((n, n) for n in sorted(_CASES))
  def test_matches_real_pax(self, name):
    spec = _CASES[name]
    layer = base_layer.instantiate(
        ref_configs.build(dict(spec['layer'], name='layer'), _MODULES))
    context = base_layer.JaxContext.HParams(do_eval=spec['do_eval'])
    steps = spec['steps']
    with base_layer.JaxContext.new_context(hparams=context):
      cache = {}
      init = _jitted(layer, steps[0], cache, 'init')
      ours = jax.eval_shape(init, jax.random.PRNGKey(0),
                            _arrays(name, 0, steps[0]))
      ours = traverse_util.flatten_dict(
          {k: v for k, v in ours.items() if k in _KEPT}, sep='/')
      ref_vars = _with_prefix(f'{name}/vars/')
      self.assertEqual({k: v.shape for k, v in ours.items()},
                       {k: v.shape for k, v in ref_vars.items()},
                       'variable names and shapes')
      ref_init = _with_prefix(f'{name}/init/')
      if ref_init:
        ours = traverse_util.flatten_dict(
            init(jax.random.PRNGKey(0), _arrays(name, 0, steps[0])), sep='/')
      for path, want in ref_init.items():
        np.testing.assert_allclose(ours[path], want, rtol=1e-6,
                                   err_msg=f'initial {path}')
      variables = traverse_util.unflatten_dict(ref_vars, sep='/')
      for i, step in enumerate(steps):
        arrays = _arrays(name, i, step)
        got = {}
        if step['mutable']:
          out, state = _jitted(layer, step, cache,
                               mutable=step['mutable'])(variables, arrays)
          variables = dict(variables)
          for coll in step['mutable']:
            if coll in state:
              variables[coll] = state[coll]
          if base_layer.NON_TRAINABLE in state:
            _flatten(state[base_layer.NON_TRAINABLE], 'nt', got)
        else:
          out = _jitted(layer, step, cache)(variables, arrays)
        _flatten(out, 'out', got)
        want = {k: v for k, v in _with_prefix(f'{name}/s{i}/').items()
                if not k.startswith('in/')}
        self._assert_same(got, want, f'step {i} ({step["method"]})')


if __name__ == '__main__':
  absltest.main()
