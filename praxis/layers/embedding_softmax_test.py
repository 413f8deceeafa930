"""Tests of praxis.layers.embedding_softmax against numpy references."""

import pathlib
import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import embedding_softmax

sys.path.insert(0, str(pathlib.Path(__file__).parent / 'testdata'))
import record_matmul_lookup_losses  # pylint: disable=g-import-not-at-top

NON_TRAINABLE = base_layer.NON_TRAINABLE

# The first Adam losses of `record_matmul_lookup_losses.run()`, recorded (as
# float32 hex) when 'matmul' lookups were one-hot matmuls (commit e077a54).
_RECORDED_MATMUL_LOOKUP_LOSSES = [float.fromhex(x) for x in (
    '0x1.8681f60000000p+2', '0x1.fdf4c80000000p+1', '0x1.652bda0000000p+1',
    '0x1.05ec320000000p+1', '0x1.ab33ba0000000p+0')]


def _make(cls, **kwargs):
  return base_layer.instantiate(pax_fiddle.Config(cls, name='layer', **kwargs))


def _apply(layer, variables, *args, **kwargs):
  """`layer.apply` under one `jax.jit` (faster than op by op).

  Array arguments are traced; the others (seq_length, method, mutable) are
  fixed at trace time.
  """
  is_array = lambda v: isinstance(v, (np.ndarray, jax.Array))
  arrays = {k: v for k, v in kwargs.items() if is_array(v)}
  static = {k: v for k, v in kwargs.items() if not is_array(v)}
  fn = jax.jit(lambda v, a, kw: layer.apply(v, *a, **kw, **static))
  return fn(variables, args, arrays)


def _eval_apply(layer, variables, *args, **kwargs):
  context = base_layer.JaxContext.HParams(do_eval=True)
  with base_layer.JaxContext.new_context(hparams=context):
    return _apply(layer, variables, *args, **kwargs)


def _np_log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _np_sinusoid(position, dims, min_ts=1.0, max_ts=10000.0):
  """position [B, T] -> [B, T, dims], the transformer sinusoid table."""
  n = dims // 2
  inc = np.log(max_ts / min_ts) / max(n - 1, 1)
  freqs = min_ts * np.exp(-inc * np.arange(n))
  angles = position[..., None] * freqs
  out = np.concatenate([np.sin(angles), np.cos(angles)], -1)
  return np.pad(out, [(0, 0), (0, 0), (0, dims % 2)])


class EmbeddingTest(test_utils.TestCase):

  def test_tutorial_init_with_single_key_and_method(self):
    emb = _make(embedding_softmax.Embedding, input_dims=4, num_classes=10)
    ids = jnp.array([[1, 2, 9]])
    with base_layer.JaxContext.new_context():
      variables = emb.init(jax.random.PRNGKey(1), ids, method=emb.emb_lookup)
    table = np.asarray(variables['params']['emb_var'])
    self.assertEqual(table.shape, (10, 4))
    out = emb.apply(variables, ids, method=emb.emb_lookup)
    self.assertAllClose(out, table[np.asarray(ids)])
    self.assertAllClose(emb.apply(variables, ids), out)

  @parameterized.parameters('index', 'matmul')
  def test_lookup_styles_match_numpy(self, style):
    table = self.np_rng.normal(size=(7, 3)).astype(np.float32)
    ids = np.array([[0, 6, 3], [3, 3, 1]])
    emb = _make(
        embedding_softmax.Embedding, input_dims=3, num_classes=7,
        lookup_style=style, scale_sqrt_depth=True,
    )
    out = _apply(emb, {'params': {'emb_var': table}}, ids)
    self.assertAllClose(out, table[ids] * np.sqrt(3.0), atol=1e-6)

  def test_nan_for_out_of_range_ids(self):
    table = self.np_rng.normal(size=(4, 2)).astype(np.float32)
    emb = _make(
        embedding_softmax.Embedding, input_dims=2, num_classes=4,
        set_nan_for_oob_id=True,
    )
    variables = {'params': {'emb_var': table}}
    out = np.asarray(_apply(emb, variables, np.array([1, 5])))
    self.assertAllClose(out[0], table[1])
    self.assertTrue(np.isnan(out[1]).all())

  def test_bad_config_names_field(self):
    emb = _make(
        embedding_softmax.Embedding, input_dims=2, num_classes=4,
        lookup_style='gather',
    )
    with self.assertRaisesRegex(ValueError, 'Embedding .*`lookup_style`'):
      emb.init(jax.random.PRNGKey(0), np.array([1]))
    emb = _make(embedding_softmax.Embedding, input_dims=2)
    with self.assertRaisesRegex(ValueError, '`num_classes`'):
      emb.init(jax.random.PRNGKey(0), np.array([1]))


