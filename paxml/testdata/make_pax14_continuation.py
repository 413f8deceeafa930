"""Records the real Pax 1.4 continuing its fixture checkpoints, for tests.

Run it with the reference environment's Python, from a directory where this
project's `paxml` is not importable (the script checks):

  cd /tmp && JAX_PLATFORMS=cpu /work/refpax/bin/python \
      /work/main/paxml/testdata/make_pax14_continuation.py [KIND...]

For each kind (spmd, pmap by default) it copies the step-2 checkpoint of
`pax14_checkpoints/<kind>/checkpoints` into a fresh job directory, runs
`paxml.main` on the same experiment to step 4 with a constant learning rate
of 0.05 and float32 activations (so Pax restores the model AND the
optimizer state, then trains steps 3 and 4; the rate makes the restored
moments matter), and writes the
train losses it summarised after the restore to
`pax14_checkpoints/<kind>/continuation.json` as {step: loss}.

  --from DIR KIND  continues the checkpoint directory DIR (checkpoint_<n>,
  e.g. one this project wrote) for 2 steps instead of the fixture and
  prints the losses as JSON, to compare with this project continuing it.
"""

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
# Resumed with a constant learning rate large enough for the restored Adam
# moments and counts to show in the step-4 loss.
LEARNING_RATE = '0.05'


def _losses(summary_dir):
  """{step: train loss} from Pax's TensorBoard events."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = {}
  for path in sorted(summary_dir.glob('events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.tag == 'loss':
          out[int(event.step)] = float(
              tf.make_ndarray(value.tensor) if value.HasField('tensor')
              else value.simple_value)
  return out


def continue_from(ckpt_dir, kind):
  """Losses of Pax resuming `ckpt_dir` (checkpoint_<n>) for 2 steps."""
  last_step = int(ckpt_dir.name.split('_')[1]) + 2
  with tempfile.TemporaryDirectory() as job:
    job = pathlib.Path(job)
    (job / 'checkpoints').mkdir()
    shutil.copytree(ckpt_dir, job / 'checkpoints' / ckpt_dir.name)
    env = dict(os.environ, PYTHONPATH=str(HERE),
               FIXTURE_STEPS=str(last_step), FIXTURE_SAVE_EVERY='2',
               FIXTURE_LR=LEARNING_RATE, FIXTURE_FP32='1',
               JAX_PLATFORMS='cpu')
    subprocess.run([sys.executable, '-m', 'paxml.main',
                    f'--exp={EXPS[kind]}', f'--job_log_dir={job}',
                    *FLAGS.get(kind, [])], check=True, env=env)
    return _losses(job / 'summaries' / 'train')


def main():
  try:
    from paxml import trainer_lib  # pylint: disable=g-import-not-at-top
  except ImportError:
    sys.exit('Run with the reference environment (the real Pax 1.4).')
  if 'work/main' in str(pathlib.Path(trainer_lib.__file__).resolve()):
    sys.exit('This project\'s paxml is importable: run from another folder.')
  if sys.argv[1:2] == ['--from']:
    print(json.dumps(continue_from(pathlib.Path(sys.argv[2]), sys.argv[3])))
    return
  for kind in sys.argv[1:] or ['spmd', 'pmap']:
    [ckpt] = list((HERE / 'pax14_checkpoints' / kind / 'checkpoints'
                   ).iterdir())
    losses = continue_from(ckpt, kind)
    (HERE / 'pax14_checkpoints' / kind / 'continuation.json').write_text(
        json.dumps({str(k): v for k, v in sorted(losses.items())},
                   indent=1) + '\n')


if __name__ == '__main__':
  main()
