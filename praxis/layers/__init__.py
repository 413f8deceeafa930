"""The public layers of praxis, re-exported by name (`layers.Linear`, ...).

Public names: those of praxis' own `praxis/layers/__init__.py` that this
project provides — the activations (BaseActivation, ReLU, GELU, ELU, ...,
Identity), linears (Linear, Bias, FeedForward, MLPBlock, StackingOverTime,
project_last_dim), stochastics (Dropout, StochasticResidual), Sequential,
Einsum, the op layers (EinsumOp, EinsumGatedOp, ArrayLookup), and those of
the normalizations, embeddings, attentions, transformers, convolutions,
poolings, ResNets, models and the rest, below.
"""

from praxis.layers import activations
from praxis.layers import adapters
from praxis.layers import attentions
from praxis.layers import augmentations
from praxis.layers import base_ops
from praxis.layers import bregman
from praxis.layers import checkpoint_policy
from praxis.layers import conformers
from praxis.layers import convolutions
from praxis.layers import einsum
from praxis.layers import embedding_softmax
from praxis.layers import frnn
from praxis.layers import grouped_query_attention
from praxis.layers import linears
from praxis.layers import losses
from praxis.layers import mobilenet
from praxis.layers import models
from praxis.layers import multi_query_attention
from praxis.layers import ngrammer
from praxis.layers import normalizations
from praxis.layers import pipeline
from praxis.layers import poolings
from praxis.layers import quantizer
from praxis.layers import repeats
from praxis.layers import resnets
from praxis.layers import rnn_cell
from praxis.layers import sequential
from praxis.layers import spectrum_augmenter
from praxis.layers import ssm
from praxis.layers import ssm_transformers
from praxis.layers import stochastics
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers import vanillanets
from praxis.layers import vits

BaseActivation = activations.BaseActivation
CubedReLU = activations.CubedReLU
ELU = activations.ELU
Exp = activations.Exp
GELU = activations.GELU
Identity = activations.Identity
LeakyReLU = activations.LeakyReLU
ReLU = activations.ReLU
ReLU6 = activations.ReLU6
Sigmoid = activations.Sigmoid
SiLU = activations.SiLU
SineReLU = activations.SineReLU
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

AttentionProjection = attentions.AttentionProjection
causal_mask = attentions.causal_mask
causal_segment_mask = attentions.causal_segment_mask
CausalDepthwiseConv1D = attentions.CausalDepthwiseConv1D
convert_paddings_to_mask = attentions.convert_paddings_to_mask
DotProductAttention = attentions.DotProductAttention
DotProductAttentionXL = attentions.DotProductAttentionXL
LocalSelfAttention = attentions.LocalSelfAttention
LocalSelfAttentionAlibi = attentions.LocalSelfAttentionAlibi
LocalSelfAttentionRelativeBias = attentions.LocalSelfAttentionRelativeBias
LocalSelfAttentionXL = attentions.LocalSelfAttentionXL
PerDimScale = attentions.PerDimScale
RelativeBias = attentions.RelativeBias
segment_mask = attentions.segment_mask

AdaptedTransformerFeedForward = adapters.AdaptedTransformerFeedForward
MultitaskResidualAdapter = adapters.MultitaskResidualAdapter

AutodiffCheckpointType = checkpoint_policy.AutodiffCheckpointType

BregmanPCA = bregman.BregmanPCA

Conv2D = convolutions.Conv2D
ConvBNAct = convolutions.ConvBNAct
ConvBNActWithPadding = convolutions.ConvBNActWithPadding
DepthwiseConv1D = convolutions.DepthwiseConv1D
LightConv1D = convolutions.LightConv1D

Embedding = embedding_softmax.Embedding
FullSoftmax = embedding_softmax.FullSoftmax
GShardSharedEmbeddingSoftmax = embedding_softmax.GShardSharedEmbeddingSoftmax
PositionalEmbedding = embedding_softmax.PositionalEmbedding
PositionalEmbedding2D = embedding_softmax.PositionalEmbedding2D
SharedEmbeddingSoftmax = embedding_softmax.SharedEmbeddingSoftmax
SigmoidCrossEntropy = embedding_softmax.SigmoidCrossEntropy
TrainablePositionalEmbedding = embedding_softmax.TrainablePositionalEmbedding

