"""Diagonal state-space (SSM) sequence layers: S4D and S5.

Public names: SSM (S4D: one diagonal complex SSM per channel, `nheads` states
each), S5 (one shared MIMO diagonal SSM), and the math they use:
make_hippo, make_nplr_hippo, make_dplr_hippo, causal_convolution, s4d_step,
s4d_kernel_zoh, s4d_discretize, s5_discretize, binary_operator,
s5_parallel_scan, s5_step.

A layer runs a whole sequence in parallel (`__call__`: an FFT convolution for
SSM, an associative scan for S5) and one step at a time from the decoder
cache (`extend_step`, state `ssm_state`); both give the same outputs. As in
Pax, A and the step size are fixed (not trained), B is all ones; C (and S5's
unused B) and D are the variables:

  SSM: C_re, C_im [nheads, dim], D [1, dim].
  S5:  B_re, B_im [nheads, dim], C_re, C_im [dim, nheads], D [dim].

References: S4D https://arxiv.org/abs/2206.11893, S5
https://arxiv.org/abs/2208.04933, HiPPO https://arxiv.org/abs/2111.00396.
"""

import jax
from jax import numpy as jnp

from praxis import base_layer
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
JTensor = pytypes.JTensor

PARAMS = base_layer.PARAMS
RANDOM = base_layer.RANDOM
DECODE_CACHE = base_layer.DECODE_CACHE

# Recurrences share their weights over time: params are never split by scan.
SCAN_SPLIT_RNGS = {PARAMS: False, RANDOM: True}

_HIPPO_TYPES = ('LegS', 'LagT')


# ---------------------------------------------------------------------------
# HiPPO matrices.
# ---------------------------------------------------------------------------


def _check_hippo_type(hippo_type: str) -> None:
  if hippo_type not in _HIPPO_TYPES:
    raise ValueError(
        f'hippo_type must be one of {_HIPPO_TYPES}, got {hippo_type!r}.')


def make_hippo(n: int, hippo_type: str) -> JTensor:
  """The n x n HiPPO state matrix A (negated), 'LegS' or 'LagT'."""
  _check_hippo_type(hippo_type)
  if hippo_type == 'LagT':
    return -jnp.tril(jnp.ones([n, n]))
  p = jnp.sqrt(1.0 + 2.0 * jnp.arange(n))
  return -(jnp.tril(jnp.outer(p, p)) - jnp.diag(jnp.arange(n)))


def make_nplr_hippo(n: int, hippo_type: str):
  """(A, P, B): HiPPO A, the rank-1 term P making A + PP^T normal, and B."""
  amat = make_hippo(n, hippo_type)
  if hippo_type == 'LagT':
    return amat, jnp.full([n], 0.5**0.5), jnp.ones([n])
  return amat, jnp.sqrt(jnp.arange(n) + 0.5), jnp.sqrt(2.0 * jnp.arange(n) + 1)


def make_dplr_hippo(n: int, hippo_type: str):
  """(Lambda, P, B, V): the diagonal-plus-low-rank form of the HiPPO matrix.

  S = A + P P^T is normal: its real part is the constant -1/2 on the
  diagonal and its skew part is diagonalised by `eigh` (which, unlike `eig`,
  every backend has). LagT eigenvalues are scaled by n.

  Args:
    n: The state size.
    hippo_type: 'LegS' or 'LagT'.

  Returns:
    Lambda [n] complex eigenvalues, P and B in the eigenbasis, V [n, n].
  """
  amat, pmat, bmat = make_nplr_hippo(n, hippo_type)
  smat = amat + jnp.outer(pmat, pmat)
  lambda_real = jnp.mean(jnp.diagonal(smat)) * jnp.ones([n])
  lambda_imag, vmat = jnp.linalg.eigh(smat * -1j)
  if hippo_type == 'LagT':
    lambda_imag = lambda_imag * float(n)
  vh = vmat.conj().T
  return lambda_real + 1j * lambda_imag, vh @ pmat, vh @ bmat, vmat


