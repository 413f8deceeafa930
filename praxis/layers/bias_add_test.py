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
    for dtype, tol in ((np.float32, 1e-4), (jnp.bfloat16, 0.05)):
      x_, b_ = jnp.asarray(x, dtype), jnp.asarray(b, dtype)

      def loss(x, b):
        y = _bias_add.add_bias(x, b).astype(jnp.float32)
        return jnp.sum(weights * y ** 2)

      grad_x, grad_b = jax.grad(loss, argnums=(0, 1))(x_, b_)
      upstream = 2.0 * weights * (np.asarray(x_, np.float64)
                                  + np.asarray(b_, np.float64))
      self.assertAllClose(np.asarray(grad_x, np.float32), upstream,
                          rtol=tol, atol=tol)
      self.assertAllClose(np.asarray(grad_b, np.float32),
                          upstream.sum(axis=(0, 1)), rtol=tol, atol=tol * 24)

  def test_only_16_bit_sums_take_the_contraction(self):
    def uses_rule(dtype):
      x = jnp.ones((2, 3), dtype)
      b = jnp.ones((3,), dtype)
      return 'custom_jvp_call' in str(jax.make_jaxpr(_bias_add.add_bias)(x, b))

    self.assertTrue(uses_rule(jnp.bfloat16))
    self.assertTrue(uses_rule(jnp.float16))
    self.assertFalse(uses_rule(jnp.float32))
    self.assertFalse(uses_rule(jnp.int32))

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
    def bf16(shape):
      return jnp.asarray(self.np_rng.standard_normal(shape), jnp.bfloat16)

    x, b, dx, db = bf16((2, 3, 4)), bf16((4,)), bf16((2, 3, 4)), bf16((4,))
    out, tangent = jax.jvp(_bias_add.add_bias, (x, b), (dx, db))
    f32 = lambda a: np.asarray(a, np.float32)
    np.testing.assert_array_equal(f32(out), f32(x + b))
    self.assertAllClose(f32(tangent), f32(dx) + f32(db), atol=0.05)
    # d2/db2 of sum((x + b)^2) is 2 * (positions) * identity.
    hessian = jax.hessian(lambda b: jnp.sum(
        _bias_add.add_bias(x, b).astype(jnp.float32) ** 2))(b)
    self.assertAllClose(f32(hessian), 2.0 * 6 * np.eye(4))

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
    x = self.np_rng.standard_normal((3, 4, 5)).astype(np.float32)
    for fprop_dtype, tol in ((jnp.float32, 1e-5), (jnp.bfloat16, 0.05)):
      layer = base_layer.instantiate(pax_fiddle.Config(
          linears.Bias, name='bias', dims=5, fprop_dtype=fprop_dtype))
      x_ = jnp.asarray(x, fprop_dtype)  # A bf16 model's activations.
      variables = layer.init(jax.random.PRNGKey(0), x_)
      variables = jax.tree.map(lambda v: v + 0.5, variables)
      grads = jax.grad(lambda v: jnp.sum(jnp.square(
          layer.apply(v, x_).astype(jnp.float32))))(variables)
      b = np.asarray(variables['params']['b'])
      self.assertEqual(grads['params']['b'].dtype, jnp.float32)
      expected = (2.0 * (np.asarray(x_, np.float32) + b)).sum((0, 1))
      self.assertAllClose(grads['params']['b'], expected, rtol=tol)


if __name__ == '__main__':
  absltest.main()
