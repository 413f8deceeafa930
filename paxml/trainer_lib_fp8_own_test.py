"""Pax's train step trains a tiny LM whose einsums are FP8 (emulated on CPU).

The FP8 delayed-scaling metas (`OVERWRITE_WITH_GRADIENT`) take their new
value from the step, not from the optimizer; the loss falls as the bf16
run's does.
"""

import functools

from absl.testing import absltest
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
from praxis import test_utils
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers
from praxis.layers.injection import fp8_nvidia_gpu

_VOCAB, _SEQ, _BATCH, _STEPS = 16, 8, 8, 40


def _task(fp8: bool):
  stacked = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=1, model_dims=16,
      hidden_dims=32, num_heads=2)
  if fp8:
    op = pax_fiddle.Config(fp8_nvidia_gpu.Fp8EinsumOp, amax_history_length=4)
    layer = stacked.transformer_layer_params_tpl
    layer.tr_atten_tpl.proj_tpl.einsum_tpl = op
    layer.tr_fflayer_tpl.fflayer_tpl.linear_tpl.einsum_tpl = op.clone()
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
  task_p.model = pax_fiddle.Config(
      models.LanguageModel, name='lm', fprop_dtype=jnp.bfloat16,
      params_init=base_layer.WeightInit.Gaussian(0.05),
      lm_tpl=pax_fiddle.Config(
          transformer_models.TransformerLm, model_dims=16, vocab_size=_VOCAB,
          stacked_transformer_tpl=stacked))
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='total_loss',
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=1e-2, clip_threshold=0.0,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  return base_layer.instantiate(task_p)


def _batches():
  """Next token = successor[token] (a fixed permutation): learnable."""
  rng = np.random.default_rng(0)
  successor = rng.permutation(_VOCAB)
  for _ in range(_STEPS):
    ids = np.empty((_BATCH, _SEQ + 1), np.int32)
    ids[:, 0] = rng.integers(0, _VOCAB, size=_BATCH)
    for t in range(_SEQ):
      ids[:, t + 1] = successor[ids[:, t]]
    yield py_utils.NestedMap(
        ids=ids[:, :-1], labels=ids[:, 1:],
        paddings=np.zeros((_BATCH, _SEQ), np.float32),
        weights=np.ones((_BATCH, _SEQ), np.float32))


def _train(fp8: bool):
  """(losses, initial vars, vars after one step, final vars)."""
  task = _task(fp8)
  batches = list(_batches())
  spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                      batches[0])
  state, _ = trainer_lib.initialize_model_state(
      task, jax.random.PRNGKey(0), spec)
  init = jax.tree.map(np.asarray, state.mdl_vars)
  step = jax.jit(functools.partial(
      trainer_lib.train_step_single_learner, task, fprop_dtype=jnp.bfloat16))
  losses, after_one = [], None
  for inputs in batches:
    state, out = step(state, jax.random.PRNGKey(1), inputs)
    losses.append(float(out.loss))
    if after_one is None:
      after_one = jax.tree.map(np.asarray, state.mdl_vars)
  return losses, init, after_one, state.mdl_vars


class Fp8TrainingTest(test_utils.TestCase):

  def test_fp8_trains_like_bf16(self):
    bf16_losses, bf16_init, _, _ = _train(fp8=False)
    losses, init, after_one, final = _train(fp8=True)
    ffn = ('params', 'lm', 'transformer', 'x_layers_0', 'ff_layer',
           'ffn_layer1', 'linear')

    def at(tree, *path):
      for key in path:
        tree = tree[key]
      return tree

    # Same start: FP8 only adds the metas.
    np.testing.assert_array_equal(at(init, *ffn, 'w'), at(bf16_init, *ffn, 'w'))
    meta0, meta1 = at(init, *ffn, 'einsum'), at(after_one, *ffn, 'einsum')
    np.testing.assert_array_equal(meta0['kernel_amax_history'], 0.0)
    np.testing.assert_array_equal(meta0['kernel_scale'], 1.0)
    # One step later the history holds max|w| of the kernel the step used
    # (w as bf16): the step's value, not an optimizer update of 0.
    w_amax = np.abs(at(init, *ffn, 'w').astype(jnp.bfloat16)).max()
    hist = meta1['kernel_amax_history']
    self.assertAllClose(hist.max(), float(w_amax), rtol=1e-6)
    self.assertEqual(np.count_nonzero(hist), 1)
    self.assertEqual(hist.dtype, np.float32)
    # The scale moved off 1 (to about max|w| / 448, e4m3's largest value).
    scale = float(at(final, *ffn, 'einsum', 'kernel_scale')[0])
    self.assertBetween(scale, 1e-5, 1e-2)
    # Training works, and tracks bf16.
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    self.assertLess(last, first - 0.5)
    self.assertAllClose(last, np.mean(bf16_losses[-5:]), atol=0.15)


if __name__ == '__main__':
  absltest.main()
