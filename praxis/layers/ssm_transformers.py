"""Transformer layers whose self-attention is a state-space model (SSM).

Public names: SSMTransformer (the SSM replaces self-attention in a
Transformer layer), SSMGated (the Gated State Space block of
https://arxiv.org/abs/2212.10544: GELU projections around the SSM, gated by
a parallel branch, without the feed-forward block).

Both keep Transformer's fields (norms, dropouts, cross attention) and add the
SSM ones; `norm_policy` is 'pre', 'post' or 'primer_hybrid'. The children
are named as in Pax: `layer_norm` (or `pre_`/`post_layer_norm`), `ssm`,
`residual_dropout`, `cross_layer_norm`, `cross_attention`,
`residual_droppath`, and `ff_layer` (SSMTransformer) or `gss_ffn_v`,
`gss_ffn_u`, `gss_ffn_uc`, `gss_ffn_uco`, `gss_ffn_o` (SSMGated).
Decoding (`extend_step`) advances the SSM state one token, or runs a
[B, L, D] block in parallel.
"""

from __future__ import annotations

from jax import numpy as jnp

from praxis import base_layer
from praxis.layers import _transformer_feedforward as _tff
from praxis.layers import activations as activations_lib
from praxis.layers import checkpoint_policy
from praxis.layers import linears
from praxis.layers import ssm
from praxis.layers import stats
from praxis.layers import transformers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]
JTensor = pytypes.JTensor

_NORM_POLICIES = ('pre', 'post', 'primer_hybrid')


class SSMTransformer(transformers.Transformer):
  """A Transformer layer with an SSM in place of self-attention.

  Example:

    p = pax_fiddle.Config(
        ssm_transformers.SSMTransformer, name='layer', input_dims=8,
        hidden_dims=32, num_heads=2, ssm_nheads=4, ssm_dim=8, ssm_l_max=16)

  Attributes:
    ssm_tpl: The SSM layer (ssm.SSM or ssm.S5).
    ssm_nheads: States (heads) per channel of the SSM.
    ssm_dim: Channels of the SSM (input_dims for SSMTransformer).
    ssm_l_max: The longest sequence.
    ssm_hippo_type: The SSM's A initialization (see ssm.SSM).
    ssm_step_size: The SSM's discretization step.
    decode_num_samples: Samples per example when decoding.
  """

  ssm_tpl: LayerTpl = template_field(ssm.SSM)
  ssm_nheads: int = 0
  ssm_dim: int = 0
  ssm_l_max: int = 0
  ssm_hippo_type: str = 'ss4d-1d-legs'
  ssm_step_size: float = 0.1
  decode_num_samples: int = 4

  def _setup_common(self) -> None:
    """Norms, residual dropout, cross attention and droppath (as Pax)."""
    _tff.check_norm_policy(self, _NORM_POLICIES)
    _tff.create_norms(self, self.input_dims)
    self.create_child(
        'residual_dropout',
        _tff.dropout(self.dropout_tpl, self.residual_dropout_prob))
    if self.use_cross_attention:
      _tff.create_norms(self, self.input_dims, prefix='cross_')
      tpl = self.cross_atten_tpl or self.tr_atten_tpl
      for field, what in (('use_rotary_position_emb', 'Rotary position '
                           'embedding'), ('dconv_qkv', 'Depth-wise '
                                          'convolution')):
        if getattr(tpl, field, False):
          raise ValueError(f'{type(self).__name__} ({self.name}): {what} '
                           f'({field}) must be off for cross attention.')
      self._setup_attention(tpl, 'cross_attention')
    _tff.create_droppath(self)

  def _setup_ssm(self) -> None:
    p = self.ssm_tpl.clone().set(
        nheads=self.ssm_nheads, dim=self.ssm_dim, l_max=self.ssm_l_max,
        decode_num_samples=self.decode_num_samples,
        hippo_type=self.ssm_hippo_type, step_size=self.ssm_step_size)
    self.create_child('ssm', p)

  def setup(self) -> None:
    if self.ssm_dim != self.input_dims:
      raise ValueError(
          f'SSMTransformer ({self.name}): ssm_dim ({self.ssm_dim}) must equal '
          f'input_dims ({self.input_dims}).')
    self._setup_common()
    ff = self.tr_fflayer_tpl.clone().set(
        input_dims=self.input_dims, hidden_dims=self.hidden_dims,
        relu_dropout_prob=self.relu_dropout_prob,
        residual_dropout_prob=self.residual_dropout_prob,
        residual_droppath_prob=self.residual_droppath_prob,
        norm_policy=self.norm_policy)
    self.create_child('ff_layer', ff)
    self._setup_ssm()

  def decoding_sequence_length(self) -> int:
    """The longest decodable sequence (ssm_l_max)."""
    return self.ssm_l_max

  def init_states(self, target_batch_size: int, target_max_length: int):
    """Zeroes the SSM state for `target_batch_size` sequences."""
    del target_max_length
    self.ssm.init_states(target_batch_size)

  def transform_decode_state(self, transform_fn) -> None:
    """The SSM state is not transformed (as in Pax)."""
    del transform_fn

  def _input_summaries(self, inputs: JTensor, paddings: JTensor) -> None:
    s = stats.compute_stats(inputs, jnp.expand_dims(paddings, -1))
    self.add_summary('xformer_input_mean', s.mean_v, verbosity=3)
    self.add_summary('xformer_input_std', s.std_v, verbosity=3)
    self.add_summary('xformer_input_abs_max', s.max_v, verbosity=3)

  def _ssm(self, x: JTensor, step: bool) -> JTensor:
    return self.ssm.extend_step(x) if step else self.ssm(x)

  def _mixer(self, x: JTensor, step: bool):
    """(SSM branch, gate) on normalized inputs (one step when `step`)."""
    return self._ssm(x, step), None

  def _ffn(self, x: JTensor, paddings: JTensor | None, gate) -> JTensor:
    del gate
    return self.ff_layer(x, paddings=paddings)

  def _cross(self, x: JTensor, cross_out: JTensor) -> JTensor:
    return self._add_residual(x, cross_out, 'cross_')

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor,
      attention_mask: JTensor,
      cross_inputs: JTensor | None = None,
      cross_attention_mask: JTensor | None = None,
      segment_pos: JTensor | None = None,
      segment_ids: JTensor | None = None,
  ) -> tuple[JTensor, None]:
    """Runs the layer on inputs [B, T, D] (paddings [B, T]).

    Args:
      inputs: [B, T, D].
      paddings: [B, T], used by the feed-forward block.
      attention_mask: Unused (the SSM is causal).
      cross_inputs: [B, S, D], encoder outputs for cross attention.
      cross_attention_mask: Additive mask [1|B, 1, 1|T, S].
      segment_pos: Unused.
      segment_ids: Unused.

    Returns:
      (outputs [B, T, D], None): there are no attention probabilities.
    """
    del attention_mask, segment_pos, segment_ids
    self._input_summaries(inputs, paddings)
    mixed, gate = self._mixer(_tff.pre_norm(self, inputs), step=False)
    out = self._add_residual(inputs, mixed)
    if self.use_cross_attention and (
        not self.allow_skip_cross_attention or cross_inputs is not None):
      if cross_inputs is None or cross_attention_mask is None:
        raise ValueError(f'{type(self).__name__} ({self.name}): cross '
                         'attention needs cross_inputs and '
                         'cross_attention_mask.')
      cross_out, _ = self.cross_attention(
          _tff.pre_norm(self, out, 'cross_'), cross_inputs, cross_inputs,
          atten_mask=cross_attention_mask)
      out = self._cross(out, cross_out)
    return self._ffn(out, paddings, gate), None

  def extend_step(
      self,
      inputs: JTensor,
      *,
      time_step: JTensor,
      segment_pos: JTensor | None = None,
      attention_mask: JTensor,
      cross_attention_mask: JTensor | None = None,
  ) -> JTensor:
    """Decodes inputs [B, D] one step (or [B, L, D], L steps at once).

    Args:
      inputs: [B, D] or [B, L, D].
      time_step: Scalar, the 0-based step (for cross attention).
      segment_pos: [B] or [B, L] positions (for cross attention).
      attention_mask: Unused (the SSM is causal).
      cross_attention_mask: [b|B, 1, 1, S], over the encoder outputs.

    Returns:
      [B, D] or [B, L, D].
    """
    del attention_mask
    if inputs.ndim not in (2, 3):
      raise ValueError(f'{type(self).__name__} ({self.name}).extend_step: '
                       f'inputs must be [B, D] or [B, L, D], got shape '
                       f'{inputs.shape}.')
    mixed, gate = self._mixer(_tff.pre_norm(self, inputs), inputs.ndim == 2)
    out = self._add_residual(inputs, mixed)
    if self.use_cross_attention and (
        not self.allow_skip_cross_attention or cross_attention_mask is not None
    ):
      if cross_attention_mask is None:
        raise ValueError(f'{type(self).__name__} ({self.name}): cross '
                         'attention needs cross_attention_mask.')
      cross_out = self.cross_attention.extend_step(
          _tff.pre_norm(self, out, 'cross_'),
          atten_mask=jnp.squeeze(cross_attention_mask, 2),
          time_step=time_step, segment_pos=segment_pos,
          is_cross_attention=True)
      out = self._cross(out, cross_out)
    return self._ffn(out, None, gate)