def _diagonal_a(nh: int, hippo_type: str) -> JTensor:
  """The [nh] complex diagonal of A for an SSM `hippo_type` string."""
  if hippo_type.endswith('legs'):
    return make_dplr_hippo(nh, 'LegS')[0]
  if hippo_type.endswith('lagt'):
    return make_dplr_hippo(nh, 'LagT')[0]
  # S4D-Lin: -1/2 + i pi k, spread over nh heads (Pax's arange bounds).
  a_im = jnp.arange(-jnp.pi / 2.0 * (nh - 1),
                    jnp.pi / 2.0 / nh * (nh - 1) ** 2,
                    jnp.pi / nh * (nh - 1))
  return -0.5 * jnp.ones([nh]) + 1j * a_im


# ---------------------------------------------------------------------------
# S4D math.
# ---------------------------------------------------------------------------


def causal_convolution(u: JTensor, ker: JTensor) -> JTensor:
  """y[b, t, d] = sum_{s<=t} ker[t - s, d] u[b, s, d], through real FFTs.

  Args:
    u: [B, L, d] inputs.
    ker: [K, d] kernel with K >= L.

  Returns:
    [B, L, d] float32 outputs.
  """
  length = u.shape[-2]
  if ker.shape[-2] < length:
    raise ValueError(f'causal_convolution: the kernel has {ker.shape[-2]} '
                     f'steps, fewer than the {length} of the inputs (l_max '
                     'too small).')
  n = 2 * length
  ud = jnp.fft.rfft(u.astype(jnp.float32), n=n, axis=-2)
  kd = jnp.fft.rfft(ker[:length].astype(jnp.float32), n=n, axis=-2)
  return jnp.fft.irfft(ud * kd[None], axis=-2)[:, :length, :].real


def s4d_step(ab: JTensor, bb: JTensor, cb: JTensor, u_k: JTensor,
             x_k_1: JTensor):
  """One S4D step: x_k = Ab x_{k-1} + Bb u_k, y_k = Re(sum_n Cb x_k).

  Args:
    ab: [nh, d] discrete A (diagonal per channel).
    bb: [nh, d] discrete B.
    cb: [nh, d] C.
    u_k: [B, d] inputs.
    x_k_1: [B, nh, d] previous state.

  Returns:
    (x_k [B, nh, d], y_k [B, d]).
  """
  x_k = ab[None] * x_k_1 + bb[None] * u_k[:, None, :]
  return x_k, jnp.sum(cb[None] * x_k, axis=1).real


def s4d_kernel_zoh(c: JTensor, a: JTensor, l: JTensor,
                   step: JTensor) -> JTensor:
  """The [L, d] convolution kernel of a ZOH-discretized diagonal SSM, B = 1.

  K[l, d] = Re(sum_n C[n, d] (exp(dt A) - 1) / A exp(l dt A)).

  Args:
    c: [nh, d] C.
    a: [nh, d] diagonal A.
    l: [L] positions.
    step: [1, d] step sizes dt.

  Returns:
    [L, d] real kernel.
  """
  dta = step * a
  b_bar = (jnp.exp(dta) - 1.0) / a
  powers = jnp.exp(l[:, None, None] * dta[None])
  return jnp.sum(c[None] * b_bar[None] * powers, axis=1).real


def s4d_discretize(a: JTensor, b: JTensor, step: JTensor):
  """ZOH discretization (Abar, Bbar) of the diagonal SSM (a, b) [nh, d]."""
  abar = jnp.exp(step * a)
  return abar, (abar - 1.0) / a * b


# ---------------------------------------------------------------------------
# S5 math.
# ---------------------------------------------------------------------------


def s5_discretize(a: JTensor, b: JTensor, step: float):
  """ZOH discretization of A [nh] (diagonal) and B [nh, d]."""
  abar = jnp.exp(step * a)
  return abar, ((abar - 1.0) / a)[:, None] * b


def binary_operator(element_i, element_j):
  """Composes two steps (A_i, Bu_i), (A_j, Bu_j) of a linear recurrence."""
  a_i, bu_i = element_i
  a_j, bu_j = element_j
  return a_j * a_i, a_j * bu_i + bu_j


