"""Transformer language models against the real Pax 1.4.

Pax 1.4's transformer_models_test checks TransformerLm against Lingvo, which
cannot run here. Instead, testdata/make_ref_stacks.py recorded the real Pax's
variables and outputs for the model cases in testdata/stacks_cases.py
(TransformerLm of each LanguageModelType, Primer and LPB attention variants,
TransformerEncoderDecoder); here the same configs, given the recorded
variables and inputs, must give the same logits and losses, in the forward
pass and in extend_step decoding.
"""

import importlib.util
import os

from absl.testing import absltest
from absl.testing import parameterized

_DIR = os.path.join(os.path.dirname(__file__), 'testdata')


def _load_cases():
  spec = importlib.util.spec_from_file_location(
      'praxis_stacks_cases', os.path.join(_DIR, 'stacks_cases.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


_CASES = _load_cases()
_REF = _CASES.load_reference(os.path.join(_DIR, 'stacks_ref.npz'))


class StacksLmRefTest(parameterized.TestCase):

  @parameterized.named_parameters((n, n) for n in _CASES.MODEL_CASES)
  def test_matches_real_pax(self, name):
    _CASES.check_case(self, name, _REF)


if __name__ == '__main__':
  absltest.main()
