"""Layers injected into Pax layers' op slots (e.g. `einsum_tpl`)."""

from praxis.layers.injection import fp8_nvidia_gpu
