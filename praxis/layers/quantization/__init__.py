"""Quantized layers and quantization tools of Pax (`praxis.layers.quantization`).

Exposes the quantized twins of the float layers under the float layers'
names (`Linear`, `Einsum`, `Embedding`, `AttentionProjection`, ...), the
quantized einsum function `einsum` (which, as in Pax, shadows the `einsum`
submodule: import the layer as `quantization.Einsum`), and the overflow
checking layers. The modules (`quantization_hparams`, `operations`,
`quantizer`, `quantize`, ...) are imported by path.
"""

# pylint: disable=g-importing-member,g-bad-import-order
from praxis.layers.quantization.attentions import AttentionProjection
from praxis.layers.quantization.attentions import AttentionProjectionLoRA
from praxis.layers.quantization.attentions import CombinedQKVProjectionLayer
from praxis.layers.quantization.attentions import DotProductAttention
from praxis.layers.quantization.convolutions import Conv2D
from praxis.layers.quantization.einsum import Einsum
from praxis.layers.quantization.embedding_softmax import Embedding
from praxis.layers.quantization.embedding_softmax import NClassMajorSharedEmbeddingSoftmax
from praxis.layers.quantization.embedding_softmax import SharedEmbeddingSoftmax
from praxis.layers.quantization.linears import Linear
from praxis.layers.quantization.linears import LinearLoRA
from praxis.layers.quantization.operations import einsum
from praxis.layers.quantization.overflow_check import AttentionProjectionOverflowCheck
from praxis.layers.quantization.overflow_check import CombinedQKVProjectionLayerOverflowCheck
from praxis.layers.quantization.overflow_check import FeedForwardOverflowCheck
from praxis.layers.quantization.searchable import SearchableAttentionProjection
from praxis.layers.quantization.searchable import SearchableCombinedQKVProjectionLayer
from praxis.layers.quantization.searchable import SearchableLinear

# Quantized twins of layers built elsewhere (multi-query attention, the
# n-grammer, conformers): imported on first use.
_LAZY = {
    'OneHeadedAttentionProjection': 'multi_query_attention',
    'OneHeadedAttentionProjectionOverflowCheck': 'overflow_check',
    'Ngrammer': 'ngrammer',
    'VQNgrammer': 'ngrammer',
    'DotProductAttentionWithContext': 'conformers',
}


def __getattr__(name: str):
  if name not in _LAZY:
    raise AttributeError(
        f'module {__name__!r} has no attribute {name!r}'
    )
  import importlib  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(f'{__name__}.{_LAZY[name]}')
  return getattr(module, name)
