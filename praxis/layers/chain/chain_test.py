"""Chain: the argument stack, and the config helpers, on hand-derived values."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import chain

Config = pax_fiddle.Config


class _AddThenKeep(base_layer.BaseLayer):
  """(a, b) -> a + b: consumes two arguments, returns one."""

  def __call__(self, a, b):
    return a + b


class _Times(base_layer.BaseLayer):
  factor: float = 2.0

  def __call__(self, x, *, scale_by=1.0):
    return x * self.factor * scale_by


def _run(cfg, *args, **kwargs):
  layer = base_layer.instantiate(cfg.set(name='c'))
  variables = layer.init(jax.random.PRNGKey(0), *args, **kwargs)
  return layer.apply(variables, *args, **kwargs), variables


class CallChainTest(absltest.TestCase):

  def test_outputs_replace_only_as_many_leading_arguments(self):
    # (1, 2, 10) -add-> (3, 2, 10) -times-> (6, 2, 10) -add-> (8, 2, 10):
    # one output replaces one argument; the consumed 2 stays on the stack.
    cfg = chain.chain(Config(_AddThenKeep), Config(_Times),
                      Config(_AddThenKeep))
    out, _ = _run(cfg, jnp.float32(1), jnp.float32(2), jnp.float32(10))
    self.assertEqual([float(v) for v in out], [8.0, 2.0, 10.0])

  def test_keyword_only_goes_to_layers_that_name_it(self):
    cfg = chain.chain(Config(_Times), Config(activations.Identity))
    out, _ = _run(cfg, jnp.float32(3), scale_by=jnp.float32(5))
    self.assertEqual(float(out), 3 * 2 * 5)

  def test_empty_chain_and_none_layers(self):
    out, _ = _run(chain.chain(None, chain.chain()), jnp.ones(2))
    np.testing.assert_array_equal(out, np.ones(2))

  def test_too_few_arguments_is_named(self):
    with self.assertRaisesRegex(ValueError, 'needs 2 positional arguments'):
      _run(chain.chain(Config(_AddThenKeep)), jnp.ones(2))


class ExtensionsTest(absltest.TestCase):

  def test_residual_padding_and_copies(self):
    x = jnp.asarray([[[1.0], [2.0]], [[3.0], [4.0]]])
    paddings = jnp.asarray([[0.0, 1.0], [0.0, 0.0]])
    # add_residual(pad): x * (1 - padding) + x.
    cfg = chain.copy_n_times(2, chain.add_residual(chain.apply_padding()))
    (out, out_pad), _ = _run(cfg, x, paddings)
    once = np.asarray(x) * (1 - np.asarray(paddings))[..., None] + x
    twice = once * (1 - np.asarray(paddings))[..., None] + once
    np.testing.assert_allclose(out, twice)
    np.testing.assert_array_equal(out_pad, paddings)

  def test_names_are_made_unique_and_weights_separate(self):
    cfg = chain.copy_n_times(3, chain.feed_forward(2, 2))
    self.assertEqual([l.name for l in cfg.layers],
                     ['feedforward0', 'feedforward1', 'feedforward2'])
    _, variables = _run(cfg, jnp.ones((1, 2)))
    self.assertLen(variables['params'], 3)

  def test_dict_to_args_and_full_like(self):
    cfg = chain.chain(chain.dict_to_args('a', 'b'), Config(_AddThenKeep),
                      chain.full_like(7.0))
    # {'a', 'b'} -> (a, b) -> (a + b, b) -> (7, b).
    (out, rest), _ = _run(cfg, {'a': jnp.ones(2), 'b': jnp.ones(2)})
    np.testing.assert_array_equal(out, [7.0, 7.0])
    np.testing.assert_array_equal(rest, [1.0, 1.0])
    with self.assertRaisesRegex(ValueError, r"keys \['z'\]"):
      _run(chain.chain(chain.dict_to_args('z')), {'a': jnp.ones(2)})

  def test_repeat_scans_the_chain(self):
    cfg = chain.repeat(3, Config(_Times, factor=2.0), chain.apply_padding())
    (out, _), _ = _run(cfg, jnp.ones((1, 2, 1)), jnp.zeros((1, 2)))
    np.testing.assert_allclose(out, np.full((1, 2, 1), 8.0))


if __name__ == '__main__':
  absltest.main()
