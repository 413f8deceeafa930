"""BiTemperedLoss: the real Pax 1.4 (via jax_bitempered_loss), numpy, hand."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import losses

NON_TRAINABLE = base_layer.NON_TRAINABLE
_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'losses_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))


def _layer(**fields):
  return base_layer.instantiate(pax_fiddle.Config(
      losses.BiTemperedLoss, name='loss', **fields))


def _eval_context():
  return base_layer.JaxContext.new_context(
      hparams=base_layer.JaxContext.HParams(do_eval=True))


class RealPaxTest(parameterized.TestCase):

  @parameterized.parameters(*sorted(_CONFIGS))
  def test_train_steps_eval_and_gradient(self, case):
    layer = _layer(**_CONFIGS[case]['fields'])
    logits, labels = _REF['logits'], _REF['labels']
    variables = layer.init(jax.random.PRNGKey(0), logits, labels)
    for step in range(8):
      out, updated = layer.apply(variables, logits, labels,
                                 mutable=[NON_TRAINABLE])
      variables = dict(variables, **updated)
      np.testing.assert_allclose(out, _REF[f'{case}/train'][step],
                                 rtol=1e-4, atol=1e-5, err_msg=f'step {step}')
    self.assertEqual(float(variables[NON_TRAINABLE]['count']), 8.0)
    with _eval_context():
      np.testing.assert_allclose(layer.apply(variables, logits, labels),
                                 _REF[f'{case}/eval'], rtol=1e-4, atol=1e-5)
      grad = jax.grad(
          lambda lg: jnp.sum(layer.apply(variables, lg, labels)))(logits)
    np.testing.assert_allclose(grad, _REF[f'{case}/grad'], rtol=1e-4,
                               atol=1e-5)


class NumpyTest(absltest.TestCase):

  def test_unit_temperatures_are_softmax_cross_entropy(self):
    logits, labels = _REF['logits'], _REF['labels']
    layer = _layer()
    variables = layer.init(jax.random.PRNGKey(0), logits, labels)
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    with _eval_context():
      out = layer.apply(variables, logits, labels)
    np.testing.assert_allclose(out, -(labels * log_p).sum(-1), rtol=1e-5)

  def test_schedule_by_hand(self):
    layer = _layer(t1=0.5, start_step=2, end_step=6)
    counts = jnp.arange(8.0)
    variables = layer.init(jax.random.PRNGKey(0), _REF['logits'],
                           _REF['labels'])
    weights = layer.apply(variables, counts,
                          method=layer.temperature_schedule)
    # 1 before start_step, then 1 - (count - 2) / 4 down to 0.
    np.testing.assert_allclose(weights, [1, 1, 1, 0.75, 0.5, 0.25, 0, 0])

  def test_end_before_start(self):
    layer = _layer(start_step=5, end_step=2)
    with self.assertRaisesRegex(ValueError, 'end_step'):
      layer.init(jax.random.PRNGKey(0), _REF['logits'], _REF['labels'])


if __name__ == '__main__':
  absltest.main()
