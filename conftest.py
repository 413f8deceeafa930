"""Pytest set-up shared by every test: 8 virtual CPU devices, quicker compiles.

XLA reads its flags once, when jax first initialises its backends, so they are
set here, before any test module imports jax; processes that tests start
inherit them.

- `--xla_force_host_platform_device_count=8`: 8 virtual CPU devices, for the
  sharding tests.
- `--xla_backend_optimization_level=0`: LLVM does not optimise the machine
  code of XLA:CPU's kernels (XLA's default level is 3). The HLO passes
  (fusion, layout, buffer assignment) and so the computations are the same;
  the suite, which is mostly compiling tiny programs, takes about a quarter
  less time. A level already in `XLA_FLAGS` is kept: set
  `XLA_FLAGS=--xla_backend_optimization_level=3` to test XLA's default
  code generation.
"""
import os


def _add_flag(flag: str) -> None:
  name = flag.split('=', 1)[0]
  flags = os.environ.get('XLA_FLAGS', '')
  if name not in flags:
    os.environ['XLA_FLAGS'] = (flags + ' ' + flag).strip()


_add_flag('--xla_force_host_platform_device_count=8')
_add_flag('--xla_backend_optimization_level=0')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
