"""Tests of praxis.layers._bias_add against numpy sums written here."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import _bias_add
from praxis.layers import linears


def _bf16_ulp(x: np.ndarray) -> np.ndarray:
  """The spacing of bfloat16 numbers at |x| (8 significant bits)."""
  exponent = np.floor(np.log2(np.maximum(np.abs(x), 1e-30)))
  return 2.0 ** (exponent - 7)


class AddBiasTest(test_utils.TestCase):

  def test_value_is_the_plain_add_bit_for_bit(self):
    for dtype in (np.float32, jnp.bfloat16):
      x = jnp.asarray(self.np_rng.standard_normal((3, 5, 7)), dtype)
      b = jnp.asarray(self.np_rng.standard_normal((7,)), dtype)
      np.testing.assert_array_equal(
          np.asarray(_bias_add.add_bias(x, b), np.float32),
          np.asarray(x + b, np.float32))

  def test_bias_gradient_is_the_sum_over_leading_positions(self):
    x = self.np_rng.standard_normal((4, 6, 3, 5)).astype(np.float32)
    b = self.np_rng.standard_normal((3, 5)).astype(np.float32)
    weights = self.np_rng.standard_normal(x.shape).astype(np.float32)

    def loss(x, b):
      return jnp.sum(weights * _bias_add.add_bias(x, b) ** 2)

    grad_x, grad_b = jax.grad(loss, argnums=(0, 1))(x, b)
    upstream = 2.0 * weights * (x.astype(np.float64) + b)
    self.assertAllClose(grad_x, upstream, rtol=1e-5, atol=1e-5)
    self.assertAllClose(grad_b, upstream.sum(axis=(0, 1)), rtol=1e-5,
                        atol=1e-4)

  def test_bfloat16_bias_gradient_within_one_step_of_the_exact_sum(self):
    # The case the helper exists for: a bf16 bias of many classes over
    # many positions (a softmax's logits), reduced with f32 accumulation.
    g = self.np_rng.standard_normal((8, 64, 300)).astype(np.float32) * 1e-3
    g16 = jnp.asarray(g, jnp.bfloat16)
    b = jnp.zeros((300,), jnp.bfloat16)
    _, vjp = jax.vjp(lambda b: _bias_add.add_bias(jnp.zeros_like(g16), b), b)
    (grad_b,) = vjp(g16)
    exact = np.asarray(g16, np.float64).sum(axis=(0, 1))
    got = np.asarray(grad_b, np.float64)
    self.assertTrue(np.all(np.abs(got - exact) <= _bf16_ulp(exact)),
                    np.max(np.abs(got - exact) / _bf16_ulp(exact)))

  def test_forward_mode_and_second_order(self):
    x = self.np_rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = self.np_rng.standard_normal((4,)).astype(np.float32)
    dx = self.np_rng.standard_normal(x.shape).astype(np.float32)
    db = self.np_rng.standard_normal(b.shape).astype(np.float32)
    out, tangent = jax.jvp(_bias_add.add_bias, (x, b), (dx, db))
    self.assertAllClose(out, x + b)
    self.assertAllClose(tangent, dx + db)
    # d2/db2 of sum((x + b)^2) is 2 * (positions) * identity.
    hessian = jax.hessian(
        lambda b: jnp.sum(_bias_add.add_bias(x, b) ** 2))(b)
    self.assertAllClose(hessian, 2.0 * 6 * np.eye(4))

  def test_other_shapes_fall_back_to_the_plain_add(self):
    x = self.np_rng.standard_normal((2, 3)).astype(np.float32)
    for bias in (np.float32(1.5), np.ones((2, 3), np.float32),
                 np.ones((1, 3), np.float32), 0.0):
      self.assertAllClose(_bias_add.add_bias(x, bias), x + bias)
      grad = jax.grad(lambda b: jnp.sum(_bias_add.add_bias(x, b)))(
          jnp.asarray(bias, jnp.float32))
      self.assertAllClose(grad, np.full(np.shape(bias), 6.0 / np.size(bias)))

  def test_compiled_gradient_has_no_windowed_reduction(self):
    # On CPU the plain add's bias gradient compiles to a reduce-window
    # (slow); the helper's is a dot.
    x = jnp.ones((4, 64, 256), jnp.bfloat16)
    b = jnp.ones((256,), jnp.bfloat16)
    grad = jax.jit(jax.grad(lambda b: jnp.sum(
        jnp.tanh(_bias_add.add_bias(x, b)).astype(jnp.float32) ** 2)))
    self.assertNotIn('reduce-window', grad.lower(b).compile().as_text())

  def test_bias_layer_gradient(self):
    layer = base_layer.instantiate(
        pax_fiddle.Config(linears.Bias, name='bias', dims=5))
    x = self.np_rng.standard_normal((3, 4, 5)).astype(np.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    grads = jax.grad(
        lambda v: jnp.sum(jnp.square(layer.apply(v, x))))(variables)
    b = np.asarray(variables['params']['b'])
    self.assertAllClose(grads['params']['b'], (2.0 * (x + b)).sum((0, 1)),
                        rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