class MatmulLookupTest(test_utils.TestCase):
  """lookup_style='matmul' gives the one-hot matmul's values and gradients.

  Off TPU, with the vocabulary on one device, it runs as a gather; the
  reference here is the one-hot matmul written in numpy.
  """

  def _check(self, layer, variables, table_of, ids):
    v = table_of(variables).shape[0]
    one_hot = (ids[..., None] == np.arange(v)).astype(np.float32)
    cot = self.np_rng.normal(size=ids.shape + (3,)).astype(np.float32)

    def loss(variables):
      out = layer.apply(variables, jnp.asarray(ids), method=layer.emb_lookup)
      return jnp.sum(out * cot), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
        variables)
    table = np.asarray(table_of(variables))
    # Ids outside [0, v) have all-zero one-hot rows: zero embeddings.
    np.testing.assert_array_equal(np.asarray(out), one_hot @ table)
    want = np.einsum('btv,btd->vd', one_hot, cot)
    self.assertAllClose(table_of(grads), want, atol=1e-5)

  def test_embedding(self):
    emb = _make(embedding_softmax.Embedding, input_dims=3, num_classes=7,
                lookup_style='matmul')
    table = self.np_rng.normal(size=(7, 3)).astype(np.float32)
    ids = np.array([[0, 6, 3, 3], [3, -1, 7, 1]])
    self._check(emb, {'params': {'emb_var': table}},
                lambda v: v['params']['emb_var'], ids)

  def test_shared_embedding_softmax(self):
    layer = _make(embedding_softmax.SharedEmbeddingSoftmax, input_dims=3,
                  num_classes=7, lookup_style='matmul')
    ids = np.array([[0, 6, 3, 3], [3, 9, 3, 1]])
    variables = layer.init(jax.random.PRNGKey(0), jnp.asarray(ids),
                           method=layer.emb_lookup)
    self._check(layer, variables,
                lambda v: v['params']['logits_ffn']['linear']['w'].T, ids)

  @absltest.skipIf(jax.default_backend() == 'tpu', 'TPUs keep the matmul')
  def test_runs_as_a_gather(self):
    layer = _make(embedding_softmax.SharedEmbeddingSoftmax, input_dims=3,
                  num_classes=7, lookup_style='matmul')
    ids = jnp.array([[0, 6, 3]])
    variables = layer.init(jax.random.PRNGKey(0), ids, method=layer.emb_lookup)
    jaxpr = jax.make_jaxpr(lambda v: layer.apply(
        v, ids, method=layer.emb_lookup))(variables)
    primitives = {e.primitive.name for e in jaxpr.jaxpr.eqns}
    self.assertIn('gather', primitives)
    self.assertNotIn('dot_general', primitives)

  def test_lm_losses_are_those_of_the_one_hot_matmul(self):
    np.testing.assert_allclose(record_matmul_lookup_losses.run(),
                               _RECORDED_MATMUL_LOOKUP_LOSSES, rtol=1e-6)

  def test_gather_only_where_the_matmul_is_not_wanted(self):
    # pylint: disable=protected-access
    style = embedding_softmax._computed_lookup_style
    axes = ['replica', 'data', 'mdl']
    one = _make(embedding_softmax.Embedding, input_dims=3, num_classes=8,
                lookup_style='matmul', ici_mesh_shape=[1, 1, 1],
                mesh_axis_names=axes)
    split = _make(embedding_softmax.Embedding, input_dims=3, num_classes=8,
                  lookup_style='matmul', ici_mesh_shape=[1, 2, 4],
                  mesh_axis_names=axes)
    index = _make(embedding_softmax.Embedding, input_dims=3, num_classes=8)
    if jax.default_backend() != 'tpu':
      self.assertEqual(style(one, 'mdl'), 'index')
      self.assertEqual(style(split, None), 'index')
    self.assertEqual(style(split, 'mdl'), 'matmul')  # Vocabulary split 4 ways.
    self.assertEqual(style(one, 'mdl', plain_einsum=False), 'matmul')
    self.assertEqual(style(index, None), 'index')


class FullSoftmaxTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = self.np_rng.normal(size=(2, 3, 4)).astype(np.float32)
    self.w = self.np_rng.normal(size=(4, 5)).astype(np.float32)
    self.b = self.np_rng.normal(size=5).astype(np.float32)
    self.ids = self.np_rng.integers(0, 5, size=(2, 3, 1))
    self.weights = self.np_rng.uniform(0.5, 1.0, size=(2, 3, 1)).astype(
        np.float32
    )
    self.variables = {
        'params': {'logits_ffn': {'linear': {'w': self.w},
                                  'bias': {'b': self.b}}}
    }

  def _check_totals(self, out, xent):
    weights = self.weights[..., 0]
    self.assertAllClose(out.per_example_xent, xent, atol=1e-5)
    self.assertAllClose(out.per_example_weight, weights)
    self.assertAllClose(out.total_xent, (xent * weights).sum(), atol=1e-4)
    self.assertAllClose(out.total_weight, weights.sum(), atol=1e-5)
    self.assertAllClose(
        out.avg_xent, (xent * weights).sum() / weights.sum(), atol=1e-5
    )

  def test_cross_entropy_with_class_ids(self):
    layer = _make(embedding_softmax.FullSoftmax, input_dims=4, num_classes=5)
    out = _apply(layer, self.variables, self.x, self.weights,
                      class_ids=self.ids)
    logits = self.x @ self.w + self.b
    log_probs = _np_log_softmax(logits)
    self.assertAllClose(out.logits, logits, atol=1e-5)
    self.assertAllClose(out.log_probs, log_probs, atol=1e-5)
    self.assertArraysEqual(out.per_example_argmax, logits.argmax(-1))
    xent = -np.take_along_axis(log_probs, self.ids, -1)[..., 0]
    self._check_totals(out, xent)
    self.assertNotIn('z_loss', out)

  def test_label_smoothing_train_and_eval(self):
    layer = _make(
        embedding_softmax.FullSoftmax, input_dims=4, num_classes=5,
        label_smoothing_prob=0.2, label_smoothing_apply_for_eval=False,
    )
    log_probs = _np_log_softmax(self.x @ self.w + self.b)
    targets = np.full((2, 3, 5), 0.2 / 4)
    np.put_along_axis(targets, self.ids, 0.8, -1)
    out = _apply(layer, self.variables, self.x, self.weights,
                      class_ids=self.ids)
    self._check_totals(out, -(targets * log_probs).sum(-1))
    out = _eval_apply(layer, self.variables, self.x, self.weights,
                      class_ids=self.ids)
    xent = -np.take_along_axis(log_probs, self.ids, -1)[..., 0]
    self._check_totals(out, xent)

  def test_class_probabilities(self):
    layer = _make(embedding_softmax.FullSoftmax, input_dims=4, num_classes=5)
    probs = self.np_rng.dirichlet(np.ones(5), size=(2, 3)).astype(np.float32)
    out = _apply(layer, self.variables, self.x, self.weights,
                      class_probabilities=probs)
    log_probs = _np_log_softmax(self.x @ self.w + self.b)
    self._check_totals(out, -(probs * log_probs).sum(-1))

  def test_soft_cap_and_z_loss(self):
    layer = _make(
        embedding_softmax.FullSoftmax, input_dims=4, num_classes=5,
        soft_cap_logits=1.5, z_loss_weight=0.1,
    )
    out, updated = _apply(
        layer, self.variables, self.x, self.weights, class_ids=self.ids,
        mutable=[base_layer.AUX_LOSS],
    )
    logits = 1.5 * np.tanh((self.x @ self.w + self.b) / 1.5)
    self.assertAllClose(out.logits, logits, atol=1e-5)
    xent = -np.take_along_axis(_np_log_softmax(logits), self.ids, -1)[..., 0]
    self._check_totals(out, xent)
    log_z = np.log(np.exp(logits).sum(-1))
    weights = self.weights[..., 0]
    z_loss = 0.1 * (log_z**2 * weights).sum() / weights.sum()
    self.assertAllClose(out.z_loss, z_loss, atol=1e-5)
    aux = updated[base_layer.AUX_LOSS]['aux_z_loss']
    self.assertAllClose(aux.value, z_loss, atol=1e-5)

  def test_chunked_matches_full(self):
    x = self.np_rng.normal(size=(2, 5, 4)).astype(np.float32)
    ids = self.np_rng.integers(0, 5, size=(2, 5))
    weights = np.ones((2, 5), np.float32)
    kwargs = {'input_dims': 4, 'num_classes': 5, 'label_smoothing_prob': 0.1,
              'scale_before_logits': True}
    full = _apply(
        _make(embedding_softmax.FullSoftmax, **kwargs),
        self.variables, x, weights, class_ids=ids,
    )
    chunked = _apply(
        _make(embedding_softmax.FullSoftmax, chunk_size=2, **kwargs),
        self.variables, x, weights, class_ids=ids,
    )
    self.assertIsNone(chunked.logits)
    self.assertIsNone(chunked.log_probs)
    for key in ('per_example_xent', 'per_example_argmax', 'avg_xent'):
      self.assertAllClose(chunked[key], full[key], atol=1e-5)
    logits = x / 2.0 @ self.w + self.b
    self.assertArraysEqual(full.per_example_argmax, logits.argmax(-1))

  def test_chunk_size_falls_back_to_the_whole_softmax(self):
    # As Pax: inputs that are not [B, T, D], T < chunk_size, class
    # probabilities or a z-loss get the whole softmax, logits included.
    kwargs = {'input_dims': 4, 'num_classes': 5}
    layer = _make(embedding_softmax.FullSoftmax, chunk_size=4, **kwargs)
    x = self.np_rng.normal(size=(2, 3, 4)).astype(np.float32)
    ids = self.np_rng.integers(0, 5, size=(2, 3))
    probs = np.full((2, 3, 5), 0.2, np.float32)
    cases = (
        (x[:, 0], np.ones((2, 1), np.float32), dict(class_ids=ids[:, :1])),
        (x, np.ones((2, 3, 1), np.float32), dict(class_ids=ids[..., None])),
        (x, np.ones((2, 3, 1), np.float32),
         dict(class_probabilities=probs)),
    )
    for inputs, weights, labels in cases:
      out = _apply(layer, self.variables, inputs, weights, **labels)
      self.assertAllClose(out.logits, inputs @ self.w + self.b, atol=1e-5)
    z_layer = _make(embedding_softmax.FullSoftmax, chunk_size=2,
                    z_loss_weight=0.1, **kwargs)
    out = _apply(z_layer, self.variables, x, np.ones((2, 3, 1), np.float32),
                 class_ids=ids[..., None])
    self.assertAllClose(out.logits, x @ self.w + self.b, atol=1e-5)

  def test_errors(self):
    layer = _make(embedding_softmax.FullSoftmax, input_dims=4, num_classes=5)
    with self.assertRaisesRegex(ValueError, 'class_ids or class_prob'):
      _apply(layer, self.variables, self.x, self.weights)
    with self.assertRaisesRegex(ValueError, 'class_weights .* does not fit'):
      _apply(layer, self.variables, self.x, self.weights[0],
             class_ids=self.ids)
    layer = _make(embedding_softmax.FullSoftmax, input_dims=4)
    with self.assertRaisesRegex(ValueError, 'FullSoftmax .*`num_classes`'):
      _apply(layer, self.variables, self.x, self.weights,
             class_ids=self.ids)


