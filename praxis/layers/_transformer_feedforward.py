"""Feed-forward blocks of a Transformer and the helpers they share.

Public names:
  gating: top2_gating, sentence_embeddings (and Pax's per-sequence
    _get_sentence_embeddings);
  layers: TransformerFeedForward, TransformerFeedForwardMoe;
  helpers for layers with a `norm_policy` (shared with `transformers.py`):
    check_norm_policy, create_norms, pre_norm, post_norm, add_residual,
    create_droppath, dropout.

This is a private sibling of `praxis.layers.transformers`, which re-exports
`top2_gating`, `TransformerFeedForward` and `TransformerFeedForwardMoe` by
name; import them from there:

  ff = base_layer.instantiate(pax_fiddle.Config(
      transformers.TransformerFeedForward, name='ff', input_dims=16,
      hidden_dims=32))
  variables = ff.init(jax.random.PRNGKey(0), x, paddings)  # x [B, T, 16]
  y = ff.apply(variables, x, paddings)                     # [B, T, 16]

A layer using the helpers has the fields `norm_policy`, `ln_tpl` and
`residual_droppath_prob` (and optionally `residual_weight`); its
normalizations are the children `layer_norm`, or `pre_layer_norm` and
`post_layer_norm` with the 'primer_hybrid' policy (with a name prefix such as
'cross_' for a second residual branch).
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax import numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from praxis import base_layer
from praxis import gshard_utils
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import activations as activations_lib
from praxis.layers import attentions
from praxis.layers import linears
from praxis.layers import normalizations
from praxis.layers import stochastics

JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]

_NORM_POLICIES = ('pre', 'post', 'primer_hybrid', 'post_skip')


# ---------------------------------------------------------------------------
# Gating.
# ---------------------------------------------------------------------------


def top2_gating(logits: JTensor, paddings: JTensor | None = None,
                num_groups: int = 1) -> tuple[JTensor, JTensor]:
  """Top-2 routing weights and GShard's load-balancing loss.

  Args:
    logits: [..., E], router logits of each token.
    paddings: [...], 1 at padded tokens (None: no padding). Padded tokens
      count neither as routed nor in the router probabilities, but still in
      the number of tokens the means divide by (Pax's legacy_mtf_behavior).
    num_groups: G, routing groups: the tokens in order, split into G equal
      groups; the loss is the mean of the groups' losses.

  Returns:
    (gates [..., E]: the softmax probabilities of each token's two best
    experts, renormalized to sum to 1, zero elsewhere; aux_loss: a scalar,
    mean over groups of E * sum_e(fraction of the group's tokens routed first
    to e * mean probability of e over the group)).
  """
  num_experts = logits.shape[-1]
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  top_probs, top_idx = jax.lax.top_k(probs, 2)
  chosen = jax.nn.one_hot(top_idx, num_experts, dtype=probs.dtype).sum(-2)
  gates = probs * chosen
  gates = gates / (jnp.sum(top_probs, axis=-1, keepdims=True) + 1e-9)
  first = jax.nn.one_hot(top_idx[..., 0], num_experts, dtype=probs.dtype)
  density_proxy = probs
  if paddings is not None:
    keep = (1.0 - paddings.astype(jnp.float32))[..., None]
    first, density_proxy = first * keep, density_proxy * keep
  first = first.reshape(num_groups, -1, num_experts)
  density_proxy = density_proxy.reshape(num_groups, -1, num_experts)
  aux_loss = num_experts * num_experts * jnp.mean(
      jnp.mean(first, axis=1) * jnp.mean(density_proxy, axis=1))
  return gates, aux_loss


def _get_sentence_embeddings(inputs: JTensor,
                             segment_ids: JTensor) -> JTensor:
  """The mean of `inputs` [S, D] over each token's segment, at each token.

  `segment_ids` [S] (ints in [0, S)) name the segments; segment 0 is padding
  and gets zeros. Returns [S, D].
  """
  length = inputs.shape[0]
  totals = jax.ops.segment_sum(inputs, segment_ids, num_segments=length)
  sizes = jax.ops.segment_sum(jnp.ones(segment_ids.shape, inputs.dtype),
                              segment_ids, num_segments=length)
  means = totals / jnp.maximum(sizes, 1)[:, None]
  means = jnp.where(jnp.arange(length)[:, None] == 0, 0, means)
  return jnp.take(means, segment_ids, axis=0)


def sentence_embeddings(inputs: JTensor, paddings: JTensor | None,
                        segment_ids: JTensor | None) -> JTensor:
  """What a sentence-level router sees at each token of `inputs` [B, T, D].

  The mean of the token's segment (`segment_ids` [B, T]); without segment
  ids, of the row's unpadded tokens (`paddings` [B, T]; padded tokens get
  zeros), or of the whole row when neither is given.
  """
  if segment_ids is None and paddings is None:
    return jnp.broadcast_to(jnp.mean(inputs, axis=1, keepdims=True),
                            inputs.shape)
  if segment_ids is None:
    segment_ids = (1 - paddings).astype(jnp.int32)
  return jax.vmap(_get_sentence_embeddings)(inputs, segment_ids)


def routing_groups(num_tokens: int, num_groups: int,
                   min_group_size: int | None, where: str) -> int:
  """Pax's number of routing groups for `num_tokens` tokens: `num_groups`
  (at least 1), fewer when groups would hold under `min_group_size`."""
  groups = max(num_groups, 1)
  if min_group_size is not None and num_tokens / groups < min_group_size:
    groups = (num_tokens + min_group_size - 1) // min_group_size
  if num_tokens % groups:
    raise ValueError(
        f'{where}: num_groups {groups} does not divide the {num_tokens} '
        'tokens of the inputs.')
  return groups


# ---------------------------------------------------------------------------
# Norm-policy, residual and dropout helpers (also used by transformers.py).
# ---------------------------------------------------------------------------


def check_norm_policy(layer: base_layer.BaseLayer, policies=_NORM_POLICIES):
  """Raises ValueError naming the layer unless norm_policy is in policies."""
  if layer.norm_policy not in policies:
    raise ValueError(
        f'{type(layer).__name__} ({layer.name}): norm_policy must be one of '
        f'{policies}, got {layer.norm_policy!r}.'
    )


def create_norms(layer: base_layer.BaseLayer, dims: int, prefix: str = ''):
  """`layer_norm` (or `pre_`/`post_layer_norm` for primer_hybrid)."""
  ln = layer.ln_tpl.clone().set(dim=dims)
  if layer.norm_policy == 'primer_hybrid':
    layer.create_child(f'pre_{prefix}layer_norm', ln)
    layer.create_child(f'post_{prefix}layer_norm', ln.clone())
  else:
    layer.create_child(f'{prefix}layer_norm', ln)


def pre_norm(layer: base_layer.BaseLayer, x: JTensor, prefix: str = ''):
  """x normalized before the branch ('pre', 'primer_hybrid'), else x."""
  if layer.norm_policy == 'primer_hybrid':
    return getattr(layer, f'pre_{prefix}layer_norm')(x)
  if layer.norm_policy == 'pre':
    return getattr(layer, f'{prefix}layer_norm')(x)
  return x


def post_norm(layer: base_layer.BaseLayer, x: JTensor, prefix: str = ''):
  """x normalized after the branch ('post', 'primer_hybrid'), else x."""
  if layer.norm_policy == 'primer_hybrid':
    return getattr(layer, f'post_{prefix}layer_norm')(x)
  if layer.norm_policy == 'post':
    return getattr(layer, f'{prefix}layer_norm')(x)
  return x


def add_residual(layer: base_layer.BaseLayer, x: JTensor, y: JTensor):
  """`x + residual_weight * y` (dropping y's path with droppath)."""
  if layer.residual_droppath_prob > 0.0:
    return layer.residual_droppath(x, y)
  return x + y * getattr(layer, 'residual_weight', 1.0)


def padding_keep(layer: base_layer.BaseLayer, inputs: JTensor,
                 paddings: JTensor | None) -> tuple[JTensor, JTensor | None]:
  """(inputs, keep): keep is 1 - paddings as [B, T, 1] (None without them);
  with `apply_padding_first` the inputs come back zeroed at padded steps."""
  keep = None if paddings is None else (1.0 - paddings[..., None])
  if layer.apply_padding_first and keep is not None:
    inputs = inputs * keep.astype(inputs.dtype)
  return inputs, keep


def finish_branch(layer: base_layer.BaseLayer, residual: JTensor,
                  outputs: JTensor) -> JTensor:
  """The branch's post-norm and residual dropout, then the skip connection."""
  outputs = layer.residual_dropout(post_norm(layer, outputs))
  if layer.add_skip_connection:
    outputs = add_residual(layer, residual, outputs)
  return outputs


def create_droppath(layer: base_layer.BaseLayer) -> None:
  """Creates `residual_droppath` if residual_droppath_prob > 0."""
  if layer.residual_droppath_prob > 0.0:
    layer.create_child(
        'residual_droppath',
        pax_fiddle.Config(
            stochastics.StochasticResidual,
            survival_prob=1.0 - layer.residual_droppath_prob,
            residual_weight=getattr(layer, 'residual_weight', 1.0),
        ),
    )


def dropout(tpl: LayerTpl, prob: float) -> LayerTpl:
  """A copy of the dropout template `tpl` dropping with probability prob."""
  return tpl.clone().set(keep_prob=1.0 - prob)


# ---------------------------------------------------------------------------
# Feed-forward layers.
# ---------------------------------------------------------------------------


class TransformerFeedForward(base_layer.BaseLayer):
  """The feed-forward block of a Transformer, with normalization and residual.

  With the 'pre' policy: `x + dropout(ffn2(dropout(act(ffn1(ln(x))))))`.
  Children: `layer_norm` (or `pre_`/`post_layer_norm`), `ffn_layer1`,
  `ffn_layer1_gate` (gated), `relu_dropout`, `ffn_layer2`,
  `residual_dropout`, `residual_droppath`.

  Attributes:
    input_dims: Depth of the input.
    output_dims: Depth of the output (0: input_dims).
    hidden_dims: Depth of the hidden layer.
    has_bias: Whether the projections have biases.
    apply_padding_first: Zero padded inputs first (else the hidden and output
      activations are zeroed at padded positions).
    activation_tpl: The activation.
    use_gated_activation: Hidden = act(x @ w_gate) * (x @ w1).
    fflayer_tpl: Template of the two projections.
    ln_tpl: Template of the normalization.
    residual_dropout_prob: Dropout probability of the output.
    relu_dropout_tpl: Template of the hidden dropout.
    relu_dropout_prob: Dropout probability of the hidden layer.
    residual_dropout_tpl: Template of the output dropout.
    add_skip_connection: Whether to add the residual connection.
    residual_weight: Weight of the block's output in the residual sum.
    residual_droppath_prob: Probability of dropping the whole block per
      example.
    norm_policy: 'pre' (normalize the input), 'post' (the output),
      'primer_hybrid' (both) or 'post_skip' (after the residual sum).
    internal_gshard_variance_scaling_fan_in_init: Initialise the projections
      uniformly with bound sqrt(3 / fan_in).
  """

  input_dims: int = 0
  output_dims: int = 0
  hidden_dims: int = 0
  has_bias: bool = True
  apply_padding_first: bool = False
  activation_tpl: pax_fiddle.Config[activations_lib.BaseActivation] = (
      template_field(activations_lib.ReLU)
  )
  use_gated_activation: bool = False
  fflayer_tpl: LayerTpl = template_field(linears.FeedForward)
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  residual_dropout_prob: float = 0.0
  relu_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  relu_dropout_prob: float = 0.0
  residual_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  add_skip_connection: bool = True
  residual_weight: float = 1.0
  residual_droppath_prob: float = 0.0
  norm_policy: str = 'pre'
  internal_gshard_variance_scaling_fan_in_init: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      ffn0: Of the first projection [input_dims, hidden_dims].
      ffn1: Of the second projection [hidden_dims, output_dims].
    """

    ffn0: SplitDimsMapping = None
    ffn1: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the activations.

    Attributes:
      ffn0: Of the hidden activations.
      ffn0_extend_step: Of the hidden activations of a decoding step [B, H]
        (None: ffn0's batch and last entries).
      ffn1: Of the outputs.
      ffn1_extend_step: Of the outputs of a decoding step [B, D].
    """

    ffn0: SplitDimsMapping = None
    ffn0_extend_step: SplitDimsMapping = None
    ffn1: SplitDimsMapping = None
    ffn1_extend_step: SplitDimsMapping = None

  def _ffn(
      self, in_dims: int, out_dims: int, act: LayerTpl, wt: Any, out: Any,
      step_out: Any = None,
  ) -> LayerTpl:
    p = self.fflayer_tpl.clone().set(
        input_dims=in_dims,
        output_dims=out_dims,
        has_bias=self.has_bias,
        activation_tpl=act,
    )
    p.weight_split_dims_mapping.wt = wt
    p.activation_split_dims_mapping.out = out
    if hasattr(p.activation_split_dims_mapping, 'extend_step_out'):
      p.activation_split_dims_mapping.extend_step_out = step_out
    if self.internal_gshard_variance_scaling_fan_in_init:
      p.linear_tpl.params_init = WeightInit.Uniform((3.0 / in_dims) ** 0.5)
    return p

  def setup(self) -> None:
    check_norm_policy(self)
    output_dims = self.output_dims or self.input_dims
    if self.add_skip_connection and output_dims != self.input_dims:
      raise ValueError(
          f'TransformerFeedForward ({self.name}): a skip connection needs '
          f'output_dims == input_dims, got {output_dims} != {self.input_dims}.'
      )
    wp, ap = self.weight_split_dims_mapping, self.activation_split_dims_mapping
    identity = pax_fiddle.Config(activations_lib.Identity)
    create_norms(self, self.input_dims)
    act1 = identity if self.use_gated_activation else self.activation_tpl
    self.create_child(
        'ffn_layer1',
        self._ffn(self.input_dims, self.hidden_dims, act1, wp.ffn0, ap.ffn0,
                  ap.ffn0_extend_step),
    )
    if self.use_gated_activation:
      gate = self._ffn(
          self.input_dims, self.hidden_dims, self.activation_tpl, wp.ffn0,
          ap.ffn0, ap.ffn0_extend_step,
      )
      self.create_child('ffn_layer1_gate', gate)
    self.create_child(
        'relu_dropout', dropout(self.relu_dropout_tpl, self.relu_dropout_prob)
    )
    self.create_child(
        'ffn_layer2',
        self._ffn(self.hidden_dims, output_dims, identity, wp.ffn1, ap.ffn1,
                  ap.ffn1_extend_step),
    )
    self.create_child(
        'residual_dropout',
        dropout(self.residual_dropout_tpl, self.residual_dropout_prob),
    )
    create_droppath(self)

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor | None = None,
      segment_ids: JTensor | None = None,
  ) -> JTensor:
    """Applies the block to `inputs` [B, T, D] (paddings [B, T])."""
    del segment_ids
    inputs, keep = padding_keep(self, inputs, paddings)
    residual = inputs
    x = pre_norm(self, inputs)
    if self.use_gated_activation:  # The gate first, as in Pax.
      gate = self.ffn_layer1_gate(x)
      hidden = gate * self.ffn_layer1(x)
    else:
      hidden = self.ffn_layer1(x)
    hidden = checkpoint_name(hidden, 'ffn1')
    if not self.apply_padding_first and keep is not None:
      hidden = hidden * keep.astype(hidden.dtype)
    outputs = self.ffn_layer2(self.relu_dropout(hidden))
    outputs = checkpoint_name(outputs, 'ffn2')
    if not self.apply_padding_first and keep is not None:
      outputs = outputs * keep.astype(outputs.dtype)
    outputs = finish_branch(self, residual, outputs)
    if self.norm_policy == 'post_skip':
      outputs = self.layer_norm(outputs)
    return outputs

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> JTensor:
    """One decoding step: the block on `inputs` [B, D]."""
    del time_step
    return self(inputs)


