"""Prints the conformance table of docs/compatibility.md.

  python3 docs/conformance_table.py REF.json OURS.json [OURS_TF.json]

REF.json is the real Pax 1.4's result (../shared/conformance/ref-pax-1.4.json),
OURS.json this project's run of `../shared/conformance/run_upstream.py` over
the files that need no TensorFlow, and OURS_TF.json (optional) its run, in a
venv with tensorflow-cpu added, over the files that import TensorFlow as a
test helper. Files are grouped by whether the project has every praxis/paxml
module that the test file imports (`*`: not), and apart, those that compare
with Lingvo's layers (`†`), which cannot run here, and those that need
SeqIO (`§`), run in the TF venv with seqio added. The
sources are read from the fetched upstream snapshots (the nearest `.mirror`
folder, as run_upstream.py finds them).
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_IMPORT = re.compile(r'^\s*from\s+((?:praxis|paxml)[\w.]*)\s+import\s+(\w+)'
                     r'|^\s*import\s+((?:praxis|paxml)[\w.]*)', re.M)


def _mirror() -> str:
  d = ROOT
  while d != os.path.dirname(d):
    if os.path.isdir(os.path.join(d, '.mirror')):
      return os.path.join(d, '.mirror')
    d = os.path.dirname(d)
  sys.exit('no .mirror folder with the upstream snapshots found')


def _exists(dotted: str) -> bool:
  path = os.path.join(ROOT, *dotted.split('.'))
  return os.path.exists(path + '.py') or os.path.isdir(path)


def _source(test_file: str) -> str:
  repo = os.path.join(_mirror(), 'google+' + test_file.split('/')[0], 'repo')
  return subprocess.run(['git', '-C', repo, 'show', f'HEAD:{test_file}'],
                        capture_output=True, text=True, check=True).stdout


def _group(test_file: str) -> str:
  """Which group of the table a test file belongs to."""
  src = _source(test_file)
  if re.search(r'^\s*from lingvo\.core import (?!nested_map\b)', src, re.M):
    return 'Lingvo comparison (cannot run here)'
  if re.search(r'^\s*(import|from) (seqio|tensorflow_datasets)\b', src, re.M):
    return 'needs SeqIO or TFDS (run in the TF venv with seqio added)'
  return 'modules here' if _has_modules(src) else 'a module missing'


def _has_modules(src: str) -> bool:
  for package, name, plain in _IMPORT.findall(src):
    if plain and not _exists(plain):
      return False
    if package and not _has_name(package, name):
      return False
  return True


def _has_name(package: str, name: str) -> bool:
  """`from package import name` finds a module, or a name in a module."""
  if _exists(f'{package}.{name}'):
    return True
  path = os.path.join(ROOT, *package.split('.'))
  source = path + '.py' if os.path.exists(path + '.py') else os.path.join(
      path, '__init__.py')
  if not os.path.exists(source):
    return False
  return re.search(rf'^\s*(?:class |def )?{name}\b', open(source).read(),
                   re.M) is not None


def main(ref_path, ours_path, tf_path=None):
  ref = {r['file']: r for r in json.load(open(ref_path))}
  ours = {r['file']: r for r in json.load(open(ours_path))}
  if tf_path:
    ours.update({r['file']: r for r in json.load(open(tf_path))
                 if ref.get(r['file'], {}).get('needs_tf')})
  print('| upstream test file | real Pax 1.4 passes | passes here |')
  print('|---|---|---|')
  totals = {}
  for f in sorted(ref):
    if not ref[f]['passed'] or f not in ours:
      continue
    group = _group(f)
    r, o = ref[f]['passed'], min(ours[f]['passed'], ref[f]['passed'])
    t = totals.setdefault(group, [0, 0, 0])
    t[0] += 1
    t[1] += r
    t[2] += o
    tf = ' (TF helper)' if ref[f].get('needs_tf') else ''
    mark = {'modules here': '', 'a module missing': ' *',
            'Lingvo comparison (cannot run here)': ' †'}.get(group, ' §')
    print(f'| `{f}`{tf}{mark} | {r} | '
          f'{ours[f]["passed"]} |')
  print()
  for group, (n, r, o) in sorted(totals.items()):
    print(f'{group}: {n} files, {o} of the reference\'s {r} passes '
          f'({o / max(r, 1):.1%})')


if __name__ == '__main__':
  main(*sys.argv[1:])
