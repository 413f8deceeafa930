"""Transformer language models against the real Pax 1.4.

Pax 1.4's transformer_models_test checks TransformerLm against Lingvo, which
cannot run here. Instead, testdata/make_ref_stacks.py recorded the real Pax's
variables and outputs for the model cases in testdata/stacks_cases.py
(TransformerLm of each LanguageModelType, Primer and LPB attention variants,
TransformerEncoderDecoder); here the same configs, given the recorded
variables and inputs, must give the same logits and losses, in the forward
pass and in extend_step decoding.
"""

from absl.testing import absltest
from absl.testing import parameterized

# The cases module and the fixture, loaded once by the sibling test.
from praxis.layers import stacks_ref_test


class StacksLmRefTest(parameterized.TestCase):

  @parameterized.named_parameters(
      (n, n) for n in stacks_ref_test.CASES.MODEL_CASES)
  def test_matches_real_pax(self, name):
    stacks_ref_test.CASES.check_case(self, name, stacks_ref_test.REF)


if __name__ == '__main__':
  absltest.main()
