"""Test helpers for Pax layers, without TensorFlow.

Public names: TestCase, to_np, apply, init_and_apply.

Example:

  class LinearTest(test_utils.TestCase):

    def test_output(self):
      layer = base_layer.instantiate(cfg)
      y, variables = test_utils.init_and_apply(layer, x)
      self.assertAllClose(y, x @ variables['params']['w'])
"""

from typing import Any

from absl.testing import parameterized
import jax
import numpy as np
from praxis import base_layer
from praxis import py_utils


def to_np(x: Any) -> Any:
  """Every array leaf of `x` as a numpy array."""
  return jax.tree.map(np.asarray, x)


class TestCase(parameterized.TestCase):
  """An absltest case with numpy assertions and a seeded numpy `rng`."""

  def setUp(self):
    super().setUp()
    self.rng = np.random.default_rng(seed=12345)

  def assertAllClose(self, x: Any, y: Any, atol: float = 1e-6,
                     rtol: float = 1e-6, msg: str = '') -> None:
    """Checks that two (nested) arrays are elementwise close."""
    x_leaves, x_tree = jax.tree.flatten(to_np(x))
    y_leaves, y_tree = jax.tree.flatten(to_np(y))
    self.assertEqual(x_tree, y_tree, msg)
    for a, b in zip(x_leaves, y_leaves):
      np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=msg)

  def assertNotAllClose(self, x: Any, y: Any, atol: float = 1e-6,
                        rtol: float = 1e-6, msg: str = '') -> None:
    """Checks that two arrays differ somewhere by more than the tolerance."""
    if np.allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=rtol):
      self.fail(msg or f'Arrays are unexpectedly close:\n{x}\n{y}')

  def assertArraysEqual(self, x: Any, y: Any, msg: str = '') -> None:
    """Checks that two (nested) arrays are exactly equal."""
    x_leaves, x_tree = jax.tree.flatten(to_np(x))
    y_leaves, y_tree = jax.tree.flatten(to_np(y))
    self.assertEqual(x_tree, y_tree, msg)
    for a, b in zip(x_leaves, y_leaves):
      np.testing.assert_array_equal(a, b, err_msg=msg)


def init_and_apply(layer: base_layer.BaseLayer, *args: Any, seed: int = 0,
                   do_eval: bool = False, **kwargs: Any) -> tuple[Any, Any]:
  """Initialises `layer` and runs it once on the inputs.

  Args:
    layer: An instantiated layer.
    *args: Its inputs.
    seed: Seed of the `params` and `random` streams.
    do_eval: Run in eval mode.
    **kwargs: Keyword inputs.

  Returns:
    (outputs, variables).
  """
  k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
  rngs = {base_layer.PARAMS: k1, base_layer.RANDOM: k2}
  context = base_layer.JaxContext.HParams(do_eval=do_eval)
  with base_layer.JaxContext.new_context(hparams=context):
    variables = layer.init(rngs, *args, **kwargs)
    outputs = layer.apply(variables, *args, rngs={base_layer.RANDOM: k2},
                          **kwargs)
  return outputs, variables


def apply(layer: base_layer.BaseLayer, variables: Any, *args: Any,
          method: Any = None, seed: int = 0, **kwargs: Any) -> Any:
  """Runs `layer` with `variables` (and a seeded `random` stream)."""
  rngs = {base_layer.RANDOM: jax.random.PRNGKey(seed)}
  return layer.apply(variables, *args, method=method, rngs=rngs, **kwargs)


NestedMap = py_utils.NestedMap
