"""SSM and S5 layers: a numpy recurrence, the real Pax 1.4, hand values."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
from flax import traverse_util
import jax
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import ssm

DECODE_CACHE = base_layer.DECODE_CACHE
_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'ssm_ref.npz'))
_CONFIGS = json.loads(str(_REF['configs']))
_SSM_CASES = sorted(k for k, v in _CONFIGS.items() if v['cls'] in ('SSM',
                                                                     'S5'))


def _layer(cls_name, **fields):
  return base_layer.instantiate(pax_fiddle.Config(
      getattr(ssm, cls_name), name='ssm', **fields))


def _ref_vars(case):
  prefix = f'{case}/vars/'
  flat = {k[len(prefix):]: _REF[k] for k in _REF.files
          if k.startswith(prefix)}
  return flat, traverse_util.unflatten_dict(flat, sep='/')


def _np_diag_a(nh, hippo_type):
  """The diagonal A, derived in numpy (eigenvalues of the skew HiPPO part)."""
  if hippo_type.endswith('legs'):
    p = np.sqrt(1 + 2 * np.arange(nh))
    a = -(np.tril(np.outer(p, p)) - np.diag(np.arange(nh)))
    q = np.sqrt(np.arange(nh) + 0.5)
  elif hippo_type.endswith('lagt'):
    a = -np.tril(np.ones([nh, nh]))
    q = np.full([nh], np.sqrt(0.5))
  else:
    step = np.pi / nh * (nh - 1)
    im = np.arange(-np.pi / 2 * (nh - 1), np.pi / 2 / nh * (nh - 1)**2, step)
    return -0.5 + 1j * im
  s = a + np.outer(q, q)
  im = np.linalg.eigvalsh(-1j * s)
  if hippo_type.endswith('lagt'):
    im = im * nh
  return np.mean(np.diag(s)) + 1j * im


def _np_run(cls_name, fields, variables, x):
  """Step-by-step ZOH recurrence with B = 1, in float64 numpy."""
  nh, dt = fields['nheads'], fields['step_size']
  a = _np_diag_a(nh, fields['hippo_type'])
  p = variables['params']
  c = p['C_re'] + 1j * p['C_im']
  abar = np.exp(dt * a)
  bbar = (abar - 1) / a
  b, length, d = x.shape
  ys = []
  if cls_name == 'SSM':  # One SISO system per channel: c [nh, d].
    state = np.zeros([b, nh, d], complex)
    for t in range(length):
      state = abar[None, :, None] * state + bbar[None, :, None] * x[:, t, None]
      ys.append(np.sum(c[None] * state, 1).real + p['D'] * x[:, t])
  else:  # One MIMO system: B = ones [nh, d], c [d, nh].
    state = np.zeros([b, nh], complex)
    for t in range(length):
      state = abar * state + bbar * x[:, t].sum(-1, keepdims=True)
      ys.append((state @ c.T).real + p['D'] * x[:, t])
  return np.stack(ys, 1)


class NumpyRecurrenceTest(parameterized.TestCase):

  @parameterized.parameters(*_SSM_CASES)
  def test_sequence_and_steps_match_numpy(self, case):
    spec = _CONFIGS[case]
    layer = _layer(spec['cls'], **spec['fields'])
    _, variables = _ref_vars(case)
    x = _REF['x']
    expected = _np_run(spec['cls'], spec['fields'], variables, x)
    out, state = layer.apply(variables, x, mutable=[DECODE_CACHE])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    step_vars = py_utils.merge_dict(state, variables)
    for t in range(x.shape[1]):
      y, state = layer.apply(step_vars, x[:, t], method=layer.extend_step,
                             mutable=[DECODE_CACHE])
      step_vars = py_utils.merge_dict(state, variables)
      np.testing.assert_allclose(y, expected[:, t], rtol=1e-4, atol=1e-4)


class RealPaxTest(parameterized.TestCase):
  """Same config and weights as the real Pax 1.4: same variables, outputs."""

  @parameterized.parameters(*_SSM_CASES)
  def test_matches_real_pax(self, case):
    spec = _CONFIGS[case]
    layer = _layer(spec['cls'], **spec['fields'])
    x = _REF['x']
    ours = layer.init(jax.random.PRNGKey(0), x)
    ref_flat, variables = _ref_vars(case)
    self.assertEqual(
        {k: v.shape for k, v in
         traverse_util.flatten_dict(ours, sep='/').items()
         if k.startswith('params/')},
        {k: v.shape for k, v in ref_flat.items()})
    out, state = layer.apply(variables, x, mutable=[DECODE_CACHE])
    np.testing.assert_allclose(out, _REF[f'{case}/out'], rtol=1e-5,
                               atol=2e-6)
    step_vars = py_utils.merge_dict(state, variables)
    for t in range(x.shape[1]):
      y, state = layer.apply(step_vars, x[:, t], method=layer.extend_step,
                             mutable=[DECODE_CACHE])
      step_vars = py_utils.merge_dict(state, variables)
      np.testing.assert_allclose(y, _REF[f'{case}/steps'][:, t], rtol=1e-5,
                                 atol=2e-6)

  def test_dplr_hippo_matches_real_pax(self):
    amat, pmat, bmat, _ = ssm.make_dplr_hippo(4, 'LegS')
    ref = _REF['dplr_legs4']
    np.testing.assert_allclose(amat, ref[0], rtol=1e-5, atol=1e-5)
    # P and B are defined up to the phase of each eigenvector: compare |.|.
    np.testing.assert_allclose(np.abs(pmat), np.abs(ref[1]), atol=1e-5)
    np.testing.assert_allclose(np.abs(bmat), np.abs(ref[2]), atol=1e-5)


class MathTest(absltest.TestCase):

  def test_hippo_by_hand(self):
    # LegS: A[n, k] = -sqrt(2n+1) sqrt(2k+1) for n > k, -(n+1) on the diagonal.
    s3, s5, s15 = np.sqrt(3), np.sqrt(5), np.sqrt(15)
    np.testing.assert_allclose(
        ssm.make_hippo(3, 'LegS'),
        -np.array([[1, 0, 0], [s3, 2, 0], [s5, s15, 3]]), rtol=1e-6)
    np.testing.assert_allclose(ssm.make_hippo(2, 'LagT'),
                               -np.array([[1, 0], [1, 1]]))

  def test_causal_convolution_is_a_causal_sum(self):
    rng = np.random.default_rng(1)
    u = rng.normal(size=(2, 4, 3)).astype(np.float32)
    k = rng.normal(size=(6, 3)).astype(np.float32)
    expected = np.zeros_like(u)
    for t in range(4):
      for s in range(t + 1):
        expected[:, t] += k[t - s] * u[:, s]
    np.testing.assert_allclose(ssm.causal_convolution(u, k), expected,
                               rtol=1e-5, atol=1e-5)

  def test_s5_scan_matches_a_loop(self):
    rng = np.random.default_rng(2)
    a = np.exp(-rng.random(3) + 1j * rng.random(3))
    b = rng.normal(size=(3, 2)) + 0j
    c = rng.normal(size=(2, 3)) + 1j * rng.normal(size=(2, 3))
    d = rng.normal(size=2)
    u = rng.normal(size=(1, 5, 2))
    x, ys = np.zeros(3, complex), []
    for t in range(5):
      x = a * x + b @ u[0, t]
      ys.append((c @ x).real + d * u[0, t])
    out = ssm.s5_parallel_scan(
        (a.astype(np.complex64), b.astype(np.complex64),
         c.astype(np.complex64), d.astype(np.float32)),
        u.astype(np.float32))
    np.testing.assert_allclose(out[0], np.stack(ys), rtol=1e-4, atol=1e-5)


class ErrorsTest(absltest.TestCase):

  def test_sequence_longer_than_l_max(self):
    layer = _layer('SSM', nheads=2, dim=1, l_max=2, decode_num_samples=1)
    x = np.ones([1, 3, 1], np.float32)
    with self.assertRaisesRegex(ValueError, 'l_max'):
      layer.init(jax.random.PRNGKey(0), x)

  def test_unknown_hippo_type_and_missing_sizes(self):
    with self.assertRaisesRegex(ValueError, 'hippo_type'):
      ssm.make_hippo(3, 'legs')
    layer = _layer('SSM', nheads=0, dim=2, l_max=2)
    with self.assertRaisesRegex(ValueError, 'nheads'):
      layer.init(jax.random.PRNGKey(0), np.ones([1, 2, 2], np.float32))


if __name__ == '__main__':
  absltest.main()
