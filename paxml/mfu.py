"""Model FLOPs utilisation: the step's FLOPs against the devices' peak.

Public names: PEAK_BF16_TFLOPS, peak_flops_per_device, xla_flops,
step_flops, mfu.

The FLOPs of a step are XLA's own count (its cost analysis) of the step as
lowered, before XLA partitions and optimizes it: the whole step on all
devices together (forward, backward with any rematerialisation, optimizer).
The compiled executable's count is not used: it is per device after SPMD
partitioning, and on a GPU it came to only 0.27-0.37 of a 1.3B LM's model
FLOPs (an H200, 2026-11-27; cause not established). Neither count sees inside
custom calls (cuDNN fused attention, Pallas kernels), and XLA counts a
loop's body once: `step_flops` adds the other iterations of each
`lax.scan` (repeated layers, pipelines), counting the body on its own.
It is the work the step executes: a pipeline's bubbles and a remat's
recomputed forward count, which PaLM-style model FLOPs leave out.
Peaks are dense bf16 matrix-unit figures from the vendors' data sheets, per
device as JAX sees it (a TPU v4 chip, a GPU).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.extend import core as jax_core

# Dense bf16 peak TFLOP/s per device, keyed by a substring of
# `jax.Device.device_kind` (matched longest first).
PEAK_BF16_TFLOPS = {
    'TPU v4': 275.0,
    'TPU v5 lite': 197.0,  # v5e.
    'TPU v5e': 197.0,
    'TPU v5p': 459.0,
    'TPU v5': 459.0,
    'TPU v6 lite': 918.0,  # Trillium (v6e).
    'A100': 312.0,
    'H100': 989.0,
    'H200': 989.0,
}


def peak_flops_per_device(device_kind: str) -> float | None:
  """Peak bf16 FLOP/s of one device of this kind, or None if unknown."""
  for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
    if key.lower() in device_kind.lower():
      return PEAK_BF16_TFLOPS[key] * 1e12
  return None


def xla_flops(stage: Any) -> float | None:
  """XLA's FLOP count of one call of a `jax.stages.Lowered` (or `Compiled`).

  Args:
    stage: Pass the lowered step for the whole step's count; a compiled one
      counts one device's share after partitioning.

  Returns:
    The count, or None where XLA has none.
  """
  try:
    analysis = stage.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else None
  flops = (analysis or {}).get('flops')
  return float(flops) if flops and flops > 0 else None


def step_flops(traced: jax.stages.Traced,
               lowered: jax.stages.Lowered | None = None) -> float | None:
  """XLA's count of a traced step, with every iteration of its scans.

  Args:
    traced: The step, traced (`jax.jit(fn).trace(...)`).
    lowered: `traced.lower()`, if already at hand.

  Returns:
    The count, or None where XLA has none. Call it under the step's mesh
    (the scans' bodies are lowered on their own).
  """
  count = xla_flops(lowered if lowered is not None else traced.lower())
  if count is None:
    return None
  return count + _scan_iterations_flops(traced.jaxpr.jaxpr, {})


def _scan_iterations_flops(
    jaxpr: jax_core.Jaxpr, memo: dict[int, tuple[float, float]]) -> float:
  """What a count with each scan's body once leaves out of `jaxpr`."""
  extra = 0.0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'scan':
      body = eqn.params['jaxpr']
      key = id(body)
      if key not in memo:
        memo[key] = (_body_flops(body),
                     _scan_iterations_flops(body.jaxpr, memo))
      once, inner = memo[key]
      length = eqn.params['length']
      # `unroll=k` lowers k bodies a loop iteration and the remainder apart.
      unroll = max(int(eqn.params.get('unroll', 1)), 1)
      counted = length if unroll >= length else unroll + length % unroll
      extra += (length - counted) * once + length * inner
    else:  # pjit, remat, custom_vjp, while, cond (a branch's, at most).
      subs = [_scan_iterations_flops(sub, memo)
              for sub in jax_core.jaxprs_in_params(eqn.params)]
      extra += max(subs, default=0.0)
  return extra


def _body_flops(body: jax_core.ClosedJaxpr) -> float:
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in body.in_avals]
  lowered = jax.jit(jax_core.jaxpr_as_fun(body)).lower(*specs)
  return xla_flops(lowered) or 0.0


def mfu(flops_per_step: float | None, steps_per_sec: float, num_devices: int,
        device_kind: str) -> float | None:
  """Achieved FLOP/s over the peak of `num_devices` devices, or None.

  Args:
    flops_per_step: FLOPs of one step on all devices together.
    steps_per_sec: Measured steps per second.
    num_devices: Devices the step runs on.
    device_kind: `jax.devices()[0].device_kind`.

  Returns:
    A fraction in [0, 1] (None on devices without a known peak).
  """
  peak = peak_flops_per_device(device_kind)
  if not flops_per_step or peak is None:
    return None
  return flops_per_step * steps_per_sec / (peak * num_devices)
