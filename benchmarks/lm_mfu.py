r"""Steps/s, tokens/s and MFU of a decoder-only LM trained with the Pax runner.

Run on one GPU (about a 1B-parameter decoder, bf16 activations):

  python benchmarks/lm_mfu.py --size=1b --steps=40

and on a CPU a tiny version of the same script (the default there):

  python benchmarks/lm_mfu.py --size=tiny

The model is `TransformerLm` (pre-LN, GELU feed-forward 4x wide, tied
softmax) under `SingleTaskTrainProgram` with Adam, on synthetic tokens held
in memory, so the input costs nothing. `--fused_attention` swaps in
`gpu_fast_attention.GpuCudnnFusedDotProductAttention` (cuDNN flash attention
on GPUs, the plain path elsewhere); `--checkpoint_policy` rematerialises
each layer with one of Pax's `AutodiffCheckpointType` policies; `--repeat`
scans one layer instead of unrolling the stack (much faster to compile).

Model FLOPs per step come from the config, as in the PaLM paper's MFU:
6 x (non-embedding parameters + the softmax's) x tokens + 12 x layers x
width x sequence x tokens (attention scores and values, forward and
backward). The script prints them next to XLA's count for the step as
lowered (`paxml.mfu.step_flops`, the count the runner's MFU uses), which
also counts the optimizer and element-wise work and the recomputed forward
under remat, but not the inside of custom calls: with cuDNN attention (a
GPU, bf16) it leaves out the attention part, printed apart. MFU is model
FLOPs x steps/s over the device's dense bf16 peak
(`paxml.mfu.PEAK_BF16_TFLOPS`); devices without a known peak (CPUs) print
steps/s and tokens/s only.

Measured on one H200 (2026-11-27, jax 0.11.2, `--size=1b`, batch 8 x 2048,
20 steps after 3): 281.6 ms a step, 3.55 steps/s, 58,178 tokens/s, MFU
52.1%, 47.3 GiB peak; `--nois_causal` 47.7%; `--batch=16
--checkpoint_policy=SAVE_DOT_EXCEPT_LOGITS` 48.9% (README, Performance).
"""

import dataclasses
import pathlib
import statistics
import tempfile
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
from paxml import learners
from paxml import mfu
from paxml import partitioning
from paxml import programs
from paxml import tasks_lib
from praxis import base_input
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import schedules
from praxis.layers import checkpoint_policy
from praxis.layers import gpu_fast_attention
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

_SIZE = flags.DEFINE_enum('size', None, ['tiny', '1b'],
                          'Model size (default: 1b on GPU, tiny elsewhere).')
_STEPS = flags.DEFINE_integer('steps', 30, 'Timed steps.')
_WARMUP = flags.DEFINE_integer('warmup', 5, 'Untimed steps after compiling.')
_BATCH = flags.DEFINE_integer('batch', None, 'Sequences per step.')
_FUSED = flags.DEFINE_bool('fused_attention', True,
                           'Use the cuDNN fused attention layer.')
_CAUSAL = flags.DEFINE_bool(
    'is_causal', True,
    'With --fused_attention: also tell the kernel that the mask is causal, '
    'so that it skips the blocks above the diagonal (the mask, which also '
    'holds the paddings, is applied in any case).')
_REPEAT = flags.DEFINE_bool(
    'repeat', False,
    'Scan one layer `layers` times (StackedTransformerRepeated, as Pax\'s '
    'large LM configs do): the step compiles in about the time of one layer.')
_POLICY = flags.DEFINE_string(
    'checkpoint_policy', None,
    'Remat policy (an AutodiffCheckpointType name, e.g. '
    'SAVE_DOT_EXCEPT_LOGITS); default: no remat.')


@dataclasses.dataclass(frozen=True)
class Size:
  layers: int
  dims: int
  heads: int
  vocab: int
  seq_len: int
  batch: int


SIZES = {
    # 24 x 12 x 2048^2 = 1.21B in the layers, + 65.5M tied embedding.
    '1b': Size(layers=24, dims=2048, heads=16, vocab=32000, seq_len=2048,
               batch=8),
    'tiny': Size(layers=2, dims=128, heads=4, vocab=512, seq_len=128,
                 batch=4),
}


def attention_flops_per_step(size: Size, batch: int) -> float:
  """The attention scores' and values' FLOPs of one step (PaLM's count)."""
  return 12 * size.layers * size.dims * size.seq_len * batch * size.seq_len


def model_flops_per_step(size: Size, batch: int) -> float:
  """The config's training FLOPs of one step (PaLM's MFU accounting)."""
  per_layer = 12 * size.dims**2  # QKV + output 4 d^2, feed-forward 8 d^2.
  params = size.layers * per_layer + size.vocab * size.dims  # + softmax.
  return (6 * params * batch * size.seq_len
          + attention_flops_per_step(size, batch))


