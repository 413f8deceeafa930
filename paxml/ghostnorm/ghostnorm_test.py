"""Ghost-norm layers against per-example gradients computed in numpy."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml.ghostnorm import _norms
from paxml.ghostnorm import base
from paxml.ghostnorm import embedding
from paxml.ghostnorm import generic_wrapper
from paxml.ghostnorm import linears
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import linears as praxis_linears
from praxis.layers import normalizations

PARAMS = base_layer.PARAMS


def _wrap(variables, scales):
  params = jax.tree_util.tree_map(
      lambda v: base.ParamWithAux(v, scales), variables[PARAMS])
  return {**variables, PARAMS: params}


def _sum_sq(x):
  return float(np.sum(np.square(x)))


class NormsTest(absltest.TestCase):

  def test_projection_sq_norms_all_paths(self):
    rng = np.random.default_rng(0)
    # rank 2; rank 3 with few positions (Gram form); rank 4 with many.
    for x_shape, out in (((3, 4), 2), ((3, 2, 4), 5), ((2, 3, 3, 2), 1)):
      x = rng.normal(size=x_shape).astype(np.float32)
      g = rng.normal(size=x_shape[:-1] + (out,)).astype(np.float32)
      want = [
          _sum_sq(x[b].reshape(-1, x_shape[-1]).T @ g[b].reshape(-1, out))
          for b in range(x_shape[0])
      ]
      got = _norms.projection_sq_norms(jnp.asarray(x), jnp.asarray(g))
      np.testing.assert_allclose(got, want, rtol=1e-5)

  def test_lookup_sq_norms_adds_repeated_ids_and_drops_out_of_range(self):
    rng = np.random.default_rng(1)
    ids = np.array([[0, 2, 0], [1, 5, 1]])  # row 5 is outside a 3-row table.
    g = rng.normal(size=(2, 3, 4)).astype(np.float32)
    want = []
    for b in range(2):
      table_grad = np.zeros((3, 4), np.float32)
      for t in range(3):
        if ids[b, t] < 3:
          table_grad[ids[b, t]] += g[b, t]
      want.append(_sum_sq(table_grad))
    got = _norms.lookup_sq_norms(jnp.asarray(ids), jnp.asarray(g), 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


class LayersTest(absltest.TestCase):

  def _check_layer(self, layer_p, inputs):
    """Per-example norms and weighted grads against numpy loops."""
    layer = base_layer.instantiate(layer_p)
    variables = layer.init(jax.random.PRNGKey(0), inputs)
    batch = inputs.shape[0]

    def loss(v, x):  # a batch-mean loss, as DP-SGD assumes
      out = layer.apply(v, x)
      return jnp.mean(jnp.sum(jnp.square(out - 1.0).reshape(batch, -1), 1))

    # Each example's own gradient: the loss of that example alone.
    own = [
        jax.grad(lambda v, b=b: jnp.sum(
            jnp.square(layer.apply(v, inputs[b:b + 1]) - 1.0)))(
                variables)[PARAMS]
        for b in range(batch)
    ]
    want_norms = [
        sum(_sum_sq(l) for l in jax.tree_util.tree_leaves(g)) for g in own
    ]
    scales = jnp.asarray(np.linspace(0.2, 1.0, batch), jnp.float32)
    grads = jax.grad(loss)(_wrap(variables, scales), inputs)[PARAMS]
    leaves = jax.tree_util.tree_leaves(
        grads, is_leaf=lambda x: isinstance(x, base.ParamWithAux))
    self.assertTrue(all(isinstance(l, base.ParamWithAux) for l in leaves))
    # The norms are of the unweighted per-example gradients times the scale.
    got_norms = sum(np.asarray(l.aux) for l in leaves)
    np.testing.assert_allclose(
        got_norms, np.asarray(want_norms) * np.square(scales), rtol=1e-4)
    # The gradient is the scale-weighted mean of the per-example gradients.
    want_grad = jax.tree_util.tree_map(
        lambda *g: sum(s * x for s, x in zip(np.asarray(scales), g)) / batch,
        *own)
    got_grad = jax.tree_util.tree_map(
        lambda l: l.param, grads,
        is_leaf=lambda x: isinstance(x, base.ParamWithAux))
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
        got_grad, want_grad)
    # Plain parameters: ordinary back-propagation, no aux.
    plain = jax.grad(loss)(variables, inputs)[PARAMS]
    self.assertFalse(any(
        isinstance(l, base.ParamWithAux)
        for l in jax.tree_util.tree_leaves(plain)))

  def test_linear(self):
    x = jnp.asarray(np.random.default_rng(2).normal(size=(3, 2, 4)),
                    jnp.float32)
    self._check_layer(pax_fiddle.Config(
        linears.LinearGhostNorm, name='l', input_dims=4, output_dims=3), x)

  def test_bias(self):
    x = jnp.asarray(np.random.default_rng(3).normal(size=(3, 2, 4)),
                    jnp.float32)
    self._check_layer(
        pax_fiddle.Config(linears.BiasGhostNorm, name='b', dims=4), x)

  def test_embedding_index_and_matmul(self):
    ids = jnp.asarray([[0, 1, 0], [2, 2, 2], [3, 0, 1]])
    for style in ('index', 'matmul'):
      self._check_layer(pax_fiddle.Config(
          embedding.EmbeddingGhostNorm, name='e', num_classes=4, input_dims=2,
          lookup_style=style), ids)

  def test_wrapped_layer_norm(self):
    x = jnp.asarray(np.random.default_rng(4).normal(size=(3, 2, 4)),
                    jnp.float32)
    cfg = generic_wrapper.generate_wrapped_template(
        pax_fiddle.Config(normalizations.LayerNorm, name='ln', dim=4))
    self.assertIsInstance(cfg, generic_wrapper.GhostNormPaxConfig)
    self._check_layer(cfg, x)

  def test_wrapped_forward_equals_the_layer(self):
    x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 4)), jnp.float32)
    ref_p = pax_fiddle.Config(normalizations.LayerNorm, name='ln', dim=4)
    wrapped = base_layer.instantiate(
        generic_wrapper.generate_wrapped_template(ref_p.clone()))
    ref = base_layer.instantiate(ref_p)
    v = wrapped.init(jax.random.PRNGKey(1), x)
    self.assertIn(generic_wrapper.LAYER, v[PARAMS])
    ref_v = {PARAMS: v[PARAMS][generic_wrapper.LAYER]}
    np.testing.assert_allclose(
        wrapped.apply(_wrap(v, jnp.ones(2)), x), ref.apply(ref_v, x),
        rtol=1e-6)

  def test_template_rewrite(self):
    cfg = pax_fiddle.Config(
        praxis_linears.FeedForward, name='ffn', input_dims=2, output_dims=3)
    out = generic_wrapper.generate_wrapped_template(cfg)
    self.assertIs(out.linear_tpl.cls, linears.LinearGhostNorm)
    self.assertIs(out.bias_tpl.cls, linears.BiasGhostNorm)
    emb = generic_wrapper.generate_wrapped_template(
        pax_fiddle.Config(embedding_softmax.Embedding))
    self.assertIs(emb.cls, embedding.EmbeddingGhostNorm)
    with self.assertRaisesRegex(TypeError, 'pax_fiddle.Config'):
      generic_wrapper.generate_wrapped_template(object())


if __name__ == '__main__':
  absltest.main()
