"""A small end-to-end demo of praxis layers: fit a 2-D function with an MLP.

Run: `python -m praxis.layer_demo` (a few seconds on a laptop CPU).

It configures an `MLPBlock` with `pax_fiddle`, initialises it, and trains it
with optax Adam under `jax.jit`, logging the loss, steps/sec and ETA. It is the
README's default job until the experiment runner (`paxml.main`) exists.
"""

import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import activations
from praxis.layers import linears

_STEPS = flags.DEFINE_integer('steps', 600, 'Number of training steps.')


def target_fn(x: np.ndarray) -> np.ndarray:
  """The function the MLP learns: sin(3 x0) * cos(2 x1)."""
  return (np.sin(3 * x[:, 0]) * np.cos(2 * x[:, 1]))[:, None]


def make_model() -> linears.MLPBlock:
  ff = pax_fiddle.Config(linears.FeedForward, input_dims=2, output_dims=1,
                         activation_tpl=pax_fiddle.Config(activations.GELU))
  cfg = pax_fiddle.Config(linears.MLPBlock, name='mlp', num_layers=3,
                          hidden_dims=64, ff_tpl=ff, activate_final=False)
  return base_layer.instantiate(cfg)


def train(num_steps: int, seed: int = 0) -> tuple[float, float]:
  """Trains the MLP; returns (initial loss, final loss) on held-out points."""
  rng = np.random.default_rng(seed)
  x_train = rng.uniform(-1, 1, size=(1024, 2)).astype(np.float32)
  x_test = rng.uniform(-1, 1, size=(256, 2)).astype(np.float32)
  y_train, y_test = target_fn(x_train), target_fn(x_test)

  model = make_model()
  params = model.init(jax.random.PRNGKey(seed), x_train[:1])
  tx = optax.adam(optax.cosine_decay_schedule(3e-3, num_steps))
  opt_state = tx.init(params)

  def loss_fn(params, x, y):
    return jnp.mean((model.apply(params, x) - y) ** 2)

  @jax.jit
  def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  eval_loss = jax.jit(loss_fn)
  initial = float(eval_loss(params, x_test, y_test))
  logging.info('Initial test loss %.4f', initial)
  start = time.time()
  for i in range(1, num_steps + 1):
    batch = rng.integers(0, len(x_train), size=128)
    params, opt_state, loss = step(params, opt_state, x_train[batch],
                                   y_train[batch])
    if i % 100 == 0 or i == num_steps:
      rate = i / (time.time() - start)
      logging.info('step %d/%d train loss %.4f (%.0f steps/sec, ETA %.1fs)',
                   i, num_steps, float(loss), rate, (num_steps - i) / rate)
  final = float(eval_loss(params, x_test, y_test))
  logging.info('Final test loss %.4f (initial %.4f)', final, initial)
  return initial, final


def main(argv):
  del argv
  initial, final = train(_STEPS.value)
  print(f'layer_demo: test loss {initial:.4f} -> {final:.4f}')


if __name__ == '__main__':
  logging.set_verbosity(logging.INFO)
  app.run(main)
