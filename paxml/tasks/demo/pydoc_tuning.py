"""A tuning study of the demo LM: learning rate, width and activation.

The default demo (`pydoc_lm.PydocTransformerLm`) with three decisions for the
tuner — the peak learning rate, the model width and the feed-forward
activation (a layer choice), two values each — and short trials, scored on
the test split's log-perplexity; a sweep, so 8 trials cover the grid:

  python -m paxml.main --exp=tasks.demo.pydoc_tuning.PydocLmTuning \\
      --job_log_dir=/tmp/pydoc_study --study=pydoc --num_trials=8

Each trial trains under `/tmp/pydoc_study/<trial>/<decisions>/`, with its
own checkpoints and TensorBoard summaries; the run ends with a table of the
trials and writes `/tmp/pydoc_study/pydoc_summary.json` with the best one.
Run the command again after a crash or with a larger --num_trials and the
study resumes: finished trials are not trained again.
"""

import pyglove as pg

from paxml import automl
from paxml import experiment_registry
from paxml.tasks.demo import pydoc_lm
from praxis import pax_fiddle
from praxis.layers import activations


@experiment_registry.register
class PydocLmTuning(pydoc_lm.PydocTransformerLm):
  """The demo LM with the learning rate, width and activation tuned."""

  NUM_TRAIN_STEPS = 200
  WARMUP_STEPS = 20
  LEARNING_RATE = pg.oneof([1e-3, 1e-2])
  MODEL_DIMS = pg.oneof([64, 128])
  ACTIVATION = pg.oneof([activations.ReLU, activations.GELU])

  def decode_datasets(self):
    return []

  def task(self):
    task_p = super().task()
    model_dims = self.MODEL_DIMS
    lm = task_p.model.lm_tpl
    lm.model_dims = model_dims
    stack = lm.stacked_transformer_tpl
    stack.model_dims = model_dims
    stack.hidden_dims = 4 * model_dims
    layer = stack.transformer_layer_params_tpl
    layer.tr_fflayer_tpl.activation_tpl = pax_fiddle.Config(self.ACTIVATION)
    train = task_p.train
    train.eval_interval_steps = 100
    train.save_interval_steps = 200
    train.summary_interval_steps = 50
    return task_p

  def search(self):
    return automl.SearchHParams(
        search_algorithm=pax_fiddle.Config(automl.Sweeping),
        search_reward=pax_fiddle.Config(
            automl.SingleObjective, metric=automl.Metric.eval('log_pplx'),
            goal='minimize'),
        max_num_trials=8)
