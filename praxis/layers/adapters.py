"""Residual adapters (https://arxiv.org/abs/1902.00751), one per task.

Public names: MultitaskResidualAdapter (norm -> down projection ->
activation -> up projection, plus the input; each task has its own weights,
picked by a task id per example or per token), AdaptedTransformerFeedForward
(a TransformerFeedForward with an adapter in its branch, 'sequential' or
'parallel', https://openreview.net/pdf?id=0RDcd5Axok).

Variables of MultitaskResidualAdapter: down_w [num_tasks, input_dims,
bottleneck_dims], down_b [num_tasks, bottleneck_dims], up_w [num_tasks,
bottleneck_dims, input_dims] (zero-initialized, so a new adapter is the
identity up to up_b), up_b [num_tasks, input_dims]; child `norm`.
"""

import fiddle as fdl
import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes
from praxis.layers import activations
from praxis.layers import normalizations
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
JTensor = pytypes.JTensor
WeightInit = base_layer.WeightInit
WeightHParams = base_layer.WeightHParams
template_field = base_layer.template_field
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]

_NORMS = (normalizations.BatchNorm, normalizations.GroupNorm,
          normalizations.LayerNorm)


def _per_task(onehot: JTensor, table: JTensor, inputs_ndim: int,
              is_matrix: bool) -> JTensor:
  """The rows of `table` [K, ...] for each task id, shaped to broadcast.

  Args:
    onehot: [..., K] one-hot task ids (leading dims of the inputs).
    table: [K, a] (bias) or [K, a, b] (matrix).
    inputs_ndim: The rank of the inputs [..., input_dims].
    is_matrix: Whether table holds matrices.

  Returns:
    [..., a] or [..., a, b], with a singleton time axis inserted when the
    task ids stop one dimension short of the inputs' leading dims.
  """
  picked = jnp.tensordot(onehot, table, axes=[[-1], [0]])
  if is_matrix and picked.ndim <= inputs_ndim:
    picked = jnp.expand_dims(picked, -3)
  elif not is_matrix and picked.ndim < inputs_ndim:
    picked = jnp.expand_dims(picked, -2)
  return picked