class SSMGated(SSMTransformer):
  """The Gated State Space layer (https://arxiv.org/abs/2212.10544).

  out = o(uco(h) * v(x)), h = x + uc(ssm(u(x))) (x normalized per
  norm_policy), with GELU for v, u and uco.

  Attributes:
    gss_fflayer_tpl: The projections' template (linears.FeedForward).
  """

  gss_fflayer_tpl: LayerTpl = template_field(linears.FeedForward)

  def _gss(self, name: str, in_dims: int, out_dims: int, act) -> None:
    p = self.gss_fflayer_tpl.clone().set(
        input_dims=in_dims, output_dims=out_dims,
        activation_tpl=pax_fiddle.Config(act))
    self.create_child(name, p)

  def setup(self) -> None:
    self._setup_common()
    self._setup_ssm()
    d, gelu, ident = self.input_dims, activations_lib.GELU, (
        activations_lib.Identity)
    self._gss('gss_ffn_v', d, 3 * d, gelu)
    self._gss('gss_ffn_u', d, self.ssm_dim, gelu)
    self._gss('gss_ffn_uc', self.ssm_dim, d, ident)
    self._gss('gss_ffn_uco', d, 3 * d, gelu)
    self._gss('gss_ffn_o', 3 * d, d, ident)

  def _mixer(self, x: JTensor, step: bool):
    gate = self.gss_ffn_v(x)
    return self.gss_ffn_uc(self._ssm(self.gss_ffn_u(x), step)), gate

  def _ffn(self, x: JTensor, paddings: JTensor | None, gate) -> JTensor:
    del paddings
    return self.gss_ffn_o(self.gss_ffn_uco(x) * gate)


# Names Pax 1.4's module also has (aliases of other modules' names).
AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType
