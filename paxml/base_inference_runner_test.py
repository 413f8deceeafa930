"""Tests of BaseInferenceRunner (serialization needs tensorflow_datasets)."""

import importlib.util
from typing import Any

from absl.testing import absltest
import numpy as np
from paxml import base_inference_runner
from praxis import pax_fiddle
from praxis import py_utils


class _Echo(base_inference_runner.BaseInferenceRunner):
  output_schema: Any = None

  def infer(self, train_state, prng_key, var_weight_hparams, input_batch):
    return py_utils.NestedMap(doubled=2 * input_batch.x)


class BaseInferenceRunnerTest(absltest.TestCase):

  def test_configured_runner_infers(self):
    runner = pax_fiddle.build(pax_fiddle.Config(_Echo, model=None))
    out = runner.infer(None, None, None, py_utils.NestedMap(x=np.arange(3)))
    np.testing.assert_array_equal(out.doubled, [0, 2, 4])
    self.assertIsNone(runner._model)

  def test_abstract_methods_must_be_defined(self):

    class Incomplete(base_inference_runner.BaseInferenceRunner):
      pass

    with self.assertRaises(TypeError):
      Incomplete()

  @absltest.skipIf(importlib.util.find_spec('tensorflow_datasets') is None,
                   'needs tensorflow_datasets')
  def test_serialize_outputs_one_example_per_row(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    schema = py_utils.NestedMap(v=tfds.features.Tensor(shape=(2,),
                                                       dtype=np.float32))
    runner = _Echo(output_schema=schema)
    rows = runner.serialize_outputs(
        py_utils.NestedMap(v=np.arange(6, dtype=np.float32).reshape(3, 2)))
    self.assertLen(rows, 3)


if __name__ == '__main__':
  absltest.main()
