"""Fp8EinsumOp injected into Linear: FP8 numerics and delayed scaling."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import linears
from praxis.layers.injection import fp8_nvidia_gpu


class Fp8EinsumTest(test_utils.TestCase):

  @parameterized.parameters(True, False)
  def test_linear_with_fp8_einsum(self, direct):
    p = pax_fiddle.Config(
        linears.Linear, name='l', input_dims=4, output_dims=2,
        einsum_tpl=pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumOp,
                                     amax_history_length=4,
                                     use_direct_quant=direct))
    layer = base_layer.instantiate(p)
    # Values exactly representable in float8_e4m3fn (scale 1).
    x = jnp.array([[1.0, -2.0, 0.5, 3.0]], jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    w = jnp.array([[1.0, 0.25], [-1.5, 2.0], [4.0, -0.5], [0.75, 1.0]])
    variables['params']['w'] = w
    y = layer.apply(variables, x)
    self.assertAllClose(y, np.asarray(x) @ np.asarray(w), atol=1e-6)
    # The "gradient" of the fp8 metas is their new value: the amax history
    # records max|x| and max|w| of this step.
    grads = jax.grad(lambda v: jnp.sum(layer.apply(v, x)))(variables)
    meta = grads['params']['einsum']
    self.assertAllClose(meta['input_amax_history'][0], 3.0)
    self.assertAllClose(meta['kernel_amax_history'][0], 4.0)

  def test_operand_count(self):
    op = base_layer.instantiate(
        pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumOp, name='op'))
    x = jnp.ones((2, 3))
    variables = op.init(jax.random.PRNGKey(0), 'ab,bc->ac', x, jnp.ones((3, 4)))
    with self.assertRaisesRegex(ValueError, 'operands'):
      op.apply(variables, 'ab,bc->ac', x)


if __name__ == '__main__':
  absltest.main()
