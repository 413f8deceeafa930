"""Linear layers.

Public names: project_last_dim, stack_over_time, Linear, Bias, FeedForward,
MLPBlock, StackingOverTime.

Example:

  ffn = base_layer.instantiate(pax_fiddle.Config(
      linears.FeedForward, name='ffn', input_dims=4, output_dims=8,
      activation_tpl=pax_fiddle.Config(activations.GELU)))
  variables = ffn.init(jax.random.PRNGKey(0), jnp.ones((2, 4)))
  y = ffn.apply(variables, jnp.ones((2, 4)))  # gelu(x @ w + b), [2, 8].
"""

from __future__ import annotations

from typing import Any, Sequence

from jax import ad_checkpoint
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import activations
from praxis.layers import base_ops

JTensor = pytypes.JTensor
SplitDimsMapping = pytypes.SplitDimsMapping
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]


def _check_positive(layer: base_layer.BaseLayer, **fields: int) -> None:
  for name, value in fields.items():
    if value <= 0:
      raise ValueError(
          f'{type(layer).__name__} ({layer.name}): {name} must be positive, '
          f'got {value}.'
      )


def _check_last_dim(inputs: JTensor, weight_shape: Sequence[int]) -> None:
  if len(weight_shape) != 2:
    raise ValueError(f'Expected a [in, out] weight, got shape {weight_shape}.')
  if inputs.ndim < 1 or inputs.shape[-1] != weight_shape[0]:
    raise ValueError(
        f'The last dim of inputs {tuple(inputs.shape)} must equal the input '
        f'dim of the weight {tuple(weight_shape)}.'
    )


def project_last_dim(inputs: JTensor, weight: JTensor) -> JTensor:
  """Multiplies the last dim of `inputs` by `weight`, keeping leading dims.

  An einsum rather than a reshape to rank 2, which suits TPUs.

  Args:
    inputs: [..., input_dim].
    weight: [input_dim, output_dim].

  Returns:
    [..., output_dim].
  """
  _check_last_dim(inputs, weight.shape)
  return jnp.einsum('...y,yz->...z', inputs, weight)


def step_sharding(ap: Any, ndim: int) -> SplitDimsMapping:
  """The sharding of an output of rank `ndim` under a layer's
  ActivationSharding `ap`: for a 2-D one (a decoding step), its
  `extend_step_out` if that has two entries, else the batch and last
  entries of a 3-entry `ap.out`; otherwise `ap.out`."""
  out = ap.out
  if ndim != 2:
    return out
  extend_step_out = getattr(ap, 'extend_step_out', None)
  if extend_step_out is not None and len(extend_step_out) == 2:
    return extend_step_out
  if out is not None and len(out) == 3:
    return [out[0], out[2]]
  return out


class Linear(base_layer.BaseLayer):
  """A projection of the last dim without bias: `inputs @ w`.

  Attributes:
    input_dims: Depth of the input.
    output_dims: Depth of the output.
    weight_init: Initialiser of `w` (None: the layer's `params_init`).
    einsum_tpl: The einsum op used for the projection (replaceable, e.g. by a
      quantized einsum).
  """

  input_dims: int = 0
  output_dims: int = 0
  weight_init: WeightInit | None = None
  einsum_tpl: pax_fiddle.Config[base_ops.EinsumOp] = template_field(
      base_ops.EinsumOp
  )

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the output.

    Attributes:
      extend_step_out: Of a 2-D output [B, D] (a decoding step); None uses
        `out`'s batch and last entries when `out` has three.
    """

    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    _check_positive(
        self, input_dims=self.input_dims, output_dims=self.output_dims
    )
    self.create_variable(
        'w',
        WeightHParams(
            shape=[self.input_dims, self.output_dims],
            init=self.weight_init,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )
    self.create_child('einsum', self.einsum_tpl.clone())

  def __call__(self, inputs: JTensor) -> JTensor:
    """Projects `inputs` [..., input_dims] to [..., output_dims]."""
    w = self.theta.w
    _check_last_dim(inputs, w.shape)
    out = self.einsum('...y,yz->...z', inputs, w)
    out_sharding = step_sharding(self.activation_split_dims_mapping, out.ndim)
    return base_layer.maybe_shard(out, out_sharding, self.mesh_axis_names)


class Bias(base_layer.BaseLayer):
  """Adds a learned bias `b` [dims] to the last dim.

  Attributes:
    dims: Depth of the input.
    bias_init: Initial (constant) value of the bias.
  """

  dims: int = 0
  bias_init: float | None = 0.0

  def setup(self) -> None:
    _check_positive(self, dims=self.dims)
    self.create_variable(
        'b',
        WeightHParams(
            shape=[self.dims],
            init=WeightInit.Constant(self.bias_init),
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=self.weight_split_dims_mapping.wt,
        ),
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns `inputs + b`."""
    return _bias_add.add_bias(inputs, self.theta.b)


