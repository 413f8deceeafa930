"""The QAT and sparse demo experiments rewrite the right layers."""

from absl.testing import absltest
import fiddle as fdl
from paxml.tasks.demo import pydoc_lm_quant
from praxis import test_utils
from praxis.layers import transformers
from praxis.layers.quantization import linears as quantized_linears
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import utils


def _ffn_linears(task_p):
  return [tr.tr_fflayer_tpl.fflayer_tpl.linear_tpl for tr in
          utils.find_target_tpl(task_p.model, transformers.Transformer)]


class PydocLmQuantTest(test_utils.TestCase):

  def test_qat_is_int8_fake_quant(self):
    task_p = pydoc_lm_quant.PydocTransformerLmQat().task()
    self.assertEqual(pydoc_lm_quant.PydocTransformerLmQat.__name__,
                     'PydocTransformerLmQat')
    for linear_p in _ffn_linears(task_p):
      self.assertIs(fdl.get_callable(linear_p), quantized_linears.Linear)
      q = linear_p.quantization
      self.assertEqual(q.quantization_type, qh.QuantizationType.FQ)
      self.assertEqual(q.mode, qh.QuantizationMode.TRAINING)
      self.assertEqual(q.weight_params.precision, 8)

  def test_sparse_is_2_4(self):
    task_p = pydoc_lm_quant.PydocTransformerLmSparse().task()
    linears_p = _ffn_linears(task_p)
    self.assertNotEmpty(linears_p)
    for linear_p in linears_p:
      self.assertIsNone(linear_p.quantization)
      self.assertEqual(linear_p.sparsity.weight_params.prune_rate, (2, 4))


if __name__ == '__main__':
  absltest.main()
