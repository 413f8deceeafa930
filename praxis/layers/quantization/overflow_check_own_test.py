"""Overflow-checking layers log formatted warnings, in Pax's order."""

from absl.testing import absltest
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import normalizations
from praxis.layers import transformers
from praxis.layers.quantization import overflow_check


def _messages(logs):
  return [r.msg for r in logs.records if r.msg.startswith('Overflow in:')]


class OverflowCheckTest(absltest.TestCase):

  def test_warning_names_layer_and_range(self):
    ff = base_layer.instantiate(pax_fiddle.Config(
        overflow_check.FeedForwardOverflowCheck, name='ff', input_dims=2,
        output_dims=1, has_bias=False,
        activation_tpl=pax_fiddle.Config(
            activations.Identity),
        overflow_limits=overflow_check.OverflowLimits(max_val=10.0,
                                                      min_val=-10.0)))
    x = jnp.array([[1.0, 2.0]])
    variables = {'params': {'linear': {'w': jnp.array([[3.0], [4.0]])}}}
    with self.assertLogs(level='WARNING') as logs:
      jax.block_until_ready(ff.apply(variables, x))  # 11 > 10.
    self.assertEqual(_messages(logs),
                     ['Overflow in: FeedForward, ff, max_val: 11.0, '
                      'min_val: 11.0'])
    with self.assertNoLogs(level='WARNING'):
      jax.block_until_ready(ff.apply(variables, x / 2))  # 5.5: in range.

  def test_gated_feed_forward_checks_the_gate_first(self):
    limits = overflow_check.OverflowLimits(max_val=-1.0, min_val=1.0)
    p = pax_fiddle.Config(transformers.TransformerFeedForward, name='tff',
                          input_dims=4, hidden_dims=8,
                          use_gated_activation=True)
    p.fflayer_tpl = pax_fiddle.Config(
        overflow_check.FeedForwardOverflowCheck, overflow_limits=limits)
    layer = base_layer.instantiate(p)
    x = jnp.ones((1, 2, 4))
    variables = layer.init(jax.random.PRNGKey(0), x)
    with self.assertLogs(level='WARNING') as logs:
      jax.block_until_ready(layer.apply(variables, x))
    names = [m.split(', ')[1] for m in _messages(logs)]
    self.assertEqual(names, ['ffn_layer1_gate', 'ffn_layer1', 'ffn_layer2'])


class LayerNormBroadcastTest(absltest.TestCase):

  def test_last_dim_of_one_broadcasts(self):
    # One feature normalizes to 0, so the output is the bias, broadcast to
    # `dim` (Pax's LayerNorm does the same).
    ln = base_layer.instantiate(pax_fiddle.Config(
        normalizations.LayerNorm, name='ln', dim=3))
    x = jnp.arange(4.0).reshape(2, 2, 1)
    bias = jnp.array([0.5, -1.0, 2.0])
    variables = {'params': {'scale': jnp.zeros(3), 'bias': bias}}
    out = ln.apply(variables, x)
    np.testing.assert_allclose(out, np.broadcast_to(bias, (2, 2, 3)),
                               atol=1e-6)
    with self.assertRaisesRegex(ValueError, 'do not end in `dim`=3'):
      ln.apply(variables, jnp.ones((2, 2)))


if __name__ == '__main__':
  absltest.main()
