"""Records the first Adam losses of a small LM with `lookup_style='matmul'`.

Run: `python praxis/layers/testdata/record_matmul_lookup_losses.py` from the
repository root; it prints the losses (float32 hex) to paste into
`embedding_softmax_test.MatmulLookupTest`. Recorded at commit e077a54,
before 'matmul' lookups ran as gathers off TPU, so the test checks that the
change kept the losses.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers


def run(steps: int = 5) -> list[float]:
  """The first `steps` losses (float32) of Adam on a fixed batch."""
  vocab, dims = 97, 16
  lm = pax_fiddle.Config(
      transformer_models.TransformerLm, model_dims=dims, vocab_size=vocab,
      softmax_tpl=pax_fiddle.Config(
          embedding_softmax.SharedEmbeddingSoftmax, lookup_style='matmul',
          scale_sqrt_depth=True))
  lm.stacked_transformer_tpl = pax_fiddle.Config(
      transformers.StackedTransformer, num_layers=1, model_dims=dims,
      hidden_dims=2 * dims, num_heads=2)
  model = base_layer.instantiate(pax_fiddle.Config(
      models.LanguageModel, name='lm', lm_tpl=lm,
      params_init=base_layer.WeightInit.Gaussian(0.5)))
  rng = np.random.default_rng(0)
  # Repeated ids, so that the embedding gradient adds several rows.
  ids = rng.integers(0, 9, size=(4, 9)).astype(np.int32)
  batch = py_utils.NestedMap(
      ids=ids[:, :-1], labels=ids[:, 1:],
      paddings=np.zeros((4, 8), np.float32),
      weights=np.ones((4, 8), np.float32))
  params = model.init(jax.random.PRNGKey(0), batch)
  tx = optax.adam(0.05)

  def loss_fn(p):
    metrics, _ = model.apply(p, batch)
    return metrics['total_loss'][0]

  @jax.jit
  def step(p, o):
    loss, grads = jax.value_and_grad(loss_fn)(p)
    updates, o = tx.update(grads, o, p)
    return optax.apply_updates(p, updates), o, loss

  opt_state, losses = tx.init(params), []
  for _ in range(steps):
    params, opt_state, loss = step(params, opt_state)
    losses.append(float(jnp.float32(loss)))
  return losses


if __name__ == '__main__':
  print([float(np.float32(x)).hex() for x in run()])
