"""Eval and decode throughput of the Pax programs vs hand-written jax loops.

Run: `python benchmarks/eval_decode_throughput.py [--batches=16]
[--repeats=15]`.

The model is a small TransformerLm LanguageModel (2 layers, 128 wide,
vocabulary 1024; as in `train_step_overhead.py`), with random weights, on
whatever devices JAX sees. In one run it measures:

* eval: examples/s of `programs.SingleTaskEvalProgram.run` over `--batches`
  batches of 16 x 64 tokens (an in-memory input, metrics aggregated and
  written), against a `jax.jit` of the model's metrics over the same
  batches (numpy batches passed straight in; the same weighted metrics the
  program reports, summed on the device and fetched once);
* decode: generated tokens/s of `decode_programs.SingleTaskDecodeProgram.run`
  (greedy `LanguageModel.decode`, outputs turned into records) over
  `--batches` batches of 16 prompts of 16 tokens, 48 tokens generated each,
  against a hand-written greedy decode: a `jax.lax.while_loop` of the LM's
  `extend_step` over its KV cache (the same cache layout and arithmetic,
  without the programs' bookkeeping) that keeps, as Pax's greedy decode
  does, each chosen token's log-probability (a log-softmax over the
  vocabulary at every step). It checks that both decode the same ids and
  log-probabilities. The ratio against the same loop without the
  log-probabilities (ids only, less math than the program does) is printed
  too.

Both hand-written steps take the weights as an argument, as the programs'
compiled steps do and as any loop over a trained checkpoint must (weights
closed over in a `jax.jit` become constants of the executable: XLA folds
their transposes and layouts at compile time, work no real decode skips).

After compilation the sides alternate `--repeats` times; it prints the
median rate of each and the median (and quartiles) of the paired repeats'
ratios, program rate / hand-written rate (1.0: no overhead).
"""

import pathlib
import statistics
import tempfile
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from paxml import decode_programs
from paxml import learners
from paxml import partitioning
from paxml import programs
from paxml import tasks_lib
from praxis import base_input
from praxis import base_layer
from praxis import decoder_hparams
from praxis import decoder_utils
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

_BATCHES = flags.DEFINE_integer('batches', 16, 'Batches per eval / decode.')
_REPEATS = flags.DEFINE_integer('repeats', 15, 'Alternating repeats.')

NestedMap = py_utils.NestedMap
DECODE_CACHE = base_layer.DECODE_CACHE
_VOCAB, _DIMS, _BATCH = 1024, 128, 16
_SEQ_LEN = 64  # Eval.
_PROMPT_LEN, _SEQLEN = 16, 64  # Decode: 48 tokens generated per prompt.


class PromptInput(base_input.InMemoryInput):
  """In-memory prompts; 'detokenizes' ids as their decimal strings."""

  def ids_to_strings(self, ids, lengths, key=None):
    del key
    return [' '.join(map(str, row[:n])) for row, n in zip(ids, lengths)]


def make_task():
  """A small LanguageModel task (greedy decoding, no EOS)."""
  lm = pax_fiddle.Config(transformer_models.TransformerLm, model_dims=_DIMS,
                         vocab_size=_VOCAB)
  lm.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=2, model_dims=_DIMS,
      hidden_dims=4 * _DIMS, num_heads=4)
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='bench')
  task_p.model = pax_fiddle.Config(
      models.LanguageModel, name='lm', lm_tpl=lm,
      params_init=base_layer.WeightInit.Gaussian(0.05),
      decoder_tpl=decoder_hparams.GreedyDecoderHParams(
          seqlen=_SEQLEN, eos_id=_VOCAB + 1))  # An id never decoded.
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='total_loss',
      optimizer=pax_fiddle.Config(optimizers.Sgd))
  return base_layer.instantiate(task_p)


def eval_data(rng, n):
  ids = rng.integers(2, _VOCAB, size=(n, _SEQ_LEN + 1), dtype=np.int32)
  return {'ids': ids[:, :-1], 'labels': ids[:, 1:],
          'paddings': np.zeros((n, _SEQ_LEN), np.float32),
          'weights': np.ones((n, _SEQ_LEN), np.float32)}


def prompt_data(rng, n):
  return {'ids': rng.integers(2, _VOCAB, size=(n, _PROMPT_LEN),
                              dtype=np.int32),
          'paddings': np.zeros((n, _PROMPT_LEN), np.float32)}


