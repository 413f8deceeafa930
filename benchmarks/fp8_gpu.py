"""FP8 against bf16 training of a small decoder: step time and loss.

Run on a GPU with FP8 matmuls (H100): `python benchmarks/fp8_gpu.py
[--steps=200]`. Elsewhere (no GPU) it runs a tiny version, `--tiny` (the
default off GPU), in which FP8 is emulated (quantize-dequantize): it checks
that the path trains, not that it is fast.

Both runs train the same `TransformerLm` (`--layers` x `--dims`, vocabulary
`--vocab`, batch `--batch` x `--seq` tokens) from the same initial weights on
the same synthetic sequences (each token a fixed function of the previous one,
so the loss can fall), with Pax's own train step
(`trainer_lib.train_step_single_learner`, Adam), compute in bfloat16. The
FP8 run injects `injection.fp8_nvidia_gpu.Fp8EinsumOp` into the attention
projections and the feed-forward linears (their delayed-scaling metas are
overwritten with their "gradients" by the train step). It prints each run's
median step time and final loss, and the fp8/bf16 ratios.
"""

import functools
import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from paxml import learners
from paxml import tasks_lib
from paxml import trainer_lib
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.injection import fp8_nvidia_gpu

_TINY = flags.DEFINE_bool('tiny', None,
                          'Tiny sizes (default: when no GPU is present).')
_STEPS = flags.DEFINE_integer('steps', None, 'Training steps per run.')
_DIMS = flags.DEFINE_integer('dims', None, 'Model width.')
_LAYERS = flags.DEFINE_integer('layers', None, 'Transformer layers.')
_VOCAB = flags.DEFINE_integer('vocab', None, 'Vocabulary size.')
_SEQ = flags.DEFINE_integer('seq', None, 'Tokens per sequence.')
_BATCH = flags.DEFINE_integer('batch', None, 'Sequences per batch.')

# (steps, dims, layers, vocab, seq, batch)
_FULL = dict(steps=200, dims=1024, layers=4, vocab=8192, seq=1024, batch=16)
_SMALL = dict(steps=80, dims=32, layers=1, vocab=64, seq=16, batch=4)


def decoder_task(dims: int, layers: int, vocab: int, fp8: bool):
  """A SingleTask training a bf16 TransformerLm (FP8 einsums if `fp8`)."""
  stacked = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=layers, model_dims=dims,
      hidden_dims=4 * dims, num_heads=max(1, dims // 64) if dims >= 64 else 2)
  if fp8:
    op = pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumOp, amax_history_length=16)
    layer = stacked.transformer_layer_params_tpl
    layer.tr_atten_tpl.proj_tpl.einsum_tpl = op
    layer.tr_fflayer_tpl.fflayer_tpl.linear_tpl.einsum_tpl = op.clone()
  lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=dims,
                         vocab_size=vocab, stacked_transformer_tpl=stacked)
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='fp8_bench')
  task_p.model = pax_fiddle.Config(
      models.LanguageModel, name='lm', lm_tpl=lm, fprop_dtype=jnp.bfloat16,
      params_init=base_layer.WeightInit.Gaussian(0.02))
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='total_loss', grad_norm_summary=False,
      var_norm_summary=False,
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=1e-2, clip_threshold=0.0,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  return base_layer.instantiate(task_p)


def batches(vocab: int, seq: int, batch: int, seed: int = 0):
  """Endless batches of sequences whose next token is `successor[token]`
  (one fixed random permutation), from random first tokens."""
  rng = np.random.default_rng(seed)
  successor = rng.permutation(vocab)
  while True:
    ids = np.empty((batch, seq + 1), np.int32)
    ids[:, 0] = rng.integers(0, vocab, size=batch)
    for t in range(seq):
      ids[:, t + 1] = successor[ids[:, t]]
    yield py_utils.NestedMap(
        ids=ids[:, :-1], labels=ids[:, 1:],
        paddings=np.zeros((batch, seq), np.float32),
        weights=np.ones((batch, seq), np.float32))


def train(task, steps: int, vocab: int, seq: int, batch: int):
  """(losses, median seconds per step after the first) of `steps` steps."""
  data = batches(vocab, seq, batch)
  first = next(data)
  spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), first)
  state, _ = trainer_lib.initialize_model_state(
      task, jax.random.PRNGKey(0), spec)
  step = jax.jit(functools.partial(
      trainer_lib.train_step_single_learner, task,
      fprop_dtype=jnp.bfloat16), donate_argnums=0)
  key = jax.random.PRNGKey(1)
  losses, times, inputs = [], [], first
  for _ in range(steps):
    start = time.perf_counter()
    state, out = step(state, key, inputs)
    losses.append(float(out.loss))  # Waits for the step.
    times.append(time.perf_counter() - start)
    inputs = next(data)
  return losses, statistics.median(times[1:]), state


def main(argv):
  del argv
  on_gpu = jax.default_backend() == 'gpu'
  tiny = (not on_gpu) if _TINY.value is None else _TINY.value
  cfg = dict(_SMALL if tiny else _FULL)
  for name, flag in (('steps', _STEPS), ('dims', _DIMS), ('layers', _LAYERS),
                     ('vocab', _VOCAB), ('seq', _SEQ), ('batch', _BATCH)):
    if flag.value is not None:
      cfg[name] = flag.value
  print(f'device: {jax.devices()[0].device_kind} ({jax.default_backend()}), '
        f'{"tiny, FP8 emulated" if tiny else "full"}: {cfg}')
  result = {}
  for name, fp8 in (('bf16', False), ('fp8', True)):
    task = decoder_task(cfg['dims'], cfg['layers'], cfg['vocab'], fp8)
    losses, sec, _ = train(task, cfg['steps'], cfg['vocab'], cfg['seq'],
                           cfg['batch'])
    result[name] = (losses, sec)
    print(f'{name:5s} step {sec * 1e3:9.2f} ms   loss first {losses[0]:.4f} '
          f'last {losses[-1]:.4f}')
  (bl, bs), (fl, fs) = result['bf16'], result['fp8']
  print(f'fp8/bf16: step time {fs / bs:.3f}, final loss {fl[-1] / bl[-1]:.4f}')


if __name__ == '__main__':
  app.run(main)
