"""N:M masks really have the N:M pattern; bad patterns fail clearly."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers.quantization import linears
from praxis.layers.quantization.sparsity import sparsity
from praxis.layers.quantization.sparsity import sparsity_hparams as sh
from praxis.layers.quantization.sparsity import sparsity_modes


class NMPatternTest(test_utils.TestCase):

  @parameterized.product(nm=[(1, 4), (2, 4), (2, 8)], order=['R', 'C'])
  def test_mask_keeps_n_largest_of_each_group(self, nm, order):
    n, m = nm
    x = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    mask = np.asarray(sparsity.get_sparsity_mask(x, n, m, order=order))
    rows = x if order == 'R' else x.T
    kept = mask if order == 'R' else mask.T
    groups = np.abs(rows).reshape(-1, m)
    kept = kept.reshape(-1, m)
    self.assertTrue(np.all(kept.sum(axis=1) == n))
    # Each kept value is >= every pruned value of its group.
    lowest_kept = np.where(kept, groups, np.inf).min(axis=1)
    highest_pruned = np.where(kept, -np.inf, groups).max(axis=1)
    self.assertTrue(np.all(lowest_kept >= highest_pruned))

  def test_m_must_divide(self):
    with self.assertRaisesRegex(ValueError, 'divisible by m'):
      sparsity.get_sparsity_mask(jnp.ones((3, 5)), 2, 4)

  def test_n_above_m(self):
    with self.assertRaisesRegex(ValueError, 'N must be lower than M'):
      sparsity.get_sparsity_mask(jnp.ones((4, 4)), 5, 4)

  def test_prune_rate_type(self):
    with self.assertRaisesRegex(ValueError, 'prune_rate'):
      sh.SparsityHParams(weight_params=sh.WeightSparsityParams(0.5))

  def test_sparse_linear_weights_are_2_4(self):
    p = pax_fiddle.Config(
        linears.Linear, name='l', input_dims=8, output_dims=4,
        quantization=None,
        sparsity=sh.SparsityHParams(
            sparsity_type=sh.SparsityType.STRUCTURED_NM,
            weight_params=sh.WeightSparsityParams(prune_rate=(2, 4)),
            mode=sparsity_modes.TrainingMode(target_step=0)))
    layer = base_layer.instantiate(p)
    x = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(0), x)
      out, state = layer.apply(variables, x, mutable=['non_trainable'])
    mask = np.asarray(state['non_trainable']['w_sparsity_mask'])
    w = np.asarray(variables['params']['w'])
    # Order C: groups of 4 run down each column (the contraction).
    self.assertTrue(np.all(mask.T.reshape(-1, 4).sum(axis=1) == 2))
    self.assertAllClose(out, x @ (w * mask), atol=1e-5)


if __name__ == '__main__':
  absltest.main()
