"""Summaries of the layers of a repeated stack reach TensorBoard, as in Pax.

A StackedTransformerRepeated unpacks each summary of its repeated layer into
a list of `x_times` values; the trainer writes them as one tag per layer,
`<name>_<i>_<type>` (Pax's flatten_flax_summaries).
"""

import pathlib
import tempfile

from absl.testing import absltest
import jax
from jax import numpy as jnp
from paxml import executors
from paxml import train
from paxml.tasks.lm import model_params
from paxml.tasks.lm.params import lm_cloud
from tensorboard.backend.event_processing import event_accumulator

_FF = 'lm/transformer/repeat/sub/x_layers_0/ff_layer/'


class _TinyRepeatedMoe(lm_cloud.LmCloudSpmdTest):
  """Two repeated layers, each with a top-2 mixture of
  experts (one per device)."""

  PERCORE_BATCH_SIZE = 1
  ICI_MESH_SHAPE = (1, jax.device_count(), 1)
  MAX_SEQ_LEN = 8
  VOCAB_SIZE = 16
  MODEL_DIMS = 8
  HIDDEN_DIMS = 16
  DIMS_PER_HEAD = 4
  NUM_LAYERS = 2
  FPROP_DTYPE = jnp.float32

  def task(self):
    task_p = super().task()
    stack_p = model_params.inner_stack(
        task_p.model.lm_tpl.stacked_transformer_tpl)
    stack_p.num_experts = jax.device_count()  # Sharded over 'data'.
    stack_p.num_groups = 1
    stack_p.moe_layers = [0]
    model_params.maybe_setup_moe_params(stack_p)
    task_p.train.num_train_steps = 2
    task_p.train.summary_interval_steps = 1
    return task_p


class RepeatedLayerSummariesTest(absltest.TestCase):

  def test_each_layer_gets_its_own_tag(self):
    exp = _TinyRepeatedMoe()
    configs = train.ExperimentConfigs.from_experiment(exp, 'tiny')
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, eval_on_test=False, decode_during_train=False,
        enable_checkpoint_saving=False))
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'train'),
        size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()['scalars']
    # One tag per repeated layer, `_<i>` before the type suffix.
    per_layer = sorted(t for t in tags if 'load_balance' in t)
    self.assertEqual(per_layer, [_FF + 'aux_moe_load_balance_loss_0_scalar',
                                 _FF + 'aux_moe_load_balance_loss_1_scalar'])
    values = {t: {e.step: e.value for e in acc.Scalars(t)} for t in per_layer}
    aux = {e.step: e.value for e in acc.Scalars('Metrics/aux_loss')}
    self.assertEqual(sorted(aux), [1, 2])
    for step in (1, 2):
      layers = [values[t][step] for t in per_layer]
      # The model's only aux losses are the two layers' load-balancing
      # losses (weight 1): their sum is the aux_loss metric of the step.
      self.assertAlmostEqual(sum(layers), aux[step], places=5)
      for value in layers:
        # E * sum_e f_e p_e with f, p distributions over E experts: in
        # (0, E], and not a placeholder zero.
        self.assertGreater(value, 0.0)
        self.assertLessEqual(value, jax.device_count())


if __name__ == '__main__':
  absltest.main()