class SharedEmbeddingSoftmaxTest(test_utils.TestCase):

  def test_tutorial_usage(self):
    layer = _make(
        embedding_softmax.SharedEmbeddingSoftmax, input_dims=4, num_classes=6
    )
    x = self.np_rng.normal(size=(2, 3, 4)).astype(np.float32)
    labels = self.np_rng.integers(0, 6, size=(2, 3))
    weights = np.ones((2, 3), np.float32)
    with base_layer.JaxContext.new_context():
      variables = layer.init(
          jax.random.PRNGKey(0), x, class_weights=weights[..., None],
          class_ids=labels[..., None],
      )
      out = layer.apply(
          variables, x, class_weights=weights[..., None],
          class_ids=labels[..., None],
      )
    ffn = variables['params']['logits_ffn']
    logits = x @ np.asarray(ffn['linear']['w']) + np.asarray(ffn['bias']['b'])
    xent = -np.take_along_axis(_np_log_softmax(logits), labels[..., None], -1)
    self.assertAllClose(out.per_example_xent, xent[..., 0], atol=1e-5)
    self.assertArraysEqual(out.per_example_argmax, logits.argmax(-1))

  @parameterized.parameters('index', 'matmul')
  def test_emb_lookup_uses_transposed_weight(self, style):
    layer = _make(
        embedding_softmax.SharedEmbeddingSoftmax, input_dims=3, num_classes=5,
        lookup_style=style, scale_sqrt_depth=True,
    )
    w = self.np_rng.normal(size=(3, 5)).astype(np.float32)
    variables = {'params': {'logits_ffn': {
        'linear': {'w': w}, 'bias': {'b': np.zeros(5, np.float32)}}}}
    ids = np.array([[4, 0], [2, 2]])
    out = _apply(layer, variables, ids, method=layer.emb_lookup)
    self.assertAllClose(out, w.T[ids] * np.sqrt(3.0), atol=1e-6)


