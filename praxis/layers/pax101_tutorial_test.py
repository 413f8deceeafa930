"""The layer half of Pax's "Pax 101" tutorial, written as its users wrote it.

A small encoder-decoder translator assembled from `praxis.layers` the way the
tutorial does: `layers.Linear` projections in a hand-written attention,
`layers.LayerNorm(dim=)`, `layers.FeedForward(..., activation_tpl=...)`,
`layers.Dropout(keep_prob=)`, `layers.PositionalEmbedding` called with
`seq_length=`, `layers.Embedding(...).emb_lookup`, `layers.SharedEmbeddingSoftmax`
called with `class_weights=` and `class_ids=`, `create_children` indexed as a
list, `layers.compute_attention_masks_for_fprop` with cross inputs, and
`base_layer.JaxContext.new_context`.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import layers
from praxis import pax_fiddle
from praxis import test_utils

instantiate = base_layer.instantiate
RANDOM = base_layer.RANDOM
PARAMS = base_layer.PARAMS


class MultiHeadedAttention(base_layer.BaseLayer):
  """Attention with `layers.Linear` projections, as the tutorial writes it."""

  input_dims: int = 0
  num_heads: int = 0
  dropout_prob: float = 0.0

  def setup(self):
    for name in ('wq', 'wk', 'wv', 'dense'):
      self.create_child(name, pax_fiddle.Config(
          layers.Linear, input_dims=self.input_dims,
          output_dims=self.input_dims))
    self.create_child('dropout', pax_fiddle.Config(
        layers.Dropout, keep_prob=1.0 - self.dropout_prob))

  @staticmethod
  def dot_attention(q, k, v, mask):
    logits = jnp.einsum('BNTH,BNSH->BNTS', q, k) / np.sqrt(q.shape[-1])
    probs = jax.nn.softmax(logits + mask, axis=-1)
    return jnp.einsum('BNTS,BNSH->BNTH', probs, v)

  def _split_heads(self, x):
    b, t, d = x.shape
    return x.reshape(b, t, self.num_heads, d // self.num_heads).transpose(
        0, 2, 1, 3)

  def __call__(self, q_in, k_in, v_in, mask):
    q, k, v = (self._split_heads(f(x)) for f, x in
               ((self.wq, q_in), (self.wk, k_in), (self.wv, v_in)))
    ctx = self.dot_attention(q, k, v, mask)
    b, n, t, h = ctx.shape
    base_layer.assert_has_shape(ctx, [b, self.num_heads, t, -1])
    out = self.dense(ctx.transpose(0, 2, 1, 3).reshape(b, t, n * h))
    return self.dropout(out)


class TransformerLayer(base_layer.BaseLayer):
  """Self-attention, optional cross-attention, then a feed-forward block."""

  dims: int = 0
  num_heads: int = 0
  cross_attention: bool = False

  def setup(self):
    atten = pax_fiddle.Config(MultiHeadedAttention, input_dims=self.dims,
                              num_heads=self.num_heads)
    self.create_child('self_atten', atten)
    self.create_child('ln1', pax_fiddle.Config(layers.LayerNorm, dim=self.dims))
    if self.cross_attention:
      self.create_child('cross_atten', atten)
      self.create_child('ln2', pax_fiddle.Config(layers.LayerNorm,
                                                 dim=self.dims))
    self.create_child('ln3', pax_fiddle.Config(layers.LayerNorm, dim=self.dims))
    self.create_child('ff1', pax_fiddle.Config(
        layers.FeedForward, input_dims=self.dims, output_dims=4 * self.dims,
        activation_tpl=pax_fiddle.Config(layers.ReLU)))
    self.create_child('ff2', pax_fiddle.Config(
        layers.FeedForward, input_dims=4 * self.dims, output_dims=self.dims,
        activation_tpl=pax_fiddle.Config(layers.Identity)))

  def __call__(self, x, mask, cross_x=None, cross_mask=None):
    h = self.ln1(x)
    x = x + self.self_atten(h, h, h, mask)
    if self.cross_attention:
      h = self.ln2(x)
      x = x + self.cross_atten(h, cross_x, cross_x, cross_mask)
    return x + self.ff2(self.ff1(self.ln3(x)))


class Translator(base_layer.BaseLayer):
  """The tutorial's encoder-decoder translator."""

  vocab: int = 0
  dims: int = 0
  num_heads: int = 0
  num_layers: int = 1

  def setup(self):
    self.create_child('position_emb', pax_fiddle.Config(
        layers.PositionalEmbedding, embedding_dims=self.dims))
    self.create_child('src_emb', pax_fiddle.Config(
        layers.Embedding, input_dims=self.dims, num_classes=self.vocab))
    self.create_child('tgt_softmax', pax_fiddle.Config(
        layers.SharedEmbeddingSoftmax, input_dims=self.dims,
        num_classes=self.vocab))
    enc = pax_fiddle.Config(TransformerLayer, dims=self.dims,
                            num_heads=self.num_heads)
    dec = enc.clone().set(cross_attention=True)
    self.create_children('enc_layer', [enc.clone()
                                       for _ in range(self.num_layers)])
    self.create_children('dec_layer', [dec.clone()
                                       for _ in range(self.num_layers)])

  def encoder_fprop(self, src_ids, src_paddings):
    x = self.src_emb.emb_lookup(src_ids)
    x = x + self.position_emb(seq_length=src_ids.shape[1])
    mask, _ = layers.compute_attention_masks_for_fprop(x, src_paddings)
    for i in range(self.num_layers):
      x = self.enc_layer[i](x, mask)
    return x

  def __call__(self, src_ids, src_paddings, tgt_ids, tgt_paddings, labels):
    enc = self.encoder_fprop(src_ids, src_paddings)
    x = self.tgt_softmax.emb_lookup(tgt_ids)
    x = x + self.position_emb(seq_length=tgt_ids.shape[1])
    mask, cross_mask = layers.compute_attention_masks_for_fprop(
        x, tgt_paddings, causal_attention=True, cross_inputs=enc,
        cross_paddings=src_paddings)
    for i in range(self.num_layers):
      x = self.dec_layer[i](x, mask, enc, cross_mask)
    return self.tgt_softmax(x, class_weights=(1.0 - tgt_paddings)[..., None],
                            class_ids=labels[..., None])


