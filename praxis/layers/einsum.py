"""A layer computing an einsum of its input with a weight, plus a bias.

Public names: einsum_fan_axes, Einsum.

  proj = pax_fiddle.Config(einsum.Einsum, name='proj', eqn='...d,dnh->...nh',
                           w_shape=(8, 2, 4), use_bias=True)

The weight's fan-in axes (contracted with the input) and fan-out axes (kept in
the output) are read from the equation; the bias spans the fan-out axes,
which must therefore be the last axes of the output.
"""

from __future__ import annotations

from typing import Sequence

from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import _bias_add
from praxis.layers import base_ops

JTensor = pytypes.JTensor
template_field = base_layer.template_field


def _parse(eqn: str) -> tuple[str, str, str]:
  """'x,w->out' into its three terms; raises ValueError if malformed."""
  if eqn.count('->') != 1 or eqn.split('->')[0].count(',') != 1:
    raise ValueError(f"Expected an equation 'x,w->out', got {eqn!r}.")
  operands, out = eqn.split('->')
  x, w = operands.split(',')
  if '.' in w:
    raise ValueError(f'The weight term of {eqn!r} cannot hold an ellipsis.')
  return x, w, out


def einsum_fan_axes(eqn: str) -> tuple[list[int], list[int]]:
  """The weight axes contracted (fan-in) and kept (fan-out) by `eqn`.

  Args:
    eqn: 'x,w->out', e.g. '...d,df->...f'.

  Returns:
    (fan_in_axes, fan_out_axes), sorted indices into the weight's axes.
  """
  x, w, out = _parse(eqn)
  fan_in = sorted(i for i, d in enumerate(w) if d in x and d not in out)
  fan_out = sorted(i for i, d in enumerate(w) if d in out and d not in x)
  return fan_in, fan_out


class Einsum(base_layer.BaseLayer):
  """`einsum(eqn, inputs, w)` (+ `b` over the fan-out axes).

  Attributes:
    eqn: The equation 'x,w->out', e.g. '...d,df->...f'.
    w_shape: Shape of the weight `w`.
    use_bias: Whether to add a bias `b` (shaped as the fan-out axes of `w`).
    einsum_op_tpl: The einsum op (replaceable, e.g. by a quantized one).
  """

  eqn: str = ''
  w_shape: Sequence[int] = ()
  use_bias: bool = False
  einsum_op_tpl: pax_fiddle.Config[base_ops.EinsumOp] = template_field(
      base_ops.EinsumOp
  )

  def _where(self) -> str:
    return f'{type(self).__name__} ({self.name})'

  def setup(self) -> None:
    try:
      x, w, out = _parse(self.eqn)
    except ValueError as e:
      raise ValueError(f'{self._where()}: eqn: {e}') from None
    if len(w) != len(self.w_shape):
      raise ValueError(
          f'{self._where()}: w_shape {tuple(self.w_shape)} has '
          f'{len(self.w_shape)} dims but the weight term {w!r} of eqn has '
          f'{len(w)}.'
      )
    fan_in, fan_out = einsum_fan_axes(self.eqn)
    w_sharding = self.weight_split_dims_mapping.wt
    self.create_variable(
        'w',
        base_layer.WeightHParams(
            shape=list(self.w_shape),
            fan_in_axes=fan_in,
            fan_out_axes=fan_out,
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=w_sharding,
        ),
    )
    if self.use_bias:
      self._create_bias(x, w, out, w_sharding)
    self.create_child('einsum', self.einsum_op_tpl.clone())

  def _create_bias(self, x: str, w: str, out: str, w_sharding) -> None:
    bias_dims = [d for d in out if d in w and d not in x]
    if out[len(out) - len(bias_dims):] != ''.join(bias_dims):
      raise ValueError(
          f'{self._where()}: with use_bias, the weight-only output dims '
          f'{bias_dims} must be the last dims of the output {out!r}.'
      )
    b_sharding = None
    if w_sharding is not None:
      b_sharding = [w_sharding[w.index(d)] for d in bias_dims]
    self.create_variable(
        'b',
        base_layer.WeightHParams(
            shape=[self.w_shape[w.index(d)] for d in bias_dims],
            init=base_layer.WeightInit.Constant(0.0),
            mesh_shape=self.mesh_shape,
            tensor_split_dims_mapping=b_sharding,
        ),
    )

  def __call__(self, inputs: JTensor) -> JTensor:
    """Returns `einsum(eqn, inputs, w) (+ b)`, sharded as `.out`."""
    ret = self.einsum(self.eqn, inputs, self.theta.w)
    if self.use_bias:
      ret = _bias_add.add_bias(ret, self.theta.b)
    return base_layer.maybe_shard(
        ret, self.activation_split_dims_mapping.out, self.mesh_axis_names
    )