class FeedForward(base_layer.BaseLayer):
  """`activation(inputs @ w + b)`.

  The children are `linear`, `bias` (when `has_bias`) and `activation`;
  `weight_split_dims_mapping.wt` and `activation_split_dims_mapping.out` are
  passed to `linear`.

  Attributes:
    input_dims: Depth of the input.
    output_dims: Depth of the output.
    has_bias: Whether to add a bias.
    linear_tpl: Template of the projection layer.
    bias_tpl: Template of the bias layer.
    activation_tpl: Template of the activation layer.
    weight_init: Initialiser of the projection weight (None: `params_init`).
    bias_init: Initial (constant) value of the bias.
    checkpoint_str: If set, the pre-activation output is named so for
      `jax.checkpoint` policies (`jax.ad_checkpoint.checkpoint_name`).
  """

  input_dims: int = 0
  output_dims: int = 0
  has_bias: bool = True
  linear_tpl: LayerTpl = template_field(Linear)
  bias_tpl: LayerTpl = template_field(Bias)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU)
  )
  weight_init: WeightInit | None = None
  bias_init: float | None = 0.0
  checkpoint_str: str | None = None

  class ActivationSharding(base_layer.BaseLayer.ActivationSharding):
    """Sharding of the output (passed to `linear`).

    Attributes:
      extend_step_out: Of a 2-D output [B, D] (a decoding step).
    """

    extend_step_out: SplitDimsMapping = None

  def setup(self) -> None:
    wp = self.weight_split_dims_mapping
    ap = self.activation_split_dims_mapping
    linear_p = self.linear_tpl.clone().set(
        input_dims=self.input_dims,
        output_dims=self.output_dims,
        weight_init=self.weight_init,
        weight_split_dims_mapping=wp.clone(),
        activation_split_dims_mapping=ap.clone(),
    )
    self.linear: Linear
    self.create_child('linear', linear_p)
    if self.has_bias:
      bias_p = self.bias_tpl.clone().set(
          dims=self.output_dims, bias_init=self.bias_init
      )
      if self.mesh_shape is not None and ap.out is not None:
        # The bias is sharded as the last dim of the output.
        bias_p.weight_split_dims_mapping.wt = [ap.out[-1]]
      self.bias: Bias
      self.create_child('bias', bias_p)
    self.activation: activations.BaseActivation
    self.create_child('activation', self.activation_tpl.clone())

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns `activation(inputs @ w + b)`, shaped [..., output_dims]."""
    projected = self.linear(inputs)
    if self.has_bias:
      projected = self.bias(projected)
    if self.checkpoint_str is not None:
      projected = ad_checkpoint.checkpoint_name(
          projected, self.checkpoint_str
      )
    return self.activation(projected)


class MLPBlock(base_layer.BaseLayer):
  """`num_layers` FeedForward layers in a row: children `mlp_layers_{i}`.

  The first layer reads `ff_tpl.input_dims`, the last writes
  `ff_tpl.output_dims`; every other width is `hidden_dims`.

  Attributes:
    num_layers: Number of FeedForward layers (at least 1).
    hidden_dims: Width of the hidden layers.
    ff_tpl: Template of each FeedForward layer.
    activate_final: Whether the last layer applies its activation (if False,
      its activation is replaced by Identity).
  """

  num_layers: int = 3
  hidden_dims: int = 128
  ff_tpl: LayerTpl = template_field(FeedForward)
  activate_final: bool = True

  def setup(self) -> None:
    _check_positive(self, num_layers=self.num_layers)
    if self.num_layers > 1:
      _check_positive(self, hidden_dims=self.hidden_dims)
    hidden_p = self.ff_tpl.clone().set(
        input_dims=self.hidden_dims,
        output_dims=self.hidden_dims,
        weight_split_dims_mapping=self.weight_split_dims_mapping.clone(),
        activation_split_dims_mapping=(
            self.activation_split_dims_mapping.clone()
        ),
    )
    layer_ps = [hidden_p.clone() for _ in range(self.num_layers)]
    layer_ps[0].input_dims = self.ff_tpl.input_dims
    layer_ps[-1].output_dims = self.ff_tpl.output_dims
    if not self.activate_final:
      layer_ps[-1].activation_tpl = pax_fiddle.Config(activations.Identity)
    self.mlp_layers: list[FeedForward]
    self.create_children('mlp_layers', layer_ps)

  def __call__(self, inputs: JTensor) -> JTensor:
    """Runs the layers in order on `inputs` [..., ff_tpl.input_dims]."""
    for layer in self.mlp_layers:
      inputs = layer(inputs)
    return inputs


def _pad_time(
    x: JTensor,
    left: int,
    right: int,
    pad_value: float,
    repeat_left: bool,
    repeat_right: bool,
) -> JTensor:
  """Pads axis 1 of `x` with `pad_value`, or with copies of its end frames."""
  parts = []
  if left:
    parts.append(
        jnp.repeat(x[:, :1], left, axis=1)
        if repeat_left
        else jnp.full((x.shape[0], left) + x.shape[2:], pad_value, x.dtype)
    )
  parts.append(x)
  if right:
    parts.append(
        jnp.repeat(x[:, -1:], right, axis=1)
        if repeat_right
        else jnp.full((x.shape[0], right) + x.shape[2:], pad_value, x.dtype)
    )
  return jnp.concatenate(parts, axis=1) if len(parts) > 1 else x


def stack_over_time(
    x: JTensor,
    left_context: int,
    right_context: int,
    stride: int,
    pad_value: float = 0.0,
    repeat_left: bool = False,
    repeat_right: bool = False,
) -> JTensor:
  """Concatenates each frame of `x` with its neighbours, every `stride` steps.

  Args:
    x: [batch, time, depth].
    left_context: Frames taken before each centre frame.
    right_context: Frames taken after it.
    stride: Step between centre frames.
    pad_value: Value of the frames padded at both ends.
    repeat_left: Pad the start with copies of the first frame instead.
    repeat_right: Pad the end with copies of the last frame instead.

  Returns:
    [batch, ceil(time / stride), (left_context + 1 + right_context) * depth];
    output step k holds input frames k * stride - left_context ... k * stride +
    right_context, in order.
  """
  time = x.shape[1]
  padded = _pad_time(
      x, left_context, right_context, pad_value, repeat_left, repeat_right
  )
  window = left_context + 1 + right_context
  out = jnp.concatenate(
      [padded[:, i : i + time] for i in range(window)], axis=2
  )
  return out[:, ::stride]


class StackingOverTime(base_layer.BaseLayer):
  """Stacks each frame with its left and right context, every `stride` steps.

  For inputs [4], [1], [9], [3], [5], [2], [8] with left_context=1,
  right_context=1 and stride=3 the outputs are [0, 4, 1], [9, 3, 5], [2, 8, 0].
  No variables.

  Attributes:
    left_context: Frames stacked before the centre frame.
    right_context: Frames stacked after the centre frame.
    stride: Step between output frames.
    pad_with_left_frame: Pad the start with the first frame instead of 0s.
    pad_with_right_frame: Pad the end with the last frame instead of 0s.
    padding_reduce_option: 'reduce_min' (an output step is padding only if
      all its frames are) or 'reduce_max' (if any is).
  """

  left_context: int = 0
  right_context: int = 0
  stride: int = 0
  pad_with_left_frame: bool = False
  pad_with_right_frame: bool = False
  padding_reduce_option: str = 'reduce_min'

  def setup(self) -> None:
    where = f'{type(self).__name__} ({self.name})'
    if self.left_context < 0 or self.right_context < 0:
      raise ValueError(
          f'{where}: left_context and right_context must be >= 0, got '
          f'{self.left_context} and {self.right_context}.'
      )
    _check_positive(self, stride=self.stride)
    if self.padding_reduce_option not in ('reduce_min', 'reduce_max'):
      raise ValueError(
          f"{where}: padding_reduce_option must be 'reduce_min' or "
          f"'reduce_max', got {self.padding_reduce_option!r}."
      )

  @property
  def window_size(self) -> int:
    """Frames per output step; the output depth is this times the input's."""
    return self.left_context + 1 + self.right_context

  def _is_identity(self) -> bool:
    return self.window_size == 1 and self.stride == 1

  def __call__(
      self, inputs: JTensor, paddings: JTensor | None = None
  ) -> tuple[JTensor, JTensor | None]:
    """Stacks `inputs` [b, t, d] (and `paddings` [b, t, 1]) over time.

    Args:
      inputs: [batch, time, depth].
      paddings: [batch, time, 1] of 0 (real) / 1 (padded), or None.

    Returns:
      (outputs [b, ceil(t / stride), window_size * d],
      out_paddings [b, ceil(t / stride), 1]).
    """
    if self._is_identity():
      return inputs, paddings
    base_layer.assert_has_shape(inputs, [-1, -1, -1])
    args = (self.left_context, self.right_context, self.stride)
    repeat = {
        'repeat_left': self.pad_with_left_frame,
        'repeat_right': self.pad_with_right_frame,
    }
    outputs = stack_over_time(inputs, *args, pad_value=0.0, **repeat)
    if paddings is None:
      return outputs, jnp.zeros(outputs.shape[:-1] + (1,), outputs.dtype)
    base_layer.assert_has_shape(paddings, [-1, -1, 1])
    stacked = stack_over_time(paddings, *args, pad_value=1.0, **repeat)
    reduce = jnp.min if self.padding_reduce_option == 'reduce_min' else jnp.max
    return outputs, reduce(stacked, axis=2, keepdims=True)

  def unstack(self, stacked: JTensor) -> JTensor:
    """Recovers the frames of the input from stacked outputs.

    Args:
      stacked: [batch, steps, window_size * depth], as returned by `__call__`.

    Returns:
      [batch, (steps - 1) * stride + right_context + 1, depth]: the input
      frames (longer than the input by padding, or up to `stride -
      right_context - 1` frames shorter when the stride skips frames at the
      end).

    Raises:
      ValueError: if stride > window_size (frames were skipped).
    """
    if self._is_identity():
      return stacked
    if self.stride > self.window_size:
      raise ValueError(
          f'{type(self).__name__} ({self.name}): cannot unstack with stride '
          f'{self.stride} > window_size {self.window_size}.'
      )
    batch, steps, _ = stacked.shape
    frames = stacked.reshape(batch, steps, self.window_size, -1)
    window_idx, frame_idx = _unstack_indices(
        steps, self.left_context, self.right_context, self.stride
    )
    return frames[:, window_idx, frame_idx]


def _unstack_indices(
    steps: int, left: int, right: int, stride: int
) -> tuple[Any, Any]:
  """For each input frame t, an output step and a position holding it."""
  t = np.arange((steps - 1) * stride + right + 1)
  window_idx = np.minimum(t // stride, steps - 1)
  offset = t - window_idx * stride
  # Frames past the right context of their step sit in the next step.
  later = offset > right
  window_idx = window_idx + later
  frame_idx = left + offset - stride * later
  return window_idx, frame_idx
