"""Test helpers for Pax layers, without TensorFlow.

Public names: TestCase, to_np, to_tf_nmap, unshard_input_nmap, apply,
init_and_apply, get_tfevent_log_dirs, get_tfevent_scalars, and Pax's
replace_jax_*_vars_to_tf (a layer's variables as its Lingvo counterpart names
them). Only to_tf_nmap (and the light-conv and conformer replace_jax_ helpers,
which call it) needs TensorFlow, imported when called; get_tfevent_scalars
needs tensorboard.

Example:

  class LinearTest(test_utils.TestCase):

    def test_output(self):
      layer = base_layer.instantiate(cfg)
      y, variables = test_utils.init_and_apply(layer, x)
      self.assertAllClose(y, x @ variables['params']['w'])
"""

import math
import os
from typing import Any
import zlib

from absl.testing import parameterized
import jax
from jax import numpy as jnp
import numpy as np
from praxis import _lingvo_var_maps
from praxis import base_layer
from praxis import py_utils

NestedMap = py_utils.NestedMap


def _is_array_like(x: Any) -> bool:
  """An array, a scalar, or a (nested) list/tuple of numbers."""
  if isinstance(x, (dict, py_utils.NestedMap)):
    return False
  try:
    return np.asarray(x).dtype != object
  except (TypeError, ValueError):
    return False


def to_np(x: Any) -> Any:
  """A tensor as a float32 numpy array (as Pax); a nested structure leafwise.

  Leaves of a structure keep their dtype (integer ids stay integers).
  """
  if _is_array_like(x):
    return np.asarray(x, dtype=np.float32)
  return jax.tree.map(np.asarray, x)


def unshard_input_nmap(x_nmap: NestedMap) -> NestedMap:
  """[devices, batch, ...] leaves -> [devices * batch, ...]."""
  return jax.tree.map(
      lambda x: jnp.reshape(x, (x.shape[0] * x.shape[1],) + x.shape[2:]),
      x_nmap)


_TF_DTYPES = ('float32', 'float64', 'int32', 'int64', 'uint32')