def s5_parallel_scan(params, input_sequence: JTensor) -> JTensor:
  """S5 outputs [B, L, d] of inputs [B, L, d] by an associative scan.

  Args:
    params: (Abar [nh], Bbar [nh, d], C [d, nh], D [d]).
    input_sequence: [B, L, d].

  Returns:
    [B, L, d] real outputs Re(C x_t) + D u_t.
  """
  a_bar, b_bar, c_mat, d_mat = params
  length = input_sequence.shape[-2]
  decay = jnp.broadcast_to(a_bar, (1, length) + a_bar.shape)
  bu = input_sequence @ b_bar.T
  _, xs = jax.lax.associative_scan(binary_operator, (decay, bu), axis=1)
  ys = xs @ c_mat.T + d_mat[None, None, :] * input_sequence
  return ys.real


def s5_step(ab: JTensor, bb: JTensor, cb: JTensor, u_k: JTensor,
            x_k_1: JTensor):
  """One S5 step: x_k = Ab x_{k-1} + Bb u_k [B, nh]; y_k = Re(C x_k) [B, d]."""
  x_k = ab[None] * x_k_1 + u_k @ bb.T
  return x_k, (x_k @ cb.T).real


# ---------------------------------------------------------------------------
# Layers.
# ---------------------------------------------------------------------------


def _gaussian_var(layer: base_layer.BaseLayer, name: str, shape, scale):
  wp = layer.weight_split_dims_mapping
  return layer.create_variable(
      name, WeightHParams(shape=shape, init=WeightInit.Gaussian(scale),
                          mesh_shape=layer.mesh_shape,
                          tensor_split_dims_mapping=wp.wt))


def _check_sizes(layer: base_layer.BaseLayer) -> None:
  for field in ('nheads', 'dim'):
    if getattr(layer, field) <= 0:
      raise ValueError(f'{type(layer).__name__} ({layer.name}): {field} must '
                       f'be positive, got {getattr(layer, field)}.')


class SSM(base_layer.BaseLayer):
  """An S4D layer: per channel, a diagonal complex SSM with `nheads` states.

  Example (a [B, L, d] sequence; decoding calls `extend_step` on [B, d]):

    p = pax_fiddle.Config(ssm.SSM, name='ssm', nheads=4, dim=8, l_max=16,
                          decode_num_samples=1)

  Attributes:
    nheads: States (heads) per channel.
    dim: Channels of the input.
    l_max: The longest sequence (length of the convolution kernel).
    decode_num_samples: Samples per example when decoding (the decoder
      state's batch is batch * decode_num_samples).
    step_size: Discretization step dt (fixed).
    hippo_type: A's initialization: ends with 'legs' or 'lagt' for HiPPO,
      else S4D-Lin.
  """

  nheads: int = 0
  dim: int = 0
  l_max: int = 0
  decode_num_samples: int = 0
  step_size: float = 0.01
  hippo_type: str = 'ss4d-1d'

  def init_s4d_ac(self, nh: int, suffix: str = ''):
    """(A [nh, dim] fixed, C [nh, dim] from variables C_re, C_im)."""
    amat = jnp.tile(_diagonal_a(nh, self.hippo_type)[:, None], [1, self.dim])
    c_re = _gaussian_var(self, 'C_re' + suffix, [nh, self.dim], 0.5**0.5)
    c_im = _gaussian_var(self, 'C_im' + suffix, [nh, self.dim], 0.5**0.5)
    return amat, c_re + 1j * c_im

  def setup(self) -> None:
    _check_sizes(self)
    wp = self.weight_split_dims_mapping
    self.ss = jnp.full([1, self.dim], self.step_size)
    self.dmat = self.create_variable(
        'D', WeightHParams(shape=[1, self.dim], init=WeightInit.Constant(1.0),
                           mesh_shape=self.mesh_shape,
                           tensor_split_dims_mapping=wp.wt))
    self.amat, self.cmat = self.init_s4d_ac(self.nheads)
    self.ssm_k = s4d_kernel_zoh(
        self.cmat, self.amat, jnp.arange(self.l_max), self.ss)
    self.abar, self.bbar = s4d_discretize(
        self.amat, jnp.ones((self.nheads, self.dim)), self.ss)

  def init_states(self, batch_size: int) -> None:
    """Sets the decoder state `ssm_state` to zeros [batch, nheads, dim]."""
    self.update_decode_state(
        'ssm_state',
        jnp.zeros((batch_size, self.nheads, self.dim), jnp.complex64))

  def extend_step(self, inputs: JTensor) -> JTensor:
    """One step on inputs [B, dim] from the cached state; returns [B, dim]."""
    if not self.has_variable(DECODE_CACHE, 'ssm_state'):
      self.init_states(inputs.shape[0])
    x = self.get_decode_state('ssm_state')
    if x.shape[0] != inputs.shape[0]:
      raise ValueError(f'SSM ({self.name}): the decoder state has batch '
                       f'{x.shape[0]}, the inputs {inputs.shape[0]}.')
    x, y = s4d_step(self.abar, self.bbar, self.cmat, inputs, x)
    self.update_decode_state('ssm_state', x)
    return y + self.dmat * inputs

  def __call__(self, inputs: JTensor) -> JTensor:
    """Outputs [B, L, dim] of inputs [B, L, dim] (resets the decoder state)."""
    self.init_states(inputs.shape[0] * self.decode_num_samples)
    y = causal_convolution(inputs, self.ssm_k)
    return y + self.dmat[None] * inputs


