"""A state-space (SSM) decoder LM on the pydoc topics: the demo's SSM twin.

Public names: PydocSsmLm.

The data, tokenizer, input pipeline, optimizer and decoding are those of
`pydoc_lm.PydocTransformerLm`; each layer of the decoder stack is a Gated
State Space block (`ssm_transformers.SSMGated`,
https://arxiv.org/abs/2212.10544) instead of self-attention plus
feed-forward:

  python -m paxml.main --exp=tasks.demo.pydoc_ssm.PydocSsmLm \\
      --job_log_dir=/tmp/pax_ssm --eval_on_test --decode_during_train

As for the transformer, the eval log-perplexity falls well below the unigram
baseline logged at start-up. The SSM is causal but does not see segment
boundaries: in packed training batches a document's states carry over from
the ones packed before it (decoding starts from zero states).
"""

from paxml import experiment_registry
from paxml.tasks.demo import pydoc_lm
from praxis import pax_fiddle
from praxis.layers import ssm
from praxis.layers import ssm_transformers


@experiment_registry.register
class PydocSsmLm(pydoc_lm.PydocTransformerLm):
  """A 2-layer, 128-wide gated-SSM LM on the pydoc topics (see module doc).

  Attributes (class constants, besides the transformer demo's):
    SSM_NHEADS: States per channel of each SSM.
    SSM_HIPPO_TYPE: A's initialization (see ssm.SSM).
    SSM_STEP_SIZE: The SSM discretization step.
    USE_GATED: SSMGated blocks (else SSMTransformer: the SSM in place of
      self-attention, with the feed-forward block).
  """

  SSM_NHEADS = 16
  SSM_HIPPO_TYPE = 'ss4d-1d-legs'
  SSM_STEP_SIZE = 0.01
  USE_GATED = True

  def _layer_tpl(self) -> pax_fiddle.Config[ssm_transformers.SSMTransformer]:
    cls = (ssm_transformers.SSMGated if self.USE_GATED
           else ssm_transformers.SSMTransformer)
    return pax_fiddle.Config(
        cls, ssm_tpl=pax_fiddle.Config(ssm.SSM), ssm_nheads=self.SSM_NHEADS,
        ssm_dim=self.MODEL_DIMS,
        ssm_l_max=max(self.SEQ_LEN, self.PROMPT_LEN + self.DECODE_STEPS),
        ssm_hippo_type=self.SSM_HIPPO_TYPE, ssm_step_size=self.SSM_STEP_SIZE,
        decode_num_samples=1)

  def task(self):
    task_p = super().task()
    stack = task_p.model.lm_tpl.stacked_transformer_tpl
    stack.transformer_layer_params_tpl = self._layer_tpl()
    task_p.name = 'pydoc_ssm'
    return task_p