def timed(fn):
  start = time.perf_counter()
  out = fn()
  return time.perf_counter() - start, out


def program_runners(task, eval_np, prompts_np):
  """(run eval program, run decode program, the train state)."""
  partitioner = partitioning.create_partitioner(task)
  spec = jax.tree.map(
      lambda a: jax.ShapeDtypeStruct((_BATCH,) + a.shape[1:], a.dtype),
      NestedMap(eval_np))
  partitioner.setup(task, None, spec)
  state = partitioner.initialize_prng_key_and_train_state(
      jax.random.PRNGKey(0), None, None)[1]
  job_dir = pathlib.Path(tempfile.mkdtemp())
  eval_p = pax_fiddle.Config(base_input.InMemoryInput, name='eval',
                             batch_size=_BATCH, data=eval_np,
                             reset_for_eval=True)
  eval_program = programs.SingleTaskEvalProgram(eval_p)
  eval_program.setup(task, partitioner, job_dir, jax.random.PRNGKey(1),
                     enable_summary_writer=False)
  decode_p = pax_fiddle.Config(PromptInput, name='prompts', batch_size=_BATCH,
                               data=prompts_np, reset_for_eval=True)
  decode_program = decode_programs.SingleTaskDecodeProgram(decode_p)
  decode_program.setup(task, partitioner, job_dir, jax.random.PRNGKey(2),
                       enable_summary_writer=False)
  return (lambda: eval_program.run(state, 0).eval_metrics['loss'],
          lambda: decode_program.run(state, 0).records, state)


def reference_eval(task, variables, batches):
  """A jitted eval step over the batches: the model's weighted metrics (the
  ones the program reports: loss, accuracy, log-perplexity, ...) summed on
  the device as (value x weight, weight), fetched once."""
  model = task.model
  context = base_layer.JaxContext.HParams(do_eval=True)

  def sums(variables, batch):
    with base_layer.JaxContext.new_context(hparams=context):
      metrics, _ = model.apply(variables, NestedMap(batch))
    return {k: jnp.stack([v * w, w]).astype(jnp.float32)
            for k, (v, w) in metrics.items()}

  @jax.jit
  def step(variables, acc, batch):
    return jax.tree.map(jnp.add, acc, sums(variables, batch))

  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                       jax.eval_shape(sums, variables, batches[0]))

  def run():
    acc = zeros
    for batch in batches:
      acc = step(variables, acc, batch)
    total = np.asarray(acc['total_loss'])
    return float(total[0] / total[1])

  return run


def reference_decode(task, variables, prompt_batches, logprobs=True):
  """Greedy decoding: a lax.while_loop of extend_step over the KV cache.

  Returns a function of no arguments: the decoded ids [N, seq len] and, with
  `logprobs`, each position's log-probability of its id (1.0 at position 0,
  as in the program's outputs), else None.
  """
  model = task.model
  context = base_layer.JaxContext.HParams(do_eval=True)

  def prefill(mdl, b):
    # The cache as LanguageModel.decode starts it: one dummy position,
    # padded to the sequence length.
    mdl.lm(jnp.zeros((b, 1), jnp.int32), jnp.ones((b, 1), jnp.float32),
           start_time_step=0)
    mdl.lm.transform_decode_state(decoder_utils.pad_state_fn(_SEQLEN - 1))

  def extend(mdl, ids, pos):
    return mdl.lm.extend_step(ids, segment_pos=pos).logits

  @jax.jit
  def decode(variables, prompts):
    b = prompts.shape[0]
    with base_layer.JaxContext.new_context(hparams=context):
      _, cache = model.apply(variables, b, method=prefill,
                             mutable=[DECODE_CACHE])
      ids = jnp.zeros((b, _SEQLEN), jnp.int32).at[:, :_PROMPT_LEN].set(
          prompts)
      lps = jnp.ones((b, _SEQLEN), jnp.float32) if logprobs else None

      def body(carry):
        t, ids, lps, cache = carry
        logits, cache = model.apply(
            {**variables, **cache}, ids[:, t], jnp.full((b,), t, jnp.int32),
            method=extend, mutable=[DECODE_CACHE])
        new = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        new = jnp.where(t + 1 < _PROMPT_LEN, ids[:, t + 1], new)
        if logprobs:
          lp = jax.nn.log_softmax(logits)[jnp.arange(b), new]
          lps = lps.at[:, t + 1].set(lp)
        return t + 1, ids.at[:, t + 1].set(new), lps, cache

      _, ids, lps, _ = jax.lax.while_loop(lambda c: c[0] < _SEQLEN - 1, body,
                                          (jnp.int32(0), ids, lps, cache))
    return ids, lps

  def run():
    outs = [decode(variables, p) for p in prompt_batches]
    ids = np.concatenate([np.asarray(i) for i, _ in outs])
    if not logprobs:
      return ids, None
    return ids, np.concatenate([np.asarray(lp) for _, lp in outs])

  return run


