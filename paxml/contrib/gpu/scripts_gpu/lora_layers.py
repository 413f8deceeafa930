"""LoRA layers (re-exported from `praxis.contrib.gpu.scripts_gpu.lora_layers`).

Public: `LoraTheta`, `LoraThetaDescriptor`, `LoraLinear`,
`LoraAttentionProjection`, `LoraCombinedQKVProjection`. Pax keeps the layers
in praxis' contrib tree; they are reachable here too, beside `lora_utils`.
"""

from praxis.contrib.gpu.scripts_gpu import lora_layers as _lora_layers

LoraTheta = _lora_layers.LoraTheta
LoraThetaDescriptor = _lora_layers.LoraThetaDescriptor
LoraLinear = _lora_layers.LoraLinear
LoraAttentionProjection = _lora_layers.LoraAttentionProjection
LoraCombinedQKVProjection = _lora_layers.LoraCombinedQKVProjection
