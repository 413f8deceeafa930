"""AutoMLSelect: the decision variable picks the branch."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import linears
from praxis.layers import searchable

NON_TRAINABLE = base_layer.NON_TRAINABLE


def _select(scales):
  return base_layer.instantiate(pax_fiddle.Config(
      searchable.AutoMLSelect, name='select', search_options_tpl=[
          pax_fiddle.Config(linears.Linear, input_dims=2, output_dims=2,
                            weight_init=base_layer.WeightInit.Constant(s))
          for s in scales]))


class AutoMLSelectTest(absltest.TestCase):

  def test_decision_picks_the_branch(self):
    layer = _select([0.5, 2.0, -1.0])
    x = jnp.array([[1.0, 3.0]])
    variables = layer.init(jax.random.PRNGKey(0), x)
    # Every branch has variables, whichever is chosen.
    self.assertLen(variables['params'], 3)
    self.assertEqual(variables[NON_TRAINABLE]['decision'].dtype, jnp.uint8)
    for i, scale in enumerate([0.5, 2.0, -1.0]):
      variables[NON_TRAINABLE]['decision'] = jnp.uint8(i)
      # A constant [2, 2] weight s gives s * (x0 + x1) in both outputs.
      np.testing.assert_allclose(layer.apply(variables, x),
                                 [[4.0 * scale] * 2])

  def test_needs_options(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        searchable.AutoMLSelect, name='select'))
    with self.assertRaisesRegex(AttributeError, 'search_options_tpl'):
      layer.init(jax.random.PRNGKey(0), jnp.ones([1, 2]))


if __name__ == '__main__':
  absltest.main()
