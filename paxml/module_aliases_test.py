"""Names that Pax 1.4's modules re-export from others, and paxml.main's
jitter: code that reaches them through Pax's module paths finds them."""

import importlib
from unittest import mock

from absl.testing import absltest
import orbax.checkpoint as ocp
from paxml import base_experiment
from paxml import base_metrics
from paxml import checkpoint_creators
from paxml import checkpoint_managers
from paxml import checkpoint_metadata
from paxml import checkpoint_paths
from paxml import checkpoint_types
from paxml import checkpoint_version
from paxml import decode_programs
from paxml import eval_lib
from paxml import io_utils
from paxml import main
from paxml import programs
from paxml import summary_utils
from paxml import train_states
from paxml import trainer_lib
from paxml.tasks.vision.params import mnist
from paxml.tools import validate_config_lib
from praxis import base_hyperparams
from praxis import base_layer
from praxis import base_model
from praxis import optimizer_prefix_vectorization
from praxis import optimizers
from praxis import py_utils
from praxis.layers import checkpoint_policy
from praxis.layers import models
from praxis.layers import rnn_cell
from praxis.layers import ssm_transformers
from praxis.layers.chain import chain_extensions
from praxis.layers.quantization import convolutions as q_convolutions
from praxis.layers.quantization import multi_query_attention as q_mqa
from praxis.layers.quantization import quantization_hparams


class ModuleAliasesTest(absltest.TestCase):

  def test_aliases_are_the_originals(self):
    pairs = [
        (checkpoint_paths.get_version, checkpoint_version.get_version),
        (checkpoint_paths.get_version_key, checkpoint_version.get_version_key),
        (checkpoint_paths.retrieve_checkpoint_type,
         checkpoint_types.retrieve_checkpoint_type),
        (checkpoint_paths.Checkpointer, ocp.Checkpointer),
        (checkpoint_paths.AsyncCheckpointer, ocp.AsyncCheckpointer),
        (checkpoint_metadata.Checkpointer, ocp.Checkpointer),
        (checkpoint_creators.Checkpointer, ocp.Checkpointer),
        (checkpoint_creators.TrainStateProvenance,
         train_states.TrainStateProvenance),
        (decode_programs.BaseMetrics, base_metrics.BaseMetrics),
        (decode_programs.EvaluationMode, io_utils.EvaluationMode),
        (decode_programs.StepFnOutput, trainer_lib.StepFnOutput),
        (eval_lib.EvaluationMode, io_utils.EvaluationMode),
        (eval_lib.NO_PREFIX_KEY, optimizer_prefix_vectorization.NO_PREFIX_KEY),
        (eval_lib.instantiate, base_hyperparams.instantiate),
        (summary_utils.TensorProvenance, train_states.TensorProvenance),
        (summary_utils.TrainStateProvenance,
         train_states.TrainStateProvenance),
        (validate_config_lib.BaseExperimentT, base_experiment.BaseExperimentT),
        (mnist.Predictions, base_model.Predictions),
        (models.Metrics, base_model.Metrics),
        (models.Predictions, base_model.Predictions),
        (rnn_cell.Params, py_utils.HParams),
        (ssm_transformers.AutodiffCheckpointType,
         checkpoint_policy.AutodiffCheckpointType),
        (optimizer_prefix_vectorization.GeneralGradientTransformation,
         optimizers.GeneralGradientTransformation),
        (optimizer_prefix_vectorization.ShardedGradientTransformation,
         optimizers.ShardedGradientTransformation),
        (q_convolutions.QuantizationParams,
         quantization_hparams.QuantizationParams),
        (q_mqa.QuantizationMode, quantization_hparams.QuantizationMode),
        (q_mqa.QuantizationParams, quantization_hparams.QuantizationParams),
        (q_mqa.QuantizationType, quantization_hparams.QuantizationType),
        (chain_extensions.Chain,
         importlib.import_module('praxis.layers.chain.chain').Chain),
        (chain_extensions.BaseLayer, base_layer.BaseLayer),
    ]
    for module in (checkpoint_creators, checkpoint_managers, decode_programs,
                   eval_lib, programs, summary_utils):
      pairs.append((module.TrainState, train_states.TrainState))
    for alias, original in pairs:
      self.assertIs(alias, original)


class WaitWithRandomJitterTest(absltest.TestCase):

  def test_sleeps_a_whole_number_of_seconds_in_range(self):
    with mock.patch.object(main.time, 'sleep') as sleep:
      for _ in range(20):
        main.wait_with_random_jitter(min_secs=2, max_secs=4)
    seconds = [call.args[0] for call in sleep.call_args_list]
    self.assertLen(seconds, 20)
    self.assertTrue(all(s in (2, 3, 4) for s in seconds), seconds)


if __name__ == '__main__':
  absltest.main()
