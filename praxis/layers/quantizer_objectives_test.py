"""Codebook statistics against hand-computed values."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
from praxis.layers import quantizer_objectives


class ObjectivesTest(absltest.TestCase):

  def test_pplx_entropy_and_coverage(self):
    # One group; codes 0, 0, 1, 2 (and a padded 3): probs 1/2, 1/4, 1/4.
    codes = jnp.asarray([[[0], [0], [1], [2], [3]]])
    paddings = jnp.asarray([[0, 0, 0, 0, 1]])
    pplx, entropy, hist = quantizer_objectives.batch_pplx_entropy_from_codes(
        codes, 5, paddings=paddings)
    want_entropy = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25))
    np.testing.assert_allclose(entropy, want_entropy, rtol=1e-5)
    np.testing.assert_allclose(pplx, np.exp(want_entropy), rtol=1e-5)
    np.testing.assert_array_equal(hist, [[2, 1, 1, 0, 0]])
    np.testing.assert_allclose(
        quantizer_objectives.batch_codebook_coverage(codes, 5,
                                                     paddings=paddings),
        3 / 5)

  def test_scatter_nd_adds_repeats(self):
    out = quantizer_objectives.scatter_nd(
        jnp.asarray([[0, 1], [0, 1], [2, 0]]), jnp.asarray([1.0, 2.0, 5.0]),
        [3, 2])
    np.testing.assert_array_equal(out, [[0, 3], [0, 0], [5, 0]])


if __name__ == '__main__':
  absltest.main()