class TransformerFeedForwardMoe(base_layer.BaseLayer):
  """A mixture-of-experts feed-forward block with top-2 routing.

  Each token goes to its two most probable experts (no capacity limit), and
  all experts are computed densely (einsums over the expert dim), which is
  exact and simple but spends E times the compute of one feed-forward layer.
  GShard's load-balancing loss is added as the auxiliary loss
  `aux_moe_load_balance_loss`. Variables: `gate` [D, E], `wi_0` [E, D, H],
  `wi_gate_0` (gated), `wo_0` [E, H, D].

  Attributes:
    input_dims: D (also the output depth).
    hidden_dims: H, the hidden depth of each expert.
    apply_padding_first: Zero padded inputs first.
    ln_tpl: Template of the normalization.
    activation_tpl: The activation.
    relu_dropout_tpl: Template of the hidden dropout.
    relu_dropout_prob: Dropout probability of the hidden layer.
    residual_dropout_tpl: Template of the output dropout.
    residual_dropout_prob: Dropout probability of the output.
    add_skip_connection: Whether to add the residual connection.
    residual_weight: Weight of the block's output in the residual sum.
    norm_policy: 'pre', 'post' or 'primer_hybrid'.
    residual_droppath_prob: Probability of dropping the block per example.
    gating_func: 'top2' or 'dense_top2' (the same here), or 'expert_choice'
      (each expert takes the S / E * unadjusted_expert_capacity_factor
      tokens of its group it rates best; no load-balancing loss).
    num_experts: E.
    num_groups: Routing groups of the load-balancing loss (its means are
      per group of consecutive tokens; routing itself is per token).
    min_group_size: If set, fewer groups when they would hold fewer tokens.
    expert_capacity_dim: Kept for configs (no capacity limit).
    unadjusted_expert_capacity_factor: Capacity factor of 'expert_choice'
      (kept for configs with top2).
    expert_weight_shards: Must be 1.
    second_expert_policy: Only 'all'.
    internal_gshard_variance_scaling_fan_in_init: Initialise the weights
      uniformly with bound sqrt(3 / fan_in).
    explicit_fan_in_fan_out_axes: Tell the initialiser the experts' fan axes.
    moe_load_balance_loss_weight: Weight of the load-balancing loss.
    gating_logit_cap: If positive, cap the router logits with tanh.
    moe_gating_embedding_level: What the router sees: 'token' (each token)
      or 'sentence' (the mean of the token's segment, given by the call's
      `segment_ids`, else of the row's unpadded tokens; inside a Transformer
      the latter, as Pax's Transformer passes no segment ids). 'sentence'
      needs [B, T, D] inputs and does not decode (extend_step).
    use_gated_activation: Hidden = act(x @ wi_gate) * (x @ wi).
  """

  input_dims: int = 0
  hidden_dims: int = 0
  apply_padding_first: bool = False
  ln_tpl: LayerTpl = template_field(normalizations.LayerNorm)
  activation_tpl: pax_fiddle.Config[activations_lib.BaseActivation] = (
      template_field(activations_lib.ReLU)
  )
  relu_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  relu_dropout_prob: float = 0.0
  residual_dropout_tpl: LayerTpl = template_field(stochastics.Dropout)
  residual_dropout_prob: float = 0.0
  add_skip_connection: bool = True
  residual_weight: float = 1.0
  norm_policy: str = 'pre'
  residual_droppath_prob: float = 0.0
  gating_func: str = 'top2'
  num_experts: int = 0
  num_groups: int = 0
  min_group_size: int | None = None
  expert_capacity_dim: int = 0
  unadjusted_expert_capacity_factor: float = 2.0
  expert_weight_shards: int = 1
  second_expert_policy: str = 'all'
  internal_gshard_variance_scaling_fan_in_init: bool = True
  explicit_fan_in_fan_out_axes: bool = False
  moe_load_balance_loss_weight: float = 1.0
  gating_logit_cap: float = 0.0
  moe_gating_embedding_level: str = 'token'
  use_gated_activation: bool = False

  class WeightSharding(base_layer.BaseLayer.WeightSharding):
    """Sharding of the weights.

    Attributes:
      me: Of the router `gate` [D, E].
      emh: Of `wi_0` [E, D, H].
      ehm: Of `wo_0` [E, H, D].
    """

    me: SplitDimsMapping = None
    emh: SplitDimsMapping = None
    ehm: SplitDimsMapping = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Pax's annotations of the routed activations, for configs that set
    them: this dense layer has no dispatch or combine tensors and does not
    constrain its activations by them.

    Attributes:
      gsm: Of the inputs by group [G, S, M].
      gs: Of the router's per-token values [G, S].
      gsec: Of the dispatch tensor [G, S, E, C].
      gecs: Of the combine tensor [G, E, C, S].
      gec: Of [G, E, C] tensors.
      egcm: Of the expert inputs and outputs [E, G, C, M].
      egch: Of the expert hidden activations [E, G, C, H].
      gecm: Of the combined outputs [G, E, C, M].
    """

    gsm: SplitDimsMapping = None
    gs: SplitDimsMapping = None
    gsec: SplitDimsMapping = None
    gecs: SplitDimsMapping = None
    gec: SplitDimsMapping = None
    egcm: SplitDimsMapping = None
    egch: SplitDimsMapping = None
    gecm: SplitDimsMapping = None

  def _check_config(self) -> None:
    where = f'TransformerFeedForwardMoe ({self.name})'
    check_norm_policy(self, ('pre', 'post', 'primer_hybrid'))
    checks = (
        (self.input_dims > 0 and self.hidden_dims > 0,
         'input_dims and hidden_dims must be positive'),
        (self.num_experts > 1, 'num_experts must be at least 2'),
        (self.gating_func in ('top2', 'dense_top2', 'expert_choice'),
         f'gating_func {self.gating_func!r} is not supported (top2, '
         'dense_top2 or expert_choice)'),
        (self.expert_weight_shards == 1, 'expert_weight_shards must be 1'),
        (self.second_expert_policy == 'all',
         "second_expert_policy must be 'all'"),
        (self.moe_gating_embedding_level in ('token', 'sentence'),
         "moe_gating_embedding_level must be 'token' or 'sentence', got "
         f'{self.moe_gating_embedding_level!r}'),
    )
    for ok, message in checks:
      if not ok:
        raise ValueError(f'{where}: {message}.')

  def _weight(self, name: str, shape: list[int], fan_in: int, wt: Any):
    init = None
    if self.internal_gshard_variance_scaling_fan_in_init:
      init = WeightInit.Uniform((3.0 / fan_in) ** 0.5)
    explicit = self.explicit_fan_in_fan_out_axes and len(shape) == 3
    self.create_variable(
        name,
        WeightHParams(
            shape=shape,
            init=init,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=wt,
            fan_in_axes=[-2] if explicit else None,
            fan_out_axes=[-1] if explicit else None,
        ),
    )

  def setup(self) -> None:
    self._check_config()
    d, h, e = self.input_dims, self.hidden_dims, self.num_experts
    wp = self.weight_split_dims_mapping
    create_norms(self, d)
    self.create_child(
        'residual_dropout',
        dropout(self.residual_dropout_tpl, self.residual_dropout_prob),
    )
    self.create_child(
        'relu_dropout', dropout(self.relu_dropout_tpl, self.relu_dropout_prob)
    )
    create_droppath(self)
    self.create_child('activation', self.activation_tpl.clone())
    self._weight('gate', [d, e], d, wp.me)
    if self.use_gated_activation:
      self._weight('wi_gate_0', [e, d, h], d, wp.emh)
    self._weight('wi_0', [e, d, h], d, wp.emh)
    self._weight('wo_0', [e, h, d], h, wp.ehm)

  def _experts(self, x: JTensor, paddings: JTensor | None, num_groups: int,
               routed_by: JTensor) -> tuple[JTensor, JTensor]:
    """Top-2 mixture of the experts at each token of x [..., D], routed by
    `routed_by` (x, or its sentence embeddings; the same shape)."""
    if self.gating_func == 'expert_choice':
      return self._expert_choice(x, num_groups, routed_by)
    logits = jnp.einsum('...m,me->...e', routed_by, self.theta.gate)
    logits = attentions.cap_logits(logits, self.gating_logit_cap)
    gates, aux_loss = top2_gating(logits, paddings, num_groups)
    hidden = self._hidden(x, '...m,emh->...eh')
    weighted = hidden * gates.astype(hidden.dtype)[..., None]
    return jnp.einsum('...eh,ehm->...m', weighted, self.theta.wo_0), aux_loss

  def _hidden(self, x: JTensor, spec: str) -> JTensor:
    """The experts' activated hidden layer; `spec` maps x to [.., E, .., H]."""
    hidden = jnp.einsum(spec, x, self.theta.wi_0)
    if self.use_gated_activation:
      gate = jnp.einsum(spec, x, self.theta.wi_gate_0)
      return self.relu_dropout(self.activation(gate) * hidden)
    return self.relu_dropout(self.activation(hidden))

  def _expert_choice(self, x: JTensor, num_groups: int,
                     routed_by: JTensor) -> tuple[JTensor, JTensor]:
    """Expert-choice routing (arXiv:2202.09368) of x [..., D] in groups."""
    grouped = x.reshape(num_groups, -1, x.shape[-1])  # [G, S, M]
    logits = jnp.einsum('gsm,me->gse',
                        routed_by.reshape(grouped.shape), self.theta.gate)
    aux_loss, gates, dispatch = gshard_utils.expert_choice_gating_on_logits(
        logits, self.num_experts, self.expert_capacity_dim, self.fprop_dtype,
        capacity_factor=self.unadjusted_expert_capacity_factor)
    dispatch = dispatch.astype(x.dtype)
    expert_in = jnp.einsum('gecs,gsm->egcm', dispatch, grouped)
    hidden = self._hidden(expert_in, 'egcm,emh->egch')
    expert_out = jnp.einsum('egch,ehm->egcm', hidden, self.theta.wo_0)
    out = jnp.einsum('egcm,gecs,gec->gsm', expert_out, dispatch,
                     gates.astype(x.dtype))
    return out.reshape(x.shape), aux_loss

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor | None = None,
      segment_ids: JTensor | None = None,
  ) -> JTensor:
    """Applies the block to `inputs` [B, T, D] (paddings [B, T]; segment_ids
    [B, T] are read with moe_gating_embedding_level='sentence')."""
    where = f'TransformerFeedForwardMoe ({self.name})'
    groups = routing_groups(math.prod(inputs.shape[:-1]), self.num_groups,
                            self.min_group_size, where)
    if self.moe_gating_embedding_level == 'sentence' and inputs.ndim != 3:
      raise ValueError(
          f"{where}: moe_gating_embedding_level='sentence' needs inputs "
          f'[batch, time, dims], got shape {inputs.shape}.')
    return self._forward(inputs, paddings, groups, segment_ids)

  def _forward(self, inputs: JTensor, paddings: JTensor | None, groups: int,
               segment_ids: JTensor | None = None) -> JTensor:
    inputs, keep = padding_keep(self, inputs, paddings)
    residual = inputs
    normed = pre_norm(self, inputs)
    routed_by = normed
    if self.moe_gating_embedding_level == 'sentence':
      routed_by = sentence_embeddings(normed, paddings, segment_ids)
    outputs, aux_loss = self._experts(normed, paddings, groups, routed_by)
    if keep is not None:
      outputs = outputs * keep.astype(outputs.dtype)
    outputs = finish_branch(self, residual, outputs)
    aux_loss = aux_loss.astype(self.fprop_dtype)
    aux_loss = aux_loss * self.moe_load_balance_loss_weight
    self.add_summary('aux_moe_load_balance_loss', aux_loss)
    self.add_aux_loss('aux_moe_load_balance_loss', aux_loss)
    return outputs

  def extend_step(self, inputs: JTensor, *, time_step: JTensor) -> JTensor:
    """One decoding step: the block on `inputs` [B, D] (one routing group:
    the load-balancing loss is not used in decoding)."""
    del time_step
    if self.moe_gating_embedding_level == 'sentence':
      raise ValueError(
          f'TransformerFeedForwardMoe ({self.name}): '
          "moe_gating_embedding_level='sentence' routes each token by the "
          'mean of its whole sentence, which a decoding step does not have; '
          "decode with moe_gating_embedding_level='token'.")
    return self._forward(inputs, None, 1)
