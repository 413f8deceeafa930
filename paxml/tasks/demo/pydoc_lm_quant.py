"""The demo LM trained with int8 quantization-aware training, or with 2:4
sparse feed-forward weights.

Public names: PydocTransformerLmQat, PydocTransformerLmSparse.

  python -m paxml.main --exp=tasks.demo.pydoc_lm_quant.PydocTransformerLmQat \\
      --job_log_dir=/tmp/pax_qat

QAT is Pax's `quantize.for_transformer` decorator (int8 fake quantization of
the attention and feed-forward weights and of the shared softmax); its
checkpoint quantizes to an int8 serving checkpoint with
`paxml.tools.quantize_checkpoint`. The sparse variant makes the feed-forward
projections quantization's `Linear` with a `SparsityHParams` (2:4 along the
contraction dim, masks recomputed every step, SR-STE gradients).
`benchmarks/quantization.py` measures both against the float run.
"""

from paxml import experiment_registry
from paxml.tasks.demo import pydoc_lm
from praxis import pax_fiddle
from praxis.layers import transformers
from praxis.layers.quantization import linears as quantized_linears
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import quantize
from praxis.layers.quantization import utils
from praxis.layers.quantization.sparsity import sparsity_hparams as sh
from praxis.layers.quantization.sparsity import sparsity_modes


@experiment_registry.register
@quantize.for_transformer(
    num_bits=8, quantization_type=qh.QuantizationType.FQ,
    mode=qh.QuantizationMode.TRAINING, quantize_embedding_softmax=True)
class PydocTransformerLmQat(pydoc_lm.PydocTransformerLm):
  """The demo LM with int8 fake-quant (QAT) weights."""


@experiment_registry.register
class PydocTransformerLmSparse(pydoc_lm.PydocTransformerLm):
  """The demo LM with N:M (default 2:4) sparse feed-forward weights."""

  SPARSITY_N_M = (2, 4)

  def task(self):
    task_p = super().task()
    sparsity = sh.SparsityHParams(
        sparsity_type=sh.SparsityType.STRUCTURED_NM,
        weight_params=sh.WeightSparsityParams(
            prune_rate=tuple(self.SPARSITY_N_M), sparse_ste=True),
        mode=sparsity_modes.TrainingMode(target_step=0),
        order=sh.SparsityOrder.C)
    for tr_p in utils.find_target_tpl(task_p.model, transformers.Transformer):
      tr_p.tr_fflayer_tpl.fflayer_tpl.linear_tpl = pax_fiddle.Config(
          quantized_linears.Linear, quantization=None, sparsity=sparsity)
    return task_p
