"""Tests of praxis.layers._softmax_xent against numpy math written here."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import _softmax_xent
from praxis.layers import embedding_softmax


def _np_log_softmax(logits: np.ndarray) -> np.ndarray:
  x = logits.astype(np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_xent(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
  """-log_softmax(logits)[id], 0 for an id outside [0, n)."""
  n = logits.shape[-1]
  valid = (ids >= 0) & (ids < n)
  picked = np.take_along_axis(_np_log_softmax(logits),
                              np.where(valid, ids, 0)[..., None], -1)[..., 0]
  return np.where(valid, -picked, 0.0)


def _np_xent_grad(logits, ids, g):
  """d(sum(g * xent)) / d logits = g * (softmax - one_hot), 0 off-range."""
  n = logits.shape[-1]
  valid = ((ids >= 0) & (ids < n))[..., None]
  one_hot = ids[..., None] == np.arange(n)
  return np.where(valid, g[..., None] * (
      np.exp(_np_log_softmax(logits)) - one_hot), 0.0)


class XentOfIdsTest(test_utils.TestCase):

  def _case(self, shape=(3, 5), n=11, scale=3.0):
    logits = (scale * self.np_rng.standard_normal(shape + (n,))).astype(
        np.float32)
    ids = self.np_rng.integers(0, n, shape)
    return logits, ids

  def test_value_is_minus_the_label_log_probability(self):
    logits, ids = self._case()
    got = _softmax_xent.xent_of_ids(jnp.asarray(logits), jnp.asarray(ids))
    self.assertEqual(got.dtype, jnp.float32)
    np.testing.assert_allclose(got, _np_xent(logits, ids), rtol=1e-5,
                               atol=1e-6)

  def test_value_equals_the_one_hot_product_bit_for_bit(self):
    logits, ids = self._case(shape=(4, 7), n=301)
    one_hot = jax.nn.one_hot(ids, 301, dtype=jnp.float32)
    log_probs = jax.nn.log_softmax(jnp.asarray(logits))
    product = -jnp.sum(log_probs * one_hot, axis=-1)
    np.testing.assert_array_equal(
        _softmax_xent.xent_of_ids(jnp.asarray(logits), jnp.asarray(ids)),
        product)

  def test_gradient_is_softmax_minus_one_hot(self):
    logits, ids = self._case()
    g = self.np_rng.standard_normal(ids.shape).astype(np.float32)
    grad = jax.grad(lambda l: jnp.sum(
        jnp.asarray(g) * _softmax_xent.xent_of_ids(l, jnp.asarray(ids))))(
            jnp.asarray(logits))
    np.testing.assert_allclose(grad, _np_xent_grad(logits, ids, g),
                               rtol=1e-5, atol=1e-6)

  def test_ids_outside_the_classes_give_zero_and_no_gradient(self):
    logits, ids = self._case(shape=(6,), n=5)
    ids[1], ids[4] = -1, 5
    xent, grad = jax.value_and_grad(
        lambda l: jnp.sum(_softmax_xent.xent_of_ids(l, jnp.asarray(ids))))(
            jnp.asarray(logits))
    per_example = _softmax_xent.xent_of_ids(jnp.asarray(logits),
                                            jnp.asarray(ids))
    self.assertEqual(float(per_example[1]), 0.0)
    self.assertEqual(float(per_example[4]), 0.0)
    np.testing.assert_array_equal(np.asarray(grad)[[1, 4]], 0.0)
    np.testing.assert_allclose(xent, _np_xent(logits, ids).sum(), rtol=1e-5)
    np.testing.assert_allclose(grad, _np_xent_grad(logits, ids,
                                                   np.ones(6, np.float32)),
                               rtol=1e-5, atol=1e-6)

  def test_masked_classes_give_a_finite_loss(self):
    logits = np.array([[1.0, -np.inf, 2.0, -np.inf]], np.float32)
    ids = np.array([2])
    xent, grad = jax.value_and_grad(
        lambda l: jnp.sum(_softmax_xent.xent_of_ids(l, jnp.asarray(ids))))(
            jnp.asarray(logits))
    # Over the two unmasked classes: log(e^1 + e^2) - 2.
    np.testing.assert_allclose(xent, np.log(np.e + np.e**2) - 2.0, rtol=1e-6)
    p0 = np.e / (np.e + np.e**2)  # p2 = 1 - p0, so p2 - 1 = -p0.
    np.testing.assert_allclose(grad, [[p0, 0.0, -p0, 0.0]], rtol=1e-5,
                               atol=1e-7)

  def test_forward_mode_and_hessian(self):
    logits, ids = self._case(shape=(2,), n=6, scale=1.0)
    t = self.np_rng.standard_normal(logits.shape).astype(np.float32)
    f = lambda l: jnp.sum(_softmax_xent.xent_of_ids(l, jnp.asarray(ids)))
    _, tangent = jax.jvp(f, (jnp.asarray(logits),), (jnp.asarray(t),))
    expected = np.sum(_np_xent_grad(logits, ids, np.ones(2)) * t)
    np.testing.assert_allclose(tangent, expected, rtol=1e-5, atol=1e-6)
    # The Hessian of each row's cross entropy is diag(p) - p p^T.
    hessian = jax.hessian(f)(jnp.asarray(logits))
    for row in range(2):
      p = np.exp(_np_log_softmax(logits[row]))
      np.testing.assert_allclose(hessian[row, :, row, :],
                                 np.diag(p) - np.outer(p, p), atol=1e-5)
    np.testing.assert_allclose(hessian[0, :, 1, :], 0.0, atol=1e-7)

  def test_vocabulary_sharded_over_devices(self):
    if jax.device_count() < 8:
      self.skipTest('needs 8 devices')
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(2, 4),
                             ('data', 'mdl'))
    spec = jax.sharding.PartitionSpec
    logits, ids = self._case(shape=(4, 6), n=64)
    sharded = jax.sharding.NamedSharding(mesh, spec('data', None, 'mdl'))
    step = jax.jit(jax.value_and_grad(
        lambda l, i: jnp.sum(_softmax_xent.xent_of_ids(l, i))),
                   out_shardings=(None, sharded))
    args = (jax.device_put(jnp.asarray(logits), sharded),
            jax.device_put(jnp.asarray(ids), jax.sharding.NamedSharding(
                mesh, spec('data', None))))
    xent, grad = step(*args)
    np.testing.assert_allclose(xent, _np_xent(logits, ids).sum(), rtol=1e-5)
    np.testing.assert_allclose(grad, _np_xent_grad(
        logits, ids, np.ones(ids.shape)), rtol=1e-5, atol=1e-6)
    # The classes stay split: no device gathers the whole logits.
    self.assertNotIn('all-gather', step.lower(*args).compile().as_text())

  def test_shape_mismatch_is_refused(self):
    with self.assertRaisesRegex(ValueError, r'ids of shape \(3,\)'):
      _softmax_xent.xent_of_ids(jnp.zeros((2, 5)), jnp.zeros((3,), jnp.int32))


class SoftmaxLayersUseIdsTest(test_utils.TestCase):

  def _softmax(self, **fields):
    p = pax_fiddle.Config(embedding_softmax.FullSoftmax, name='softmax',
                          input_dims=4, num_classes=9, **fields)
    return base_layer.instantiate(p)

  def _check(self, layer):
    x = jnp.asarray(self.np_rng.standard_normal((2, 8, 4)), jnp.float32)
    ids = self.np_rng.integers(0, 9, (2, 8, 1))
    weights = jnp.asarray(self.np_rng.uniform(0.0, 1.0, (2, 8, 1)),
                          jnp.float32)
    variables = layer.init(jax.random.PRNGKey(1), x, weights, class_ids=ids)

    def loss(v, x):
      return layer.apply(v, x, weights, class_ids=ids).total_xent

    total, grad_x = jax.value_and_grad(loss, argnums=1)(variables, x)
    # Against the same logits' cross entropy in numpy.
    logits = np.asarray(layer.apply(variables, x, method=layer.get_logits))
    w = np.asarray(weights)[..., 0]
    np.testing.assert_allclose(
        total, np.sum(w * _np_xent(logits, ids[..., 0])), rtol=1e-5)
    g_logits = _np_xent_grad(logits, ids[..., 0], w)
    out = layer.apply(variables, x, weights, class_ids=ids)
    if out.log_probs is not None:  # The chunked path keeps none.
      np.testing.assert_allclose(out.log_probs, _np_log_softmax(logits),
                                 rtol=1e-5, atol=1e-5)
    # The input gradient through the projection: g_logits @ W^T.
    w_proj = np.asarray(variables['params']['logits_ffn']['linear']['w'])
    np.testing.assert_allclose(grad_x, g_logits @ w_proj.T, rtol=1e-4,
                               atol=1e-6)

  def test_full_softmax(self):
    self._check(self._softmax())

  def test_chunked_full_softmax(self):
    self._check(self._softmax(chunk_size=3))


if __name__ == '__main__':
  absltest.main()
