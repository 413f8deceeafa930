"""Tests of the vector quantizers against numpy and the real Pax."""

import json
import os

from absl.testing import absltest
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import quantizer


_REF = os.path.join(os.path.dirname(__file__), 'testdata', 'vision_ref.npz')


def _ref_case(name):
  """(fields, variables, outputs, data) of a case of vision_ref.npz (written
  by testdata/make_ref_vision.py under the real Pax)."""
  ref = np.load(_REF)
  fields = json.loads(str(ref['meta']))[name]
  variables, outputs = {}, {}
  for key in ref.files:
    if key.startswith(f'{name}/vars/'):
      variables[key[len(f'{name}/vars/'):]] = ref[key]
    elif key.startswith(f'{name}/out'):
      outputs[key[len(f'{name}/out'):].lstrip('/')] = ref[key]
  variables = traverse_util.unflatten_dict(variables, sep='/')
  return fields, variables, outputs, ref


def _np_nearest(latent, codebook):
  """Brute-force nearest entry: latent [N, G, H], codebook [V, G, H]."""
  n, g, _ = latent.shape
  codes = np.zeros((n, g), np.int64)
  for i in range(n):
    for j in range(g):
      d = [np.sum((latent[i, j] - codebook[v, j])**2)
           for v in range(codebook.shape[0])]
      codes[i, j] = int(np.argmin(d))
  return codes


def _normalize(x):
  return x / np.sqrt(np.sum(x * x, -1, keepdims=True) + 1e-12)


class QuantizeVectorTest(test_utils.TestCase):

  def test_nearest_codebook_entry_per_group(self):
    rng = np.random.default_rng(0)
    latent = rng.normal(size=(2, 5, 3, 4)).astype(np.float32)
    codebook = rng.normal(size=(7, 3, 4)).astype(np.float32)
    q, codes, onehot = quantizer.quantize_vector(latent, codebook)
    want = _np_nearest(latent.reshape(10, 3, 4), codebook).reshape(2, 5, 3)
    np.testing.assert_array_equal(np.asarray(codes), want)
    want_q = np.stack([codebook[want[..., j], j] for j in range(3)], axis=-2)
    self.assertAllClose(q, want_q)
    self.assertAllClose(onehot, np.eye(7)[want])

  def test_mismatched_shapes_are_named(self):
    with self.assertRaisesRegex(ValueError, 'does not match codebook'):
      quantizer.quantize_vector(jnp.zeros((2, 3, 4)), jnp.zeros((5, 3, 2)))


class VectorQuantizerTest(test_utils.TestCase):

  def _layer(self, **kwargs):
    p = pax_fiddle.Config(
        quantizer.VectorQuantizer, name='vq', num_latent_classes=6,
        latent_dim=4, beta=0.25, **kwargs)
    return base_layer.instantiate(p)

  def test_outputs_and_loss_match_numpy(self):
    rng = np.random.default_rng(1)
    z = rng.normal(size=(2, 3, 4)).astype(np.float32)
    paddings = np.array([[0, 0, 1], [0, 0, 0]], np.float32)
    vq = self._layer(num_groups=2)
    variables = vq.init(jax.random.PRNGKey(0), z, paddings)
    out = vq.apply(variables, z, paddings)
    w = _normalize(np.asarray(variables['params']['w']))  # [6, 2, 2]
    mask = 1.0 - paddings
    zn = _normalize((z * mask[..., None]).reshape(2, 3, 2, 2))
    codes = _np_nearest(zn.reshape(6, 2, 2), w).reshape(2, 3, 2)
    zq = np.stack([w[codes[..., j], j] for j in range(2)], -2)
    zq = zq.reshape(2, 3, 4) * mask[..., None]
    # As in Pax, the loss compares the masked z before the per-group
    # normalization with z_q.
    zflat = z * mask[..., None]
    np.testing.assert_array_equal(np.asarray(out.z_codes),
                                  codes * mask[..., None])
    self.assertAllClose(out.z_q, zq, atol=1e-6)
    per_frame = np.mean((zflat - zq)**2, -1)
    want_loss = 1.25 * np.sum(per_frame) / (np.sum(mask) + 1e-7)
    self.assertAllClose(out.loss, want_loss, rtol=1e-5)

  def test_straight_through_gradient(self):
    rng = np.random.default_rng(2)
    z = rng.normal(size=(1, 4, 4)).astype(np.float32)
    paddings = np.zeros((1, 4), np.float32)
    vq = self._layer(normalize_latent_vector=False, normalize_codebook=False)
    variables = vq.init(jax.random.PRNGKey(0), z, paddings)
    cot = rng.normal(size=z.shape).astype(np.float32)

    def f(z):
      return jnp.sum(vq.apply(variables, z, paddings).z_q * cot)

    # d z_q / d z is the identity: the gradient passes straight through.
    self.assertAllClose(jax.grad(f)(z), cot)

  def test_bad_config_names_the_field(self):
    with self.assertRaisesRegex(ValueError, '`beta`'):
      p = pax_fiddle.Config(quantizer.VectorQuantizer, name='vq',
                            num_latent_classes=4, latent_dim=4)
      base_layer.instantiate(p).init(
          jax.random.PRNGKey(0), jnp.zeros((1, 2, 4)), jnp.zeros((1, 2)))


