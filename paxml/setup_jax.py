"""JAX's global settings for a Pax run, as `paxml.main` applies them.

Public names: JaxDistributedOptions, setup_jax.

Example:

  setup_jax.setup_jax(globally_use_hardware_rng=True, jax_backend_target=None,
                      jax_xla_backend=None, jax_enable_checks=False)
"""

from __future__ import annotations

import dataclasses

from absl import logging
import jax
from praxis import py_utils


@dataclasses.dataclass
class JaxDistributedOptions:
  """Where `jax.distributed` finds its coordinator, and this process's place.

  Attributes:
    coordinator_address: `host:port` of process 0.
    num_processes: How many processes the job has.
    process_id: This process's index.
  """
  coordinator_address: str | None
  num_processes: int | None
  process_id: int | None


def setup_jax(
    globally_use_hardware_rng: bool,
    jax_backend_target: str | None,
    jax_xla_backend: str | None,
    jax_enable_checks: bool,
    jax_traceback_filtering_option: str = 'auto',
    should_initialize_jax_distributed: bool = False,
    jax_distributed_options: JaxDistributedOptions | None = None,
) -> None:
  """Applies the run's JAX settings and logs the devices it sees.

  Args:
    globally_use_hardware_rng: Make 'rbg' (the hardware RNG) JAX's default
      PRNG implementation.
    jax_backend_target: A remote backend target, only logged here (JAX reads
      its own `--jax_backend_target` flag).
    jax_xla_backend: The XLA backend of that target, only logged.
    jax_enable_checks: Turn on JAX's internal checks.
    jax_traceback_filtering_option: JAX's `jax_traceback_filtering` value
      ('off', 'auto', 'tracebackhide', 'remove_frames', ...).
    should_initialize_jax_distributed: Start `jax.distributed`.
    jax_distributed_options: The coordinator and process index; when None
      (or its address is None), JAX reads them from the cluster environment.
  """
  if globally_use_hardware_rng:
    py_utils.set_globally_use_rbg_prng_key()
  jax.config.update('jax_traceback_filtering', jax_traceback_filtering_option)
  if jax_enable_checks:
    jax.config.update('jax_enable_checks', True)
    logging.info('jax_enable_checks has been enabled.')
  if jax_backend_target:
    logging.info('Using JAX backend target %s (XLA backend %s)',
                 jax_backend_target, jax_xla_backend)
  if should_initialize_jax_distributed:
    options = jax_distributed_options
    if options is not None and options.coordinator_address is not None:
      jax.distributed.initialize(options.coordinator_address,
                                 options.num_processes, options.process_id)
    else:
      jax.distributed.initialize()  # JAX reads SLURM, TPU, MPI, ... settings.
  logging.info('JAX process %d / %d; %d devices (%d local): %r',
               jax.process_index(), jax.process_count(), jax.device_count(),
               jax.local_device_count(), jax.devices())
