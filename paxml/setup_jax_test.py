"""Tests of setup_jax: the JAX settings it applies."""

from unittest import mock

from absl.testing import absltest
import jax
from paxml import setup_jax


class SetupJaxTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self._prng = jax.config.jax_default_prng_impl
    self._filtering = jax.config.jax_traceback_filtering

  def tearDown(self):
    jax.config.update('jax_default_prng_impl', self._prng)
    jax.config.update('jax_traceback_filtering', self._filtering)
    super().tearDown()

  def test_hardware_rng_and_traceback_filtering(self):
    setup_jax.setup_jax(True, None, None, False, 'off')
    self.assertEqual(jax.config.jax_default_prng_impl, 'rbg')
    self.assertEqual(jax.config.jax_traceback_filtering, 'off')
    # An rbg key holds 4 words, the default threefry one 2.
    self.assertEqual(jax.random.key_data(jax.random.key(0)).shape, (4,))

  def test_distributed_options_reach_jax(self):
    options = setup_jax.JaxDistributedOptions('host:1234', 2, 1)
    with mock.patch.object(jax.distributed, 'initialize') as init:
      setup_jax.setup_jax(False, None, None, False, 'auto', True, options)
      init.assert_called_once_with('host:1234', 2, 1)
      setup_jax.setup_jax(False, None, None, False, 'auto', True, None)
      init.assert_called_with()

  def test_no_distributed_unless_asked(self):
    with mock.patch.object(jax.distributed, 'initialize') as init:
      setup_jax.setup_jax(False, None, None, False)
      init.assert_not_called()


if __name__ == '__main__':
  absltest.main()
