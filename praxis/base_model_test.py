"""Tests of praxis.base_model."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import base_model
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils


class Scale(base_model.BaseModel):
  """predictions = x * w; loss = mean((predictions - y)**2)."""

  def setup(self):
    self.create_variable('w', base_layer.WeightHParams(
        shape=[2], init=base_layer.WeightInit.Constant(1.5)))

  def compute_predictions(self, input_batch):
    return input_batch.x * self.theta.w

  def compute_loss(self, predictions, input_batch):
    err = jnp.square(predictions - input_batch.y)
    return {'loss': (jnp.mean(err), jnp.array(2.0))}, {'err': err.sum(-1)}


class BaseModelTest(test_utils.TestCase):

  def test_call_is_loss_of_predictions(self):
    model = base_layer.instantiate(pax_fiddle.Config(Scale, name='m'))
    batch = py_utils.NestedMap(
        x=self.np_rng.normal(size=(3, 2)).astype(np.float32),
        y=self.np_rng.normal(size=(3, 2)).astype(np.float32))
    (metrics, per_example), _ = test_utils.init_and_apply(model, batch)
    err = (batch.x * 1.5 - batch.y) ** 2
    self.assertAllClose(metrics['loss'][0], err.mean())
    self.assertAllClose(metrics['loss'][1], 2.0)
    self.assertAllClose(per_example['err'], err.sum(-1))

  def test_undefined_methods_name_the_model(self):
    model = base_layer.instantiate(pax_fiddle.Config(Scale, name='m'))
    batch = py_utils.NestedMap(x=jnp.ones((1, 2)), y=jnp.ones((1, 2)))
    variables = model.init(jax.random.PRNGKey(0), batch)
    for method in ('decode',):
      with self.assertRaisesRegex(NotImplementedError, 'Scale must define'):
        model.apply(variables, batch, method=getattr(model, method))
    with self.assertRaisesRegex(NotImplementedError, 'process_decode_out'):
      model.process_decode_out(None, py_utils.NestedMap())
    bare = base_layer.instantiate(
        pax_fiddle.Config(base_model.BaseModel, name='bare'))
    with self.assertRaisesRegex(NotImplementedError, 'compute_predictions'):
      bare.init(jax.random.PRNGKey(0), batch)


if __name__ == '__main__':
  absltest.main()
