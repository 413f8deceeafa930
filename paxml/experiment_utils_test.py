"""Tests of experiment_utils' summary and the parser that reads it back."""

from absl.testing import absltest
from paxml import base_experiment
from paxml import experiment_utils
from paxml import experiment_vars_summary_parser


class _A(base_experiment.BaseExperiment):
  LAYERS = 2
  NAME = 'a'
  SHAPE = (1, 'x')

  def task(self):
    return None

  def datasets(self):
    return []


class _B(_A):
  NAME = 'b'
  USE_BIAS = True


class SummaryTest(absltest.TestCase):

  def test_each_variable_under_its_live_owner(self):
    text = experiment_utils.get_cls_vars_summary(_B)
    sections = text.split('\n\n')
    self.assertTrue(sections[0].startswith(
        'paxml.base_experiment.BaseExperiment:\n    _abc_impl: '))
    self.assertEqual(sections[1],
                     f"{__name__}._A:\n    LAYERS: 2\n    SHAPE: (1, 'x')")
    self.assertEqual(sections[2],
                     f'{__name__}._B:\n    NAME: b\n    USE_BIAS: True\n')

  def test_parse_reads_literals_and_keeps_the_rest_as_text(self):
    parsed = experiment_vars_summary_parser.parse(
        experiment_utils.get_cls_vars_summary(_B))
    self.assertEqual({k: v for k, v in parsed.items() if k != '_abc_impl'},
                     {'LAYERS': 2, 'SHAPE': (1, 'x'), 'NAME': 'b',
                      'USE_BIAS': True})
    self.assertIsInstance(parsed['_abc_impl'], str)


if __name__ == '__main__':
  absltest.main()
