"""Summary names as Pax writes them, for quantized and sparse layers.

Pax's `BaseLayer.add_summary` numbers a summary only when the name without
its type suffix is taken, so a name written again (in the same call, or fed
back in with an earlier apply's `summaries`) keeps `<name>_<type>` and holds
the latest value.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.quantization import linears as qlinears
from praxis.layers.quantization import quantization_hparams as qhp
from praxis.layers.quantization.sparsity import sparsity_hparams as shp
from praxis.layers.quantization.sparsity import sparsity_modes

NON_TRAINABLE = base_layer.NON_TRAINABLE
SUMMARIES = base_layer.SUMMARIES
instantiate = base_layer.instantiate


class _Twice(base_layer.BaseLayer):

  def __call__(self, x):
    self.add_summary('m', jnp.sum(x))
    self.add_summary('m', 10.0 * jnp.sum(x))
    return x


def _apply_train(layer, variables, x):
  ctx = base_layer.JaxContext.HParams(do_eval=False, summary_verbosity=4)
  with base_layer.JaxContext.new_context(hparams=ctx):
    return layer.apply(variables, x, mutable=True)[1]


class SummaryNamesTest(test_utils.TestCase):

  def test_repeated_name_overwrites(self):
    layer = instantiate(pax_fiddle.Config(_Twice, name='t'))
    x = jnp.array([1.0, 2.0])
    variables = layer.init(jax.random.PRNGKey(0), x)
    got = _apply_train(layer, variables, x)[SUMMARIES]
    self.assertEqual(set(got), {'m_scalar'})
    self.assertAllClose(got['m_scalar'], 30.0)

  def test_unsuffixed_name_taken_gets_number(self):
    layer = instantiate(pax_fiddle.Config(_Twice, name='t'))
    x = jnp.array([1.0, 2.0])
    variables = dict(layer.init(jax.random.PRNGKey(0), x))
    variables[SUMMARIES] = {'m': jnp.zeros(())}
    got = _apply_train(layer, variables, x)[SUMMARIES]
    self.assertEqual(set(got), {'m', 'm1_scalar'})

  def test_quantized_linear_step_count_fed_back(self):
    p = pax_fiddle.Config(
        qlinears.Linear, name='q', input_dims=3, output_dims=2,
        quantization=qhp.QuantizationParams(
            quantization_type=qhp.QuantizationType.AQT,
            mode=qhp.QuantizationMode.TRAINING,
            weight_params=qhp.WeightQuantizationParams(
                precision=8, use_step_count=True),
        ),
    )
    layer = instantiate(p)
    x = np.ones((2, 3), np.float32)
    state = layer.init(jax.random.PRNGKey(1), x)
    for step in range(3):
      state = _apply_train(layer, state, x)
      self.assertEqual(sorted(state[SUMMARIES]), ['step_count_scalar'])
      # The summary holds the count the call read; the variable moved on.
      self.assertEqual(int(state[SUMMARIES]['step_count_scalar']), step)
      self.assertEqual(int(state[NON_TRAINABLE]['step_count']), step + 1)

  def test_sparse_linear_mask_update_count_fed_back(self):
    p = pax_fiddle.Config(
        qlinears.Linear, name='s', input_dims=4, output_dims=4,
        sparsity=pax_fiddle.Config(
            shp.SparsityHParams,
            sparsity_type=shp.SparsityType.STRUCTURED_NM,
            weight_params=shp.WeightSparsityParams(prune_rate=(2, 4)),
            mode=pax_fiddle.Config(
                sparsity_modes.FewShotMode, num_shots=3,
                mask_update_interval=1, target_step=0),
        ),
    )
    layer = instantiate(p)
    x = np.ones((2, 4), np.float32)
    state = layer.init(jax.random.PRNGKey(2), x)
    for step in range(4):
      state = _apply_train(layer, state, x)
      names = [k for k in state[SUMMARIES] if 'mask_update_count' in k]
      self.assertEqual(names, ['mask_update_count_scalar'])
      # Three shots, one per step from step 0: the count stops at 3.
      self.assertEqual(
          int(state[SUMMARIES]['mask_update_count_scalar']), min(step + 1, 3))


if __name__ == '__main__':
  absltest.main()
