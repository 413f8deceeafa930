"""Quantized N-grammer layers.

Public: `Ngrammer`, `VQNgrammer` (twins of `praxis.layers.ngrammer`'s
layers with a `quantization` field). Only the bi-gram embedding tables are
quantized: each head's `ngram_table_<i>` is a quantized `Embedding` (int8
rows with one scale, and maybe zero point, per row); the layer norms and the
VQ centroids stay in float.

  q = base_layer.instantiate(pax_fiddle.Config(
      quantization.VQNgrammer, name='vq', quantization=QuantizationParams(
          quantization_type=QuantizationType.PTQ,
          mode=QuantizationMode.INFERENCE),
      ngram_vocab_size=9, ngram_emb_dim=2, num_heads=2, num_clusters=2,
      dim_per_head=4, concat_ngrams=True))
"""

from __future__ import annotations

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import ngrammer
from praxis.layers.quantization import embedding_softmax as quantized_emb
from praxis.layers.quantization import quantization_hparams

QuantizationParams = quantization_hparams.QuantizationParams
instance_field = base_layer.instance_field


class Ngrammer(ngrammer.Ngrammer):
  """`ngrammer.Ngrammer` with quantized bi-gram tables.

  Attributes:
    quantization: How the tables `ngram_table_<i>` are quantized.
  """

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def _ngram_table_tpl(self) -> pax_fiddle.Config:
    return pax_fiddle.Config(
        quantized_emb.Embedding, quantization=self.quantization)


class VQNgrammer(ngrammer.VQNgrammer):
  """`ngrammer.VQNgrammer` whose `ngram_layer` is a quantized `Ngrammer`.

  Attributes:
    quantization: How the bi-gram tables are quantized.
  """

  quantization: QuantizationParams = instance_field(QuantizationParams)

  def _ngram_layer_tpl(self) -> pax_fiddle.Config:
    return pax_fiddle.Config(Ngrammer, quantization=self.quantization)
