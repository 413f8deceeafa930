"""Tests of the activations (vs numpy formulas) and praxis.layers re-exports."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import activations
from praxis.layers import grouped_query_attention
from praxis.layers import normalizations
from praxis.layers import poolings
from praxis.layers import transformer_models


def np_sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def np_gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) *
                                  (x + 0.044715 * x**3)))


def np_gelu_erf(x):
  erf = np.vectorize(math.erf)
  return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


_CASES = (
    ('ReLU', {}, lambda x: np.maximum(x, 0.0)),
    ('SineReLU', {}, lambda x: np.sin(np.maximum(x, 0.0))),
    ('ReLU6', {}, lambda x: np.minimum(np.maximum(x, 0.0), 6.0)),
    ('SquaredReLU', {}, lambda x: np.maximum(x, 0.0)**2),
    ('CubedReLU', {}, lambda x: np.maximum(x, 0.0)**3),
    ('LeakyReLU', {'negative_slope': 0.2},
     lambda x: np.where(x >= 0, x, 0.2 * x)),
    ('ELU', {}, lambda x: np.where(x > 0, x, np.expm1(x))),
    ('Sigmoid', {}, np_sigmoid),
    ('Tanh', {}, np.tanh),
    ('GELU', {}, np_gelu_tanh),
    ('GELU', {'approximate': False}, np_gelu_erf),
    ('SiLU', {}, lambda x: x * np_sigmoid(x)),
    ('Swish', {}, lambda x: x * np_sigmoid(x)),
    ('Softplus', {}, lambda x: np.log1p(np.exp(x))),
    ('Exp', {}, np.exp),
    ('Identity', {}, lambda x: x),
)


class ActivationsTest(test_utils.TestCase):

  @parameterized.parameters(*_CASES)
  def test_matches_numpy(self, name, fields, reference):
    cls = getattr(activations, name)
    layer = base_layer.instantiate(
        pax_fiddle.Config(cls, name='act', **fields))
    # Values either side of every kink (0, 6) and in the tails.
    x = np.array([-7.0, -2.5, -0.3, 0.0, 0.4, 1.7, 5.9, 6.0, 8.0],
                 np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    self.assertEqual(variables, {})
    self.assertAllClose(y, reference(x.astype(np.float64)), atol=1e-5,
                        rtol=1e-5)

  def test_base_activation_is_abstract(self):
    layer = base_layer.instantiate(
        pax_fiddle.Config(activations.BaseActivation, name='act'))
    with self.assertRaises(NotImplementedError):
      layer.apply({}, jnp.ones(2))


class SubclassByNameTest(test_utils.TestCase):

  def test_names_ignore_case_and_underscores(self):
    get = activations.BaseActivation.get_subclass_by_name
    self.assertIs(get('cubed_relu'), activations.CubedReLU)
    self.assertIs(get('GE_LU'), activations.GELU)
    with self.assertRaisesRegex(KeyError, 'known'):
      get('no_such')

  def test_two_classes_of_one_name_are_ambiguous(self):

    class Tanh(activations.BaseActivation):  # pylint: disable=unused-variable
      pass

    with self.assertRaisesRegex(KeyError, 'Found >1'):
      activations.BaseActivation.get_subclass_by_name('tanh')


class LayersPackageTest(test_utils.TestCase):

  def test_reexports(self):
    self.assertIs(layers.ReLU, activations.ReLU)
    self.assertIs(layers.GELU, activations.GELU)
    self.assertIs(layers.Identity, activations.Identity)
    for name in ('Linear', 'Bias', 'FeedForward', 'MLPBlock',
                 'project_last_dim', 'Dropout', 'StochasticResidual',
                 'Sequential', 'Einsum', 'EinsumOp', 'ArrayLookup'):
      self.assertTrue(hasattr(layers, name), name)

  def test_reexports_of_the_other_modules(self):
    self.assertIs(layers.LayerNorm, normalizations.LayerNorm)
    self.assertIs(layers.TransformerLm, transformer_models.TransformerLm)
    for name in ('DotProductAttention', 'causal_mask', 'Conv2D',
                 'SharedEmbeddingSoftmax', 'LanguageModel', 'Pooling',
                 'Repeat', 'ResNet', 'StackedTransformer',
                 'LayerwiseShardablePipelined', 'AutodiffCheckpointType'):
      self.assertTrue(hasattr(layers, name), name)

  def test_every_pax_name_with_a_class_here(self):
    self.assertIs(layers.ELU, activations.ELU)
    self.assertIs(layers.GroupedQueryAttention,
                  grouped_query_attention.GroupedQueryAttention)
    self.assertIs(layers.Pooling1D, poolings.Pooling1D)
    for name in ('DotProductAttentionXL', 'LocalSelfAttention',
                 'LocalSelfAttentionAlibi', 'LocalSelfAttentionRelativeBias',
                 'LocalSelfAttentionXL', 'BregmanPCA'):
      self.assertTrue(hasattr(layers, name), name)


if __name__ == '__main__':
  absltest.main()