GroupedQueryAttention = grouped_query_attention.GroupedQueryAttention
MultiQueryDotProductAttention = (
    multi_query_attention.MultiQueryDotProductAttention)

BiTemperedLoss = losses.BiTemperedLoss

BertModel = models.BertModel
ClassificationMLPModel = models.ClassificationMLPModel
ClassificationModel = models.ClassificationModel
LanguageModel = models.LanguageModel
SequenceModel = models.SequenceModel

get_bigram_ids = ngrammer.get_bigram_ids
Ngrammer = ngrammer.Ngrammer
VectorQuantization = ngrammer.VectorQuantization
VQNgrammer = ngrammer.VQNgrammer

BaseNormalization = normalizations.BaseNormalization
BatchNorm = normalizations.BatchNorm
compute_moments = normalizations.compute_moments
GroupNorm = normalizations.GroupNorm
IdentityNorm = normalizations.IdentityNorm
LayerNorm = normalizations.LayerNorm
RmsNorm = normalizations.RmsNorm
RmsNormNoScale = normalizations.RmsNormNoScale

LayerwiseShardablePipelined = pipeline.LayerwiseShardablePipelined

GlobalPooling = poolings.GlobalPooling
Pooling = poolings.Pooling
Pooling1D = poolings.Pooling1D

Repeat = repeats.Repeat

SSM = ssm.SSM
SSMGated = ssm_transformers.SSMGated
SSMTransformer = ssm_transformers.SSMTransformer

ResNet = resnets.ResNet
ResNetBlock = resnets.ResNetBlock

LanguageModelType = transformer_models.LanguageModelType
TransformerEncoderDecoder = transformer_models.TransformerEncoderDecoder
TransformerLm = transformer_models.TransformerLm

compute_attention_masks_for_extend_step = (
    transformers.compute_attention_masks_for_extend_step)
compute_attention_masks_for_fprop = (
    transformers.compute_attention_masks_for_fprop)
PipelinedTransformer = transformers.PipelinedTransformer
StackedTransformer = transformers.StackedTransformer
StackedTransformerRepeated = transformers.StackedTransformerRepeated
Transformer = transformers.Transformer
TransformerFeedForward = transformers.TransformerFeedForward
TransformerFeedForwardMoe = transformers.TransformerFeedForwardMoe

VanillaBlock = vanillanets.VanillaBlock
VanillaNet = vanillanets.VanillaNet

VisionTransformer = vits.VisionTransformer
VitEntryLayers = vits.VitEntryLayers
VitExitLayers = vits.VitExitLayers

MobileNet = mobilenet.MobileNet

quantize_vector = quantizer.quantize_vector
RandomVectorQuantizer = quantizer.RandomVectorQuantizer
VectorQuantizer = quantizer.VectorQuantizer

# Speech: LSTM cells and RNNs, Conformer, augmentations.
CifgLstmCellSimple = rnn_cell.CifgLstmCellSimple
LayerNormalizedLstmCellSimple = rnn_cell.LayerNormalizedLstmCellSimple
LstmCellSimple = rnn_cell.LstmCellSimple
FRnn = frnn.FRnn
LstmFrnn = frnn.LstmFrnn
StackFrnn = frnn.StackFrnn
Conformer = conformers.Conformer
DotProductAttentionWithContext = conformers.DotProductAttentionWithContext
DotProductAttentionWithContextXL = conformers.DotProductAttentionWithContextXL
SelfAttentionWithNormAndResidual = conformers.SelfAttentionWithNormAndResidual
MaskedLmDataAugmenter = augmentations.MaskedLmDataAugmenter
TemporalShifting = augmentations.TemporalShifting
SpectrumAugmenter = spectrum_augmenter.SpectrumAugmenter