class MultitaskResidualAdapter(base_layer.BaseLayer):
  """A residual adapter with one set of weights per task.

  Example:

    p = pax_fiddle.Config(adapters.MultitaskResidualAdapter, name='adapter',
                          input_dims=8, bottleneck_dims=2, num_tasks=3)
    # layer(x [B, T, 8], tasks=[B] or [B, T] int ids) -> [B, T, 8]

  Attributes:
    input_dims: Depth of the inputs.
    bottleneck_dims: Depth of the bottleneck.
    num_tasks: Number of tasks (sets of weights).
    norm_tpl: The input normalization (BatchNorm, GroupNorm or LayerNorm),
      or None.
    activation_tpl: The activation at the bottleneck.
  """

  input_dims: int = 0
  bottleneck_dims: int = 0
  num_tasks: int = 1
  norm_tpl: LayerTpl | None = template_field(normalizations.LayerNorm)
  activation_tpl: pax_fiddle.Config[activations.BaseActivation] = (
      template_field(activations.ReLU))

  def _check_norm(self) -> None:
    cls = fdl.get_callable(self.norm_tpl)
    if cls not in _NORMS:
      raise NotImplementedError(
          f'MultitaskResidualAdapter ({self.name}): norm_tpl must be one of '
          f'{[c.__name__ for c in _NORMS]} or None, got {cls.__name__}.')

  def setup(self) -> None:
    if self.norm_tpl:
      self._check_norm()
      self.create_child('norm', self.norm_tpl.clone().set(dim=self.input_dims))
    k, i, n = self.num_tasks, self.input_dims, self.bottleneck_dims
    self.create_variable('down_w', WeightHParams(shape=[k, i, n]))
    self.create_variable('down_b', WeightHParams(shape=[k, n]))
    self.create_variable(
        'up_w', WeightHParams(shape=[k, n, i], init=WeightInit.Constant(0.0)))
    self.create_variable('up_b', WeightHParams(shape=[k, i]))
    self.create_child('activation', self.activation_tpl)

  def _check_tasks(self, inputs: JTensor, tasks: JTensor | None) -> JTensor:
    if tasks is None:
      if self.num_tasks != 1:
        raise ValueError(
            f'MultitaskResidualAdapter ({self.name}): tasks must be given '
            f'when num_tasks ({self.num_tasks}) != 1.')
      return jnp.zeros(inputs.shape[:-1], jnp.int32)
    lead = inputs.shape[:tasks.ndim]
    if tuple(tasks.shape) != tuple(lead) or not 1 <= (
        inputs.ndim - tasks.ndim) <= 2:
      raise ValueError(
          f'MultitaskResidualAdapter ({self.name}): tasks of shape '
          f'{tasks.shape} must be the leading dims of the inputs '
          f'{inputs.shape}, one or two dims shorter.')
    return tasks

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor | None = None,
      tasks: JTensor | None = None,
      add_residual: bool = True,
  ) -> JTensor:
    """Adapts inputs [..., input_dims].

    Args:
      inputs: [batch, ..., input_dims].
      paddings: 1.0 at padded positions (used by BatchNorm only).
      tasks: int task ids, the leading dims of the inputs ([batch] or
        [batch, time] for [batch, time, input_dims] inputs); None needs
        num_tasks == 1.
      add_residual: Whether to add the inputs to the result.

    Returns:
      The adapted activations, shaped as inputs.
    """
    tasks = self._check_tasks(inputs, tasks)
    onehot = jax.nn.one_hot(tasks, self.num_tasks, dtype=inputs.dtype)
    theta, nd = self.theta, inputs.ndim
    down_w = _per_task(onehot, theta.down_w, nd, True)
    down_b = _per_task(onehot, theta.down_b, nd, False)
    up_w = _per_task(onehot, theta.up_w, nd, True)
    up_b = _per_task(onehot, theta.up_b, nd, False)
    x = self.norm(inputs, paddings) if self.norm_tpl else inputs
    hidden = self.activation(
        jnp.einsum('...i,...in->...n', x, down_w) + down_b)
    out = jnp.einsum('...n,...ni->...i', hidden, up_w) + up_b
    return inputs + out if add_residual else out


class AdaptedTransformerFeedForward(transformers.TransformerFeedForward):
  """A TransformerFeedForward with a residual adapter in its branch.

  'sequential' adapts the feed-forward branch's output; 'parallel' adds the
  adapter of the block's inputs to the branch. The skip connection (with
  residual_weight) comes after. Setting the adapter's norm_tpl to None is
  recommended.

  Attributes:
    adapter_tpl: The adapter (a MultitaskResidualAdapter).
    mode: 'sequential' or 'parallel'.
  """

  adapter_tpl: LayerTpl = template_field(None)
  mode: str = 'sequential'

  def setup(self) -> None:
    super().setup()
    if self.mode not in ('sequential', 'parallel'):
      raise ValueError(
          f'AdaptedTransformerFeedForward ({self.name}): mode must be '
          f"'sequential' or 'parallel', got {self.mode!r}.")
    if self.adapter_tpl is None:
      raise ValueError(f'AdaptedTransformerFeedForward ({self.name}): '
                       'adapter_tpl must be set.')
    if self.residual_droppath_prob:
      raise NotImplementedError(
          f'AdaptedTransformerFeedForward ({self.name}): '
          'residual_droppath_prob is not supported with adapters.')
    self.create_child('adapters', self.adapter_tpl)

  def __call__(
      self,
      inputs: JTensor,
      paddings: JTensor | None = None,
      segment_ids: JTensor | None = None,
      tasks: JTensor | None = None,
  ) -> JTensor:
    """The block on inputs [B, T, D] with the adapter of `tasks`."""
    x = super().__call__(inputs, paddings, segment_ids=segment_ids)
    if self.add_skip_connection:  # Take the branch back out of the sum.
      x = (x - inputs) / self.residual_weight
    source = x if self.mode == 'sequential' else inputs
    x = x + self.adapters(source, paddings, add_residual=False, tasks=tasks)
    if self.add_skip_connection:
      x = inputs + x * self.residual_weight
    return x
