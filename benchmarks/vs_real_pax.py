"""This project against the real Pax 1.4 on the same experiment, one machine.

Run (the real Pax built with `../shared/reference-pax/install.sh VENV`):

  python benchmarks/vs_real_pax.py --ref_python=/path/refpax/bin/python \\
      [--exp=tiny_lm.TinyLmSpmdAdam] [--short_steps=10] [--long_steps=40] \\
      [--rounds=2]

Both systems run the reference's own experiment file
(`../shared/reference-pax/tiny_lm.py`: a 2-layer decoder-only LM built on
Pax's `lm_cloud` configs, unchanged in both) through their
`python -m paxml.main`, as separate processes, alternating: per round, each
system trains `--short_steps` and `--long_steps` steps from scratch in a
fresh job directory. From the wall times T(n) of a run of n steps:

  time per step = (T(long) - T(short)) / (long - short)
  start-up      = T(short) - short * time per step

(start-up: process start to the first step done, less the steps: imports,
config, initialisation, compilation, and the closing checkpoint). It prints
every run, then per system the median over rounds, and the ratios
(steps/s of this project over the real Pax's; the real Pax's start-up over
this project's).

With `--first_step`, each round also times a 1-step run of each system:
start to the first step done is then read directly, as T(1) less one step
(what a 1-step run does besides the step: process start, imports,
initialisation, compiling what the first step needs, and the closing
checkpoint), with less noise than the start-up above (which multiplies
the error of the per-step estimate by `--short_steps`). It includes no work
that the first step does not need (in this project, the loss-only variant
of the step, compiled at the first step that runs it).

Before timing, both systems' `praxis` and `paxml` packages are
byte-compiled (`python -m compileall`), as `pip install` does for a regular
install and as any import does once where writing bytecode is allowed: a
machine that sets PYTHONDONTWRITEBYTECODE (as some sandboxes do) would
otherwise recompile an editable install's sources in every timed run (about
0.3 s of this project's start-up), while the reference's wheels are
compiled. The experiment file is compiled by neither.

With `--compilation_cache`, both systems get JAX's persistent compilation
cache (`--jax_compilation_cache_dir`, one directory per system, filled by an
untimed run first): the start-up of a rerun of the same experiment (a
restart after preemption, a trial of a tuning study, an eval job).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

_ROOT = pathlib.Path(__file__).resolve().parents[1]
_TINY_LM_DIR = _ROOT.parent / 'shared' / 'reference-pax'


def _run(python: str, exp: str, steps: int, exp_dir: pathlib.Path,
         extra_flags: tuple[str, ...] = ()) -> float:
  """Wall seconds of one `python -m paxml.main` training run of `steps`."""
  with tempfile.TemporaryDirectory() as job_dir:
    env = dict(os.environ, PYTHONPATH=str(exp_dir), TINY_STEPS=str(steps),
               JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2')
    start = time.perf_counter()
    proc = subprocess.run(
        [python, '-m', 'paxml.main', f'--exp={exp}',
         f'--job_log_dir={job_dir}', *extra_flags],
        cwd=job_dir, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
  if proc.returncode != 0:
    sys.exit(f'{python} -m paxml.main --exp={exp} failed '
             f'(exit {proc.returncode}):\n{proc.stderr[-3000:]}')
  return seconds


def _byte_compile(python: str) -> None:
  """Byte-compiles the `praxis` and `paxml` that `python` imports."""
  where = subprocess.run(
      [python, '-c', 'import importlib.util as u; print("\\n".join('
       'p for n in ("praxis", "paxml") '
       'for p in u.find_spec(n).submodule_search_locations))'],
      capture_output=True, text=True, check=True).stdout.split('\n')
  subprocess.run([python, '-m', 'compileall', '-q', *filter(None, where)],
                 stdout=subprocess.DEVNULL, check=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--ref_python', required=True,
                      help="The real Pax 1.4's python (its venv's bin/python).")
  parser.add_argument('--python', default=sys.executable,
                      help="This project's python (default: this one).")
  parser.add_argument('--exp', default='tiny_lm.TinyLmSpmdAdam')
  parser.add_argument('--exp_dir', default=str(_TINY_LM_DIR),
                      help='Folder of the experiment module (tiny_lm.py).')
  parser.add_argument('--short_steps', type=int, default=10)
  parser.add_argument('--long_steps', type=int, default=40)
  parser.add_argument('--rounds', type=int, default=2)
  parser.add_argument('--compilation_cache', action='store_true',
                      help="Time reruns with JAX's persistent compilation "
                      'cache, warmed by an untimed run.')
  parser.add_argument('--first_step', action='store_true',
                      help='Also time 1-step runs: start to first step done.')
  args = parser.parse_args()
  if args.long_steps <= args.short_steps:
    parser.error('--long_steps must be larger than --short_steps')
  exp_dir = pathlib.Path(args.exp_dir)
  if not (exp_dir / (args.exp.split('.')[0] + '.py')).exists():
    parser.error(f'--exp_dir {exp_dir} has no {args.exp.split(".")[0]}.py')

  systems = {'this project': args.python, 'real Pax 1.4': args.ref_python}
  extra = {name: () for name in systems}
  for python in systems.values():
    _byte_compile(python)
  if args.compilation_cache:
    cache_root = pathlib.Path(tempfile.mkdtemp(prefix='xla_cache_'))
    for i, (name, python) in enumerate(systems.items()):
      extra[name] = (f'--jax_compilation_cache_dir={cache_root / str(i)}',
                     '--jax_persistent_cache_min_compile_time_secs=0')
      _run(python, args.exp, args.short_steps, exp_dir, extra[name])
  per_step = {name: [] for name in systems}
  startup = {name: [] for name in systems}
  first = {name: [] for name in systems}
  run_lengths = (args.short_steps, args.long_steps) + (
      (1,) if args.first_step else ())
  print(f'{args.exp}: {args.short_steps} and {args.long_steps} steps, '
        f'{args.rounds} round(s), alternating'
        + (', warm compilation caches' if args.compilation_cache else ''))
  print(f'{"round":>5}  {"system":<14} {"T(short) s":>10} {"T(long) s":>10} '
        f'{"ms/step":>8} {"start-up s":>10}'
        + (f' {"T(1) s":>8} {"to step 1 s":>11}' if args.first_step else ''))
  for r in range(args.rounds):
    times = {name: {} for name in systems}
    for steps in run_lengths:
      for name, python in systems.items():
        times[name][steps] = _run(python, args.exp, steps, exp_dir,
                                  extra[name])
    for name in systems:
      short, long = times[name][args.short_steps], times[name][args.long_steps]
      step = (long - short) / (args.long_steps - args.short_steps)
      up = short - args.short_steps * step
      per_step[name].append(step)
      startup[name].append(up)
      line = (f'{r + 1:>5}  {name:<14} {short:>10.2f} {long:>10.2f} '
              f'{1e3 * step:>8.1f} {up:>10.2f}')
      if args.first_step:
        first[name].append(times[name][1] - step)
        line += f' {times[name][1]:>8.2f} {first[name][-1]:>11.2f}'
      print(line, flush=True)
  ours, ref = 'this project', 'real Pax 1.4'
  step_ratio = statistics.median(per_step[ref]) / statistics.median(
      per_step[ours])
  up_ratio = statistics.median(startup[ref]) / statistics.median(
      startup[ours])
  print(f'median ms/step: this project {1e3 * statistics.median(per_step[ours]):.1f}, '
        f'real Pax {1e3 * statistics.median(per_step[ref]):.1f}')
  print(f'steps/s, this project / real Pax: {step_ratio:.2f}x')
  print(f'start-up, real Pax / this project: {up_ratio:.2f}x faster here')
  if args.first_step:
    print('start to first step done (T(1) less one step), real Pax / this '
          f'project: {statistics.median(first[ref]):.2f} s / '
          f'{statistics.median(first[ours]):.2f} s = '
          f'{statistics.median(first[ref]) / statistics.median(first[ours]):.2f}x'
          ' faster here')


if __name__ == '__main__':
  main()
