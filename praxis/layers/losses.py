"""Loss layers.

Public names: BiTemperedLoss.

The bi-tempered logistic loss (https://arxiv.org/abs/1906.03361) bounds the
loss of each example (t1 < 1) and gives the softmax heavier tails (t2 > 1);
(t1, t2) = (1, 1) is the softmax cross entropy. The math lives in
`_bitempered.py`.
"""

from jax import numpy as jnp

from praxis import base_layer
from praxis import pytypes
from praxis.layers import _bitempered

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit
JTensor = pytypes.JTensor


class BiTemperedLoss(base_layer.BaseLayer):
  """The bi-tempered logistic loss, its temperatures on a schedule.

  Training starts at (1, 1) and moves linearly to (t1, t2) between
  start_step and end_step (counted by the non-trainable `count`, which each
  training call increments); with end_step == 0 the temperatures are (t1, t2)
  from the start. Evaluation uses (t1, t2).

  Example:

    p = pax_fiddle.Config(losses.BiTemperedLoss, name='loss', t1=0.8, t2=1.2)
    # layer(logits [..., C], one_hot_labels [..., C]) -> [...]

  Attributes:
    t1: Temperature of the log (< 1 bounds the loss).
    t2: Temperature of the exp (> 1 makes the tails heavier).
    label_smoothing: Label smoothing, in [0, 1).
    start_step: The step at which the move away from (1, 1) starts.
    end_step: The step at which (t1, t2) is reached (0: from the start).
  """

  t1: float = 1.0
  t2: float = 1.0
  label_smoothing: float = 0.0
  start_step: int = 0
  end_step: int = 0

  def setup(self) -> None:
    if self.end_step < self.start_step:
      raise ValueError(f'BiTemperedLoss ({self.name}): end_step '
                       f'({self.end_step}) must be >= start_step '
                       f'({self.start_step}).')
    count = WeightHParams(
        shape=[], init=WeightInit.Constant(0.0), dtype=jnp.float32,
        collections=[base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC])
    self.create_variable('count', count, trainable=False)

  def temperature_schedule(self, count: JTensor) -> JTensor:
    """The weight of (1, 1) at step `count`: 1 before start_step, then
    falling linearly to 0 at end_step (0 throughout if end_step == 0)."""
    count = jnp.asarray(count, jnp.float32)
    before = jnp.where((self.end_step > 0) & (count < self.end_step), 1.0, 0.0)
    span = max(self.end_step - self.start_step, 1.0)
    ramp = jnp.maximum(1.0 - (count - self.start_step) / span, 0.0)
    return jnp.where(count >= self.start_step, ramp, before)

  def __call__(self, logits: JTensor, labels: JTensor) -> JTensor:
    """Per-example losses [...] of logits and one-hot labels [..., C]."""
    weight = 0.0
    if not self.do_eval:
      count = self.get_var('count')
      self.update_var('count', count + 1.0)
      weight = self.temperature_schedule(count)
    t1 = weight + self.t1 * (1.0 - weight)
    t2 = weight + self.t2 * (1.0 - weight)
    return _bitempered.bi_tempered_logistic_loss(
        logits, labels, t1, t2, self.label_smoothing)