def to_tf_nmap(x_nmap: Any) -> Any:
  """Leaves of a (nested) structure as TF constants of the same dtype.

  For tests that compare with a TensorFlow implementation; TensorFlow is
  imported here, so the rest of this module does not need it.

  Args:
    x_nmap: A NestedMap (or any nest) of arrays or numbers.

  Returns:
    The same structure with tf.Tensor leaves (float32, float64, int32, int64
    or uint32, as the leaf's numpy dtype).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def to_tf(x: Any) -> Any:
    x = np.asarray(x)
    if x.dtype.name not in _TF_DTYPES:
      raise ValueError(f'to_tf_nmap: leaf dtype {x.dtype} is not one of '
                       f'{_TF_DTYPES}')
    return tf.constant(x, dtype=x.dtype.name)

  return tf.nest.map_structure(to_tf, x_nmap)


def _dtype(x: Any) -> Any:
  return getattr(x, 'dtype', None) or np.asarray(x).dtype


class TestCase(parameterized.TestCase):
  """An absltest case with Pax's numpy assertions and seeded numpy generators.

  The assertions take arrays, as Pax's do, or two nested structures of the
  same shape (NestedMap, dict, list), compared leaf by leaf. `rng()` is
  Pax's: a `numpy.random.RandomState` seeded by the test method's name;
  `np_rng` is a `numpy.random.Generator` with a fixed seed.
  """

  def setUp(self):
    super().setUp()
    self.np_rng = np.random.default_rng(seed=12345)
    # As Pax: adler32 of the test's name (stable across runs and processes,
    # unlike hash(); an int32 as RandomState needs).
    self._rng = np.random.RandomState(
        zlib.adler32(self._testMethodName.encode()))

  def rng(self) -> np.random.RandomState:
    """This test's RandomState (seeded by the test method's name)."""
    return self._rng

  def _pairs(self, x: Any, y: Any, msg: str) -> list[tuple[Any, Any]]:
    if _is_array_like(x) and _is_array_like(y):
      return [(np.asarray(x), np.asarray(y))]
    x_leaves, x_tree = jax.tree.flatten(x)
    y_leaves, y_tree = jax.tree.flatten(y)
    self.assertEqual(x_tree, y_tree, msg)
    return [(np.asarray(a), np.asarray(b)) for a, b in zip(x_leaves, y_leaves)]

  def assertDtypesMatch(self, x: Any, y: Any) -> None:
    """Checks that x and y have the same (canonical JAX) dtype."""
    self.assertEqual(jax.dtypes.canonicalize_dtype(_dtype(x)),
                     jax.dtypes.canonicalize_dtype(_dtype(y)))

  def assertAllClose(self, x: Any, y: Any, check_dtypes: bool = True,
                     rtol: float = 1e-5, atol: float = 1e-5,
                     msg: str = '', **kwargs: Any) -> None:
    """Checks that x and y are elementwise close (bfloat16 compared in f32)."""
    kwargs.setdefault('err_msg', msg)
    for a, b in self._pairs(x, y, msg):
      if check_dtypes:
        self.assertDtypesMatch(a, b)
      a = a.astype(np.float32) if a.dtype == jnp.bfloat16 else a
      b = b.astype(np.float32) if b.dtype == jnp.bfloat16 else b
      np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, **kwargs)

  def assertNotAllClose(self, x: Any, y: Any, check_dtypes: bool = True,
                        rtol: float = 1e-5, atol: float = 1e-5,
                        msg: str = '', **kwargs: Any) -> None:
    """Checks that x and y differ somewhere by more than the tolerance."""
    try:
      self.assertAllClose(x, y, check_dtypes=check_dtypes, rtol=rtol,
                          atol=atol, **kwargs)
    except AssertionError:
      return
    self.fail(msg or f'The two values are close at all elements:\n{x}\n{y}')

  def assertArraysEqual(self, x: Any, y: Any, check_dtypes: bool = True,
                        msg: str = '', **kwargs: Any) -> None:
    """Checks that x and y are exactly equal."""
    kwargs.setdefault('err_msg', msg)
    for a, b in self._pairs(x, y, msg):
      if check_dtypes:
        self.assertDtypesMatch(a, b)
      np.testing.assert_array_equal(a, b, **kwargs)

  def assertNear(self, f1: Any, f2: Any, err: float, msg: str | None = None
                 ) -> None:
    """Checks that |f1 - f2| <= err (or f1 == f2, e.g. both inf)."""
    f1, f2 = float(np.asarray(f1)), float(np.asarray(f2))
    self.assertTrue(f1 == f2 or math.fabs(f1 - f2) <= err,
                    f'{f1} != {f2} +/- {err}' + (f' ({msg})' if msg else ''))


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


def apply(layer: base_layer.BaseLayer, layer_vars: Any, method: Any,
          *args: Any, context_p: Any = None, **kwargs: Any) -> Any:
  """`layer.apply(layer_vars, *args, method=method, **kwargs)` in a new
  JaxContext (`context_p`: its JaxContext.HParams, None for the defaults)."""
  with base_layer.JaxContext.new_context(hparams=context_p):
    return layer.apply(layer_vars, *args, method=method, **kwargs)


def get_tfevent_log_dirs(root: Any) -> list[str]:
  """The folders under `root` (relative to it) that hold TensorBoard event
  files (`events.out.tfevents*`), among those without subfolders."""
  found = []
  for folder, subfolders, files in os.walk(os.fspath(root)):
    if not subfolders and any(
        f.startswith('events.out.tfevents') for f in files):
      found.append(os.path.relpath(os.path.normpath(folder), root))
  return found


def get_tfevent_scalars(root: Any) -> dict[str, float]:
  """Tag -> value of the scalars in the event files under `root` (the last
  one written for a tag wins).

  Reads TF2-style scalar summaries (a tensor with the 'scalars' plugin, as
  Pax writes them) and the scalar `simple_value`s that tensorboardX writes
  (this project's summaries). Needs the `tensorboard` package (the test
  extra).
  """
  try:
    # pylint: disable=g-import-not-at-top
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.util import tensor_util
    # pylint: enable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('get_tfevent_scalars needs the tensorboard package '
                      '(pip install tensorboard).') from e
  scalars = {}
  for folder in get_tfevent_log_dirs(root):
    path = os.path.join(os.fspath(root), folder)
    for name in sorted(os.listdir(path)):
      if not name.startswith('events.out.tfevents'):
        continue
      loader = event_file_loader.EventFileLoader(os.path.join(path, name))
      for event in loader.Load():
        for value in event.summary.value:
          if value.HasField('simple_value'):
            scalars[value.tag] = float(value.simple_value)
          elif (value.metadata.plugin_data.plugin_name == 'scalars'
                and value.HasField('tensor')):
            scalars[value.tag] = tensor_util.make_ndarray(value.tensor).item()
  return scalars


# Pax's helpers that lay out a layer's variables as its Lingvo counterpart
# names them (for tests that compare the two); see `_lingvo_var_maps`.
replace_jax_transformer_ffwd_vars_to_tf = _lingvo_var_maps.transformer_ffwd
replace_jax_attention_vars_to_tf = _lingvo_var_maps.attention
replace_jax_single_shard_full_softmax_vars_to_tf = (
    _lingvo_var_maps.single_shard_full_softmax)
replace_jax_simple_full_softmax_vars_to_tf = (
    _lingvo_var_maps.simple_full_softmax)
replace_jax_conv_bnact_vars_to_tf = _lingvo_var_maps.conv_bnact
replace_jax_res_net_block_vars_to_tf = _lingvo_var_maps.res_net_block
replace_jax_res_net_vars_to_tf = _lingvo_var_maps.res_net
replace_jax_light_conv_vars_to_tf = _lingvo_var_maps.light_conv
replace_jax_conformer_layer_vars_to_tf = _lingvo_var_maps.conformer_layer


NestedMap = py_utils.NestedMap