class OtherSoftmaxTest(test_utils.TestCase):

  def test_sigmoid_cross_entropy(self):
    x = self.np_rng.normal(size=(3, 4)).astype(np.float32)
    w = self.np_rng.normal(size=(4, 2)).astype(np.float32)
    probs = self.np_rng.uniform(size=(3, 2)).astype(np.float32)
    weights = np.array([[1.0], [0.5], [0.0]], np.float32)
    layer = _make(
        embedding_softmax.SigmoidCrossEntropy, input_dims=4, num_classes=2
    )
    variables = {'params': {'logits_ffn': {
        'linear': {'w': w}, 'bias': {'b': np.zeros(2, np.float32)}}}}
    out = _apply(layer, variables, x, weights, class_probabilities=probs)
    logits = x @ w
    sig = 1 / (1 + np.exp(-logits))
    xent = -(probs * np.log(sig) + (1 - probs) * np.log(1 - sig)).sum(-1)
    self.assertAllClose(out.per_example_xent, xent, atol=1e-5)
    self.assertAllClose(out.avg_xent, (xent * weights[:, 0]).sum() / 1.5,
                        atol=1e-5)

  def test_gshard_softmax(self):
    x = self.np_rng.normal(size=(2, 3, 4)).astype(np.float32)
    table = self.np_rng.normal(size=(5, 4)).astype(np.float32)
    ids = self.np_rng.integers(0, 5, size=(2, 3, 1))
    weights = np.ones((2, 3, 1), np.float32)
    weights[1, 2] = 0.0
    layer = _make(
        embedding_softmax.GShardSharedEmbeddingSoftmax, input_dims=4,
        num_classes=5, label_smoothing_prob=0.1,
    )
    variables = {'params': {'embedding': {'w': table}}}
    out = _apply(layer, variables, x, weights, class_ids=ids)
    logits = x / 2.0 @ table.T
    targets = np.full((2, 3, 5), 0.1 / 5)
    np.put_along_axis(targets, ids, 0.9 + 0.1 / 5, -1)
    xent = -(targets * _np_log_softmax(logits)).sum(-1)
    self.assertAllClose(out.per_example_xent, xent, atol=1e-5)
    # The denominator is the number of target positions (6), not 5.
    self.assertAllClose(out.avg_xent, (xent * weights[..., 0]).sum() / 6,
                        atol=1e-5)
    embs = _apply(layer, variables, ids[..., 0], method=layer.emb_lookup)
    self.assertAllClose(embs, table[ids[..., 0]], atol=1e-6)


class PositionalEmbeddingTest(test_utils.TestCase):

  @parameterized.parameters(6, 7)
  def test_matches_sinusoid_formula(self, dims):
    layer = _make(embedding_softmax.PositionalEmbedding, embedding_dims=dims)
    with base_layer.JaxContext.new_context():
      out = layer.apply({}, seq_length=5)
    self.assertEqual(out.shape, (1, 5, dims))
    self.assertAllClose(out, _np_sinusoid(np.arange(5.0)[None], dims),
                        atol=1e-5)

  def test_explicit_positions_and_timescales(self):
    layer = _make(
        embedding_softmax.PositionalEmbedding, embedding_dims=4,
        min_timescale=2, max_timescale=100,
    )
    position = np.array([[0, 1, 2], [5, 0, 1]], np.float32)
    out = _apply(layer, {}, position=position)
    self.assertAllClose(out, _np_sinusoid(position, 4, 2.0, 100.0), atol=1e-5)

  def test_needs_a_length(self):
    layer = _make(embedding_softmax.PositionalEmbedding, embedding_dims=4)
    with self.assertRaisesRegex(ValueError, 'seq_length or position'):
      _apply(layer, {})

  def test_2d(self):
    layer = _make(
        embedding_softmax.PositionalEmbedding2D, h=2, w=3, embedding_dims=8,
        num_prepend_cls_tokens=1,
    )
    out = np.asarray(_apply(layer, {}))
    self.assertEqual(out.shape, (1, 7, 8))
    self.assertAllClose(out[0, 0], np.zeros(8))

    def axis(length):
      pos = np.arange(-length / 2, length / 2)[:, None]
      angles = pos / 10000 ** (np.arange(2) / 2)
      return np.concatenate([np.sin(angles), np.cos(angles)], -1)

    rows, cols = axis(2), axis(3)
    for r in range(2):
      for c in range(3):
        expected = np.concatenate([rows[r], cols[c]])
        self.assertAllClose(out[0, 1 + r * 3 + c], expected, atol=1e-5)


