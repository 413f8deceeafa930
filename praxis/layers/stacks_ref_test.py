"""Convolutions and transformer layers and stacks against the real Pax 1.4.

Pax 1.4 checks these layers against Lingvo (convolutions_test,
transformers_test), which cannot run here. Instead, testdata/make_ref_stacks.py
recorded the real Pax's variables and outputs for the cases in
testdata/stacks_cases.py; here the same configs are built with this project's
praxis, given the recorded variables and inputs, and must give the same
outputs (forward calls and extend_step decoding). The language models of the
same fixture are checked by stacks_lm_ref_test.py.
"""

import importlib.util
import os

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

_DIR = os.path.join(os.path.dirname(__file__), 'testdata')


def _load_cases():
  spec = importlib.util.spec_from_file_location(
      'praxis_stacks_cases', os.path.join(_DIR, 'stacks_cases.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


CASES = _load_cases()
REF = CASES.load_reference(os.path.join(_DIR, 'stacks_ref.npz'))


class StacksRefTest(parameterized.TestCase):

  def test_every_case_was_recorded(self):
    self.assertEqual(set(REF) - {'inputs'}, set(CASES.CASES))

  def test_inputs_are_the_recorded_ones(self):
    for k, v in CASES.make_inputs().items():
      np.testing.assert_array_equal(v, REF['inputs'][k], err_msg=k)

  @parameterized.named_parameters((n, n) for n in CASES.LAYER_CASES)
  def test_matches_real_pax(self, name):
    CASES.check_case(self, name, REF)


if __name__ == '__main__':
  absltest.main()
