"""Local and Transformer-XL attentions: against the real Pax 1.4 and numpy."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import attentions

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'local_attention_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))


def _layer(name):
  spec = _CONFIGS[name]
  return base_layer.instantiate(pax_fiddle.Config(
      getattr(attentions, spec['cls']), name='atten', **spec['fields']))


class RealPaxTest(parameterized.TestCase):
  """Same config and weights as the real Pax: same outputs and probs."""

  @parameterized.product(case=sorted(_CONFIGS),
                         mask=['pad_mask', 'full_mask'])
  def test_matches_real_pax(self, case, mask):
    layer = _layer(case)
    x = _REF['x']
    ours = layer.init(jax.random.PRNGKey(0), x, x, x, _REF[mask])
    ours_flat = traverse_util.flatten_dict(ours, sep='/')
    prefix = f'{case}/vars/'
    ref_flat = {k[len(prefix):]: _REF[k] for k in _REF.files
                if k.startswith(prefix)}
    self.assertEqual(
        {k: v.shape for k, v in ours_flat.items()},
        {k: v.shape for k, v in ref_flat.items()})
    variables = traverse_util.unflatten_dict(ref_flat, sep='/')
    (encoded, probs), _ = layer.apply(variables, x, x, x, _REF[mask],
                                      mutable=True)
    np.testing.assert_allclose(encoded, _REF[f'{case}/{mask}/encoded'],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs, _REF[f'{case}/{mask}/probs'],
                               rtol=1e-5, atol=1e-6)

  @parameterized.parameters(
      *[c for c in sorted(_CONFIGS) if f'{c}/steps' in _REF.files])
  def test_extend_step_matches_real_pax(self, case):
    layer = _layer(case)
    x, mask = _REF['x'], _REF['full_mask']
    prefix = f'{case}/vars/'
    variables = traverse_util.unflatten_dict(
        {k[len(prefix):]: _REF[k] for k in _REF.files
         if k.startswith(prefix)}, sep='/')
    _, cache = layer.apply(variables, x, x, x, mask,
                           mutable=[base_layer.DECODE_CACHE])
    step = jax.jit(lambda v, q, m, t: layer.apply(
        v, q, atten_mask=m, time_step=t, segment_pos=None,
        method=layer.extend_step, mutable=[base_layer.DECODE_CACHE]))
    for t in range(x.shape[1]):
      out, cache = step({**variables, **cache}, x[:, t], mask[:, :, t], t)
      np.testing.assert_allclose(out, _REF[f'{case}/steps'][:, t],
                                 rtol=1e-5, atol=1e-6, err_msg=f'step {t}')
      # A step sees what the forward pass's causal row t sees.
      np.testing.assert_allclose(
          out, _REF[f'{case}/full_mask/encoded'][:, t], rtol=1e-4,
          atol=1e-5)


class BlocksTest(absltest.TestCase):

  def test_extract_block_context(self):
    x = jnp.arange(1, 6)[None]  # [1, 5]
    ctx = attentions.extract_block_context(x, block_size=2, left_context=3,
                                           right_context=1)
    # Block u holds positions 2u - 2 ... 2u + 2 (0 outside 1..5).
    np.testing.assert_array_equal(
        ctx[0], [[0, 0, 1, 2, 3], [1, 2, 3, 4, 5], [3, 4, 5, 0, 0]])
    with self.assertRaisesRegex(ValueError, 'left_context'):
      attentions.extract_block_context(x, 2, 4, 0)

  def test_same_as_banded_full_attention(self):
    """Blocked attention equals full attention under the band mask."""
    x = np.random.default_rng(1).normal(size=(2, 7, 8)).astype(np.float32)
    mask = attentions.convert_paddings_to_mask(jnp.zeros((2, 7)))
    common = dict(name='a', input_dim=8, hidden_dim=8, num_heads=2,
                  left_context=3, right_context=2)
    blocked = _layer_from(attentions.LocalSelfAttention, block_size=3,
                          **common)
    variables = blocked.init(jax.random.PRNGKey(2), x, x, x, mask)
    full = _layer_from(attentions.DotProductAttention, name='a',
                       input_dim=8, hidden_dim=8, num_heads=2)
    # Query i sees keys i - 2 ... i + 2.
    i, j = np.arange(7)[:, None], np.arange(7)[None, :]
    band = np.where((j >= i - 2) & (j <= i + 2), 0.0,
                    py_utils.get_large_negative_number(np.float32))
    want, _ = full.apply(variables, x, x, x, band[None, None])
    got, probs = blocked.apply(variables, x, x, x, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    self.assertEqual(probs.shape, (2, 2, 3, 3, 3 + 2 + 2))


class DecodeTest(absltest.TestCase):

  def test_extend_step_matches_the_causal_forward(self):
    layer = _layer_from(attentions.LocalSelfAttention, name='a', input_dim=8,
                        hidden_dim=8, num_heads=2, block_size=2,
                        left_context=2, right_context=0)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype(np.float32)
    mask = attentions.causal_mask(x)
    variables = layer.init(jax.random.PRNGKey(4), x, x, x, mask)
    want, _ = layer.apply(variables, x, x, x, mask)
    _, cache = layer.apply(variables, x * 0, x * 0, x * 0, mask,
                           mutable=[base_layer.DECODE_CACHE])
    neg = py_utils.get_large_negative_number(np.float32)
    for t in range(5):
      step_mask = np.where(np.arange(5) <= t, 0.0, neg)[None, None]
      out, cache = layer.apply(
          {**variables, **cache}, x[:, t], atten_mask=step_mask,
          time_step=t, segment_pos=None, method=layer.extend_step,
          mutable=[base_layer.DECODE_CACHE])
      np.testing.assert_allclose(out, want[:, t], rtol=1e-4, atol=2e-5)


def _layer_from(cls, **fields):
  return base_layer.instantiate(pax_fiddle.Config(cls, **fields))


if __name__ == '__main__':
  absltest.main()