class Pax101TutorialTest(test_utils.TestCase):

  def test_translator_as_the_tutorial_builds_it(self):
    translator = instantiate(pax_fiddle.Config(
        Translator, name='translator', vocab=16, dims=8, num_heads=2,
        num_layers=2))
    rng = np.random.default_rng(0)
    src = jnp.asarray(rng.integers(1, 16, size=(2, 5)))
    tgt = jnp.asarray(rng.integers(1, 16, size=(2, 4)))
    src_pad = jnp.zeros((2, 5)).at[1, 3:].set(1.0)
    tgt_pad = jnp.zeros((2, 4))
    labels = jnp.roll(tgt, -1, axis=1)
    init_key, random_key = jax.random.split(jax.random.PRNGKey(0))
    with base_layer.JaxContext.new_context():
      variables = translator.init({PARAMS: init_key, RANDOM: random_key},
                                  src, src_pad, tgt, tgt_pad, labels)
      out = translator.apply(variables, src, src_pad, tgt, tgt_pad, labels,
                             rngs={RANDOM: random_key})
    self.assertEqual(set(variables[PARAMS]['enc_layer_1']),
                     {'self_atten', 'ln1', 'ln3', 'ff1', 'ff2'})
    self.assertEqual(out.per_example_xent.shape, (2, 4))
    self.assertEqual(out.per_example_argmax.shape, (2, 4))
    # The cross-entropy is that of the logits the softmax reports.
    logits = np.asarray(out.logits, np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    xent = -np.take_along_axis(log_probs, np.asarray(labels)[..., None],
                               axis=-1)[..., 0]
    self.assertAllClose(out.per_example_xent, xent, atol=1e-5, rtol=1e-5)
    self.assertAllClose(out.per_example_argmax, logits.argmax(-1))

    encoded = translator.apply(variables, src, src_pad, rngs={RANDOM: random_key},
                               method=translator.encoder_fprop)
    self.assertEqual(encoded.shape, (2, 5, 8))

  def test_embedding_alone_with_a_single_key(self):
    emb = instantiate(pax_fiddle.Config(layers.Embedding, name='emb',
                                        input_dims=4, num_classes=10))
    ids = jnp.array([[1, 2], [3, 9]])
    variables = emb.init(jax.random.PRNGKey(1), ids, method=emb.emb_lookup)
    table = np.asarray(variables[PARAMS]['emb_var'])
    self.assertAllClose(emb.apply(variables, ids, method=emb.emb_lookup),
                        table[np.asarray(ids)])

  def test_dot_attention_matches_numpy(self):
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(1, 2, 3, 4)).astype(np.float32)
               for _ in range(3))
    mask = np.zeros((1, 1, 3, 3), np.float32)
    mask[..., 2] = -1e9  # The last key is masked out.
    logits = np.einsum('bnth,bnsh->bnts', q, k) / 2.0 + mask
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    self.assertAllClose(
        MultiHeadedAttention.dot_attention(q, k, v, mask),
        np.einsum('bnts,bnsh->bnth', probs, v), atol=1e-5, rtol=1e-5)


if __name__ == '__main__':
  absltest.main()
