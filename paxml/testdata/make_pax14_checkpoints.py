"""Writes checkpoints with the real Pax 1.4, as fixtures for checkpoints tests.

Run it with the reference environment's Python, from a directory where this
project's `paxml` is not importable (the script checks):

  cd /tmp && JAX_PLATFORMS=cpu /work/refpax/bin/python \
      /work/main/paxml/testdata/make_pax14_checkpoints.py \
      /work/main/paxml/testdata/pax14_checkpoints

For each experiment of pax14_fixture_lm.py (FixtureLmSpmd: GDA checkpoints,
version 1.1 and, with --tensorstore_use_ocdbt, 1.2; FixtureLmPmap: Flax) it trains 2 steps with `paxml.main`, keeps the
checkpoint of step 2 as `<out>/<kind>/checkpoints/...`, and writes
`<out>/<kind>/ref.json`: every variable of the train state (its path as key
kinds and names, shape, dtype, sum of its values as the real Pax restored
it) and the loss of the model on the first training batch with the restored
variables.

  --verify DIR KIND  restores DIR (checkpoints written elsewhere, e.g. by this
  project) with the real Pax and checks every variable equals the fixture's,
  bit for bit; prints OK.
"""

import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
EXPS = {'spmd': 'pax14_fixture_lm.FixtureLmSpmd',
        'spmd_ocdbt': 'pax14_fixture_lm.FixtureLmSpmd',
        'pmap': 'pax14_fixture_lm.FixtureLmPmap'}
FLAGS = {'spmd_ocdbt': ['--tensorstore_use_ocdbt']}


def _train(exp, job_dir, flags):
  env = dict(os.environ, PYTHONPATH=str(HERE), FIXTURE_STEPS='2',
             FIXTURE_SAVE_EVERY='2', JAX_PLATFORMS='cpu')
  subprocess.run([sys.executable, '-m', 'paxml.main', f'--exp={exp}',
                  f'--job_log_dir={job_dir}', *flags], check=True, env=env)


def _setup(exp_name):
  """(task, input, abstract metadata, mesh or None) of the real Pax."""
  sys.path.insert(0, str(HERE))
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from paxml import experiment_registry  # pylint: disable=g-import-not-at-top
  from paxml import trainer_lib  # pylint: disable=g-import-not-at-top
  from praxis import base_hyperparams  # pylint: disable=g-import-not-at-top
  importlib.import_module(exp_name.rsplit('.', 1)[0])
  exp = experiment_registry.get(exp_name)()
  task = base_hyperparams.instantiate(exp.task())
  inp = base_hyperparams.instantiate(exp.datasets()[0])
  batch = inp.get_next()
  specs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                       batch)
  meta = trainer_lib.create_train_state_metadata(task, specs)
  mesh = None
  if task.model.mesh_shape is not None:
    devices = np.array(jax.devices()[:1]).reshape(task.model.mesh_shape)
    mesh = jax.sharding.Mesh(devices, task.model.mesh_axis_names)
  return task, batch, meta, mesh


def _restore(kind, ckpt_dir):
  from paxml import checkpoints  # pylint: disable=g-import-not-at-top
  task, batch, meta, mesh = _setup(EXPS[kind])
  if kind.startswith('spmd'):
    state = checkpoints.restore_checkpoint(
        meta.padded_global_shapes, ckpt_dir, global_mesh=mesh,
        checkpoint_type=checkpoints.CheckpointType.GDA,
        state_specs=meta.partition_specs,
        tensorstore_use_ocdbt=kind.endswith('ocdbt'))
  else:
    state = checkpoints.restore_checkpoint(
        meta.unpadded_global_shapes, ckpt_dir,
        checkpoint_type=checkpoints.CheckpointType.FLAX)
  return task, batch, state


def _path(path):
  import jax  # pylint: disable=g-import-not-at-top
  out = []
  for k in path:
    if isinstance(k, jax.tree_util.SequenceKey):
      out.append(['seq', k.idx])
    elif isinstance(k, jax.tree_util.DictKey):
      out.append(['key', str(k.key)])
    else:
      out.append(['attr', str(getattr(k, 'name', k))])
  return out


def _leaves(state):
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from praxis import py_utils  # pylint: disable=g-import-not-at-top
  out = []
  for field in ('step', 'mdl_vars', 'opt_states'):
    flat = jax.tree_util.tree_flatten_with_path(
        getattr(state, field), is_leaf=py_utils.is_optax_masked_node)[0]
    for path, leaf in flat:
      if py_utils.is_optax_masked_node(leaf):
        continue
      value = np.asarray(leaf)
      out.append({'field': field, 'path': _path(path),
                  'shape': list(value.shape), 'dtype': str(value.dtype),
                  'sum': float(value.astype(np.float64).sum()),
                  'value': value})
  return out


def _loss(task, batch, mdl_vars):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from praxis import base_layer  # pylint: disable=g-import-not-at-top
  dtype = task.model.fprop_dtype  # Floats go in as the trainer casts them.
  batch = jax.tree.map(
      lambda x: x.astype(dtype) if x.dtype == jnp.float32 else x, batch)
  with base_layer.JaxContext.new_context():
    (metrics, _), _ = task.model.apply(
        mdl_vars, batch, rngs={'dropout': jax.random.PRNGKey(1),
                               'random': jax.random.PRNGKey(2)},
        mutable=True)
  return float(metrics['total_loss'][0])


def _train_into(exp, dst, flags):
  with tempfile.TemporaryDirectory() as job:
    _train(exp, job, flags)
    src = pathlib.Path(job) / 'checkpoints'
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    last = max(src.iterdir(), key=lambda p: int(p.name.split('_')[1]))
    shutil.copytree(last, dst / last.name)


def make(out_dir):
  for kind, exp in EXPS.items():
    dst = out_dir / kind / 'checkpoints'
    if not (dst.exists() and os.environ.get('FIXTURE_KEEP_CHECKPOINTS')):
      _train_into(exp, dst, FLAGS.get(kind, []))
    task, batch, state = _restore(kind, dst)
    leaves = _leaves(state)
    for leaf in leaves:
      del leaf['value']
    ref = {'experiment': exp, 'leaves': leaves,
           'loss': _loss(task, batch, state.mdl_vars),
           'batch': {k: v.tolist() for k, v in batch.items()}}
    (out_dir / kind / 'ref.json').write_text(json.dumps(ref, indent=1))


def verify(ckpt_dir, kind):
  import numpy as np  # pylint: disable=g-import-not-at-top
  _, _, mine = _restore(kind, ckpt_dir)
  _, _, ref = _restore(kind, HERE / 'pax14_checkpoints' / kind / 'checkpoints')
  a, b = _leaves(mine), _leaves(ref)
  assert len(a) == len(b), (len(a), len(b))
  for x, y in zip(a, b):
    assert x['path'] == y['path'] and x['dtype'] == y['dtype'], (x, y)
    np.testing.assert_array_equal(x['value'], y['value'], str(x['path']))
  print('OK', len(a), 'arrays equal bit for bit')


def main():
  try:
    from paxml import trainer_lib  # pylint: disable=g-import-not-at-top
  except ImportError:
    sys.exit('Run with the reference environment (the real Pax 1.4).')
  if 'work/main' in str(pathlib.Path(trainer_lib.__file__).resolve()):
    sys.exit('This project\'s paxml is importable: run from another folder.')
  if sys.argv[1] == '--verify':
    verify(pathlib.Path(sys.argv[2]), sys.argv[3])
  else:
    make(pathlib.Path(sys.argv[1]))


if __name__ == '__main__':
  main()