def alternate(repeats, *fns):
  """Seconds of each function in `repeats` alternating runs (lists)."""
  for fn in fns:
    fn()  # Compile (and warm up).
  times = [[] for _ in fns]
  for _ in range(repeats):
    for fn, fn_times in zip(fns, times):
      fn_times.append(timed(fn)[0])
  return times


def paired_ratio(program_times, reference_times):
  """'ratio R (quartiles A-B)': of the paired repeats' ratios reference /
  program (throughput of the program over the reference's), the median and
  quartiles: adjacent runs see the same state of a shared machine."""
  ratios = [r / p for p, r in zip(program_times, reference_times)]
  low, _, high = statistics.quantiles(ratios, n=4)
  return (f'ratio {statistics.median(ratios):.3f} '
          f'(quartiles {low:.3f}-{high:.3f})')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # The programs log each run.
  rng = np.random.default_rng(0)
  n = _BATCHES.value * _BATCH
  eval_np, prompts_np = eval_data(rng, n), prompt_data(rng, n)
  task = make_task()
  run_eval, run_decode, state = program_runners(task, eval_np, prompts_np)
  variables = jax.tree.map(jnp.asarray, state.mdl_vars)
  eval_batches = [{k: v[i:i + _BATCH] for k, v in eval_np.items()}
                  for i in range(0, n, _BATCH)]
  prompt_batches = [prompts_np['ids'][i:i + _BATCH]
                    for i in range(0, n, _BATCH)]
  ref_eval = reference_eval(task, variables, eval_batches)
  ref_decode = reference_decode(task, variables, prompt_batches)
  ids_only_decode = reference_decode(task, variables, prompt_batches,
                                     logprobs=False)

  np.testing.assert_allclose(run_eval(), ref_eval(), rtol=1e-4)
  records = dict(run_decode())
  ref_ids, ref_logprobs = ref_decode()
  np.testing.assert_array_equal(ids_only_decode()[0], ref_ids)
  for row, logprobs, prompt in zip(ref_ids, ref_logprobs, prompts_np['ids']):
    record = records[' '.join(map(str, prompt))]
    np.testing.assert_array_equal(record['ids'][:_SEQLEN], row)
    np.testing.assert_allclose(record['logprobs'][:_SEQLEN], logprobs,
                               rtol=1e-5, atol=1e-5)

  print(f'devices: {jax.device_count()} x {jax.devices()[0].device_kind}')
  print(f'model: TransformerLm 2 x {_DIMS}, vocabulary {_VOCAB}; '
        f'{_BATCHES.value} batches of {_BATCH}; {_REPEATS.value} '
        'alternating repeats; rates are medians, ratios the median of the '
        'paired ratios)')
  med = statistics.median
  prog, ref = alternate(_REPEATS.value, run_eval, ref_eval)
  print(f'eval ({_SEQ_LEN} tokens/example): program {n / med(prog):.1f} '
        f'examples/s, hand-written jit {n / med(ref):.1f} examples/s, '
        f'{paired_ratio(prog, ref)}')
  tokens = n * (_SEQLEN - _PROMPT_LEN)
  prog, ref, ids_only = alternate(_REPEATS.value, run_decode, ref_decode,
                                  ids_only_decode)
  print(f'decode ({_PROMPT_LEN}-token prompts, {_SEQLEN - _PROMPT_LEN} new '
        f'tokens): program {tokens / med(prog):.1f} tokens/s, hand-written '
        f'while_loop {tokens / med(ref):.1f} tokens/s, '
        f'{paired_ratio(prog, ref)}; ids only, without the log-probabilities: '
        f'{tokens / med(ids_only):.1f} tokens/s, '
        f'{paired_ratio(prog, ids_only)}')


if __name__ == '__main__':
  app.run(main)
