"""Tests of praxis.layers.sequential."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import activations
from praxis.layers import linears
from praxis.layers import sequential

instantiate = base_layer.instantiate


class SplitInTwo(base_layer.BaseLayer):
  """Returns a tuple (x, 2x)."""

  def __call__(self, x):
    return x, 2.0 * x


class AddPair(base_layer.BaseLayer):
  """Adds two positional inputs; with `as_map`, returns a NestedMap."""

  as_map: bool = False

  def __call__(self, a, b):
    if self.as_map:
      return py_utils.NestedMap(a=a + b, b=a - b)
    return a + b


class MultiplyNamed(base_layer.BaseLayer):
  """Takes keyword inputs a, b; returns a dict."""

  def __call__(self, a, b, scale=1.0):
    return {'a': a * b * scale, 'b': a}


def seq(*layer_cfgs):
  return instantiate(
      pax_fiddle.Config(sequential.Sequential, name='seq',
                        layers=list(layer_cfgs)))


class SequentialTest(test_utils.TestCase):

  def test_linear_then_relu(self):
    layer = seq(
        pax_fiddle.Config(linears.Linear, input_dims=3, output_dims=4),
        pax_fiddle.Config(activations.ReLU),
    )
    x = self.np_rng.standard_normal((2, 3)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertEqual(list(variables['params']), ['layers_0'])
    w = np.asarray(variables['params']['layers_0']['w'])
    self.assertAllClose(y, np.maximum(x @ w, 0.0), atol=1e-5)

  def test_tuple_unpacked_and_dicts_passed_as_keywords(self):
    # x -> (x, 2x) -> {a: 3x, b: -x} -> {a: -3x^2, b: 3x} -> 3x - 3x^2.
    layer = seq(
        pax_fiddle.Config(SplitInTwo),
        pax_fiddle.Config(AddPair, as_map=True),
        pax_fiddle.Config(MultiplyNamed),
        pax_fiddle.Config(AddPair),
    )
    x = np.array([1.0, 2.0, -1.5], np.float32)
    y, _ = test_utils.init_and_apply(layer, x)
    self.assertAllClose(y, 3 * x - 3 * x**2)

  def test_first_layer_gets_args_and_kwargs(self):
    layer = seq(pax_fiddle.Config(MultiplyNamed))
    y = layer.apply({}, jnp.float32(2.0), b=jnp.float32(3.0), scale=0.5)
    self.assertAllClose(y, {'a': np.float32(3.0), 'b': np.float32(2.0)})

  def test_empty_fails(self):
    with self.assertRaisesRegex(ValueError, r'Sequential \(seq\): layers'):
      seq().init(jax.random.PRNGKey(0), jnp.ones(2))


if __name__ == '__main__':
  absltest.main()