def _np_rotary(x, position, min_ts=1.0, max_ts=10000.0):
  """x [B, T, N, H]: rotate each pair (x[i], x[i + H/2])."""
  half = x.shape[-1] // 2
  out = np.empty_like(x)
  for i in range(half):
    theta = position / (min_ts * (max_ts / min_ts) ** (2 * i / x.shape[-1]))
    c, s = np.cos(theta)[..., None], np.sin(theta)[..., None]
    a, b = x[..., i], x[..., i + half]
    out[..., i] = a * c - b * s
    out[..., i + half] = b * c + a * s
  return out


class RotaryPositionalEmbeddingTest(test_utils.TestCase):

  def test_matches_numpy_rotation(self):
    x = self.np_rng.normal(size=(2, 4, 2, 6)).astype(np.float32)
    layer = _make(
        embedding_softmax.RotaryPositionalEmbedding, embedding_dims=6
    )
    out = _apply(layer, {}, x)
    self.assertAllClose(out, _np_rotary(x, np.arange(4.0)[None]), atol=1e-5)
    position = np.array([[3, 2, 1, 0], [0, 0, 5, 6]], np.float32)
    out = _apply(layer, {}, x, position)
    self.assertAllClose(out, _np_rotary(x, position), atol=1e-5)
    # A rotation keeps the norm of each pair.
    self.assertAllClose(
        np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), atol=1e-5
    )

  def test_extend_step_matches_full_sequence(self):
    x = self.np_rng.normal(size=(2, 5, 1, 4)).astype(np.float32)
    layer = _make(
        embedding_softmax.RotaryPositionalEmbedding, embedding_dims=4
    )
    full = np.asarray(_apply(layer, {}, x))
    step = _apply(layer, {}, x[:, 3], 3, method=layer.extend_step)
    self.assertAllClose(step, full[:, 3], atol=1e-5)
    prefix = _apply(layer, {}, x[:, 2:5], 4, method=layer.extend_step)
    self.assertAllClose(prefix, full[:, 2:5], atol=1e-5)

  def test_odd_dims_fail(self):
    layer = _make(
        embedding_softmax.RotaryPositionalEmbedding, embedding_dims=5
    )
    with self.assertRaisesRegex(ValueError, '`embedding_dims` must be even'):
      _apply(layer, {}, np.ones((1, 2, 1, 5), np.float32))


class TrainablePositionalEmbeddingTest(test_utils.TestCase):

  @parameterized.parameters('index', 'matmul')
  def test_rows_of_the_table(self, style):
    table = self.np_rng.normal(size=(8, 3)).astype(np.float32)
    layer = _make(
        embedding_softmax.TrainablePositionalEmbedding, embedding_dims=3,
        max_seq_length=8, lookup_style=style,
    )
    variables = {'params': {'emb_var': table}}
    self.assertAllClose(
        _apply(layer, variables, seq_length=4), table[None, :4]
    )
    position = np.array([[2, 0, 1]])
    self.assertAllClose(
        _apply(layer, variables, position=position), table[position],
        atol=1e-6,
    )

  def test_too_long_fails(self):
    layer = _make(
        embedding_softmax.TrainablePositionalEmbedding, embedding_dims=3,
        max_seq_length=4,
    )
    with self.assertRaisesRegex(ValueError, '`max_seq_length`=4'):
      _apply(layer, {'params': {'emb_var': np.ones((4, 3))}}, seq_length=5)


class TokenCounterTest(test_utils.TestCase):

  def test_counts_non_padded_tokens(self):
    layer = _make(embedding_softmax.TokenCounter)
    paddings = np.array([[0, 0, 1], [0, 1, 1]], np.float32)
    variables = layer.init(jax.random.PRNGKey(0), None, paddings)
    _, updated = _apply(layer, variables, None, paddings,
                             mutable=[NON_TRAINABLE])
    self.assertAllClose(
        updated[NON_TRAINABLE]['approx_total_tokens_mm'], 3e-6
    )


if __name__ == '__main__':
  absltest.main()
