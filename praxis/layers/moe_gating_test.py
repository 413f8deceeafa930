"""The MoE's GShard load-balancing loss with paddings and routing groups, and
its sentence-level routing."""

from absl.testing import absltest
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import transformers


def _np_loss(logits, paddings, groups):
  """E^2 * mean over (group, expert) of the group's first-choice fraction
  times its mean router probability; padded tokens count as zeros."""
  e = logits.shape[-1]
  logits = logits.reshape(groups, -1, e).astype(np.float64)
  keep = 1.0 - paddings.reshape(groups, -1, 1)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  first = np.eye(e)[probs.argmax(-1)]
  return e * e * np.mean((first * keep).mean(1) * (probs * keep).mean(1))


class Top2GatingLossTest(absltest.TestCase):

  def test_by_hand(self):
    # Two tokens, two experts; the second token is padding. Token 0 goes
    # first to expert 0 with probability p = sigmoid(1).
    logits = np.array([[1.0, 0.0], [0.0, 3.0]], np.float32)
    p = 1 / (1 + np.exp(-1.0))
    _, loss = transformers.top2_gating(logits, np.array([0.0, 1.0]))
    # f = (1/2, 0), mean prob = (p/2, (1-p)/2): 2 * (1/2 * p/2).
    self.assertAlmostEqual(float(loss), p / 2, places=6)
    _, loss = transformers.top2_gating(logits)
    # Unpadded: f = (1/2, 1/2), so the loss is 2 * 1/2 * (sum of the mean
    # probabilities) = 1, whatever the probabilities.
    self.assertAlmostEqual(float(loss), 1.0, places=6)

  def test_groups_and_paddings_match_numpy(self):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 4)).astype(np.float32)
    paddings = np.zeros((2, 6), np.float32)
    paddings[1, 3:] = 1.0
    for groups in (1, 2, 3):
      _, loss = transformers.top2_gating(logits, paddings, groups)
      np.testing.assert_allclose(loss, _np_loss(logits, paddings, groups),
                                 rtol=1e-5)

  def test_layer_uses_its_groups_and_paddings(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        transformers.TransformerFeedForwardMoe, name='moe', input_dims=4,
        hidden_dims=8, num_experts=4, num_groups=2))
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 4, 4)), jnp.float32)
    paddings = jnp.asarray([[0, 0, 0, 0], [0, 0, 1, 1]], jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x, paddings)
    _, updated = layer.apply(variables, x, paddings,
                             mutable=[base_layer.AUX_LOSS])
    got = jax.tree.leaves(updated[base_layer.AUX_LOSS])
    # The router sees the layer-normed inputs.
    normed = layer.apply(variables, x, method=lambda m, v: m.layer_norm(v))
    logits = np.einsum('btm,me->bte', normed,
                       variables['params']['gate'])
    want = _np_loss(np.asarray(logits), np.asarray(paddings), 2)
    np.testing.assert_allclose(got[0], want, rtol=1e-5)

  def test_groups_must_divide_the_tokens(self):
    layer = base_layer.instantiate(pax_fiddle.Config(
        transformers.TransformerFeedForwardMoe, name='moe', input_dims=4,
        hidden_dims=8, num_experts=4, num_groups=3))
    with self.assertRaisesRegex(ValueError, 'num_groups 3 does not divide'):
      layer.init(jax.random.PRNGKey(0), jnp.ones((2, 4, 4)))


def _np_segment_means(x, segment_ids):
  """Each token's mean over the tokens of its segment; segment 0 -> 0."""
  out = np.zeros_like(x)
  for b in range(x.shape[0]):
    for t in range(x.shape[1]):
      seg = segment_ids[b, t]
      if seg:
        out[b, t] = x[b][segment_ids[b] == seg].mean(0)
  return out


class SentenceLevelRoutingTest(absltest.TestCase):

  def test_segment_means(self):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    segment_ids = np.array([[1, 1, 2, 2, 0], [3, 1, 3, 0, 0]], np.int32)
    got = transformers._transformer_feedforward.sentence_embeddings(
        x, None, segment_ids)
    np.testing.assert_allclose(got, _np_segment_means(x, segment_ids),
                               rtol=1e-6, atol=1e-6)
    # Without segment ids: the row's unpadded tokens, or the whole row.
    paddings = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], np.float32)
    got = transformers._transformer_feedforward.sentence_embeddings(
        x, paddings, None)
    want = np.where(paddings[..., None] > 0, 0.0,
                    x[:, :3].mean(1, keepdims=True))
    want[1] = x[1].mean(0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got = transformers._transformer_feedforward.sentence_embeddings(
        x, None, None)
    np.testing.assert_allclose(
        got, np.broadcast_to(x.mean(1, keepdims=True), x.shape), rtol=1e-6)

  def _layer(self, level='sentence'):
    return base_layer.instantiate(pax_fiddle.Config(
        transformers.TransformerFeedForwardMoe, name='moe', input_dims=4,
        hidden_dims=8, num_experts=4, moe_gating_embedding_level=level))

  def test_router_sees_the_segment_means(self):
    layer = self._layer()
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(2, 4, 4)), jnp.float32)
    segment_ids = np.array([[1, 1, 2, 2], [1, 2, 2, 2]], np.int32)
    variables = layer.init(jax.random.PRNGKey(0), x,
                           segment_ids=segment_ids)
    _, updated = layer.apply(variables, x, segment_ids=segment_ids,
                             mutable=[base_layer.AUX_LOSS])
    normed = layer.apply(variables, x, method=lambda m, v: m.layer_norm(v))
    means = _np_segment_means(np.asarray(normed), segment_ids)
    logits = np.einsum('btm,me->bte', means, variables['params']['gate'])
    np.testing.assert_allclose(
        jax.tree.leaves(updated[base_layer.AUX_LOSS])[0],
        _np_loss(logits, np.zeros((2, 4), np.float32), 1), rtol=1e-5)

  def test_decoding_and_2d_inputs_are_refused(self):
    layer = self._layer()
    variables = layer.init(jax.random.PRNGKey(0), jnp.ones((1, 2, 4)))
    with self.assertRaisesRegex(ValueError, "'sentence'.*decoding step"):
      layer.apply(variables, jnp.ones((1, 4)), time_step=0,
                  method=layer.extend_step)
    with self.assertRaisesRegex(ValueError, r'needs inputs \[batch, time'):
      layer.apply(variables, jnp.ones((3, 4)))

  def test_unknown_level_is_refused(self):
    with self.assertRaisesRegex(ValueError, "'token' or 'sentence'"):
      self._layer('word').init(
          jax.random.PRNGKey(0), jnp.ones((1, 2, 4)))


if __name__ == '__main__':
  absltest.main()
