"""Tests of praxis.layers.base_ops and of injecting an op into a layer."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import base_ops
from praxis.layers import embedding_softmax
from praxis.layers import linears

instantiate = base_layer.instantiate


class DoubledEinsumOp(base_ops.EinsumOp):
  """An injected op: twice the einsum."""

  def __call__(self, equation, *args):
    return 2.0 * super().__call__(equation, *args)


def op(cls):
  return instantiate(pax_fiddle.Config(cls, name='op'))


class BaseOpsTest(test_utils.TestCase):

  def test_einsum_op(self):
    a = self.np_rng.standard_normal((2, 3)).astype(np.float32)
    b = self.np_rng.standard_normal((3, 4)).astype(np.float32)
    c = self.np_rng.standard_normal((4,)).astype(np.float32)
    y = op(base_ops.EinsumOp).apply({}, 'ij,jk,k->i', a, b, c)
    self.assertAllClose(y, (a @ b) @ c, atol=1e-5)

  def test_einsum_gated_op(self):
    x = self.np_rng.standard_normal((2, 3)).astype(np.float32)
    k = self.np_rng.standard_normal((3, 4)).astype(np.float32)
    g = self.np_rng.standard_normal((3, 4)).astype(np.float32)
    y, y_gated = op(base_ops.EinsumGatedOp).apply({}, 'bd,df->bf', x, k, g)
    self.assertAllClose(y, x @ k, atol=1e-5)
    self.assertAllClose(y_gated, x @ g, atol=1e-5)

  def test_einsum_gated_op_needs_three_operands(self):
    with self.assertRaisesRegex(ValueError, 'three operands'):
      op(base_ops.EinsumGatedOp).apply({}, 'bd,df->bf', jnp.ones((1, 2)),
                                       jnp.ones((2, 2)))

  def test_array_lookup(self):
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = np.array([[3, 0], [1, 1]])
    y = op(base_ops.ArrayLookup).apply({}, table, ids)
    self.assertArraysEqual(y, np.stack([[table[3], table[0]],
                                        [table[1], table[1]]]))

  def test_injected_op_replaces_the_linear_einsum(self):
    layer = instantiate(
        pax_fiddle.Config(
            linears.Linear,
            name='lin',
            input_dims=3,
            output_dims=2,
            einsum_tpl=pax_fiddle.Config(DoubledEinsumOp),
        )
    )
    x = self.np_rng.standard_normal((4, 3)).astype(np.float32)
    y, variables = test_utils.init_and_apply(layer, x)
    w = np.asarray(variables['params']['w'])
    self.assertAllClose(y, 2.0 * (x @ w), atol=1e-5)


class DoubledArrayLookup(base_ops.ArrayLookup):
  """An injected gather: twice the rows."""

  def __call__(self, x, idx):
    return 2.0 * super().__call__(x, idx)


class EmbeddingOpTemplatesTest(test_utils.TestCase, parameterized.TestCase):
  """Pax's `array_lookup_tpl` / `einsum_tpl` of the embedding layers: an
  injected op that doubles its result doubles the embeddings."""

  @parameterized.parameters(('index', 'array_lookup_tpl', DoubledArrayLookup),
                            ('matmul', 'einsum_tpl', DoubledEinsumOp))
  def test_injected_lookup_op(self, style, field, doubled):
    ops = {'lookup_style': style, field: pax_fiddle.Config(doubled)}
    shared = instantiate(pax_fiddle.Config(
        embedding_softmax.SharedEmbeddingSoftmax, name='emb', input_dims=3,
        num_classes=5, **ops))
    variables = shared.init(
        jax.random.PRNGKey(0), jnp.ones((1, 3)), jnp.ones((1, 1)),
        class_ids=jnp.zeros((1, 1), jnp.int32))
    table = np.asarray(variables['params']['logits_ffn']['linear']['w']).T
    ids = np.array([[2, 0, 3]])
    self.assertAllClose(
        shared.apply(variables, ids, method=shared.emb_lookup),
        2.0 * table[ids], atol=1e-6)
    positions = instantiate(pax_fiddle.Config(
        embedding_softmax.TrainablePositionalEmbedding, name='pos',
        embedding_dims=2, max_seq_length=6, **ops))
    variables = positions.init(jax.random.PRNGKey(0), seq_length=4)
    table = np.asarray(variables['params']['emb_var'])
    self.assertAllClose(positions.apply(variables, seq_length=4),
                        2.0 * table[None, :4], atol=1e-6)

if __name__ == '__main__':
  absltest.main()
