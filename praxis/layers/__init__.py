"""The public layers of praxis, re-exported by name (`layers.Linear`, ...).

Public names: those of praxis' own `praxis/layers/__init__.py` that this
project provides — the activations (BaseActivation, ReLU, GELU, ...,
Identity), linears (Linear, Bias, FeedForward, MLPBlock, StackingOverTime,
project_last_dim), stochastics (Dropout, StochasticResidual), Sequential,
Einsum, the op layers (EinsumOp, EinsumGatedOp, ArrayLookup), and the names
listed in `_OPTIONAL` below for normalizations, embeddings, attentions,
transformers, convolutions, poolings, ResNets, models and the rest.

The modules in `_OPTIONAL` are re-exported only if they import and define the
name, so `from praxis import layers` keeps working while one of them is
missing or broken: an absent module or name is logged at info level, a module
that fails to import at warning level, and importing the module directly still
raises the real error.
"""

import importlib

from absl import logging
from praxis.layers import activations
from praxis.layers import base_ops
from praxis.layers import einsum
from praxis.layers import linears
from praxis.layers import sequential
from praxis.layers import stochastics

BaseActivation = activations.BaseActivation
CubedReLU = activations.CubedReLU
Exp = activations.Exp
GELU = activations.GELU
Identity = activations.Identity
LeakyReLU = activations.LeakyReLU
ReLU = activations.ReLU
ReLU6 = activations.ReLU6
Sigmoid = activations.Sigmoid
SiLU = activations.SiLU
Softplus = activations.Softplus
SquaredReLU = activations.SquaredReLU
Swish = activations.Swish
Tanh = activations.Tanh

ArrayLookup = base_ops.ArrayLookup
EinsumGatedOp = base_ops.EinsumGatedOp
EinsumOp = base_ops.EinsumOp
Einsum = einsum.Einsum

Bias = linears.Bias
FeedForward = linears.FeedForward
Linear = linears.Linear
MLPBlock = linears.MLPBlock
project_last_dim = linears.project_last_dim
StackingOverTime = linears.StackingOverTime

Sequential = sequential.Sequential

Dropout = stochastics.Dropout
StochasticResidual = stochastics.StochasticResidual

# Module (under praxis.layers) -> the names praxis re-exports from it.
_OPTIONAL = {
    'attentions': (
        'AttentionProjection',
        'causal_mask',
        'causal_segment_mask',
        'CausalDepthwiseConv1D',
        'convert_paddings_to_mask',
        'DotProductAttention',
        'DotProductAttentionXL',
        'LocalSelfAttention',
        'LocalSelfAttentionXL',
        'PerDimScale',
        'RelativeBias',
        'segment_mask',
    ),
    'checkpoint_policy': ('AutodiffCheckpointType',),
    'convolutions': (
        'Conv2D',
        'ConvBNAct',
        'ConvBNActWithPadding',
        'DepthwiseConv1D',
        'LightConv1D',
    ),
    'embedding_softmax': (
        'Embedding',
        'FullSoftmax',
        'GShardSharedEmbeddingSoftmax',
        'PositionalEmbedding',
        'PositionalEmbedding2D',
        'SharedEmbeddingSoftmax',
        'SigmoidCrossEntropy',
        'TrainablePositionalEmbedding',
    ),
    'models': (
        'BertModel',
        'ClassificationMLPModel',
        'ClassificationModel',
        'LanguageModel',
        'SequenceModel',
    ),
    'normalizations': (
        'BaseNormalization',
        'BatchNorm',
        'compute_moments',
        'GroupNorm',
        'IdentityNorm',
        'LayerNorm',
        'RmsNorm',
        'RmsNormNoScale',
    ),
    'pipeline': ('LayerwiseShardablePipelined',),
    'poolings': ('GlobalPooling', 'Pooling'),
    'repeats': ('Repeat',),
    'resnets': ('ResNet', 'ResNetBlock'),
    'transformer_models': (
        'LanguageModelType',
        'TransformerEncoderDecoder',
        'TransformerLm',
    ),
    'transformers': (
        'compute_attention_masks_for_extend_step',
        'compute_attention_masks_for_fprop',
        'PipelinedTransformer',
        'StackedTransformer',
        'StackedTransformerRepeated',
        'Transformer',
        'TransformerFeedForward',
        'TransformerFeedForwardMoe',
    ),
}

# Modules this project may never provide: their absence is logged at info
# level only. A missing module not listed here is a gap worth a warning.


def _reexport(
    namespace: dict, module_name: str, names: tuple[str, ...]
) -> list[str]:
  """Copies `names` from `praxis.layers.<module_name>` into `namespace`.

  Args:
    namespace: Where the names go (this package's globals).
    module_name: A module under `praxis.layers`.
    names: The names to copy.

  Returns:
    The names copied; those missing are logged and skipped.
  """
  full_name = f'{__name__}.{module_name}'
  try:
    module = importlib.import_module(full_name)
  except ModuleNotFoundError as e:
    if e.name == full_name:
      logging.info('praxis.layers: %s does not exist; %s not re-exported.',
                   full_name, ', '.join(names))
      return []
    logging.warning('praxis.layers: importing %s failed (%r); %s not '
                    're-exported.', full_name, e, ', '.join(names))
    return []
  except Exception as e:  # noqa: BLE001 pylint: disable=broad-except
    logging.warning('praxis.layers: importing %s failed (%r); %s not '
                    're-exported.', full_name, e, ', '.join(names))
    return []
  copied = [n for n in names if hasattr(module, n)]
  missing = [n for n in names if n not in copied]
  if missing:
    logging.info('praxis.layers: %s does not define %s; not re-exported.',
                 full_name, ', '.join(missing))
  for n in copied:
    namespace[n] = getattr(module, n)
  return copied


for _module_name, _names in _OPTIONAL.items():
  _reexport(globals(), _module_name, _names)
del _module_name, _names