def make_task(size: Size, fused: bool, causal: bool, policy: str | None,
              repeat: bool = False) -> object:
  names = checkpoint_policy.AutodiffCheckpointType.__members__
  if policy and policy not in names:
    raise app.UsageError(f'--checkpoint_policy={policy}: expected one of '
                         f'{", ".join(names)}.')
  lm = pax_fiddle.Config(
      transformer_models.TransformerLm, model_dims=size.dims,
      vocab_size=size.vocab)  # The softmax is also the embedding table.
  stack = pax_fiddle.Config(
      transformers.StackedTransformer,
      num_layers=1 if repeat else size.layers, model_dims=size.dims,
      hidden_dims=4 * size.dims, num_heads=size.heads,
      mask_self_attention=True)
  if fused:
    stack.transformer_layer_params_tpl.tr_atten_tpl = pax_fiddle.Config(
        gpu_fast_attention.GpuCudnnFusedDotProductAttention,
        is_causal=causal)
  if repeat:  # Its loop body is rematerialised: SAVE_EVERYTHING = no remat.
    stack = pax_fiddle.Config(
        transformers.StackedTransformerRepeated, block=stack,
        x_times=size.layers,
        checkpoint_policy=names[policy or 'SAVE_EVERYTHING'])
  elif policy:
    stack.remat = True
    stack.checkpoint_policy = names[policy]
  lm.stacked_transformer_tpl = stack
  model = pax_fiddle.Config(models.LanguageModel, name='lm', lm_tpl=lm)
  if jax.default_backend() != 'cpu':
    model.fprop_dtype = jnp.bfloat16
  model.params_init = base_layer.WeightInit.Gaussian(0.02)
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='mfu', model=model)
  train = task_p.train
  train.num_train_steps = 10**9
  train.summary_interval_steps = 10**9  # Time the lean steps only.
  train.eval_interval_steps = 0
  train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='total_loss', grad_norm_summary=False,
      var_norm_summary=False,
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=1e-4, clip_gradient_norm_to_value=1.0,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  return base_layer.instantiate(task_p)


def synthetic_input(size: Size, batch: int) -> base_input.InMemoryInput:
  rng = np.random.default_rng(0)
  n = 4 * batch
  ids = rng.integers(1, size.vocab, (n, size.seq_len + 1), dtype=np.int32)
  data = {'ids': ids[:, :-1], 'labels': ids[:, 1:],
          'paddings': np.zeros((n, size.seq_len), np.float32),
          'weights': np.ones((n, size.seq_len), np.float32)}
  return base_input.InMemoryInput(name='train', batch_size=batch, data=data,
                                  is_training=True, input_random_seed=1)


def main(argv):
  del argv
  on_cpu = jax.default_backend() == 'cpu'
  size = SIZES[_SIZE.value or ('tiny' if on_cpu else '1b')]
  batch = _BATCH.value or size.batch
  task = make_task(size, _FUSED.value, _CAUSAL.value, _POLICY.value,
                   _REPEAT.value)
  inp = synthetic_input(size, batch)
  partitioner = partitioning.create_partitioner(task)
  spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                      inp.peek_padded())
  partitioner.setup(task, None, spec)
  key = jax.random.PRNGKey(1)
  program = programs.SingleTaskTrainProgram()
  program.setup(task, inp, partitioner, pathlib.Path(tempfile.mkdtemp()),
                key, key, 0, enable_summary_writer=False)
  state = partitioner.initialize_prng_key_and_train_state(
      jax.random.PRNGKey(0), None, None)[1]
  num_params = sum(x.size for x in jax.tree.leaves(state.mdl_vars))
  device = jax.devices()[0]
  print(f'device: {jax.device_count()} x {device.device_kind}; model: '
        f'{size.layers} layers x {size.dims}, {num_params / 1e6:.1f}M '
        f'parameters, batch {batch} x {size.seq_len} tokens, fused attention '
        f'{_FUSED.value} (is_causal {_CAUSAL.value}), '
        f'{"repeated" if _REPEAT.value else "unrolled"} layers, remat '
        f'{_POLICY.value or "none"}')
  start = time.perf_counter()
  step = 0
  out = program.run(state, step)
  jax.block_until_ready(out.state)
  print(f'first step (compiling): {time.perf_counter() - start:.1f} s')
  state, step = out.state, 1
  for _ in range(_WARMUP.value):
    out = program.run(state, step)
    state, step = out.state, step + 1
  jax.block_until_ready(state)
  times = []
  for _ in range(_STEPS.value):
    t = time.perf_counter()
    out = program.run(state, step)
    state, step = out.state, step + 1
    jax.block_until_ready(out.loss)
    times.append(time.perf_counter() - t)
  program.shutdown()
  step_time = statistics.median(times)
  steps_per_sec = 1.0 / step_time
  tokens_per_sec = steps_per_sec * batch * size.seq_len
  flops = model_flops_per_step(size, batch)
  xla_flops = program._compiled_train_step().flops  # pylint: disable=protected-access
  print(f'loss after {step} steps: {float(out.loss):.4f}')
  print(f'median step {1e3 * step_time:.1f} ms: {steps_per_sec:.3f} steps/s, '
        f'{tokens_per_sec:,.0f} tokens/s')
  ratio = f' (XLA / model: {xla_flops / flops:.2f})' if xla_flops else ''
  print(f'model FLOPs/step {flops:.3e}, of which attention '
        f'{attention_flops_per_step(size, batch):.3e}; XLA counts '
        f'{xla_flops or float("nan"):.3e}{ratio}')
  utilisation = mfu.mfu(flops, steps_per_sec, jax.device_count(),
                        device.device_kind)
  if utilisation is None:
    print(f'MFU: no known bf16 peak for {device.device_kind!r}')
  else:
    print(f'MFU: {100 * utilisation:.1f}%')
  stats = device.memory_stats() or {}
  if 'peak_bytes_in_use' in stats:
    print(f'peak device memory: {stats["peak_bytes_in_use"] / 2**30:.1f} GiB')


if __name__ == '__main__':
  app.run(main)