class S5(SSM):
  """An S5 layer: one diagonal MIMO SSM of `nheads` states over all channels.

  As in Pax, the discretization uses B = 1 (B_re and B_im are created but do
  not enter the outputs).
  """

  def init_s5_abc(self, nh: int, suffix: str = ''):
    """(A [nh] fixed, B [nh, dim], C [dim, nh]) with B and C variables."""
    amat = _diagonal_a(nh, self.hippo_type)
    b_scale = (1.0 / self.dim)**0.5
    c_scale = (1.0 / nh)**0.5
    b_re = _gaussian_var(self, 'B_re' + suffix, [nh, self.dim], b_scale)
    b_im = _gaussian_var(self, 'B_im' + suffix, [nh, self.dim], b_scale)
    c_re = _gaussian_var(self, 'C_re' + suffix, [self.dim, nh], c_scale)
    c_im = _gaussian_var(self, 'C_im' + suffix, [self.dim, nh], c_scale)
    return amat, b_re + 1j * b_im, c_re + 1j * c_im

  def setup(self) -> None:
    _check_sizes(self)
    wp = self.weight_split_dims_mapping
    self.ss = self.step_size
    self.dmat = self.create_variable(
        'D', WeightHParams(shape=[self.dim], init=WeightInit.Constant(1.0),
                           mesh_shape=self.mesh_shape,
                           tensor_split_dims_mapping=wp.wt))
    self.amat, self.bmat, self.cmat = self.init_s5_abc(self.nheads)
    self.abar, self.bbar = s5_discretize(
        self.amat, jnp.ones((self.nheads, self.dim)), self.ss)

  def init_states(self, batch_size: int) -> None:
    """Sets the decoder state `ssm_state` to zeros [batch, nheads]."""
    self.update_decode_state(
        'ssm_state', jnp.zeros((batch_size, self.nheads), jnp.complex64))

  def extend_step(self, inputs: JTensor) -> JTensor:
    """One step on inputs [B, dim] from the cached state; returns [B, dim]."""
    if not self.has_variable(DECODE_CACHE, 'ssm_state'):
      self.init_states(inputs.shape[0])
    x = self.get_decode_state('ssm_state')
    if x.shape[0] != inputs.shape[0]:
      raise ValueError(f'S5 ({self.name}): the decoder state has batch '
                       f'{x.shape[0]}, the inputs {inputs.shape[0]}.')
    x, y = s5_step(self.abar, self.bbar, self.cmat, inputs, x)
    self.update_decode_state('ssm_state', x)
    return y + self.dmat[None] * inputs

  def __call__(self, inputs: JTensor) -> JTensor:
    """Outputs [B, L, dim] of inputs [B, L, dim] (resets the decoder state)."""
    self.init_states(inputs.shape[0] * self.decode_num_samples)
    params = (self.abar, self.bbar, self.cmat, self.dmat)
    return s5_parallel_scan(params, inputs)
