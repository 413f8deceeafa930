"""Lists where this project's public API differs from the real Pax 1.4's.

Reads the real Pax's sources (without importing them: no TensorFlow needed)
and imports this project's modules of the same names, then prints:

  names       module-level functions, classes and aliases Pax has and we lack;
  members     public methods and dataclass fields of Pax's classes we lack
              (nested WeightSharding / ActivationSharding fields included);
  signatures  functions and methods whose parameters differ in name or order.

Run it with the project's Python, pointing at the real Pax's site-packages
(built by ../shared/reference-pax/install.sh):

  .venv/bin/python docs/api_audit.py \\
      --pax_root /work/refpax/lib/python3.11/site-packages [--only names]

Entries that are deliberate are explained in docs/compatibility.md (type
aliases, TensorFlow- or Lingvo-only code, attributes Pax sets in
`__post_init__`). Modules that do not import here are listed first.
"""

import argparse
import ast
import contextlib
import dataclasses
import importlib
import inspect
import io
import logging
import os
import sys
from typing import Any, Iterator

_SHARDING_CLASSES = ('WeightSharding', 'ActivationSharding')


def _pax_modules(root: str) -> Iterator[tuple[str, ast.Module]]:
  for package in ('praxis', 'paxml'):
    for folder, _, files in os.walk(os.path.join(root, package)):
      for name in sorted(files):
        if not name.endswith('.py') or name.endswith('_test.py'):
          continue
        if name == '__init__.py':
          continue
        path = os.path.join(folder, name)
        module = os.path.relpath(path, root)[:-3].replace(os.sep, '.')
        with open(path) as f:
          yield module, ast.parse(f.read())


def _top_level_names(tree: ast.Module) -> list[str]:
  names = []
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      names.append(node.name)
    elif isinstance(node, ast.Assign):
      names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target,
                                                        ast.Name):
      names.append(node.target.id)
  return [n for n in names if not n.startswith('_')]


def _init_fields(cls_node: ast.ClassDef) -> list[str]:
  """Annotated fields that are arguments (not `field(init=False)`)."""
  fields = []
  for node in cls_node.body:
    if not (isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)):
      continue
    value = node.value
    if (isinstance(value, ast.Call) and any(
        k.arg == 'init' and isinstance(k.value, ast.Constant)
        and k.value.value is False for k in value.keywords)):
      continue
    if not node.target.id.startswith('_'):
      fields.append(node.target.id)
  return fields


def _has_field(cls: Any, name: str) -> bool:
  if hasattr(cls, name):
    return True
  try:
    return name in {f.name for f in dataclasses.fields(cls)}
  except TypeError:
    return False


def _params(node: ast.FunctionDef) -> list[str]:
  args = node.args
  return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def _our_params(fn: Any) -> list[str] | None:
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    return None
  kinds = inspect.Parameter
  if any(p.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
         for p in sig.parameters.values()):
    return None  # Takes anything.
  return list(sig.parameters)


def _signature_problem(pax: list[str], ours: list[str]) -> bool:
  strip = lambda names: names[1:] if names[:1] in (['self'], ['cls']) else names
  pax, ours = strip(pax), strip(ours)
  if any(name not in ours for name in pax):
    return True
  return ours[:len(pax)] != pax


def _is_property(node: ast.FunctionDef) -> bool:
  return any(isinstance(d, ast.Name) and d.id == 'property'
             for d in node.decorator_list)


def audit(root: str, only: str | None) -> int:
  """Prints the differences; returns how many were found."""
  found = 0

  def report(kind: str, text: str) -> None:
    nonlocal found
    if only in (None, kind):
      print(f'{kind:10s} {text}')
      found += 1

  for module, tree in _pax_modules(root):
    try:
      with contextlib.redirect_stderr(io.StringIO()):
        ours = importlib.import_module(module)
    except Exception as e:  # pylint: disable=broad-except
      report('modules', f'{module}: does not import ({type(e).__name__})')
      continue
    missing = [n for n in _top_level_names(tree) if not hasattr(ours, n)]
    if missing:
      report('names', f'{module}: {", ".join(missing)}')
    for node in tree.body:
      if isinstance(node, ast.FunctionDef) and not node.name.startswith('_'):
        fn = getattr(ours, node.name, None)
        params = _our_params(fn) if callable(fn) else None
        if params is not None and _signature_problem(_params(node), params):
          report('signatures', f'{module}.{node.name}: Pax {_params(node)}, '
                 f'ours {params}')
      if not isinstance(node, ast.ClassDef) or node.name.startswith('_'):
        continue
      cls = getattr(ours, node.name, None)
      if cls is None:
        continue
      where = f'{module}.{node.name}'
      lacking = [f for f in _init_fields(node) if not _has_field(cls, f)]
      for sub in node.body:
        if isinstance(sub, ast.FunctionDef) and (
            not sub.name.startswith('_') or sub.name == '__call__'):
          method = getattr(cls, sub.name, None)
          if method is None:
            if not _has_field(cls, sub.name):  # A property here may be a field.
              lacking.append(f'{sub.name}()')
          elif not _is_property(sub):
            params = _our_params(method)
            if params is not None and _signature_problem(_params(sub),
                                                         params):
              report('signatures', f'{where}.{sub.name}: Pax '
                     f'{_params(sub)}, ours {params}')
        if isinstance(sub, ast.ClassDef) and sub.name in _SHARDING_CLASSES:
          ours_sub = getattr(cls, sub.name, None)
          lacking += [f'{sub.name}.{f}' for f in _init_fields(sub)
                      if ours_sub is None or not _has_field(ours_sub, f)]
      if lacking:
        report('members', f'{where}: {", ".join(lacking)}')
  return found


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--pax_root', required=True,
                      help="The real Pax's site-packages folder.")
  parser.add_argument('--only', choices=('modules', 'names', 'members',
                                         'signatures'))
  args = parser.parse_args()
  if not os.path.isdir(os.path.join(args.pax_root, 'praxis')):
    sys.exit(f'--pax_root {args.pax_root}: no praxis package there.')
  logging.disable(logging.CRITICAL)
  print(f'{audit(args.pax_root, args.only)} differences')


if __name__ == '__main__':
  main()
