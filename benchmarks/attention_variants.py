"""Attention variants side by side: fused vs plain, multi-query vs full.

Run: `python benchmarks/attention_variants.py [--repeats=5] [--batches=4]`.

One small decoder-only LM (`eval_decode_throughput.py`'s: 2 layers, 128
wide, 4 heads, vocabulary 1024, random weights) with four attentions:

* `plain`: `attentions.DotProductAttention` (multi-head),
* `fused`: `gpu_fast_attention.GpuCudnnFusedDotProductAttention` (the core
  in `jax.nn.dot_product_attention`: cuDNN flash attention on GPUs for
  bf16/f16, XLA elsewhere),
* `gqa`: `multi_query_attention.MultiQueryDotProductAttention` with 2
  key/value heads,
* `mqa`: the same with 1 key/value head.

For each it measures, in one run and alternating over `--repeats`: the
forward pass of the loss over `--batches` batches of 16 x 64 tokens
(examples/s), and greedy decoding with the KV cache (a `lax.while_loop` of
`extend_step`, 48 new tokens after 16-token prompts; tokens/s), and the
bytes of the decoder cache. It prints the medians and the ratios against
`plain` (>1: faster or smaller). Runs on whatever devices JAX sees (CPU or
GPU).
"""

import pathlib
import statistics
import sys

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import eval_decode_throughput as edt  # pylint: disable=g-import-not-at-top,wrong-import-position

from praxis import base_layer  # pylint: disable=wrong-import-position
from praxis import pax_fiddle  # pylint: disable=wrong-import-position
from praxis.layers import gpu_fast_attention  # pylint: disable=wrong-import-position
from praxis.layers import multi_query_attention  # pylint: disable=wrong-import-position

_VARIANTS = {
    'plain': None,
    'fused': lambda: pax_fiddle.Config(
        gpu_fast_attention.GpuCudnnFusedDotProductAttention),
    'gqa': lambda: pax_fiddle.Config(
        multi_query_attention.MultiQueryDotProductAttention, num_kv_heads=2),
    'mqa': lambda: pax_fiddle.Config(
        multi_query_attention.MultiQueryDotProductAttention, num_kv_heads=1),
}


def _task_with(variant: str):
  """edt's LM task, with the attention of `variant`."""
  lm = pax_fiddle.Config(edt.transformer_models.TransformerLm,
                         model_dims=edt._DIMS, vocab_size=edt._VOCAB)  # pylint: disable=protected-access
  lm.stacked_transformer_tpl = pax_fiddle.Config(
      edt.transformers.StackedTransformer, num_layers=2,
      model_dims=edt._DIMS, hidden_dims=4 * edt._DIMS, num_heads=4)  # pylint: disable=protected-access
  if _VARIANTS[variant] is not None:
    layer = lm.stacked_transformer_tpl.transformer_layer_params_tpl
    layer.tr_atten_tpl = _VARIANTS[variant]()
  task_p = pax_fiddle.Config(edt.tasks_lib.SingleTask, name='bench')
  task_p.model = pax_fiddle.Config(
      edt.models.LanguageModel, name='lm', lm_tpl=lm,
      params_init=base_layer.WeightInit.Gaussian(0.05),
      decoder_tpl=edt.decoder_hparams.GreedyDecoderHParams(
          seqlen=edt._SEQLEN, eos_id=edt._VOCAB + 1))  # pylint: disable=protected-access
  task_p.train.learner = pax_fiddle.Config(
      edt.learners.Learner, loss_name='total_loss',
      optimizer=pax_fiddle.Config(edt.optimizers.Sgd))
  return base_layer.instantiate(task_p)


def _cache_bytes(task, variables, batch: int) -> int:
  """Bytes of the decoder cache for `batch` rows of the decode length."""

  def prefill(mdl, b):
    mdl.lm(jnp.zeros((b, 1), jnp.int32), jnp.ones((b, 1), jnp.float32),
           start_time_step=0)
    mdl.lm.transform_decode_state(
        edt.decoder_utils.pad_state_fn(edt._SEQLEN - 1))  # pylint: disable=protected-access

  context = base_layer.JaxContext.HParams(do_eval=True)
  with base_layer.JaxContext.new_context(hparams=context):
    _, cache = jax.eval_shape(
        lambda v: task.model.apply(v, batch, method=prefill,
                                   mutable=[edt.DECODE_CACHE]), variables)
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  batches = [edt.eval_data(rng, edt._BATCH) for _ in range(edt._BATCHES.value)]  # pylint: disable=protected-access
  prompts = [edt.prompt_data(rng, edt._BATCH)['ids']  # pylint: disable=protected-access
             for _ in range(edt._BATCHES.value)]  # pylint: disable=protected-access
  runners = {}
  for name in _VARIANTS:
    task = _task_with(name)
    variables = task.model.init(
        jax.random.PRNGKey(0), edt.NestedMap(batches[0]))
    variables = {k: v for k, v in variables.items() if k != 'summaries'}
    fwd = edt.reference_eval(task, variables, batches)
    dec = edt.reference_decode(task, variables, prompts)
    fwd(), dec()  # Compile.
    runners[name] = (fwd, dec, _cache_bytes(task, variables, edt._BATCH))  # pylint: disable=protected-access
  times = {name: ([], []) for name in runners}
  for _ in range(edt._REPEATS.value):  # pylint: disable=protected-access
    for name, (fwd, dec, _) in runners.items():
      times[name][0].append(edt.timed(fwd)[0])
      times[name][1].append(edt.timed(dec)[0])
  examples = edt._BATCH * len(batches)  # pylint: disable=protected-access
  tokens = examples * (edt._SEQLEN - edt._PROMPT_LEN)  # pylint: disable=protected-access
  base = {k: statistics.median(v) for k, v in zip(
      ('fwd', 'dec'), times['plain'])}
  print(f'devices: {jax.devices()}')
  print(f'{"variant":<7} {"fwd ex/s":>10} {"x plain":>8} {"decode tok/s":>13} '
        f'{"x plain":>8} {"cache bytes":>12} {"x smaller":>9}')
  for name, (fwd_t, dec_t) in times.items():
    fwd, dec = statistics.median(fwd_t), statistics.median(dec_t)
    cache = runners[name][2]
    print(f'{name:<7} {examples / fwd:>10.1f} {base["fwd"] / fwd:>8.2f} '
          f'{tokens / dec:>13.1f} {base["dec"] / dec:>8.2f} {cache:>12d} '
          f'{runners["plain"][2] / cache:>9.2f}')


if __name__ == '__main__':
  app.run(main)
