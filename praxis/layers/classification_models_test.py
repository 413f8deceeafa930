"""Tests of praxis.layers.classification_models against hand-computed values."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import activations
from praxis.layers import classification_models
from praxis.layers import embedding_softmax
from praxis.layers import linears
from praxis.layers import resnets

NestedMap = py_utils.NestedMap

_NUM_CLASSES = 7

# Logits designed by hand (label of each row marked by its position):
# row 0: the label (class 2) has the largest logit -> top-1 and top-5 right.
# row 1: the label (class 0) is 3rd largest -> top-5 right, top-1 wrong.
# row 2: the label (class 6) is the smallest -> both wrong.
# row 3: right, but its weight is 0.
_LOGITS = np.array(
    [
        [0.1, 0.2, 3.0, -1.0, 0.0, 0.5, -0.3],
        [1.0, 2.0, 0.3, 1.5, -2.0, 0.0, 0.2],
        [0.4, 0.3, 0.2, 0.1, 0.0, -0.1, -4.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0],
    ],
    np.float32,
)
_LABELS = np.array([2, 0, 6, 5])
_WEIGHTS = np.array([1.0, 1.0, 0.5, 0.0], np.float32)


def np_log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def identity_classifier(num_classes=_NUM_CLASSES):
  """A model whose logits are its input (no network, no projection)."""
  return base_layer.instantiate(pax_fiddle.Config(
      classification_models.ClassificationModel,
      name='classifier',
      network_tpl=pax_fiddle.Config(activations.Identity),
      softmax_tpl=pax_fiddle.Config(
          embedding_softmax.FullSoftmax, input_dims=num_classes,
          num_classes=num_classes, feed_forward_tpl=None),
  ))


def label_probs():
  probs = np.eye(_NUM_CLASSES, dtype=np.float32)[_LABELS]
  # Row 1 is a soft target whose argmax is still class 0.
  probs[1] = [0.6, 0.0, 0.0, 0.2, 0.0, 0.0, 0.2]
  return probs


def run_methods(model, batch, methods):
  """Runs several methods of `model` (no variables) in one compiled call."""

  def fn(batch):
    context = base_layer.JaxContext.HParams(do_eval=True)
    with base_layer.JaxContext.new_context(hparams=context):
      return [model.apply({}, batch, method=getattr(model, m))
              for m in methods]

  return jax.tree.map(np.asarray, jax.jit(fn)(batch))


class ClassificationModelTest(test_utils.TestCase):

  def test_metrics_predict_and_decode_match_hand_values(self):
    model = identity_classifier()
    probs = label_probs()
    batch = NestedMap(image=_LOGITS, label_probs=probs, weight=_WEIGHTS)
    (metrics, per_example), predicted, decoded = run_methods(
        model, batch, ['__call__', 'predict', 'decode'])

    total_weight = 2.5
    xent = -(probs * np_log_softmax(_LOGITS.astype(np.float64))).sum(-1)
    avg_xent = (xent * _WEIGHTS).sum() / total_weight
    expected = {
        'avg_xent': (avg_xent, total_weight),
        'num_predictions': (total_weight, 1.0),
        'accuracy': (1.0 / 2.5, total_weight),
        'error': (1.5 / 2.5, total_weight),
        'acc5': (2.0 / 2.5, total_weight),
        'error5': (0.5 / 2.5, total_weight),
    }
    self.assertEqual(sorted(metrics), sorted(expected))
    for name, (value, weight) in expected.items():
      self.assertAllClose(metrics[name][0], value, atol=1e-5, rtol=1e-5,
                          msg=name)
      self.assertAllClose(metrics[name][1], weight, msg=name)
    self.assertAllClose(per_example['labels'], probs)
    self.assertAllClose(per_example['scores'], _LOGITS)

    self.assertAllClose(predicted['logits'], _LOGITS)
    self.assertAllClose(predicted['logp'], np_log_softmax(_LOGITS),
                        atol=1e-5, rtol=1e-5)

    decode_metrics, results, eval_metrics = decoded
    self.assertAllClose(decode_metrics['accuracy'][0], 0.4, atol=1e-6)
    self.assertArraysEqual(results['predicted_labels'], np.array([2, 1, 0, 5]))
    self.assertArraysEqual(results['labels'], _LABELS)
    self.assertAllClose(eval_metrics['accuracy'][0], 0.4, atol=1e-6)
    scalars, pairs, _ = model.process_decode_out(None, results)
    self.assertAllClose(scalars['accuracy'][0], 0.4, atol=1e-6)
    self.assertEqual(scalars['accuracy'][1], 2.5)
    self.assertEqual(pairs, [
        ('0', {'prediction': 2, 'label': 2}),
        ('1', {'prediction': 1, 'label': 0}),
        ('2', {'prediction': 0, 'label': 6}),
    ])

  def test_default_weights_and_no_top5_with_five_classes(self):
    model = identity_classifier(num_classes=5)
    logits = _LOGITS[:, :5]
    labels = np.array([2, 0, 4, 1])
    batch = NestedMap(
        image=logits, label_probs=np.eye(5, dtype=np.float32)[labels])
    ((metrics, _),) = run_methods(model, batch, ['__call__'])
    self.assertEqual(
        sorted(metrics),
        ['accuracy', 'avg_xent', 'error', 'num_predictions'])
    # Top-1 hits: row 0 (3.0 is the max) and row 3, whose logits all tie (a
    # tie with the k-th largest counts); rows 1 and 2 miss.
    self.assertAllClose(metrics['accuracy'], (0.5, 4.0), atol=1e-6)
    self.assertAllClose(metrics['num_predictions'], (4.0, 1.0))
    xent = -np_log_softmax(logits.astype(np.float64))[np.arange(4), labels]
    self.assertAllClose(metrics['avg_xent'][0], xent.mean(), atol=1e-5,
                        rtol=1e-5)

  def test_bad_batches_fail_with_the_field_name(self):
    model = identity_classifier()
    good = NestedMap(image=_LOGITS, label_probs=label_probs())
    with self.assertRaisesRegex(ValueError, r'weight must have shape \(4,\)'):
      model.init(jax.random.PRNGKey(0), NestedMap(good, weight=_WEIGHTS[:3]))
    with self.assertRaisesRegex(KeyError, 'input_field'):
      model.init(jax.random.PRNGKey(0), NestedMap(label_probs=label_probs()))

  def test_top_k_accuracy_needs_labels_and_valid_k(self):
    with self.assertRaisesRegex(ValueError, 'label_ids or label_probs'):
      classification_models.top_k_accuracy(1, jnp.asarray(_LOGITS))
    with self.assertRaisesRegex(ValueError, 'top_k=8'):
      classification_models.top_k_accuracy(
          8, jnp.asarray(_LOGITS), label_ids=jnp.asarray(_LABELS))

  def test_resnet50_with_1000_classes_has_25_6m_parameters(self):
    model = base_layer.instantiate(pax_fiddle.Config(
        classification_models.ClassificationModel, name='classifier',
        softmax_tpl=pax_fiddle.Config(
            embedding_softmax.FullSoftmax, input_dims=2048,
            num_classes=1000)))
    batch = NestedMap(
        image=jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32),
        label_probs=jax.ShapeDtypeStruct((1, 1000), jnp.float32))
    hparams = model.abstract_init_with_metadata(batch)

    def conv_bn(k, cin, cout):  # A bias-free conv and its beta, gamma.
      return k * k * cin * cout + 2 * cout

    expected, in_dim = conv_bn(7, 3, 64), 64
    for out_dim, num_blocks in ((256, 3), (512, 4), (1024, 6), (2048, 3)):
      mid = out_dim // 4
      for block in range(num_blocks):
        expected += (conv_bn(1, in_dim, mid) + conv_bn(3, mid, mid)
                     + conv_bn(1, mid, out_dim))
        if block == 0:  # Every stage starts with a projection shortcut.
          expected += conv_bn(1, in_dim, out_dim)
        in_dim = out_dim
    expected += 2048 * 1000 + 1000  # The classifier.
    self.assertEqual(expected, 25_557_032)  # The published ResNet-50 count.
    count = sum(
        int(np.prod(hp.shape)) for hp in jax.tree.leaves(
            hparams['params'],
            is_leaf=lambda a: isinstance(a, base_layer.WeightHParams)))
    self.assertEqual(count, expected)
    self.assertEqual(sorted(hparams['params']), ['network', 'softmax'])

  def test_tiny_resnet_classifier_outputs(self):
    model = base_layer.instantiate(pax_fiddle.Config(
        classification_models.ClassificationModel, name='classifier',
        network_tpl=resnets.ResNet.HParamsResNet5(),
        softmax_tpl=pax_fiddle.Config(
            embedding_softmax.FullSoftmax, input_dims=16, num_classes=10)))
    batch = NestedMap(
        image=jax.ShapeDtypeStruct((2, 8, 8, 3), jnp.float32),
        label_probs=jax.ShapeDtypeStruct((2, 10), jnp.float32))

    def init_and_apply(batch):
      key = jax.random.PRNGKey(0)
      variables = model.init(key, batch)
      return model.apply(variables, batch, mutable=[base_layer.NON_TRAINABLE])

    (metrics, per_example), _ = jax.eval_shape(init_and_apply, batch)
    self.assertIn('acc5', metrics)
    self.assertEqual(per_example['scores'].shape, (2, 10))


class ClassificationMLPModelTest(test_utils.TestCase):

  def test_loss_falls_and_metrics_match_numpy(self):
    vocab, dims = 8, 16
    model = base_layer.instantiate(pax_fiddle.Config(
        classification_models.ClassificationMLPModel, name='mlp_model',
        mlp_tpl=pax_fiddle.Config(
            linears.MLPBlock, num_layers=2, hidden_dims=32,
            ff_tpl=pax_fiddle.Config(
                linears.FeedForward, input_dims=dims, output_dims=dims)),
        softmax_tpl=pax_fiddle.Config(
            embedding_softmax.SharedEmbeddingSoftmax, input_dims=dims,
            num_classes=vocab)))
    ids = self.np_rng.integers(0, vocab, size=(4, 6))
    weights = np.ones((4, 6), np.float32)
    weights[3, 3:] = 0.0
    # A separable toy problem: each id has its own label.
    batch = NestedMap(ids=ids, labels=(ids + 3) % vocab, weights=weights)

    optimizer = optax.adam(0.03)

    def loss_fn(params):
      metrics, _ = model.apply({'params': params}, batch)
      return metrics['total_loss'][0]

    def step(carry, _):
      params, opt_state = carry
      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss

    @jax.jit
    def train_and_evaluate():
      params = model.init(jax.random.PRNGKey(0), batch)['params']
      (params, _), losses = jax.lax.scan(
          step, (params, optimizer.init(params)), None, length=40)
      predictions = model.apply(
          {'params': params}, batch, method=model.compute_predictions)
      metrics, _ = model.apply({'params': params}, batch)
      return params, losses, predictions.logits, metrics

    params, losses, logits, metrics = jax.tree.map(
        np.asarray, train_and_evaluate())
    self.assertEqual(sorted(params), ['mlp_layers_0', 'softmax'])
    self.assertLess(losses[-1], 0.2 * losses[0])

    logp = np_log_softmax(logits.astype(np.float64))
    xent = -np.take_along_axis(logp, batch.labels[..., None], -1)[..., 0]
    avg_xent = (xent * weights).sum() / weights.sum()
    accuracy = ((logits.argmax(-1) == batch.labels) * weights).sum() / 21.0
    self.assertAllClose(metrics['total_loss'], (avg_xent, 21.0), atol=1e-5,
                        rtol=1e-4)
    self.assertAllClose(metrics['avg_xent'][0], avg_xent, atol=1e-5,
                        rtol=1e-4)
    self.assertAllClose(metrics['fraction_of_correct_preds'],
                        (accuracy, 21.0))
    self.assertAllClose(metrics['num_predictions'], (21.0, 1.0))
    self.assertGreater(accuracy, 0.9)


if __name__ == '__main__':
  absltest.main()
