"""Quantized layers and quantization tools of Pax (`praxis.layers.quantization`).

Exposes the quantized twins of the float layers (same names as the float
layers: `Linear`, `Einsum`, `Embedding`, `AttentionProjection`, ...), the
quantized einsum `einsum` and the overflow checking layers. The modules
(`quantization_hparams`, `operations`, `quantizer`, `quantize`, ...) are
imported by path.
"""

# pylint: disable=g-importing-member
from praxis.layers.quantization.operations import einsum