class RandomVectorQuantizerTest(test_utils.TestCase):

  def test_codes_of_the_projection_and_no_gradient(self):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(2, 6, 5)).astype(np.float32)
    paddings = np.zeros((2, 6), np.float32)
    p = pax_fiddle.Config(
        quantizer.RandomVectorQuantizer, name='rq', latent_dim=5,
        projection_dim=8, num_latent_classes=9, num_groups=2,
        low_rank_codebook=False)
    rq = base_layer.instantiate(p)
    variables = rq.init(jax.random.PRNGKey(0), z, paddings)
    params = variables['params']
    self.assertEqual(params['random_codebook'].shape, (9, 2, 4))
    out = rq.apply(variables, z, paddings)
    proj = z @ np.asarray(params['random_proj']) + np.asarray(
        params['random_bias'])
    codes = _np_nearest(proj.reshape(12, 2, 4),
                        np.asarray(params['random_codebook']))
    np.testing.assert_array_equal(np.asarray(out.z_codes).reshape(12, 2),
                                  codes)
    grad = jax.grad(lambda z: jnp.sum(rq.apply(variables, z, paddings).z_q))
    self.assertAllClose(grad(z), np.zeros_like(z))

  def test_stacking_halves_time(self):
    z = np.ones((1, 6, 3), np.float32)
    paddings = np.zeros((1, 6), np.float32)
    p = pax_fiddle.Config(
        quantizer.RandomVectorQuantizer, name='rq', latent_dim=3,
        projection_dim=4, num_latent_classes=5, stack_ratio=2,
        low_rank_codebook=True)
    rq = base_layer.instantiate(p)
    variables = rq.init(jax.random.PRNGKey(0), z, paddings)
    self.assertEqual(variables['params']['random_proj'].shape, (6, 4))
    self.assertEqual(variables['params']['random_codebook'].shape, (5, 4))
    out = rq.apply(variables, z, paddings)
    self.assertEqual(out.z_q.shape, (1, 3, 4))
    self.assertEqual(out.paddings.shape, (1, 3))


class RealPaxTest(test_utils.TestCase):
  """Same seed, config and inputs as the real Pax: same variables, outputs."""

  def _check(self, name, cls):
    fields, want_vars, want_out, ref = _ref_case(name)
    layer = base_layer.instantiate(
        pax_fiddle.Config(cls, name=name, **fields))
    args = (ref['z'], ref['paddings'])
    # Pax's JAX (0.4.26) drew random bits with threefry_partitionable off.
    with jax.threefry_partitionable(False):
      variables = layer.init(jax.random.PRNGKey(1234), *args)
    jax.tree.map(lambda a, b: self.assertAllClose(a, b, atol=1e-6),
                 jax.device_get(variables), want_vars)
    out = layer.apply(variables, *args)
    self.assertEqual(set(out.keys()), set(want_out))
    for key, want in want_out.items():
      self.assertAllClose(np.asarray(out[key], want.dtype), want, atol=1e-5,
                          err_msg=key)

  def test_vector_quantizer(self):
    self._check('vq', quantizer.VectorQuantizer)

  def test_random_vector_quantizer(self):
    self._check('rq', quantizer.RandomVectorQuantizer)


if __name__ == '__main__':
  absltest.main()
